/**
 * Admission control end to end: a real gateway in front of simulated vLLM workers (and stub
 * workers where a worker must misbehave), on loopback.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Gateway, GatewayOptions } from '../../src/gateway/gateway.js';
import { createLogger } from '../../src/telemetry/logger.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { metricValue, MODEL, post, startGateway, startSims, startStub, waitFor } from './helpers.js';

const chat = (content: string, max_tokens: number, extra: object = {}) => ({ model: MODEL, messages: [{ role: 'user', content }], max_tokens, ...extra });
const words = (n: number, salt: string) => Array.from({ length: n }, (_, i) => `${salt}${i}`).join(' ');

/** A critical tenant `front` and a sheddable tenant `batch` with keys of their own (`n` tells them from other tests'), and their request headers. */
function frontAndBatch(n: number) {
  const key = (tenant: string) => `sk-${tenant}-${String(n).padStart(4, '0')}`;
  return {
    tenants: [
      { id: 'front', keys: [{ value: key('front') }], priority: 'critical' as const },
      { id: 'batch', keys: [{ value: key('batch') }], priority: 'sheddable' as const },
    ],
    front: { authorization: `Bearer ${key('front')}` },
    batch: { authorization: `Bearer ${key('batch')}` },
  };
}

const closers: Array<() => Promise<unknown>> = [];
after(async () => {
  for (const c of closers.reverse()) await c();
});

/** URLs of the simulated workers started here (stand-ins publish no KV capacity). */
const simUrls = new Set<string>();

/**
 * A gateway in front of these workers, returned once it has read the KV capacity of each simulated
 * one: until its first scrape the gateway assumes a large GPU's (fleet/worker-state.ts,
 * DEFAULT_NUM_GPU_BLOCKS), and a test of KV pressure begun earlier finds every request fits.
 */
async function gateway(urls: string[], extra: object, opts: GatewayOptions = {}): Promise<{ gw: Gateway; url: string }> {
  const g = await startGateway(urls, extra as never, opts);
  closers.push(() => g.gw.close());
  await waitFor(() => g.gw.registry.workers.every((w) => !simUrls.has(w.url) || w.knownGpuBlocks !== undefined), 30_000);
  return g;
}

async function sims(n: number, opts: { speed?: number; numGpuBlocks?: number }): Promise<SimWorker[]> {
  const s = await startSims(n, opts);
  closers.push(() => Promise.all(s.map((w) => w.close())));
  for (const w of s) simUrls.add(w.url);
  return s;
}

/** A request whose client can leave: `response` settles with the response head (the body is left unread). */
function open(url: string, body: unknown, headers: Record<string, string> = {}): { response: Promise<Response>; abort(): void } {
  const ac = new AbortController();
  const response = fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body), signal: ac.signal });
  // Aborted after its head was read, the body's rejection is expected; before, the test awaits it.
  response.catch(() => {});
  return { response, abort: () => ac.abort() };
}

async function metrics(url: string, headers: Record<string, string> = {}): Promise<string> {
  return (await fetch(`${url}/metrics`, { headers })).text();
}

