/**
 * A disaggregated fleet end to end: the gateway as the proxy of simulated vLLM workers started
 * with KV connectors (prefill and decode roles), over loopback.
 */
import assert from 'node:assert/strict';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { after, before, describe, test } from 'node:test';
import type { RawConfig } from '../../src/config/index.js';
import { startSimWorker, type SimWorker } from '../../src/sim/worker/server.js';
import { estimateTokenizer } from '../../src/tokenizer/index.js';
import { MODEL, metricValue, parseSse, post, startGateway, startStub, streamText, waitFor } from './helpers.js';

const quiet = { health: { intervalMs: 60_000 }, scrape: { intervalMs: 60_000 } };

/** A prompt of about `n` tokens no other test sends. */
function prompt(n: number, salt: string): string {
  const words = ['cache', 'block', 'token', 'prefill', 'decode', 'worker', 'link', 'transfer', 'queue', 'batch'];
  let s = salt;
  for (let i = 0; i < n; i++) s += ' ' + words[(i * 7 + i * i + salt.length) % words.length];
  return s;
}

function disaggConfig(prefill: string[], decode: string[], extra: Partial<RawConfig> = {}): Partial<RawConfig> {
  return {
    ...quiet,
    pools: [
      { name: 'prefill', model: MODEL, role: 'prefill', workers: prefill.map((url, i) => ({ url, id: `p${i}` })) },
      { name: 'decode', model: MODEL, role: 'decode', workers: decode.map((url, i) => ({ url, id: `d${i}` })) },
    ],
    disaggregation: { nonCachedTokens: 256 },
    ...extra,
  };
}

/** A stand-in worker's answer to the gateway's health probes and model list; true if it was one. */
function probe(req: IncomingMessage, res: ServerResponse): boolean {
  if (req.method === 'POST') return false;
  req.resume();
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ object: 'list', data: [{ id: MODEL, object: 'model' }] }));
  return true;
}

async function metrics(url: string): Promise<string> {
  return (await fetch(url + '/metrics')).text();
}

const decisions = (m: string, mode: string, reason: string) => metricValue(m, 'kvgate_disagg_decisions_total', { model: MODEL, mode, reason }) ?? 0;

/** A gateway in front of one prefill and one decode worker, started before and closed after a describe's tests. */
interface DisaggFleet {
  p: SimWorker;
  d: SimWorker;
  gw: Awaited<ReturnType<typeof startGateway>>['gw'];
  url: string;
}

/** Registers the before/after hooks of a fleet whose prefill worker runs at `prefillSpeed` (the sim's speed factor). */
function disaggFleet(prefillSpeed: number): DisaggFleet {
  const fleet = {} as DisaggFleet;
  before(async () => {
    [fleet.p, fleet.d] = await Promise.all([
      startSimWorker({ model: MODEL, speed: prefillSpeed, kvRole: 'prefill' }),
      startSimWorker({ model: MODEL, speed: 50, kvRole: 'decode' }),
    ]);
    ({ gw: fleet.gw, url: fleet.url } = await startGateway([], disaggConfig([fleet.p.url], [fleet.d.url])));
  });
  after(async () => {
    await fleet.gw.close();
    await Promise.all([fleet.p.close(), fleet.d.close()]);
  });
  return fleet;
}

