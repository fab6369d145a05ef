/**
 * The proxy's side of an ext_proc stream at about a native proxy's cost, for the EPP benchmark:
 * gRPC over node:http2 framed by hand (grpc/grpc doc/PROTOCOL-HTTP2.md), every message a request
 * sends encoded once per body and reused, the answers read by walking their bytes for the few
 * fields the proxy acts on. src/epp/ext-proc-client.ts (on @grpc/grpc-js and protobufjs) is the
 * general client the tests use; per request it spends more CPU than the EPP it measures, and on a
 * machine of two cores that CPU and its event-loop turns would be counted as the EPP's latency.
 */
import http2 from 'node:http2';
import { BodySendMode, encodeProcessingRequest, EXT_PROC_SERVICE, type ProcessingRequest } from '../../src/epp/descriptor.js';

/** One request's messages, framed (5-byte gRPC prefix + the encoded ProcessingRequest). */
export interface FramedRequest {
  headers: Buffer;
  /** The body chunks, the last with end_of_stream. */
  body: Buffer[];
  responseHeaders: Buffer;
  responseBody: Buffer;
  /** The body's length (the echo is read up to its end_of_stream). */
  bodyBytes: number;
}

function frame(m: ProcessingRequest): Buffer {
  const msg = encodeProcessingRequest(m);
  const out = Buffer.allocUnsafe(5 + msg.length);
  out[0] = 0;
  out.writeUInt32BE(msg.length, 1);
  msg.copy(out, 5);
  return out;
}

const latin1 = (s: string): Buffer => Buffer.from(s, 'latin1');

/** The messages Envoy's filter sends for a chat request with `body` (FULL_DUPLEX_STREAMED both ways), and a worker's JSON answer. */
export function framedRequest(path: string, body: Buffer, chunk: number, response: Buffer): FramedRequest {
  const headers: Record<string, string> = { ':method': 'POST', ':path': path, ':authority': 'epp.bench', 'content-type': 'application/json', 'content-length': String(body.length) };
  const chunks: Buffer[] = [];
  for (let at = 0; at < body.length; at += chunk) {
    chunks.push(frame({ request_body: { body: body.subarray(at, at + chunk), end_of_stream: at + chunk >= body.length } }));
  }
  return {
    headers: frame({
      request_headers: { headers: { headers: Object.entries(headers).map(([key, v]) => ({ key, raw_value: latin1(v) })) }, end_of_stream: false },
      protocol_config: { request_body_mode: BodySendMode.FULL_DUPLEX_STREAMED, response_body_mode: BodySendMode.FULL_DUPLEX_STREAMED },
    }),
    body: chunks,
    responseHeaders: frame({ response_headers: { headers: { headers: [{ key: ':status', raw_value: latin1('200') }, { key: 'content-type', raw_value: latin1('application/json') }] } } }),
    responseBody: frame({ response_body: { body: response, end_of_stream: true } }),
    bodyBytes: body.length,
  };
}

/**
 * The span of field `field` (length-delimited) in the message bytes `b[start, end)`, or null.
 * Varint and fixed fields are stepped over; a field repeated gives its last occurrence, as
 * protobuf's merge rule reads a message field.
 */
function lengthDelimited(b: Buffer, start: number, end: number, field: number): [number, number] | null {
  let found: [number, number] | null = null;
  let at = start;
  while (at < end) {
    let tag = 0;
    [tag, at] = varint(b, at);
    const wire = tag & 7;
    if (wire === 0) [, at] = varint(b, at);
    else if (wire === 1) at += 8;
    else if (wire === 5) at += 4;
    else if (wire === 2) {
      let len = 0;
      [len, at] = varint(b, at);
      if (tag >>> 3 === field) found = [at, at + len];
      at += len;
    } else throw new Error(`wire type ${wire} in an answer`);
  }
  return found;
}

/** The varint field `field` of `b[start, end)` (0 when absent). */
function varintField(b: Buffer, start: number, end: number, field: number): number {
  let value = 0;
  let at = start;
  while (at < end) {
    let tag = 0;
    [tag, at] = varint(b, at);
    const wire = tag & 7;
    if (wire === 0) {
      let v = 0;
      [v, at] = varint(b, at);
      if (tag >>> 3 === field) value = v;
    } else if (wire === 1) at += 8;
    else if (wire === 5) at += 4;
    else if (wire === 2) {
      let len = 0;
      [len, at] = varint(b, at);
      at += len;
    } else throw new Error(`wire type ${wire} in an answer`);
  }
  return value;
}

function varint(b: Buffer, at: number): [number, number] {
  let v = 0;
  let mul = 1;
  for (;;) {
    const x = b[at++]!;
    v += (x & 0x7f) * mul;
    if (x < 0x80) return [v, at];
    mul *= 128;
  }
}

