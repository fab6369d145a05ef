/** Every error the gateway answers itself, in OpenAI's error shape. */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Gateway } from '../../src/gateway/gateway.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { MODEL, post, startGateway, startSims, startStub } from './helpers.js';

let sims: SimWorker[];
let gw: Gateway;
let url: string;

before(async () => {
  sims = await startSims(1);
  // Slow health probes: a test below takes the worker out by hand and must not be overruled.
  ({ gw, url } = await startGateway(sims.map((s) => s.url), { limits: { maxBodyBytes: 2048 }, health: { intervalMs: 60_000 } }));
  await gw.health.probeAll();
});

after(async () => {
  await gw.close();
  await Promise.all(sims.map((s) => s.close()));
});

function assertOpenAiError(json: any, code: string | null, type?: string): void {
  assert.ok(json && typeof json.error === 'object', 'error body');
  assert.equal(typeof json.error.message, 'string');
  assert.ok(json.error.message.length > 0);
  assert.ok('param' in json.error);
  assert.equal(json.error.code, code);
  if (type) assert.equal(json.error.type, type);
}

test('400 on malformed JSON', async () => {
  const r = await post(url + '/v1/chat/completions', '{"model": "x", "messages": [');
  assert.equal(r.status, 400);
  assertOpenAiError(r.json, 'invalid_json', 'invalid_request_error');
});

test('400 on a body that is not UTF-8; the same text in UTF-8 is answered', async () => {
  const json = (s: string) => `{"model":"${MODEL}","max_tokens":2,"messages":[{"role":"user","content":"${s}"}]}`;
  const latin1 = Buffer.from(json('caf\u00e9'), 'latin1'); // é as the single byte 0xe9
  const r = await fetch(url + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: latin1 });
  assert.equal(r.status, 400);
  const body = (await r.json()) as { error: { message: string } };
  assertOpenAiError(body, 'invalid_json', 'invalid_request_error');
  assert.match(body.error.message, /not valid UTF-8/);
  const ok = await fetch(url + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: Buffer.from(json('caf\u00e9'), 'utf8') });
  assert.equal(ok.status, 200);
  await ok.arrayBuffer();
});

test('a UTF-8 byte order mark before the JSON is ignored, and the worker is sent the JSON without it', async () => {
  const json = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
  // A worker that records what reaches it and answers as a worker would.
  const received: string[] = [];
  const worker = await startStub((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.url === '/v1/chat/completions') received.push(Buffer.concat(chunks).toString('utf8'));
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: 'x', object: 'chat.completion', created: 0, model: MODEL, choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }));
    });
  });
  const g = await startGateway([worker.url], { health: { intervalMs: 60_000 }, scrape: { intervalMs: 60_000 } });
  try {
    const r = await post(g.url + '/v1/chat/completions', '\ufeff' + json);
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.equal(r.json.object, 'chat.completion');
    assert.equal(received.length, 1);
    assert.notEqual(received[0]!.charCodeAt(0), 0xfeff, 'the mark is not passed on');
    assert.deepEqual(JSON.parse(received[0]!), JSON.parse(json));
    // A mark anywhere else is not JSON.
    const r2 = await post(g.url + '/v1/chat/completions', ' \ufeff' + json);
    assert.equal(r2.status, 400);
    assertOpenAiError(r2.json, 'invalid_json', 'invalid_request_error');
    assert.equal(received.length, 1);
  } finally {
    await g.gw.close();
    await worker.close();
  }
});

test('400 on a schema violation names the field', async () => {
  const r = await post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: -3 });
  assert.equal(r.status, 400);
  assertOpenAiError(r.json, 'invalid_value', 'invalid_request_error');
  assert.equal(r.json.error.param, 'max_tokens');
  assert.match(r.json.error.message, /max_tokens/);

  const r2 = await post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }, { content: 'x' }] });
  assert.equal(r2.status, 400);
  assert.equal(r2.json.error.param, 'messages[1].role');

  const r3 = await post(url + '/v1/completions', { model: MODEL });
  assert.equal(r3.status, 400);
  assert.equal(r3.json.error.param, 'prompt');

  const r4 = await post(url + '/v1/completions', [1, 2]);
  assert.equal(r4.status, 400);
  assertOpenAiError(r4.json, 'invalid_value');
});

test("a field only the worker checks: its 400 is relayed as it is, never cached, never held against the worker", async () => {
  // The gateway passes response_format through; the simulated worker refuses an unknown type as
  // vLLM's request schema does (AnyResponseFormat in vllm/entrypoints/openai/protocol.py).
  const body = { model: MODEL, temperature: 0, max_tokens: 3, messages: [{ role: 'user', content: 'hi' }], response_format: { type: 'xml' } };
  for (let i = 0; i < 2; i++) {
    const r = await post(url + '/v1/chat/completions', body);
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.param, 'response_format.type');
    assert.notEqual(r.headers.get('x-kvgate-cache'), 'hit');
  }
  const ok = await post(url + '/v1/chat/completions', { ...body, response_format: { type: 'json_object' } });
  assert.equal(ok.status, 200, ok.text);
  assert.equal(gw.router.openCount, 0);
});

