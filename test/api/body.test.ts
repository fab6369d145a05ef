import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { readBody, type BodyResult } from '../../src/api/body.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** A loopback server that reads each request's body with readBody and hands over both. */
async function serve(limit: number, timeoutMs = 0): Promise<{ server: Server; url: string; next: () => Promise<{ req: IncomingMessage; result: BodyResult }> }> {
  const waiting: Array<(x: { req: IncomingMessage; result: BodyResult }) => void> = [];
  const server = createServer((req, res) => {
    void readBody(req, limit, timeoutMs).then((result) => {
      waiting.shift()?.({ req, result });
      res.end('ok');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  return { server, url, next: () => new Promise((r) => waiting.push(r)) };
}

/** Send `parts` as one chunked body, `gapMs` apart, so that the server reads them as separate chunks. */
function send(url: string, parts: Buffer[], gapMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST' }, (res) => {
      res.resume();
      res.on('end', resolve);
    });
    req.on('error', reject);
    let i = 0;
    const write = (): void => {
      if (i === parts.length) {
        req.end();
        return;
      }
      req.write(parts[i++]);
      setTimeout(write, gapMs);
    };
    write();
  });
}

test('a body sent in several chunks is read whole', async () => {
  const { server, url, next } = await serve(1 << 20);
  try {
    const parts = [Buffer.from('{"a":'), Buffer.from('"'.padEnd(1000, 'x')), Buffer.from('"}')];
    const got = next();
    await send(url, parts, 20);
    const { result } = await got;
    assert.ok(result.ok);
    if (result.ok) assert.deepEqual(result.body, Buffer.concat(parts));
  } finally {
    server.close();
  }
});

test('a body over the limit is refused: declared, or as its chunks pass it', async () => {
  const { server, url, next } = await serve(100);
  try {
    let got = next();
    await new Promise<void>((resolve) => {
      const req = request(url, { method: 'POST', headers: { 'content-length': '101' } }, (res) => {
        res.resume();
        res.on('end', resolve);
      });
      req.end(Buffer.alloc(101));
    });
    assert.deepEqual((await got).result, { ok: false, reason: 'too_large' });
    got = next();
    const sent = send(url, [Buffer.alloc(60), Buffer.alloc(60)], 20).catch(() => undefined);
    assert.deepEqual((await got).result, { ok: false, reason: 'too_large' });
    await sent;
  } finally {
    server.closeAllConnections();
    server.close();
  }
});

test('a body that stops arriving is given up on after the timeout', async () => {
  const { server, url, next } = await serve(1 << 20, 100);
  try {
    const got = next();
    const req = request(url, { method: 'POST' });
    req.on('error', () => undefined);
    req.write('{"a":');
    const t0 = Date.now();
    assert.deepEqual((await got).result, { ok: false, reason: 'timeout' });
    assert.ok(Date.now() - t0 < 2000);
    req.destroy();
  } finally {
    server.closeAllConnections();
    server.close();
  }
});

test('once read, the request no longer holds the chunks its body was made of', async () => {
  const { server, url, next } = await serve(1 << 20);
  try {
    const chunks: WeakRef<Buffer>[] = [];
    server.prependListener('request', (req: IncomingMessage) => req.on('data', (c: Buffer) => chunks.push(new WeakRef(c))));
    const got = next();
    await send(url, [Buffer.alloc(64 * 1024, 1), Buffer.alloc(64 * 1024, 2), Buffer.alloc(64 * 1024, 3)], 30);
    const { req, result } = await got;
    assert.ok(result.ok && result.body.length === 3 * 64 * 1024);
    assert.ok(chunks.length >= 2, `read in ${chunks.length} chunks`);
    // The request is still alive (as it is while its answer streams), its listeners with it.
    assert.ok(req.listenerCount('data') > 0);
    await new Promise((r) => setImmediate(r));
    gc();
    await new Promise((r) => setImmediate(r));
    gc();
    assert.equal(chunks.filter((c) => c.deref() !== undefined).length, 0, 'chunks still reachable');
    assert.ok(req.complete);
  } finally {
    server.close();
  }
});
