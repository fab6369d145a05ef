import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import { UpstreamPool, type ExchangeController, type UpstreamRequest } from '../../src/http/upstream-pool.js';

interface Outcome {
  status: number;
  headers: Record<string, unknown>;
  body: string;
  error: (Error & { code?: string }) | null;
}

/** Dispatches and collects the response; `onData` may steer the exchange (pause, abort). */
function call(pool: UpstreamPool, req: Partial<UpstreamRequest> = {}, onData?: (c: ExchangeController, chunk: Buffer, o: Outcome) => void): Promise<Outcome> {
  return new Promise((resolve) => {
    const o: Outcome = { status: 0, headers: {}, body: '', error: null };
    pool.dispatch(
      { method: 'POST', path: '/v1/chat/completions', headers: { 'content-type': 'application/json' }, body: '{}', ...req },
      {
        onResponseStart: (_c, status, headers) => {
          o.status = status;
          o.headers = headers;
        },
        onResponseData: (c, chunk) => {
          o.body += chunk.toString();
          onData?.(c, chunk, o);
        },
        onResponseEnd: () => resolve(o),
        onResponseError: (_c, e) => {
          o.error = e;
          resolve(o);
        },
      },
    );
  });
}

async function listen(s: Server | ReturnType<typeof createNetServer>): Promise<string> {
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

const opts = { connections: 0, keepAliveTimeoutMs: 4_000, connectTimeoutMs: 2_000 };

/** A node:http worker: JSON answers, SSE streams, and a count of the connections it accepted. */
async function worker(): Promise<{ url: string; server: Server; connections: () => number; seen: Array<{ headers: Record<string, unknown>; body: string }> }> {
  let connections = 0;
  const seen: Array<{ headers: Record<string, unknown>; body: string }> = [];
  const server = createHttpServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      seen.push({ headers: req.headers, body });
      if (req.url === '/stream') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        let i = 0;
        const t = setInterval(() => {
          if (res.destroyed) return clearInterval(t);
          if (i === 5) {
            clearInterval(t);
            res.end('data: [DONE]\n\n');
            return;
          }
          res.write(`data: ${i++}\n\n`);
        }, 20);
        return;
      }
      const out = JSON.stringify({ echo: body, n: seen.length });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
      res.end(out);
    });
  });
  server.on('connection', () => connections++);
  return { url: await listen(server), server, connections: () => connections, seen };
}

test('upstream pool: relays JSON and SSE answers, sends the request intact, reuses one keep-alive connection', async () => {
  const w = await worker();
  const pool = new UpstreamPool(w.url, opts);
  try {
    const a = await call(pool, { headers: { 'content-type': 'application/json', 'x-request-id': 'r1', authorization: 'Bearer k' }, body: Buffer.from('{"a":"é"}') });
    assert.equal(a.error, null);
    assert.equal(a.status, 200);
    assert.equal(a.headers['content-type'], 'application/json');
    assert.deepEqual(JSON.parse(a.body), { echo: '{"a":"é"}', n: 1 });
    assert.equal(w.seen[0]!.headers['x-request-id'], 'r1');
    assert.equal(w.seen[0]!.headers.authorization, 'Bearer k');
    assert.equal(w.seen[0]!.headers.host, new URL(w.url).host);
    const s = await call(pool, { path: '/stream' });
    assert.equal(s.body, 'data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\ndata: [DONE]\n\n');
    await call(pool);
    assert.equal(w.connections(), 1, 'one connection carried all three requests');
    assert.equal(pool.connections, 1);
  } finally {
    await pool.destroy();
    w.server.close();
  }
});

test('upstream pool: past the connection cap requests wait their turn; none is lost', async () => {
  const w = await worker();
  const pool = new UpstreamPool(w.url, { ...opts, connections: 2 });
  try {
    const all = await Promise.all(Array.from({ length: 7 }, (_, i) => call(pool, { body: `{"i":${i}}` })));
    assert.deepEqual(all.map((o) => o.error), Array(7).fill(null));
    assert.deepEqual(all.map((o) => JSON.parse(o.body).echo).sort(), Array.from({ length: 7 }, (_, i) => `{"i":${i}}`).sort());
    assert.equal(w.connections(), 2);
  } finally {
    await pool.destroy();
    w.server.close();
  }
});

test('upstream pool: abort mid-stream reports the reason and never reuses that connection; pause holds the bytes back', async () => {
  const w = await worker();
  const pool = new UpstreamPool(w.url, opts);
  try {
    const aborted = await call(pool, { path: '/stream' }, (c, _chunk, o) => {
      if (o.body.includes('data: 1')) c.abort(new Error('deadline'));
    });
    assert.equal(aborted.error?.message, 'deadline');
    assert.ok(!aborted.body.includes('data: 2'), 'nothing is delivered after abort');
    let pausedAt = -1;
    const paused = await call(pool, { path: '/stream' }, (c, _chunk, o) => {
      if (pausedAt === -1) {
        pausedAt = o.body.length;
        c.pause();
        setTimeout(() => {
          assert.equal(o.body.length, pausedAt, 'no bytes arrive while paused');
          c.resume();
        }, 150);
      }
    });
    assert.equal(paused.error, null);
    assert.ok(paused.body.endsWith('data: [DONE]\n\n'));
    assert.equal(w.connections(), 2, 'the aborted connection was closed, a new one opened');
  } finally {
    await pool.destroy();
    w.server.close();
  }
});

