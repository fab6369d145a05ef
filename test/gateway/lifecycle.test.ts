/** Deadlines that do not cut off healthy long generations, the circuit breaker, graceful shutdown. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createGateway } from '../../src/gateway/gateway.js';
import { FIRST_SCRAPE_WAIT_MS } from '../../src/fleet/scraper.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { configFor, MODEL, metricValue, parseSse, post, startGateway, startSims, startStub, waitFor } from './helpers.js';

const quietFleet = { health: { intervalMs: 60_000 }, scrape: { intervalMs: 60_000 } };

test('a generation longer than the first-byte timeout, at a healthy pace, is not cut off', async () => {
  // 12 tokens, one every 60 ms: ~720 ms in all, far beyond firstByteMs (300 ms) but within
  // firstByteMs + max_tokens / minTokensPerSecond = 300 ms + 12 / 10 s = 1,500 ms. (The margins
  // leave room for timers that fire late on a busy machine.)
  const stub = await startStub((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    let i = 0;
    const t = setInterval(() => {
      if (i < 12) res.write(`data: {"choices":[{"index":0,"delta":{"content":"t${i++} "}}]}\n\n`);
      else {
        clearInterval(t);
        res.end('data: [DONE]\n\n');
      }
    }, 60);
  });
  const { gw, url } = await startGateway([stub.url], { ...quietFleet, timeouts: { firstByteMs: 300, minTokensPerSecond: 10 } });
  try {
    const r = await post(url + '/v1/chat/completions', { model: MODEL, stream: true, max_tokens: 12, messages: [{ role: 'user', content: 'go' }] });
    const events = parseSse(r.text);
    assert.equal(events.at(-1), '[DONE]');
    assert.equal(events.length, 13);
    // The same pace with a smaller budget (300 ms + 1 / 10 s = 400 ms) is cut at the deadline,
    // with an error event.
    const r2 = await post(url + '/v1/chat/completions', { model: MODEL, stream: true, max_tokens: 1, messages: [{ role: 'user', content: 'go' }] });
    const e2 = parseSse(r2.text);
    assert.equal(e2.at(-1).error.code, 'deadline_exceeded');
    assert.ok(!r2.text.includes('[DONE]'));
    await waitFor(() => gw.router.openCount === 0);
  } finally {
    await gw.close();
    await stub.close();
  }
});

test('repeated failures open a worker’s circuit; traffic goes elsewhere', async () => {
  let bad = 0;
  const stub = await startStub((req, res) => {
    req.resume();
    if (req.url?.startsWith('/v1/')) bad++;
    res.writeHead(500);
    res.end();
  });
  const sims = await startSims(1);
  const { gw, url } = await startGateway([stub.url, sims[0]!.url], {
    ...quietFleet,
    policy: { name: 'round-robin' },
    circuitBreaker: { failuresToOpen: 2, coolDownMs: 60_000 },
  });
  try {
    for (let i = 0; i < 6; i++) {
      const r = await post(url + '/v1/completions', { model: MODEL, prompt: `p${i}`, max_tokens: 2 });
      assert.equal(r.status, 200, 'retried on the healthy worker');
    }
    assert.equal(bad, 2, 'the failing worker stops getting traffic once its circuit opens');
    assert.equal(gw.registry.workers[0]!.circuitOpen, true);
    const desc = ((await (await fetch(url + '/admin/workers')).json()) as any[])[0];
    assert.equal(desc.circuitState, 'open');
    const m = await (await fetch(url + '/metrics')).text();
    assert.equal(metricValue(m, 'kvgate_worker_healthy', { worker: 'w0' }), 0);
    assert.equal(metricValue(m, 'kvgate_upstream_failures_total', { worker: 'w0', reason: 'status_5xx' }), 2);
  } finally {
    await gw.close();
    await stub.close();
    await sims[0]!.close();
  }
});

test('shutdown lets short requests finish and ends long streams with a clean error', async () => {
  const sims = await startSims(1, { speed: 2 });
  const { gw, url } = await startGateway([sims[0]!.url], { ...quietFleet, shutdown: { graceMs: 400 } });
  // A short request (finishes within the grace period) and a long stream (does not).
  const short = post(url + '/v1/completions', { model: MODEL, prompt: 'short', max_tokens: 20, ignore_eos: true });
  const long = post(url + '/v1/completions', { model: MODEL, prompt: 'long', max_tokens: 3000, stream: true, ignore_eos: true });
  await waitFor(() => gw.inflight === 2);
  const t0 = Date.now();
  await gw.close();
  assert.ok(Date.now() - t0 < 3000);
  const s = await short;
  assert.equal(s.status, 200);
  assert.equal(s.json.usage.completion_tokens, 20);
  const l = await long;
  assert.equal(l.status, 200);
  const last = parseSse(l.text).at(-1);
  assert.equal(last.error.code, 'shutting_down');
  await waitFor(() => sims[0]!.stats().inFlight === 0);
  await assert.rejects(fetch(url + '/health'));
  await sims[0]!.close();
});

test('services share the gateway’s lifecycle', async () => {
  const sims = await startSims(1);
  const calls: string[] = [];
  const gw = createGateway(configFor([sims[0]!.url]), { logger: createLogger({ level: 'silent' }) });
  gw.addService({ name: 'a', start: () => void calls.push('start a'), close: async () => void calls.push('close a') });
  await gw.start();
  gw.addService({ name: 'b', start: () => void calls.push('start b'), close: () => void calls.push('close b') });
  assert.deepEqual(calls, ['start a', 'start b']);
  await gw.close();
  assert.deepEqual(calls, ['start a', 'start b', 'close a', 'close b']);
  await sims[0]!.close();
});

test('a request held by a stage at shutdown gets a clean 503', async () => {
  const sims = await startSims(1);
  const { gw, url } = await startGateway([sims[0]!.url], { ...quietFleet, shutdown: { graceMs: 100 } });
  gw.use({
    name: 'queue-forever',
    async handle(ctx) {
      // An admission queue that never admits: it gives up when the request is aborted.
      while (!ctx.aborted) await new Promise((r) => setTimeout(r, 10));
      return 'handled' as const;
    },
  });
  const pending = post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
  await waitFor(() => gw.inflight === 1);
  await gw.close();
  const r = await pending;
  assert.equal(r.status, 503);
  assert.equal(r.json.error.code, 'shutting_down');
  assert.equal(r.headers.get('retry-after'), '1');
  await sims[0]!.close();
});

test('the workers are scraped before the gateway takes its first request', async () => {
  // A worker far smaller than the capacity assumed for a worker that has not said: admission must
  // judge the first burst against its real 800 blocks, not 31,250.
  const sims = await startSims(1, { numGpuBlocks: 800 });
  const { gw, url } = await startGateway([sims[0]!.url], quietFleet);
  try {
    const w = gw.registry.workers[0]!;
    assert.equal(w.numGpuBlocks, 800, 'capacity known as soon as start() resolves');
    const r = await post(url + '/v1/completions', { model: MODEL, prompt: 'hello', max_tokens: 2 });
    assert.equal(r.status, 200);
  } finally {
    await gw.close();
    await sims[0]!.close();
  }
});

test('a worker that does not answer at start does not keep the gateway from listening', async () => {
  // Never answers a scrape; fails anything else at once (so the request below goes to the sim).
  const stub = await startStub((req, res) => {
    req.resume();
    if (req.url !== '/metrics') res.writeHead(500).end();
  });
  const sims = await startSims(1);
  const started = Date.now();
  const { gw, url } = await startGateway([stub.url, sims[0]!.url], { ...quietFleet, scrape: { intervalMs: 60_000, timeoutMs: 300 } });
  try {
    assert.ok(Date.now() - started < 5_000, 'start waits at most about one scrape timeout');
    const r = await post(url + '/v1/completions', { model: MODEL, prompt: 'hello', max_tokens: 2 });
    assert.equal(r.status, 200);
  } finally {
    await gw.close();
    await stub.close();
    await sims[0]!.close();
  }
});

test('the start waits at most FIRST_SCRAPE_WAIT_MS for a slow scrape, which still lands', async () => {
  // scrape.timeoutMs defaults to 0.8 of the interval: 48 s here. The worker answers its scrape
  // after 4 s; the gateway listens after about 2 s and learns the worker's capacity when it answers.
  const stub = await startStub((req, res) => {
    req.resume();
    if (req.url === '/metrics') setTimeout(() => res.end('vllm:cache_config_info{block_size="16",num_gpu_blocks="700"} 1\nvllm:kv_cache_usage_perc 0.1\n'), 4_000);
    else res.writeHead(500).end();
  });
  const started = Date.now();
  const { gw } = await startGateway([stub.url], quietFleet);
  try {
    const waited = Date.now() - started;
    assert.ok(waited >= FIRST_SCRAPE_WAIT_MS - 50 && waited < 3_500, `start waited ${waited} ms`);
    const w = gw.registry.workers[0]!;
    assert.notEqual(w.numGpuBlocks, 700, 'not scraped yet when the gateway listens');
    await waitFor(() => w.numGpuBlocks === 700, 5_000);
  } finally {
    await gw.close();
    await stub.close();
  }
});