test('404 model_not_found for a model no pool serves', async () => {
  const r = await post(url + '/v1/chat/completions', { model: 'gpt-17', messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(r.status, 404);
  assertOpenAiError(r.json, 'model_not_found');
  assert.equal(r.json.error.param, 'model');
});

test('413 when the body is over the limit', async () => {
  const big = { model: MODEL, prompt: 'x'.repeat(10_000) };
  const r = await post(url + '/v1/completions', big);
  assert.equal(r.status, 413);
  assertOpenAiError(r.json, 'request_too_large');
});

test('413 for a chunked body (no Content-Length) that grows past the limit', async () => {
  const chunks = ['{"model":"' + MODEL + '","prompt":"', 'y'.repeat(1500), 'y'.repeat(1500), '"}'];
  const body = new ReadableStream({
    start(c) {
      for (const s of chunks) c.enqueue(new TextEncoder().encode(s));
      c.close();
    },
  });
  const r = await fetch(url + '/v1/completions', { method: 'POST', body, duplex: 'half', headers: { 'content-type': 'application/json' } } as RequestInit);
  assert.equal(r.status, 413);
  assertOpenAiError((await r.json()) as any, 'request_too_large');
});

test('404 unknown route, 405 wrong method', async () => {
  const r = await fetch(url + '/v1/embeddings-nope');
  assert.equal(r.status, 404);
  assertOpenAiError(await r.json(), 'not_found');
  const r2 = await fetch(url + '/v1/chat/completions');
  assert.equal(r2.status, 405);
  assert.equal(r2.headers.get('allow'), 'POST');
  assertOpenAiError(await r2.json(), 'method_not_allowed');
  const r3 = await fetch(url + '/v1/models', { method: 'DELETE' });
  assert.equal(r3.status, 405);
});

test('503 with Retry-After when no worker is healthy; /ready stays 200 and says so, or follows with readyRequiresWorker', async () => {
  const strict = await startGateway(sims.map((s) => s.url), { server: { readyRequiresWorker: true }, health: { intervalMs: 60_000 } });
  await strict.gw.health.probeAll();
  const ready = async (u: string) => {
    const r = await fetch(u + '/ready');
    return { status: r.status, body: (await r.json()) as { status: string; workers_routable: boolean } };
  };
  try {
    assert.deepEqual(await ready(url), { status: 200, body: { status: 'ready', workers_routable: true } });
    assert.equal((await ready(strict.url)).status, 200);
    const ws = [gw.registry.workers[0]!, strict.gw.registry.workers[0]!];
    for (const w of ws) w.healthy = false;
    try {
      const r = await post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
      assert.equal(r.status, 503);
      assert.equal(r.headers.get('retry-after'), '1');
      assertOpenAiError(r.json, 'no_worker_available');
      // By default the gateway stays in its Service and answers the 503 itself.
      assert.deepEqual(await ready(url), { status: 200, body: { status: 'ready', workers_routable: false } });
      assert.deepEqual(await ready(strict.url), { status: 503, body: { status: 'not_ready', workers_routable: false } });
      assert.equal((await fetch(url + '/health')).status, 200);
    } finally {
      for (const w of ws) w.healthy = true;
    }
  } finally {
    await strict.gw.close();
  }
});

test('502 when every worker fails with 5xx (tried twice, then given up)', async () => {
  let hits = 0;
  const a = await startStub((req, res) => {
    if (req.url === '/v1/completions') hits++;
    res.writeHead(500, { 'content-type': 'application/json' });
    res.end('{"error":"boom"}');
  });
  const b = await startStub((req, res) => {
    if (req.url === '/v1/completions') hits++;
    res.writeHead(503);
    res.end('overloaded');
  });
  const g = await startGateway([a.url, b.url], { health: { intervalMs: 60_000 }, scrape: { intervalMs: 60_000 } });
  try {
    const r = await post(g.url + '/v1/completions', { model: MODEL, prompt: 'hello' });
    assert.equal(r.status, 502);
    assertOpenAiError(r.json, 'upstream_error', 'upstream_error');
    assert.equal(hits, 2, 'one retry on the other worker');
    assert.equal(g.gw.router.openCount, 0);
  } finally {
    await g.gw.close();
    await a.close();
    await b.close();
  }
});

test('502 when the only worker is unreachable', async () => {
  const dead = await startStub(() => undefined);
  const deadUrl = dead.url;
  await dead.close();
  const g = await startGateway([deadUrl], { health: { intervalMs: 60_000 }, scrape: { intervalMs: 60_000 } });
  try {
    const r = await post(g.url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r.status, 502);
    assertOpenAiError(r.json, 'upstream_unreachable');
  } finally {
    await g.gw.close();
  }
});

test('504 when a worker never answers: first-byte timeout (stream) and request deadline (JSON)', async () => {
  const hung = await startStub((req) => {
    req.resume(); // read the body, never answer
  });
  const g = await startGateway([hung.url], {
    health: { intervalMs: 60_000 },
    scrape: { intervalMs: 60_000 },
    timeouts: { firstByteMs: 150, minTokensPerSecond: 1000 },
  });
  try {
    const t0 = Date.now();
    const r = await post(g.url + '/v1/chat/completions', { model: MODEL, stream: true, messages: [{ role: 'user', content: 'hi' }], max_tokens: 10 });
    assert.equal(r.status, 504);
    assertOpenAiError(r.json, 'deadline_exceeded', 'timeout_error');
    assert.ok(Date.now() - t0 < 2000);
    // Non-streaming: deadline = 150 ms + 100 tokens / 1000 tok/s = 250 ms.
    const t1 = Date.now();
    const r2 = await post(g.url + '/v1/completions', { model: MODEL, prompt: 'hi', max_tokens: 100 });
    assert.equal(r2.status, 504);
    assertOpenAiError(r2.json, 'deadline_exceeded');
    const took = Date.now() - t1;
    assert.ok(took >= 240 && took < 2000, `took ${took} ms`);
    assert.equal(g.gw.router.openCount, 0);
  } finally {
    await g.gw.close();
    await hung.close();
  }
});
