/**
 * The gateway against clients that misbehave on purpose: stalled sockets, dribbled bodies,
 * cross-site posts, oversized asks, probing headers, colliding request ids; and what it reveals
 * of its workers in errors.
 */
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { after, before, describe, it, test } from 'node:test';
import type { Gateway } from '../../src/gateway/gateway.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { MODEL, post, startGateway, startSims, startStub, waitFor } from './helpers.js';

const CALM = { health: { intervalMs: 60_000 }, scrape: { intervalMs: 60_000 } };
const chat = (content: string, extra: object = {}) => ({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 4, ...extra });

/** Raw request over a new socket; resolves with what the server wrote before closing. */
function raw(port: number, text: string, timeoutMs = 5_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => s.write(text));
    let out = '';
    s.on('data', (d) => (out += d.toString('latin1')));
    s.on('close', () => resolve(out));
    s.on('error', reject);
    setTimeout(() => {
      s.destroy();
      resolve(out);
    }, timeoutMs).unref();
  });
}

function bodyOf(response: string): any {
  return JSON.parse(response.slice(response.indexOf('\r\n\r\n') + 4));
}

describe('slow and stalled clients', () => {
  let sims: SimWorker[];
  let gw: Gateway;
  let url: string;
  let port: number;
  before(async () => {
    sims = await startSims(1);
    ({ gw, url } = await startGateway([sims[0]!.url], {
      ...CALM,
      server: { headersTimeoutMs: 3_000, bodyTimeoutMs: 500, keepAliveTimeoutMs: 500, maxConnectionsPerAddress: 1_500, maxConnections: 4_000 },
    }));
    port = Number(new URL(url).port);
  });
  after(async () => {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  });

  it('2,000 stalled sockets: health and real requests still answered, every stalled socket closed within its timeout', async () => {
    const N = 2_000;
    const sockets: Socket[] = [];
    let closed = 0;
    const opened = Date.now();
    // In batches, so the listen backlog (511) never overflows: a connection the kernel drops
    // before accept() would only test the kernel.
    for (let b = 0; b < N; b += 250) {
      await Promise.all(
        Array.from({ length: 250 }, (_, j) =>
          new Promise<void>((resolve) => {
            const i = b + j;
            const s = connect(port, '127.0.0.1', () => {
              // Half the sockets send part of a request line, the rest nothing at all.
              if (i % 2 === 0) s.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n');
              resolve();
            });
            s.on('error', () => resolve());
            s.on('close', () => closed++);
            s.on('data', () => undefined);
            sockets.push(s);
          }),
        ),
      );
      await waitFor(() => gw.connections.open + closed >= b + 250, 2_000);
    }
    const lastOpened = Date.now();
    console.log(`stalled sockets: ${gw.connections.open} open at once, opened in ${lastOpened - opened} ms`);
    assert.ok(gw.connections.open > N / 2, `${gw.connections.open} open at once`);
    try {
      // While they are open: probes and a real request go through.
      const h = await fetch(url + '/health');
      assert.equal(h.status, 200);
      const r = await post(url + '/v1/chat/completions', chat('still there?'));
      assert.equal(r.status, 200);
      // Every stalled socket is closed: by the header timeout (plus Node's 1 s check interval at
      // most), or earlier to make room for the requests above.
      await waitFor(() => closed === N, 6_000);
      assert.ok(Date.now() - lastOpened < 3_000 + 1_000 + 500, `took ${Date.now() - lastOpened} ms after the last was opened`);
      await waitFor(() => gw.connections.open <= 2, 1_000);
    } finally {
      for (const s of sockets) s.destroy();
    }
  });

  it('a request whose headers never finish gets 408 in OpenAI’s shape', async () => {
    const out = await raw(port, 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n');
    assert.match(out, /^HTTP\/1\.1 408 /);
    assert.equal(bodyOf(out).error.code, 'request_timeout');
  });

  it('a body sent one byte at a time gets 408 in OpenAI’s shape within the body timeout', async () => {
    const started = Date.now();
    const out = await new Promise<string>((resolve) => {
      const s = connect(port, '127.0.0.1', () => {
        s.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{');
        const t = setInterval(() => s.writable && s.write(' '), 200);
        s.on('close', () => clearInterval(t));
      });
      let o = '';
      s.on('data', (d) => (o += d.toString()));
      s.on('close', () => resolve(o));
      s.on('error', () => resolve(o));
    });
    assert.match(out, /^HTTP\/1\.1 408 /);
    assert.equal(bodyOf(out).error.code, 'request_timeout');
    assert.ok(Date.now() - started < 2_000);
  });

  it('oversized headers get 431 and malformed requests 400, both with an OpenAI error body', async () => {
    const big = await raw(port, `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
    assert.match(big, /^HTTP\/1\.1 431 /);
    assert.equal(bodyOf(big).error.code, 'headers_too_large');
    const bad = await raw(port, 'NOT HTTP AT ALL\r\n\r\n');
    assert.match(bad, /^HTTP\/1\.1 400 /);
    assert.deepEqual(Object.keys(bodyOf(bad).error).sort(), ['code', 'message', 'param', 'type']);
  });
});

describe('the request surface', () => {
  let sims: SimWorker[];
  let gw: Gateway;
  let url: string;
  before(async () => {
    sims = await startSims(2);
    ({ gw, url } = await startGateway(sims.map((s) => s.url), {
      ...CALM,
      server: {},
      caps: { maxN: 4, maxTokens: 1_000, maxTotalTokens: 2_000 },
      tenants: [
        { id: 'small', keys: [{ value: 'sk-small-001' }], caps: { maxTokens: 10 } },
        { id: 'big', keys: [{ value: 'sk-big-0001' }] },
      ],
      admin: { keys: [{ value: 'sk-admin-001' }] },
    }));
  });
  after(async () => {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  });
  const BIG = { authorization: 'Bearer sk-big-0001' };

  it('only application/json bodies are read: text/plain, forms and compressed bodies get 415', async () => {
    const before = sims[0]!.stats().requests + sims[1]!.stats().requests;
    for (const [ct, extra] of [
      ['text/plain', {}],
      ['application/x-www-form-urlencoded', {}],
      ['multipart/form-data; boundary=x', {}],
      ['application/json', { 'content-encoding': 'gzip' }],
    ] as Array<[string, Record<string, string>]>) {
      const r = await fetch(url + '/v1/chat/completions', { method: 'POST', headers: { ...BIG, 'content-type': ct, ...extra }, body: JSON.stringify(chat('x')) });
      assert.equal(r.status, 415, ct);
      assert.equal(((await r.json()) as any).error.code, 'unsupported_media_type');
    }
    const ok = await post(url + '/v1/chat/completions', chat('x'), { ...BIG, 'content-type': 'application/json; charset=utf-8' });
    assert.equal(ok.status, 200);
    assert.equal(sims[0]!.stats().requests + sims[1]!.stats().requests, before + 1);
  });

  it('CORS is off: a cross-site request gets no Access-Control-Allow-Origin', async () => {
    const r = await post(url + '/v1/chat/completions', chat('x'), { ...BIG, origin: 'https://evil.example' });
    assert.equal(r.headers.get('access-control-allow-origin'), null);
    const pre = await fetch(url + '/v1/chat/completions', { method: 'OPTIONS', headers: { origin: 'https://evil.example', 'access-control-request-method': 'POST' } });
    assert.equal(pre.headers.get('access-control-allow-origin'), null);
  });

  it('request caps: 400 naming the parameter; a tenant’s caps lower the pool’s', async () => {
    const n = await post(url + '/v1/chat/completions', chat('x', { n: 128 }), BIG);
    assert.equal(n.status, 400);
    assert.equal(n.json.error.param, 'n');
    assert.equal(n.json.error.code, 'limit_exceeded');
    const mt = await post(url + '/v1/chat/completions', chat('x', { max_tokens: 5_000 }), BIG);
    assert.equal(mt.json.error.param, 'max_tokens');
    const mct = await post(url + '/v1/chat/completions', { ...chat('x'), max_tokens: undefined, max_completion_tokens: 5_000 }, BIG);
    assert.equal(mct.json.error.param, 'max_completion_tokens');
    const total = await post(url + '/v1/chat/completions', chat('x', { n: 3, max_tokens: 1_000 }), BIG);
    assert.equal(total.status, 400);
    assert.match(total.json.error.message, /3 × 1000/);
    const batch = await post(url + '/v1/completions', { model: MODEL, prompt: ['a', 'b', 'c'], max_tokens: 1_000 }, BIG);
    assert.equal(batch.status, 400);
    assert.equal((await post(url + '/v1/chat/completions', chat('x', { max_tokens: 11 }), { authorization: 'Bearer sk-small-001' })).status, 400);
    assert.equal((await post(url + '/v1/chat/completions', chat('x', { max_tokens: 10 }), { authorization: 'Bearer sk-small-001' })).status, 200);
  });

  it('routing headers are off by default and shown to admin callers', async () => {
    const r = await post(url + '/v1/chat/completions', chat('who routed me'), BIG);
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('x-kvgate-worker'), null);
    assert.equal(r.headers.get('x-kvgate-prefix-hit'), null);
    const a = await post(url + '/v1/chat/completions', chat('who routed me'), { ...BIG, 'x-kvgate-admin-key': 'sk-admin-001' });
    assert.equal(a.status, 200);
    assert.match(a.headers.get('x-kvgate-worker') ?? '', /^w[01]$/);
    const wrong = await post(url + '/v1/chat/completions', chat('who routed me'), { ...BIG, 'x-kvgate-admin-key': 'sk-big-0001' });
    assert.equal(wrong.headers.get('x-kvgate-worker'), null, 'a tenant key is not an admin key');
    // Or for everyone, by configuration.
    const g = await startGateway(sims.map((s) => s.url), { ...CALM, server: { routingHeaders: true } });
    try {
      const v = await post(g.url + '/v1/chat/completions', chat('who routed me'));
      assert.match(v.headers.get('x-kvgate-worker') ?? '', /^w[01]$/);
    } finally {
      await g.gw.close();
    }
  });

  it('kvgate owns the request id: two clients sending the same one get different ids, each its own echoed', async () => {
    const a = await post(url + '/v1/chat/completions', chat('a'), { ...BIG, 'x-request-id': 'same-id' });
    const b = await post(url + '/v1/chat/completions', chat('b'), { ...BIG, 'x-client-request-id': 'same-id' });
    assert.notEqual(a.headers.get('x-request-id'), b.headers.get('x-request-id'));
    assert.equal(a.headers.get('x-client-request-id'), 'same-id');
    assert.equal(b.headers.get('x-client-request-id'), 'same-id');
    assert.equal(a.json.id, `chatcmpl-${a.headers.get('x-request-id')}`);
  });

  it('message roles are validated; a huge model name is not echoed in full', async () => {
    const role = await post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'root', content: 'x' }] }, BIG);
    assert.equal(role.status, 400);
    assert.equal(role.json.error.param, 'messages[0].role');
    const name = 'm'.repeat(3 * 1024 * 1024);
    const nm = await post(url + '/v1/chat/completions', { model: name, messages: [{ role: 'user', content: 'x' }] }, BIG);
    assert.equal(nm.status, 404);
    assert.ok(nm.text.length < 500, `${nm.text.length} bytes`);
  });

  it('GET /v1/models/{id} answers the model, or 404 in OpenAI’s shape', async () => {
    const r = await fetch(url + '/v1/models/' + MODEL);
    assert.equal(r.status, 200);
    const j = (await r.json()) as any;
    assert.equal(j.id, MODEL);
    assert.equal(j.object, 'model');
    const nf = await fetch(url + '/v1/models/nope');
    assert.equal(nf.status, 404);
    assert.equal(((await nf.json()) as any).error.code, 'model_not_found');
  });
});

test('errors name the worker, never its address or raw text; 503 says why no worker could take it', async () => {
  const stub = await startStub((req, res) => {
    req.resume();
    res.writeHead(500, { 'content-type': 'text/plain' });
    res.end('Traceback: secret internals at /opt/vllm/engine.py line 42');
  });
  const { gw, url } = await startGateway(['http://127.0.0.1:1', stub.url], {
    ...CALM,
    retry: { attempts: 1 },
    circuitBreaker: { failuresToOpen: 2, coolDownMs: 60_000 },
    policy: { name: 'round-robin' },
  });
  try {
    for (let i = 0; i < 2; i++) {
      const r = await post(url + '/v1/chat/completions', chat('x'));
      assert.equal(r.status, 502);
      assert.doesNotMatch(r.text, /127\.0\.0\.1|Traceback|ECONNREFUSED|:1\b/);
      assert.match(r.json.error.message, /worker w[01]/);
    }
    // Both breakers are open now: the 503 names that, not "(healthy)".
    const r = await post(url + '/v1/chat/completions', chat('x'));
    assert.equal(r.status, 503);
    assert.match(r.json.error.message, /open circuit breaker/);
    assert.doesNotMatch(r.json.error.message, /\(healthy\)/);
  } finally {
    await gw.close();
    await stub.close();
  }
});

test('upstream credentials: the pool’s apiKey is sent to workers; a worker refusing it is a 502', async () => {
  const seen: Array<string | undefined> = [];
  const stub = await startStub((req, res) => {
    seen.push(req.headers.authorization);
    req.resume();
    if (req.headers.authorization !== 'Bearer worker-secret') {
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end('{"error":"Unauthorized"}');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"id":"x","choices":[]}');
  });
  const pools = (apiKey: string) => [{ name: 'main', model: MODEL, apiKey: { value: apiKey }, headers: { 'x-team': 'infra' }, workers: [{ url: stub.url, id: 'w0' }] }];
  const good = await startGateway([], { ...CALM, pools: pools('worker-secret') });
  const bad = await startGateway([], { ...CALM, pools: pools('wrong') });
  try {
    assert.equal((await post(good.url + '/v1/chat/completions', chat('x'))).status, 200);
    assert.equal(seen.at(-1), 'Bearer worker-secret');
    const r = await post(bad.url + '/v1/chat/completions', chat('x'));
    assert.equal(r.status, 502);
    assert.equal(r.json.error.code, 'upstream_auth_failed');
    assert.doesNotMatch(JSON.stringify(good.gw.registry.describeAll()), /worker-secret/);
  } finally {
    await good.gw.close();
    await bad.gw.close();
    await stub.close();
  }
});

test('shutdown: /ready answers 503 during the drain delay while requests are still served, then the listener closes', async () => {
  const sims = await startSims(1);
  const { gw, url } = await startGateway([sims[0]!.url], { ...CALM, shutdown: { drainDelayMs: 400, graceMs: 1_000 } });
  try {
    assert.equal((await fetch(url + '/ready')).status, 200);
    const done = gw.shutdown();
    assert.equal((await fetch(url + '/ready')).status, 503);
    assert.equal((await post(url + '/v1/chat/completions', chat('during drain'))).status, 200);
    assert.equal((await fetch(url + '/health')).status, 200);
    await done;
    await assert.rejects(fetch(url + '/health'));
  } finally {
    await gw.close();
    await sims[0]!.close();
  }
});

test('at the connection cap a new client gets in by closing the oldest stalled connection', async () => {
  const sims = await startSims(1);
  const { gw, url } = await startGateway([sims[0]!.url], { ...CALM, server: { maxConnections: 40, maxConnectionsPerAddress: 30, headersTimeoutMs: 60_000 } });
  const port = Number(new URL(url).port);
  const sockets: Socket[] = [];
  try {
    for (let i = 0; i < 30; i++) {
      await new Promise<void>((resolve) => {
        const s = connect(port, '127.0.0.1', () => resolve());
        s.on('error', () => undefined);
        sockets.push(s);
      });
    }
    await waitFor(() => gw.connections.open === 30);
    const first = sockets[0]!;
    const closed = new Promise<void>((r) => first.once('close', () => r()));
    // Same address, at its cap: the oldest idle connection makes room.
    assert.equal((await fetch(url + '/health')).status, 200);
    await closed;
    assert.ok(gw.connections.evicted >= 1);
    assert.equal((await post(url + '/v1/chat/completions', chat('in'))).status, 200);
  } finally {
    for (const s of sockets) s.destroy();
    await gw.close();
    await sims[0]!.close();
  }
});

/** A non-streamed request for 10,000 tokens to a worker that never answers, under caps.maxRequestMs: status, body and ms taken. */
async function askNeverAnswered(maxRequestMs: number): Promise<{ status: number; json: any; text: string; took: number }> {
  const held: Array<import('node:http').ServerResponse> = [];
  const stub = await startStub((req, res) => {
    req.resume();
    if (req.url === '/health') return void res.end();
    held.push(res);
  });
  const { gw, url } = await startGateway([stub.url], { ...CALM, outlier: { enabled: false }, caps: { maxRequestMs }, retry: { attempts: 0 } });
  try {
    const t0 = Date.now();
    const r = await post(url + '/v1/chat/completions', chat('x', { max_tokens: 10_000 }));
    return { status: r.status, json: r.json, text: r.text, took: Date.now() - t0 };
  } finally {
    for (const r of held) r.destroy();
    await gw.close();
    await stub.close();
  }
}

test('the request deadline is capped (caps.maxRequestMs), whatever max_tokens allows', async () => {
  // Non-streamed, 10,000 tokens: the derived deadline would be 30 s + 2,000 s.
  const r = await askNeverAnswered(300);
  assert.equal(r.status, 504);
  assert.ok(r.took < 2_000, `${r.took} ms`);
});

test('a deadline over a second is neither early nor late (its timer is set in whole seconds, then for the rest)', async () => {
  const r = await askNeverAnswered(1_400);
  assert.equal(r.status, 504);
  assert.equal(r.json.error.code, 'deadline_exceeded', r.text);
  assert.ok(r.took >= 1_390, `answered after ${r.took} ms: before the deadline`);
  assert.ok(r.took < 2_400, `answered after ${r.took} ms`);
});

test('a warning when listening beyond loopback with no client keys', async () => {
  const { Writable } = await import('node:stream');
  const { createLogger } = await import('../../src/telemetry/logger.js');
  const { createGateway } = await import('../../src/gateway/gateway.js');
  const { configFor } = await import('./helpers.js');
  const lines: string[] = [];
  const destination = new Writable({ write: (c, _e, cb) => (lines.push(String(c)), cb()) });
  const warned = async (host: string, extra: object = {}) => {
    lines.length = 0;
    const gw = createGateway(configFor(['http://127.0.0.1:9'], { ...CALM, listen: { host, port: 0 }, ...extra }), { logger: createLogger({ level: 'warn', destination }), watchFleet: false });
    await gw.start();
    await gw.close();
    return lines.some((l) => /non-loopback address with no client API keys/.test(l));
  };
  assert.equal(await warned('0.0.0.0'), true);
  assert.equal(await warned('127.0.0.1'), false);
  assert.equal(await warned('0.0.0.0', { tenants: [{ id: 't', keys: [{ value: 'sk-some-key-1' }] }] }), false);
});

test('CORS for configured origins only: preflight and responses carry the grant for them alone', async () => {
  const sims = await startSims(1);
  const { gw, url } = await startGateway([sims[0]!.url], { ...CALM, server: { corsOrigins: ['https://app.example.com'] } });
  try {
    const pre = await fetch(url + '/v1/chat/completions', { method: 'OPTIONS', headers: { origin: 'https://app.example.com', 'access-control-request-method': 'POST' } });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers.get('access-control-allow-origin'), 'https://app.example.com');
    assert.match(pre.headers.get('access-control-allow-headers') ?? '', /content-type/);
    const ok = await post(url + '/v1/chat/completions', chat('x'), { origin: 'https://app.example.com' });
    assert.equal(ok.headers.get('access-control-allow-origin'), 'https://app.example.com');
    const other = await post(url + '/v1/chat/completions', chat('x'), { origin: 'https://evil.example' });
    assert.equal(other.headers.get('access-control-allow-origin'), null);
  } finally {
    await gw.close();
    await sims[0]!.close();
  }
});