test('upstream pool: refused connections, a worker hanging up mid-answer and a malformed answer are errors with codes', async () => {
  const probe = createNetServer();
  const deadUrl = await listen(probe);
  await new Promise((r) => probe.close(r));
  const dead = new UpstreamPool(deadUrl, opts);
  const refused = await call(dead);
  assert.equal(refused.error?.code, 'ECONNREFUSED');
  assert.equal(dead.connections, 0);

  let mode = 'cut';
  const raw = createNetServer((s: Socket) => {
    s.once('data', () => {
      if (mode === 'cut') s.end('HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"partial"');
      else s.end('HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nabc');
    });
  });
  const pool = new UpstreamPool(await listen(raw), opts);
  try {
    const cut = await call(pool);
    assert.equal(cut.status, 200);
    assert.equal(cut.error?.code, 'UND_ERR_SOCKET');
    assert.match(cut.error.message, /mid-response/);
    mode = 'bad';
    const bad = await call(pool);
    assert.equal(bad.error?.code, 'KVGATE_HTTP_PARSE');
    const injected = await call(pool, { headers: { 'x-a': 'v\r\nx-b: smuggled' } });
    assert.equal(injected.error?.code, 'KVGATE_INVALID_HEADER');
  } finally {
    await pool.destroy();
    raw.close();
  }
});

test('upstream pool: a connection the worker closed while idle is replaced; close() waits for requests in progress', async () => {
  const w = await worker();
  w.server.keepAliveTimeout = 50;
  const pool = new UpstreamPool(w.url, opts);
  try {
    assert.equal((await call(pool)).error, null);
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(pool.connections, 0, 'the worker closed the idle connection and the pool noticed');
    assert.equal((await call(pool)).error, null);
    const inflight = call(pool, { path: '/stream' });
    await new Promise((r) => setTimeout(r, 30));
    let closed = false;
    const closing = pool.close().then(() => (closed = true));
    const late = await call(pool);
    assert.equal(late.error?.code, 'UND_ERR_CLOSED', 'nothing new after close()');
    assert.equal(closed, false);
    const s = await inflight;
    assert.equal(s.error, null);
    assert.ok(s.body.endsWith('[DONE]\n\n'), 'the stream in progress finished');
    await closing;
    assert.equal(pool.connections, 0);
  } finally {
    await pool.destroy();
    w.server.close();
  }
});