/** What an answer is, as the proxy acts on it. */
export type Answer =
  | { kind: 'pick' }
  | { kind: 'immediate'; status: number }
  /** A streamed body chunk (request_body or response_body direction). */
  | { kind: 'chunk'; end: boolean }
  | { kind: 'other' };

/** ProcessingResponse fields (external_processor.proto). */
const REQUEST_HEADERS = 1;
const RESPONSE_HEADERS = 2;
const REQUEST_BODY = 3;
const RESPONSE_BODY = 4;
const IMMEDIATE = 7;

export function readAnswer(m: Buffer): Answer {
  const end = m.length;
  if (lengthDelimited(m, 0, end, IMMEDIATE) !== null) {
    const im = lengthDelimited(m, 0, end, IMMEDIATE)!;
    const status = lengthDelimited(m, im[0], im[1], 1); // ImmediateResponse.status (HttpStatus)
    return { kind: 'immediate', status: status === null ? 0 : varintField(m, status[0], status[1], 1) };
  }
  if (lengthDelimited(m, 0, end, REQUEST_HEADERS) !== null) return { kind: 'pick' };
  if (lengthDelimited(m, 0, end, RESPONSE_HEADERS) !== null) return { kind: 'other' };
  const body = lengthDelimited(m, 0, end, REQUEST_BODY) ?? lengthDelimited(m, 0, end, RESPONSE_BODY);
  if (body === null) return { kind: 'other' };
  // BodyResponse.response (1) → CommonResponse.body_mutation (3) → BodyMutation.streamed_response (3) → end_of_stream (2)
  const common = lengthDelimited(m, body[0], body[1], 1);
  const mutation = common && lengthDelimited(m, common[0], common[1], 3);
  const streamed = mutation && lengthDelimited(m, mutation[0], mutation[1], 3);
  if (streamed === null) return { kind: 'other' };
  return { kind: 'chunk', end: varintField(m, streamed[0], streamed[1], 2) === 1 };
}

const ENVOY_WINDOW = 256 * 1024 * 1024;

/** One connection to the EPP's ext_proc listener. */
export class WireClient {
  private readonly session: http2.ClientHttp2Session;

  constructor(address: string) {
    // Envoy's HTTP/2 client windows (http2_protocol_options: 256 MiB per stream and per
    // connection by default), so the EPP's answers never wait for a WINDOW_UPDATE from the proxy.
    this.session = http2.connect(`http://${address}`, { settings: { initialWindowSize: ENVOY_WINDOW } });
    this.session.on('connect', () => this.session.setLocalWindowSize(ENVOY_WINDOW));
    this.session.on('error', () => undefined);
  }

  open(): WireStream {
    const s = this.session.request({ ':method': 'POST', ':path': `/${EXT_PROC_SERVICE}/Process`, 'content-type': 'application/grpc', te: 'trailers' });
    return new WireStream(s);
  }

  close(): void {
    this.session.close();
  }
}

/** A stream's answers, read message by message. */
class WireStream {
  private pending: Buffer = Buffer.alloc(0);
  private readonly queue: Buffer[] = [];
  private waiter: ((m: Buffer | null) => void) | null = null;
  private done = false;
  /** grpc-status from the trailers ('' until they come, or if they never do). */
  grpcStatus = '';
  /** Settles when the stream has closed. */
  readonly closed: Promise<void>;

  constructor(private readonly s: http2.ClientHttp2Stream) {
    s.on('data', (chunk: Buffer) => this.onData(chunk));
    s.on('trailers', (t) => (this.grpcStatus = String(t['grpc-status'] ?? '')));
    s.on('response', (h) => {
      if (h['grpc-status'] !== undefined) this.grpcStatus = String(h['grpc-status']);
    });
    s.on('error', () => undefined);
    this.closed = new Promise((resolve) =>
      s.on('close', () => {
        this.done = true;
        const w = this.waiter;
        this.waiter = null;
        w?.(null);
        resolve();
      }),
    );
  }

  write(framed: Buffer): void {
    this.s.write(framed);
  }

  /** Half-close. */
  end(): void {
    this.s.end();
  }

  cancel(): void {
    this.s.close(http2.constants.NGHTTP2_CANCEL);
  }

  /** The next message; null when the stream closed first. */
  next(): Promise<Buffer | null> {
    const m = this.queue.shift();
    if (m !== undefined) return Promise.resolve(m);
    if (this.done) return Promise.resolve(null);
    return new Promise((resolve) => (this.waiter = resolve));
  }

  private onData(chunk: Buffer): void {
    let b = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    while (b.length >= 5) {
      const len = b.readUInt32BE(1);
      if (b.length < 5 + len) break;
      const m = b.subarray(5, 5 + len);
      b = b.subarray(5 + len);
      const w = this.waiter;
      if (w !== null) {
        this.waiter = null;
        w(m);
      } else this.queue.push(m);
    }
    this.pending = b;
  }
}