describe('one prefill and one decode worker', () => {
  const fleet = disaggFleet(50);

  test('a long uncached prompt is prefilled on the prefill worker and decoded on the decode worker: one JSON answer, usage of the whole prompt', async () => {
    const { p, d, gw, url } = fleet;
    const text = prompt(2000, 'json');
    const [pBefore, dComputed] = [p.stats().requests, d.stats().computedPromptTokens];
    const r = await post(url + '/v1/completions', { model: MODEL, prompt: text, max_tokens: 6, ignore_eos: true });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get('x-kvgate-worker'), 'd0');
    assert.equal(r.headers.get('x-kvgate-prefill-worker'), 'p0');
    assert.equal(r.json.object, 'text_completion');
    assert.equal(r.json.kv_transfer_params, undefined);
    assert.equal(r.json.usage.prompt_tokens, estimateTokenizer.encode(text).length);
    assert.equal(r.json.usage.completion_tokens, 6);
    assert.equal(p.stats().requests, pBefore + 1);
    // The decode worker computed one prompt token (the last); the rest was pulled.
    assert.equal(d.stats().computedPromptTokens - dComputed, 1);
    assert.ok((d.stats().kv?.pulledTokens ?? 0) >= 1999);
    await waitFor(() => p.stats().kv?.held === 0);
    const m = await metrics(url);
    assert.equal(decisions(m, 'disaggregated', 'uncached'), 1);
    assert.equal(metricValue(m, 'kvgate_disagg_prefills_total', { model: MODEL, outcome: 'ok' }), 1);
    assert.equal(metricValue(m, 'kvgate_disagg_transfer_tokens_count', { model: MODEL }), 1);
    assert.equal(metricValue(m, 'kvgate_disagg_transfer_tokens_sum', { model: MODEL }), r.json.usage.prompt_tokens);
    assert.ok((metricValue(m, 'kvgate_disagg_transfer_blocks_sum', { model: MODEL }) ?? 0) >= Math.floor(r.json.usage.prompt_tokens / 16));
    assert.equal(gw.router.openCount, 0);
  });

  test('streamed: the decode worker streams the answer, usage right, the time from the prefill to the first token measured', async () => {
    const { gw, url } = fleet;
    const text = prompt(1500, 'stream');
    const r = await post(url + '/v1/chat/completions', {
      model: MODEL, stream: true, stream_options: { include_usage: true }, max_tokens: 5, ignore_eos: true, messages: [{ role: 'user', content: text }],
    });
    assert.equal(r.status, 200, r.text);
    const events = parseSse(r.text);
    assert.equal(events.at(-1), '[DONE]');
    assert.ok(streamText(events).length > 0);
    const usage = events.find((e) => e !== '[DONE]' && e.usage)?.usage;
    assert.equal(usage.completion_tokens, 5);
    assert.ok(usage.prompt_tokens > 1500);
    const m = await metrics(url);
    assert.equal(decisions(m, 'disaggregated', 'uncached'), 2);
    assert.equal(metricValue(m, 'kvgate_disagg_prefill_to_first_token_seconds_count', { model: MODEL }), 1);
    assert.equal(gw.router.openCount, 0);
  });

  test('a short prompt, and a long one the decode worker has cached, are served by the decode worker alone', async () => {
    const { p, url } = fleet;
    const before = p.stats().requests;
    const short = await post(url + '/v1/completions', { model: MODEL, prompt: 'a short question', max_tokens: 4 });
    assert.equal(short.status, 200);
    // The first request of this prompt is disaggregated; its KV then sits in the decode worker's cache.
    const text = prompt(1200, 'again');
    assert.equal((await post(url + '/v1/completions', { model: MODEL, prompt: text, max_tokens: 4 })).status, 200);
    assert.equal(p.stats().requests, before + 1);
    const again = await post(url + '/v1/completions', { model: MODEL, prompt: text + ' and one more line', max_tokens: 4 });
    assert.equal(again.status, 200);
    assert.equal(again.json.usage.prompt_tokens_details?.cached_tokens >= 1184 || again.json.usage.prompt_tokens_details === undefined, true);
    assert.equal(p.stats().requests, before + 1);
    const m = await metrics(url);
    assert.equal(decisions(m, 'local', 'cached'), 2);
  });

  test('a saturated prefill pool gets no prompt the decode worker would prefill sooner', async () => {
    const { p, gw, url } = fleet;
    const pw = gw.registry.workers.find((w) => w.id === 'p0')!;
    // 100 s of prefill queued at the prefill worker (at the default 10,000 tokens/s).
    pw.begin({ id: 'queued', promptTokens: 1_000_000, uncachedTokens: 1_000_000, maxTokens: 1, blocks: 1, dispatchedAt: 0 });
    try {
      const before = p.stats().requests;
      const r = await post(url + '/v1/completions', { model: MODEL, prompt: prompt(2000, 'saturated'), max_tokens: 4 });
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('x-kvgate-worker'), 'd0');
      assert.equal(p.stats().requests, before);
      assert.equal(decisions(await metrics(url), 'local', 'prefill-saturated'), 1);
    } finally {
      pw.end('queued');
    }
  });

  test('a client that leaves during the decode: the decode is aborted, the prefill worker has freed its blocks, every reservation released', async () => {
    const { p, d, gw, url } = fleet;
    const dAborts = d.stats().clientAborts;
    const ac = new AbortController();
    const r = await fetch(url + '/v1/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: prompt(1500, 'leave-decode'), max_tokens: 2000, ignore_eos: true, stream: true }),
      signal: ac.signal,
    });
    const reader = r.body!.getReader();
    await reader.read();
    ac.abort();
    await waitFor(() => d.stats().clientAborts === dAborts + 1);
    await waitFor(() => gw.router.openCount === 0);
    assert.equal(d.engine.stats().running + d.engine.stats().waiting, 0);
    await waitFor(() => p.stats().kv?.held === 0);
  });
});