/** A self-signed certificate for 127.0.0.1, for this test only. */
const TEST_CERT = `-----BEGIN CERTIFICATE-----
MIIBjzCCATagAwIBAgIUMFDe2dxsmA2t0Z/Ic6bBwu+EqMMwCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJMTI3LjAuMC4xMCAXDTI2MTEyNjE3NDE0NVoYDzIxMjYxMTAy
MTc0MTQ1WjAUMRIwEAYDVQQDDAkxMjcuMC4wLjEwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAAQXmxhwzIt1WujMfGkvDyZIWJN50RHX+yDd9MMvVmpVQrnkL6q58ee8
WYb5feyvqM6k4DygDVnM4/GCgxlT25eqo2QwYjAdBgNVHQ4EFgQUk/Qn33+Lztx4
CrGy2oKFM/Vo2EowHwYDVR0jBBgwFoAUk/Qn33+Lztx4CrGy2oKFM/Vo2EowDwYD
VR0TAQH/BAUwAwEB/zAPBgNVHREECDAGhwR/AAABMAoGCCqGSM49BAMCA0cAMEQC
IATFMt3A/z12+oqAk6OdT0FvwCBIGwNKQQ1VS/NyiCyoAiAazuC3rQR7im+eGrs9
Do2nRDCl/xWe0fXPYOX5N+CE3A==
-----END CERTIFICATE-----
`;
const TEST_KEY = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgZ2IBxUfhhlqdL3n2
qHYDi7zAtsKfSCot62lYXJsonkyhRANCAAQXmxhwzIt1WujMfGkvDyZIWJN50RHX
+yDd9MMvVmpVQrnkL6q58ee8WYb5feyvqM6k4DygDVnM4/GCgxlT25eq
-----END PRIVATE KEY-----
`;

test('upstream pool: https workers are verified; a private CA can be given', async () => {
  const server = createHttpsServer({ cert: TEST_CERT, key: TEST_KEY }, (req, res) => {
    req.resume();
    req.on('end', () => res.end('{"tls":true}'));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const untrusted = new UpstreamPool(url, opts);
  const trusted = new UpstreamPool(url, { ...opts, tls: { ca: TEST_CERT } });
  try {
    const refused = await call(untrusted);
    assert.equal(refused.error?.code, 'DEPTH_ZERO_SELF_SIGNED_CERT', 'an unknown certificate is refused');
    const ok = await call(trusted);
    assert.equal(ok.error, null);
    assert.equal(ok.body, '{"tls":true}');
  } finally {
    await untrusted.destroy();
    await trusted.destroy();
    server.close();
  }
});

test('upstream pool: a request on a kept-alive connection the worker closes unanswered is sent again once on a new one; on a new connection it fails', async () => {
  let conns = 0;
  let requests = 0;
  let closeNew = false;
  const raw = createNetServer((s: Socket) => {
    const n = ++conns;
    let served = 0;
    s.on('data', () => {
      requests++;
      // The first connection answers once, then hangs up on the next request (an idle-timeout race).
      if ((n === 1 && served === 1) || closeNew) {
        s.destroy();
        return;
      }
      served++;
      s.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}');
    });
  });
  const pool = new UpstreamPool(await listen(raw), opts);
  try {
    assert.equal((await call(pool)).error, null);
    const second = await call(pool);
    assert.equal(second.error, null, 'sent again on a new connection');
    assert.equal(second.body, '{}');
    assert.equal(conns, 2);
    assert.equal(requests, 3);
    await pool.destroy();
    closeNew = true;
    const fresh = new UpstreamPool(`http://127.0.0.1:${(raw.address() as AddressInfo).port}`, opts);
    const failed = await call(fresh);
    assert.equal(failed.error?.code, 'UND_ERR_SOCKET', 'a new connection closed unanswered is an error, not a loop');
    assert.equal(requests, 4);
    await fresh.destroy();
  } finally {
    await pool.destroy();
    raw.close();
  }
});

test('upstream pool: bytes past the end of a response close the connection; the request queued behind it is not lost', async () => {
  let conns = 0;
  const raw = createNetServer((s: Socket) => {
    const n = ++conns;
    s.on('data', () => {
      // The first connection answers with a second, unrequested response glued to the first.
      const extra = n === 1 ? 'HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nextra' : '';
      s.write(`HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}${extra}`);
    });
  });
  const pool = new UpstreamPool(await listen(raw), { ...opts, connections: 1 });
  try {
    const [a, b] = await Promise.all([call(pool), call(pool)]);
    assert.equal(a.error, null);
    assert.equal(a.body, '{}');
    assert.equal(b.error, null, 'the queued request went out again on a new connection');
    assert.equal(b.body, '{}');
    assert.equal(conns, 2);
  } finally {
    await pool.destroy();
    raw.close();
  }
});

test('upstream pool: a request aborted while waiting for a connection leaves the queue at once', async () => {
  const w = await worker();
  const pool = new UpstreamPool(w.url, { ...opts, connections: 1 });
  try {
    const stream = call(pool, { path: '/stream' });
    let controller: ExchangeController | null = null;
    const waiting = new Promise<Outcome>((resolve) => {
      const o: Outcome = { status: 0, headers: {}, body: '', error: null };
      pool.dispatch(
        { method: 'POST', path: '/v1/chat/completions', headers: {}, body: '{}' },
        {
          onRequestStart: (c) => (controller = c),
          onResponseEnd: () => resolve(o),
          onResponseError: (_c, e) => {
            o.error = e;
            resolve(o);
          },
        },
      );
    });
    controller!.abort(new Error('client gone'));
    assert.equal((await waiting).error?.message, 'client gone');
    assert.equal((await stream).error, null);
    assert.equal((await call(pool)).error, null, 'the next request is served');
    assert.equal(w.seen.length, 2, 'the aborted request never reached the worker');
  } finally {
    await pool.destroy();
    w.server.close();
  }
});

test('upstream pool: the frames of one socket read reach the handler as one piece', async () => {
  const raw = createNetServer((s: Socket) => {
    s.once('data', () => {
      s.write('HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n');
      // Three events in one write, then the last one and the end after a pause.
      setTimeout(() => s.write('3\r\na\n\n\r\n3\r\nb\n\n\r\n3\r\nc\n\n\r\n'), 20);
      setTimeout(() => s.write('3\r\nd\n\n\r\n0\r\n\r\n'), 120);
    });
  });
  const pool = new UpstreamPool(await listen(raw), opts);
  try {
    const pieces: string[] = [];
    const o = await call(pool, {}, (_c, chunk) => pieces.push(chunk.toString()));
    assert.equal(o.error, null);
    assert.deepEqual(pieces, ['a\n\nb\n\nc\n\n', 'd\n\n']);
  } finally {
    await pool.destroy();
    raw.close();
  }
});
