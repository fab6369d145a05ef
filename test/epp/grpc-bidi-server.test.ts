/**
 * The ext_proc listener's gRPC server (src/epp/grpc-bidi-server.ts) on its own, with an echoing
 * handler: against @grpc/grpc-js's client (what the EPP's other tests and the benchmark drive it
 * with), and against a raw node:http2 client for what grpc-js never sends (a message cut into
 * pieces at any byte, two messages in one write, a compressed or oversized message).
 */
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import { after, before, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { GrpcBidiServer, type BidiCall } from '../../src/epp/grpc-bidi-server.js';
import { waitFor } from './helpers.js';

const PATH = '/test.Echo/Chat';
const raw = (b: Buffer): Buffer => b;

let server: GrpcBidiServer;
let port: number;
const received: Buffer[] = [];
let cancels = 0;

before(async () => {
  // Echoes each message; a message reading "fail" ends the call with status 9, "end" with OK.
  server = new GrpcBidiServer(
    PATH,
    (call: BidiCall) => ({
      onMessage(m) {
        received.push(Buffer.from(m));
        if (m.toString() === 'fail') call.fail(9, 'asked to fail: 100% ünïcode');
        else if (m.toString() === 'end') call.end();
        else call.write(m);
      },
      onHalfClose: () => call.end(),
      onCancel: () => cancels++,
    }),
    1000,
  );
  port = await server.listen('127.0.0.1', 0);
});

after(async () => {
  await server.close();
});

function grpcCall(path = PATH): { call: grpc.ClientDuplexStream<Buffer, Buffer>; got: Buffer[]; status: Promise<grpc.StatusObject>; client: grpc.Client } {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const call = client.makeBidiStreamRequest(path, raw, raw);
  const got: Buffer[] = [];
  call.on('data', (b: Buffer) => got.push(b));
  call.on('error', () => undefined);
  const status = new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
  return { call, got, status, client };
}

/** A raw gRPC request over node:http2: `chunks` written as given, then the client's end. */
async function rawCall(chunks: Buffer[]): Promise<{ messages: Buffer[]; status: string | undefined; message: string | undefined }> {
  const session = http2.connect(`http://127.0.0.1:${port}`);
  try {
    const req = session.request({ ':method': 'POST', ':path': PATH, 'content-type': 'application/grpc', te: 'trailers' });
    const data: Buffer[] = [];
    let trailers: http2.IncomingHttpHeaders = {};
    let head: http2.IncomingHttpHeaders = {};
    req.on('response', (h) => (head = h));
    req.on('trailers', (t) => (trailers = t));
    req.on('data', (d: Buffer) => data.push(d));
    for (const c of chunks) {
      req.write(c);
      await new Promise((r) => setImmediate(r));
    }
    req.end();
    await new Promise((r) => req.on('close', r));
    const all = Buffer.concat(data);
    const messages: Buffer[] = [];
    for (let at = 0; at < all.length; at += 5 + all.readUInt32BE(at + 1)) messages.push(all.subarray(at + 5, at + 5 + all.readUInt32BE(at + 1)));
    const st = trailers['grpc-status'] ?? head['grpc-status'];
    const msg = trailers['grpc-message'] ?? head['grpc-message'];
    return { messages, status: st === undefined ? undefined : String(st), message: msg === undefined ? undefined : String(msg) };
  } finally {
    session.close();
  }
}

const frame = (m: Buffer, compressed = 0): Buffer => {
  const h = Buffer.alloc(5);
  h[0] = compressed;
  h.writeUInt32BE(m.length, 1);
  return Buffer.concat([h, m]);
};

test('messages are echoed in order to a grpc-js client, and a half-close ends the call with OK', async () => {
  const c = grpcCall();
  const sent = [Buffer.alloc(0), Buffer.from('hello'), Buffer.alloc(999, 7)];
  for (const m of sent) c.call.write(m);
  c.call.end();
  const st = await c.status;
  c.client.close();
  assert.equal(st.code, 0);
  assert.deepEqual(c.got, sent);
});

test('an error status reaches the client with its details; an unknown method is UNIMPLEMENTED', async () => {
  const c = grpcCall();
  c.call.write(Buffer.from('fail'));
  const st = await c.status;
  c.client.close();
  assert.equal(st.code, 9);
  assert.equal(st.details, 'asked to fail: 100% ünïcode');
  const u = grpcCall('/test.Echo/Other');
  u.call.write(Buffer.from('x'));
  u.call.end();
  const us = await u.status;
  u.client.close();
  assert.equal(us.code, grpc.status.UNIMPLEMENTED);
});

test('a message cut at any byte, and two messages in one write, each reach the handler whole', async () => {
  const one = frame(Buffer.from('split across writes'));
  const two = Buffer.concat([frame(Buffer.from('first')), frame(Buffer.from('second'))]);
  const pieces = [...one].map((b) => Buffer.from([b]));
  const r = await rawCall([...pieces, two]);
  assert.equal(r.status, '0');
  assert.deepEqual(r.messages.map(String), ['split across writes', 'first', 'second']);
});

test('a compressed or oversized message ends the call with an error and tells the handler', async () => {
  const before = cancels;
  const compressed = await rawCall([frame(Buffer.from('zz'), 1)]);
  assert.equal(compressed.status, '13');
  const big = await rawCall([frame(Buffer.alloc(1001))]);
  assert.equal(big.status, '8');
  assert.match(decodeURIComponent(big.message ?? ''), /larger than max \(1001 vs\. 1000\)/);
  assert.equal(cancels, before + 2);
});

test('a stream that ends inside a message is INTERNAL after the messages before it, and the handler is told', async () => {
  const before = cancels;
  const whole = frame(Buffer.from('whole'));
  const cut = frame(Buffer.from('cut short')).subarray(0, 8);
  const r = await rawCall([whole, cut]);
  assert.equal(r.status, '13');
  assert.match(decodeURIComponent(r.message ?? ''), /ended inside a message \(8 bytes of it received\)/);
  assert.deepEqual(r.messages.map(String), ['whole']);
  assert.equal(cancels, before + 1);
  // Cut inside the 5-byte prefix too.
  const inPrefix = await rawCall([whole, Buffer.from([0, 0])]);
  assert.equal(inPrefix.status, '13');
});

test('a client that resets its stream (RST_STREAM CANCEL, as Envoy cancels) is told to the handler', async () => {
  const before = cancels;
  const session = http2.connect(`http://127.0.0.1:${port}`);
  const req = session.request({ ':method': 'POST', ':path': PATH, 'content-type': 'application/grpc', te: 'trailers' });
  req.on('error', () => undefined);
  const echoed = new Promise((r) => req.once('data', r));
  req.write(frame(Buffer.from('hello')));
  await echoed;
  req.close(http2.constants.NGHTTP2_CANCEL);
  await waitFor(() => cancels === before + 1, 2_000);
  session.close();
});