describe('tenants, priorities and rate limits', () => {
  it('maps keys to tenants and classes: 401 without a key, a request can lower its class but not raise it, a bad header is a 400', async () => {
    const [w] = await sims(1, {});
    const { url } = await gateway([w!.url], {
      tenants: [
        { id: 'front', keys: [{ value: 'sk-front-0001' }], priority: 'critical' },
        { id: 'batch', keys: [{ value: 'sk-batch-0001' }], priority: 'sheddable' },
      ],
    });
    const u = `${url}/v1/chat/completions`;
    const none = await post(u, chat('hi', 2));
    assert.equal(none.status, 401);
    assert.equal(none.json.error.code, 'invalid_api_key');
    const front = await post(u, chat('hi', 2), { authorization: 'Bearer sk-front-0001' });
    assert.equal(front.status, 200);
    assert.equal(front.headers.get('x-kvgate-priority'), 'critical');
    const lowered = await post(u, chat('hi', 2), { authorization: 'Bearer sk-front-0001', 'x-kvgate-priority': 'sheddable' });
    assert.equal(lowered.headers.get('x-kvgate-priority'), 'sheddable');
    const raised = await post(u, chat('hi', 2), { authorization: 'Bearer sk-batch-0001', 'x-kvgate-priority': 'critical' });
    assert.equal(raised.status, 200);
    assert.equal(raised.headers.get('x-kvgate-priority'), 'sheddable', 'never raised');
    const viaBody = await post(u, chat('hi', 2, { priority: 1 }), { authorization: 'Bearer sk-front-0001' });
    assert.equal(viaBody.headers.get('x-kvgate-priority'), 'standard', 'the body’s vLLM integer lowers it too');
    const bad = await post(u, chat('hi', 2), { authorization: 'Bearer sk-front-0001', 'x-kvgate-priority': 'urgent' });
    assert.equal(bad.status, 400);
    assert.deepEqual(Object.keys(bad.json.error).sort(), ['code', 'message', 'param', 'type']);
    assert.equal(bad.json.error.param, 'x-kvgate-priority');
  });

  it('answers 429 rate_limit_exceeded with OpenAI’s x-ratelimit headers and Retry-After past a tenant’s requests per minute', async () => {
    const [w] = await sims(1, {});
    const { url } = await gateway([w!.url], {
      tenants: [{ id: 'acme', keys: [{ value: 'sk-acme-00001' }], limits: { requestsPerMinute: 2, tokensPerMinute: 100_000 } }],
    });
    const h = { authorization: 'Bearer sk-acme-00001' };
    const u = `${url}/v1/chat/completions`;
    const a = await post(u, chat('hello', 2), h);
    assert.equal(a.status, 200);
    assert.equal(a.headers.get('x-ratelimit-limit-requests'), '2');
    assert.equal(a.headers.get('x-ratelimit-remaining-requests'), '1');
    assert.match(a.headers.get('x-ratelimit-reset-requests')!, /^\d+(\.\d+)?s$|^\d+ms$/);
    assert.equal(a.headers.get('x-ratelimit-limit-tokens'), '100000');
    assert.ok(Number(a.headers.get('x-ratelimit-remaining-tokens')) < 100_000);
    assert.equal((await post(u, chat('hello', 2), h)).status, 200);
    const r = await post(u, chat('hello', 2), h);
    assert.equal(r.status, 429);
    assert.equal(r.json.error.code, 'rate_limit_exceeded');
    assert.equal(r.json.error.type, 'requests');
    assert.equal(r.headers.get('x-ratelimit-remaining-requests'), '0');
    assert.ok(Number(r.headers.get('retry-after')) >= 1);
    assert.equal(metricValue(await metrics(url), 'kvgate_admission_total', { priority: 'standard', decision: 'rate_limited' }), 1);
    assert.equal(metricValue(await metrics(url), 'kvgate_rate_limited_total', { tenant: 'acme', limit: 'rpm' }), 1);
  });

  it('refuses past a tenant’s requests per day, saying so, with a Retry-After of hours', async () => {
    const [w] = await sims(1, {});
    const { url } = await gateway([w!.url], { tenants: [{ id: 'acme', keys: [{ value: 'sk-acme-00001' }], limits: { requestsPerDay: 2 } }] });
    const h = { authorization: 'Bearer sk-acme-00001' };
    const u = `${url}/v1/chat/completions`;
    assert.equal((await post(u, chat('hello', 2), h)).status, 200);
    assert.equal((await post(u, chat('hello', 2), h)).status, 200);
    const r = await post(u, chat('hello', 2), h);
    assert.equal(r.status, 429);
    assert.deepEqual([r.json.error.code, r.json.error.type], ['rate_limit_exceeded', 'requests']);
    assert.match(r.json.error.message, /requests per day \(RPD\): Limit 2\. Please try again in (12h0m0s|11h59m\d+s)\./, 'a day’s limit of 2: one back in about 12 h (less the time the test took)');
    assert.ok(Number(r.headers.get('retry-after')) > 43_000);
    assert.equal(metricValue(await metrics(url), 'kvgate_rate_limited_total', { tenant: 'acme', limit: 'rpd' }), 1);
  });

  it('charges tokens per minute for every prompt of a batch, so batching passes no limit', async () => {
    const [w] = await sims(1, {});
    const { url } = await gateway([w!.url], {
      tenants: [{ id: 'acme', keys: [{ value: 'sk-acme-00001' }], limits: { tokensPerMinute: 300 } }],
    });
    const h = { authorization: 'Bearer sk-acme-00001' };
    const input = 'a sentence of about ten tokens to embed into a vector';
    const one = await post(`${url}/v1/embeddings`, { model: MODEL, input }, h);
    assert.equal(one.status, 200, `status ${one.status}`);
    const used = 300 - Number(one.headers.get('x-ratelimit-remaining-tokens'));
    assert.ok(used > 5 && used < 40, `one input charged ${used} tokens`);
    // Fifty of the same inputs in one request: charged fifty times as much, past the limit.
    const batch = await post(`${url}/v1/embeddings`, { model: MODEL, input: Array.from({ length: 50 }, () => input) }, h);
    assert.equal(batch.status, 429, `status ${batch.status}`);
    assert.equal(batch.json.error.type, 'tokens');
    assert.match(batch.json.error.message, new RegExp(`needs ${used * 50} tokens`));
  });

  it('settles a tokens-per-minute reservation to the tokens the answer used (tokensCounted: used), or keeps it (reserved)', async () => {
    const [w] = await sims(1, {});
    const tenants = [{ id: 'acme', keys: [{ value: 'sk-acme-00001' }], limits: { tokensPerMinute: 20_000 } }];
    const used = await gateway([w!.url], { tenants });
    const reserved = await gateway([w!.url], { tenants, admission: { tokensCounted: 'reserved' } } as never);
    const h = { authorization: 'Bearer sk-acme-00001' };
    // No max_tokens: each request reserves its prompt + the assumed 8,192 tokens of answer.
    const ask = (url: string, stream = false) =>
      post(`${url}/v1/chat/completions`, { model: MODEL, messages: [{ role: 'user', content: 'Say hello.' }], ...(stream ? { stream: true } : {}) }, h);
    const remaining = (r: { headers: Headers }) => Number(r.headers.get('x-ratelimit-remaining-tokens'));
    const statusesUsed: number[] = [];
    const left: number[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await ask(used.url, i % 2 === 1);
      statusesUsed.push(r.status);
      left.push(remaining(r));
    }
    assert.deepEqual(statusesUsed, [200, 200, 200, 200, 200]);
    // Each answer's header shows the bucket after its own reservation; the one before it was settled.
    assert.ok(left[0]! < 20_000 - 8192 && left[4]! > left[0]! - 200, `remaining ${left.join(', ')}`);
    const statusesReserved: number[] = [];
    for (let i = 0; i < 3; i++) statusesReserved.push((await ask(reserved.url)).status);
    assert.deepEqual(statusesReserved, [200, 200, 429]);
  });

  it('gives a tenant back the whole reservation of a request no worker answered', async () => {
    const failing = await startStub((_req, res) => {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"engine died","type":"internal_server_error","param":null,"code":null}}');
    });
    closers.push(() => failing.close());
    const { url } = await gateway([failing.url], {
      tenants: [{ id: 'acme', keys: [{ value: 'sk-acme-00001' }], limits: { tokensPerMinute: 10_000 } }],
      health: { intervalMs: 60_000, failuresToMarkDown: 100 },
    } as never);
    const h = { authorization: 'Bearer sk-acme-00001' };
    const body = { model: MODEL, messages: [{ role: 'user', content: 'Say hello.' }], max_tokens: 6000 };
    const first = await post(`${url}/v1/chat/completions`, body, h);
    assert.equal(first.status, 502, first.text);
    assert.match(first.text, /engine died|500/);
    // 6,000 reserved and nothing used: the next reservation of 6,000 fits.
    const second = await post(`${url}/v1/chat/completions`, body, h);
    assert.ok(second.status >= 500, `status ${second.status}: not refused for tokens`);
    assert.ok(Number(second.headers.get('x-ratelimit-remaining-tokens')) > 3000);
  });

  it('protects /metrics with the admin key', async () => {
    const [w] = await sims(1, {});
    const { url } = await gateway([w!.url], { admin: { keys: [{ value: 'sk-admin-0001' }], openMetrics: false } });
    assert.equal((await fetch(`${url}/metrics`)).status, 401);
    const ok = await fetch(`${url}/metrics`, { headers: { authorization: 'Bearer sk-admin-0001' } });
    assert.equal(ok.status, 200);
    assert.match(await ok.text(), /kvgate_fleet_kv_usage\{model="llama-3.1-8b"\}/);
  });
});