// A slow prefill worker, so that the client leaves while the prompt is still being prefilled
// however late a busy machine delivers the abort.
describe('a client that leaves during a slow prefill', () => {
  const fleet = disaggFleet(2);

  test('the prefill is aborted, nothing reaches the decode worker, every reservation released', async () => {
    const { p, d, gw, url } = fleet;
    const [pAborts, dRequests] = [p.stats().clientAborts, d.stats().requests];
    const ac = new AbortController();
    const pending = fetch(url + '/v1/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: prompt(30_000, 'leave-prefill'), max_tokens: 4 }),
      signal: ac.signal,
    }).catch(() => null);
    await waitFor(() => p.engine.stats().running + p.engine.stats().waiting > 0);
    ac.abort();
    await pending;
    await waitFor(() => p.stats().clientAborts === pAborts + 1);
    await waitFor(() => gw.router.openCount === 0);
    assert.equal(p.engine.stats().running + p.engine.stats().waiting, 0);
    assert.equal(d.stats().requests, dRequests);
    assert.equal(p.stats().kv?.held, 0);
  });
});

describe('failures', () => {
  test('a prefill worker that is down: the prefill is retried on another prefill worker; with none left, prefilled by the decode worker', async () => {
    const [p, d] = await Promise.all([startSimWorker({ model: MODEL, speed: 50, kvRole: 'prefill' }), startSimWorker({ model: MODEL, speed: 50, kvRole: 'decode' })]);
    const dead = await startSimWorker({ model: MODEL, speed: 50, kvRole: 'prefill' });
    const deadUrl = dead.url;
    await dead.close();
    const retried = await startGateway([], disaggConfig([deadUrl, p.url], [d.url], { policy: { name: 'least-load' } }));
    const alone = await startGateway([], disaggConfig([deadUrl], [d.url]));
    // The live prefill worker looks busier (one request in flight, a little prefill): the dead one is tried first.
    const live = retried.gw.registry.workers.find((w) => w.id === 'p1')!;
    live.begin({ id: 'busy', promptTokens: 100, uncachedTokens: 100, maxTokens: 1, blocks: 1, dispatchedAt: 0 });
    try {
      for (let i = 0; i < 2; i++) {
        const r = await post(retried.url + '/v1/completions', { model: MODEL, prompt: prompt(1000, `retry${i}`), max_tokens: 4 });
        assert.equal(r.status, 200, r.text);
      }
      let m = await metrics(retried.url);
      assert.equal(metricValue(m, 'kvgate_disagg_prefills_total', { model: MODEL, outcome: 'ok' }), 2);
      // The dead worker was tried first (and once more, its circuit still closed) — never the answer.
      assert.ok((metricValue(m, 'kvgate_disagg_prefills_total', { model: MODEL, outcome: 'error' }) ?? 0) >= 1);
      assert.equal(metricValue(m, 'kvgate_disagg_fallbacks_total', { model: MODEL, reason: 'prefill_failed' }) ?? 0, 0);
      const before = d.stats().computedPromptTokens;
      const r = await post(alone.url + '/v1/completions', { model: MODEL, prompt: prompt(1000, 'alone'), max_tokens: 4 });
      assert.equal(r.status, 200, r.text);
      // Prefilled by the decode worker itself: the whole prompt computed there.
      assert.equal(d.stats().computedPromptTokens - before, r.json.usage.prompt_tokens);
      m = await metrics(alone.url);
      assert.equal(metricValue(m, 'kvgate_disagg_fallbacks_total', { model: MODEL, reason: 'prefill_failed' }), 1);
      assert.equal(retried.gw.router.openCount + alone.gw.router.openCount, 0);
    } finally {
      live.end('busy');
      await Promise.all([retried.gw.close(), alone.gw.close()]);
      await Promise.all([p.close(), d.close()]);
    }
  });

  test('a decode worker that fails after the transfer: a stream ends with an SSE error event; before any byte, the request is prefilled again on another decode worker', async () => {
    const [p, d] = await Promise.all([startSimWorker({ model: MODEL, speed: 50, kvRole: 'prefill' }), startSimWorker({ model: MODEL, speed: 50, kvRole: 'decode' })]);
    // A decode worker that pulls the KV as vLLM's does, streams a little, then dies.
    const dying = await startStub((req, res) => {
      if (probe(req, res)) return;
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        const kv = JSON.parse(body).kv_transfer_params;
        const side = `http://${kv.remote_host}:${kv.remote_port}`;
        const ids = JSON.stringify({ remote_engine_id: kv.remote_engine_id, remote_request_id: kv.remote_request_id });
        void (async () => {
          await fetch(side + '/kv_transfer/read', { method: 'POST', body: ids });
          await fetch(side + '/kv_transfer/done', { method: 'POST', body: ids });
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write('data: {"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"Hel"}]}\n\n');
          setTimeout(() => res.socket?.destroy(), 30);
        })();
      });
    });
    // One that fails at once, before any byte.
    const failing = await startStub((req, res) => {
      if (probe(req, res)) return;
      req.resume();
      req.on('end', () => {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end('{"error":{"message":"engine died","type":"InternalServerError","code":500}}');
      });
    });
    const streamGw = await startGateway([], disaggConfig([p.url], [dying.url]));
    const retryGw = await startGateway([], disaggConfig([p.url], [failing.url, d.url], { policy: { name: 'round-robin' } }));
    try {
      const r = await post(streamGw.url + '/v1/completions', { model: MODEL, prompt: prompt(1000, 'dying'), max_tokens: 8, stream: true });
      assert.equal(r.status, 200);
      const events = parseSse(r.text);
      assert.equal(events[0].choices[0].text, 'Hel');
      assert.equal(events.at(-1).error.type, 'upstream_error');
      assert.ok(!r.text.includes('[DONE]'));
      await waitFor(() => p.stats().kv?.held === 0);
      assert.equal(streamGw.gw.router.openCount, 0);

      // Round-robin sends the first decode to the failing worker: retried on d1 without the KV.
      const before = d.stats().computedPromptTokens;
      const ok = await post(retryGw.url + '/v1/completions', { model: MODEL, prompt: prompt(1000, 'retry-decode'), max_tokens: 4 });
      assert.equal(ok.status, 200, ok.text);
      assert.equal(ok.headers.get('x-kvgate-worker'), 'd1');
      assert.equal(d.stats().computedPromptTokens - before, ok.json.usage.prompt_tokens);
      const m = await metrics(retryGw.url);
      assert.equal(metricValue(m, 'kvgate_disagg_fallbacks_total', { model: MODEL, reason: 'decode_retry' }), 1);
      // The KV the failed worker never read is freed by the prefill worker's timeout, not leaked into a wrong answer.
      assert.equal(retryGw.gw.router.openCount, 0);
    } finally {
      await Promise.all([streamGw.gw.close(), retryGw.gw.close()]);
      await Promise.all([p.close(), d.close(), dying.close(), failing.close()]);
    }
  });

  test('a decode worker that fails after the transfer, not streamed and with no other decode worker: a clean OpenAI error', async () => {
    const p = await startSimWorker({ model: MODEL, speed: 50, kvRole: 'prefill' });
    const failing = await startStub((req, res) => {
      if (probe(req, res)) return;
      req.resume();
      req.on('end', () => {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end('{"error":{"message":"engine died","type":"InternalServerError","code":500}}');
      });
    });
    const { gw, url } = await startGateway([], disaggConfig([p.url], [failing.url]));
    try {
      const r = await post(url + '/v1/completions', { model: MODEL, prompt: prompt(1000, 'clean'), max_tokens: 4 });
      assert.equal(r.status, 502);
      assert.deepEqual(Object.keys(r.json.error).sort(), ['code', 'message', 'param', 'type']);
      assert.equal(gw.router.openCount, 0);
    } finally {
      await gw.close();
      await Promise.all([p.close(), failing.close()]);
    }
  });
});