describe('KV-pressure admission', () => {
  it('sheds sheddable requests with 503 + Retry-After at once while critical ones hold the KV, and serves those', async () => {
    // Two workers of 64 KV blocks (1,024 tokens); slow (a decode step lasts some 70 ms), so a long
    // streamed answer holds its blocks for half a minute, until its client leaves.
    const s = await sims(2, { speed: 0.1, numGpuBlocks: 64 });
    // The gateway's own request log: how long it took to answer each request, from its arrival.
    const lines: any[] = [];
    const sink = new Writable({
      write(chunk, _enc, cb) {
        for (const l of String(chunk).split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l));
        cb();
      },
    });
    const { gw, url } = await gateway(
      s.map((w) => w.url),
      {
        tenants: [
          { id: 'front', keys: [{ value: 'sk-front-0001' }], priority: 'critical' },
          { id: 'batch', keys: [{ value: 'sk-batch-0001' }], priority: 'sheddable' },
        ],
      },
      { logger: createLogger({ level: 'info', destination: sink }) },
    );
    const u = `${url}/v1/chat/completions`;
    // One long critical request per worker, each holding 63 of its 64 blocks (600 prompt tokens,
    // 400 output): the second cannot fit beside the first.
    const big = [0, 1].map(() => open(u, chat(words(300, 'big'), 400, { stream: true }), { authorization: 'Bearer sk-front-0001' }));
    await waitFor(() => gw.registry.workers.every((w) => w.inflightCount === 1));
    assert.ok(gw.admission!.usage(MODEL) > 0.85, `fleet KV usage ${gw.admission!.usage(MODEL)}`);
    const burst = await Promise.all(Array.from({ length: 12 }, (_, i) => post(u, chat(words(120, `b${i}x`), 48), { authorization: 'Bearer sk-batch-0001' })));
    for (const r of burst) {
      assert.equal(r.status, 503, r.text);
      assert.deepEqual(Object.keys(r.json.error).sort(), ['code', 'message', 'param', 'type']);
      assert.equal(r.json.error.code, 'overloaded');
      assert.equal(r.json.error.type, 'overloaded_error');
      assert.equal(r.headers.get('retry-after'), '1');
    }
    // Answered by the gateway without a worker, at once. (The client's own timing also holds its
    // connection set-up in a process shared with the gateway and workers, so the gateway's log
    // is the measure; bounded generously for a busy 2-core machine.)
    const shedLines = lines.filter((l) => l.msg === 'request' && l.status === 503);
    assert.equal(shedLines.length, 12);
    for (const l of shedLines) assert.ok(l.durationMs < 1000, `shed ${l.durationMs} ms after arrival`);
    for (const b of big) {
      assert.equal((await b.response).status, 200);
      b.abort();
    }
    const text = await metrics(url);
    assert.equal(metricValue(text, 'kvgate_admission_total', { priority: 'sheddable', decision: 'shed' }), 12);
    assert.equal(metricValue(text, 'kvgate_admission_total', { priority: 'critical', decision: 'admitted' }), 2);
    assert.ok(metricValue(text, 'kvgate_fleet_kv_usage', { model: MODEL }) !== undefined);
    assert.equal(metricValue(text, 'kvgate_queue_depth', { model: MODEL, priority: 'critical' }), 0);
  });

  it('sheds a sheddable request whose worker already has more prefill waiting than thresholds.prefillBacklogTokens, and only that', async () => {
    // One worker at 1/50 of real time: a 600-token prefill takes long enough to be seen waiting.
    const s = await sims(1, { speed: 0.02 });
    const { tenants, front, batch } = frontAndBatch(2);
    const { gw, url } = await gateway([s[0]!.url], { tenants, admission: { thresholds: { prefillBacklogTokens: 200 } } });
    const u = `${url}/v1/chat/completions`;
    const long = post(u, chat(words(300, 'pre'), 2), front);
    const worker = gw.registry.workers[0]!;
    await waitFor(() => worker.inflightPrefillTokens > 200);
    assert.equal(worker.inflightCount, 1);
    // KV is nearly empty: the refusal is the prefill backlog's, and says so.
    const shed = await post(u, chat('a short question', 2), batch);
    assert.equal(shed.status, 503, shed.text);
    assert.equal(shed.json.error.code, 'overloaded');
    assert.match(shed.json.error.message, /prompt tokens waiting for prefill, more than 200/);
    assert.equal(shed.headers.get('retry-after'), '1');
    // The veto undid the router's reservation: nothing of the shed request stays charged.
    assert.equal(worker.inflightCount, 1);
    // A critical request is not held back by the backlog.
    const crit = post(u, chat('an urgent question', 2), front);
    assert.equal((await long).status, 200);
    assert.equal((await crit).status, 200);
    // With the prefill done, sheddable work is served again.
    await waitFor(() => worker.inflightCount === 0);
    const ok = await post(u, chat('a later question', 2), batch);
    assert.equal(ok.status, 200, ok.text);
    const text = await metrics(url);
    // Admitted on KV, then shed for the backlog: counted as such, not as a KV shed.
    assert.equal(metricValue(text, 'kvgate_admission_total', { priority: 'sheddable', decision: 'shed_backlog' }), 1);
    assert.equal(metricValue(text, 'kvgate_admission_total', { priority: 'sheddable', decision: 'admitted' }), 2);
    assert.equal(metricValue(text, 'kvgate_admission_total', { priority: 'sheddable', decision: 'shed' }), undefined);
  });

  it('sheds a sheddable request where the answers streaming from the picked worker run slower than thresholds.sheddableTpotMs per token', async () => {
    // One worker at a tenth of real time: its decode steps take some 70 ms. The limit is set at 30
    // and the request sent once the pace reads above 45, so the pace's jitter on a busy machine
    // cannot take it back under the limit between the two.
    const s = await sims(1, { speed: 0.1 });
    const { tenants, front, batch } = frontAndBatch(3);
    const { gw, url } = await gateway([s[0]!.url], { tenants, admission: { thresholds: { sheddableTpotMs: 30 } } });
    const u = `${url}/v1/chat/completions`;
    const worker = gw.registry.workers[0]!;
    // Before any answer has streamed from it there is no figure: sheddable work is served.
    const first = await post(u, chat('a first question', 2), batch);
    assert.equal(first.status, 200, first.text);
    // A critical answer streams from the worker, a token every ~70 ms.
    const streaming = open(u, chat('tell a long story', 200, { stream: true }), front);
    // The figure shows once the answer's chunks cover a quarter of the pace's time constant, and
    // can fade again for a moment between its first chunks; half a second more of them covers it.
    await waitFor(() => (worker.recentTpotMs(performance.now()) ?? 0) > 45, 30_000);
    await sleep(500);
    await waitFor(() => (worker.recentTpotMs(performance.now()) ?? 0) > 45, 30_000);
    const shed = await post(u, chat('a short question', 2), batch);
    assert.equal(shed.status, 503, shed.text);
    assert.equal(shed.json.error.code, 'overloaded');
    assert.match(shed.json.error.message, /ms per token, more than 30\)/);
    assert.equal(shed.headers.get('retry-after'), '1');
    // The veto undid the router's reservation: only the stream is charged.
    assert.equal(worker.inflightCount, 1);
    // Operators see the pace admission sheds by, while the answer streams (read until it shows:
    // on a busy machine a stall of the stream's chunks can fade the figure for a moment).
    const recent = async () => metricValue(await metrics(url), 'kvgate_worker_recent_tpot_seconds', { worker: worker.id }) ?? 0;
    await waitFor(async () => (await recent()) > 0.03, 10_000).catch(async () => assert.fail(`recent TPOT exported: ${await recent()} s`));
    // A critical request is served beside it.
    const crit = await post(u, chat('an urgent question', 2), front);
    assert.equal(crit.status, 200, crit.text);
    streaming.abort();
    await streaming.response.catch(() => undefined);
    // Once the worker's answers have gone quiet the figure fades and sheddable work is served again.
    await waitFor(() => worker.inflightCount === 0 && worker.recentTpotMs(performance.now()) === undefined, 30_000);
    const later = await post(u, chat('a later question', 2), batch);
    assert.equal(later.status, 200, later.text);
    const text = await metrics(url);
    assert.equal(metricValue(text, 'kvgate_worker_recent_tpot_seconds', { worker: worker.id }), undefined, 'no series once quiet');
    assert.equal(metricValue(text, 'kvgate_admission_total', { priority: 'sheddable', decision: 'shed_tpot' }), 1);
    assert.equal(metricValue(text, 'kvgate_admission_total', { priority: 'sheddable', decision: 'shed_backlog' }), undefined);
  });

  it('queues standard requests under pressure, serves them when capacity frees, and drops a queued request whose client left at once', async () => {
    // A slow worker (a decode step lasts some 70 ms): the big request, streamed, holds its blocks
    // for half a minute, until its client leaves.
    const s = await sims(1, { speed: 0.1, numGpuBlocks: 64 });
    const { gw, url } = await gateway(s.map((w) => w.url), { tenants: [{ id: 'front', keys: [{ value: 'sk-front-0001' }], priority: 'critical' }, { id: 'app', keys: [{ value: 'sk-app-000001' }] }] });
    const u = `${url}/v1/chat/completions`;
    // A critical request that holds most of the worker's 64 blocks for a while.
    const big = open(u, chat(words(300, 'big'), 400, { stream: true }), { authorization: 'Bearer sk-front-0001' });
    await waitFor(() => gw.registry.workers[0]!.inflightCount === 1);
    // A standard request no longer fits under 0.92: it waits.
    const ac = new AbortController();
    const leaving = fetch(u, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer sk-app-000001' }, body: JSON.stringify(chat(words(60, 'q'), 32)), signal: ac.signal }).catch((e: Error) => e);
    await waitFor(() => gw.admission!.queueDepth(MODEL, 'standard') === 1);
    ac.abort();
    await leaving;
    await waitFor(() => gw.admission!.queueDepth(MODEL) === 0, 1000);
    const waiting = post(u, chat(words(60, 'w'), 32), { authorization: 'Bearer sk-app-000001' });
    await waitFor(() => gw.admission!.queueDepth(MODEL, 'standard') === 1);
    assert.equal((await big.response).status, 200);
    big.abort();
    const r = await waiting;
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const text = await metrics(url);
    assert.equal(metricValue(text, 'kvgate_admission_total', { priority: 'standard', decision: 'cancelled' }), 1);
    assert.equal(metricValue(text, 'kvgate_admission_total', { priority: 'standard', decision: 'dequeued' }), 1);
    assert.equal(metricValue(text, 'kvgate_admission_queue_seconds_count', { model: MODEL, priority: 'standard' }), 2);
    await waitFor(() => gw.inflight === 0);
  });

  it('starts a small standard request that fits ahead of a larger one waiting, away from the worker kept for it', async () => {
    // Slow workers (a decode step of some 7 ms modelled lasts about a third of a second): the big
    // request, streamed, would take minutes, so it holds its blocks for the whole check however
    // busy the machine, and the test ends it by leaving. The small request asks for one token.
    const s = await sims(2, { speed: 0.02, numGpuBlocks: 64 });
    // Standard requests (every request here: no tenants) wait above half the fleet's 128 blocks.
    const { gw, url } = await gateway(s.map((w) => w.url), {
      server: { routingHeaders: true },
      admission: { thresholds: { sheddable: 0.4, standard: 0.5 }, queue: { maxWaitMs: 120_000 } },
    });
    const u = `${url}/v1/chat/completions`;
    // The first, on an idle fleet, holds more than a third of its blocks until it is cancelled.
    const big = open(u, chat(words(150, 'big'), 300, { stream: true }));
    await waitFor(() => gw.registry.workers.some((w) => w.inflightCount === 1), 30_000);
    const busy = gw.registry.workers.find((w) => w.inflightCount === 1)!;
    // A larger standard request would take the fleet past half: it waits at the head.
    const head = open(u, chat(words(100, 'head'), 300, { stream: true }));
    await waitFor(() => gw.admission!.queueDepth(MODEL, 'standard') === 1, 30_000);
    // A small one fits under the threshold: it starts at once, on the busy worker, since the idle
    // one (the most room) is kept for the head.
    const small = await post(u, chat(words(10, 'small'), 1));
    assert.equal(small.status, 200, small.text);
    assert.equal(gw.admission!.queueDepth(MODEL, 'standard'), 1, 'the head still waits');
    assert.equal(small.headers.get('x-kvgate-worker'), busy.id);
    // The big request's client leaves: its blocks free, and the head starts.
    assert.equal((await big.response).status, 200);
    big.abort();
    const r = await head.response;
    assert.equal(r.status, 200);
    head.abort();
    const text = await metrics(url);
    assert.equal(metricValue(text, 'kvgate_admission_total', { priority: 'standard', decision: 'admitted' }), 2);
    assert.equal(metricValue(text, 'kvgate_admission_total', { priority: 'standard', decision: 'dequeued' }), 1);
    await waitFor(() => gw.inflight === 0, 30_000);
  });

  it('answers 503 queue_timeout when a queued request cannot start within queue.maxWaitMs', async () => {
    // A slow worker (a decode step lasts some 70 ms): the big request holds its blocks until its
    // client leaves.
    const s = await sims(1, { speed: 0.1, numGpuBlocks: 64 });
    const { gw, url } = await gateway(s.map((w) => w.url), { admission: { queue: { maxWaitMs: 150 } } });
    const u = `${url}/v1/chat/completions`;
    // 57 of the 64 blocks (600 prompt tokens, 280 output): under the standard threshold (0.92).
    const big = open(u, chat(words(300, 'big'), 280, { stream: true }));
    await waitFor(() => gw.registry.workers[0]!.inflightCount === 1);
    const t0 = performance.now();
    const r = await post(u, chat(words(60, 'late'), 32));
    const ms = performance.now() - t0;
    assert.equal(r.status, 503);
    assert.equal(r.json.error.code, 'queue_timeout');
    assert.equal(r.headers.get('retry-after'), '1');
    // The wait is what is tested: not before 150 ms; after it, as soon as the gateway's loop gets
    // to it (bounded for a busy 2-core machine, where the test shares it with the workers).
    assert.ok(ms >= 140 && ms < 5000, `refused after ${ms.toFixed(0)} ms`);
    assert.equal((await big.response).status, 200);
    big.abort();
  });
});

describe('workers that say they are overloaded', () => {
  it('backs off a worker answering 429 (not counted as broken) and retries the request elsewhere', async () => {
    let hits = 0;
    const stub = await startStub((req, res) => {
      // Health probes and scrapes (GET) succeed: only its answers to requests say it is busy.
      if (req.method !== 'POST') return void res.end();
      hits++;
      // A back-off far longer than the test takes, however busy the machine.
      res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '20' });
      res.end('{"error":{"message":"busy","type":"overloaded","param":null,"code":null}}');
    });
    closers.push(() => stub.close());
    const [w] = await sims(1, {});
    const { gw, url } = await gateway([stub.url, w!.url], { policy: { name: 'round-robin' }, circuitBreaker: { failuresToOpen: 1 } });
    for (let i = 0; i < 4; i++) {
      const r = await post(`${url}/v1/chat/completions`, chat(`hello ${i}`, 2));
      assert.equal(r.status, 200);
    }
    assert.equal(hits, 1, 'backed off after its first 429: no further request reached it');
    const b = gw.registry.breaker('w0');
    assert.equal(b.state, 'closed', 'overloaded, not broken');
    assert.equal(b.backoffMs, 20_000, 'its Retry-After');
    assert.equal(gw.registry.workers[0]!.circuitOpen, true);
  });

  it('passes the class on as vLLM’s integer priority to pools that run priority scheduling', async () => {
    const seen: unknown[] = [];
    const stub = await startStub((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        // Scrapes and health probes are GETs.
        if (req.method === 'POST') seen.push(JSON.parse(body).priority);
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: 'x', object: 'chat.completion', created: 0, model: MODEL, choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }] }));
      });
    });
    closers.push(() => stub.close());
    const { url } = await gateway([stub.url], { admission: { vllmPriority: { pools: ['main'], values: { critical: -10, standard: 0, sheddable: 10 } } } });
    await post(`${url}/v1/chat/completions`, chat('a', 2));
    await post(`${url}/v1/chat/completions`, chat('b', 2), { 'x-kvgate-priority': 'sheddable' });
    await post(`${url}/v1/chat/completions`, chat('c', 2), { 'x-kvgate-priority': '-10' });
    assert.deepEqual(seen, [0, 10, 0], 'standard by default, lowered to sheddable; never raised to critical');
  });
});
