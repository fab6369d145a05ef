/** Passive outlier detection: a worker that accepts requests and then says nothing. */
import assert from 'node:assert/strict';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { test } from 'node:test';
import { RequestState } from '../../src/util/state.js';
import { MODEL, metricValue, post, startGateway, startSims, startStub } from './helpers.js';

/** A worker that hangs: it accepts every connection and request and never answers any. */
async function startHung() {
  const held: ServerResponse[] = [];
  let requests = 0;
  const stub = await startStub((req: IncomingMessage, res: ServerResponse) => {
    if (req.url?.startsWith('/v1/')) requests++;
    req.resume();
    held.push(res);
  });
  return { ...stub, requests: () => requests };
}

test('a hung worker is suspected within its allowance: no new requests, waiting ones retried elsewhere, nobody waits for the deadline', async () => {
  const sims = await startSims(1);
  const hung = await startHung();
  const { gw, url } = await startGateway([sims[0]!.url, hung.url], {
    policy: { name: 'round-robin' },
    // Probes and scrapes slow enough that they do not find it first: silence must.
    health: { intervalMs: 60_000 },
    scrape: { intervalMs: 60_000 },
    // A short allowance keeps the test quick; on a starved machine a healthy worker can be silent
    // that long too, so a request may need a second retry.
    outlier: { minSilenceMs: 400, checkIntervalMs: 50 },
    circuitBreaker: { failuresToOpen: 100 },
    retry: { attempts: 2 },
  });
  try {
    const started = Date.now();
    const results = await Promise.all(
      Array.from({ length: 12 }, async (_, i) => {
        const t0 = Date.now();
        const r = await post(url + '/v1/chat/completions', { model: MODEL, stream: true, max_tokens: 8, messages: [{ role: 'user', content: `q${i}` }] });
        return { status: r.status, ms: Date.now() - t0, worker: r.headers.get('x-kvgate-worker'), done: r.text.includes('[DONE]') };
      }),
    );
    for (const r of results) {
      assert.equal(r.status, 200);
      assert.ok(r.done, 'every stream completed');
      assert.equal(r.worker, 'w0');
      // Allowance (400 ms) + one check interval + the retry's own time, with room for a busy machine.
      assert.ok(r.ms < 3_000, `a request took ${r.ms} ms`);
    }
    const w1 = gw.registry.get('w1')!;
    assert.equal(w1.suspected, true);
    assert.equal((await fetch(url + '/ready')).status, 200, 'the other worker keeps the gateway ready');
    // Suspected: no new request goes there.
    const sentToHung = hung.requests();
    for (let i = 0; i < 4; i++) {
      const r = await post(url + '/v1/chat/completions', { model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: `after ${i}` }] });
      assert.equal(r.status, 200);
    }
    assert.equal(hung.requests(), sentToHung);
    const m = await (await fetch(url + '/metrics')).text();
    assert.ok((metricValue(m, 'kvgate_worker_suspected_total', { worker: 'w1' }) ?? 0) >= 1);
    assert.equal(metricValue(m, 'kvgate_worker_suspected_total', { worker: 'w0' }) ?? 0, 0);
    assert.ok(Date.now() - started < 10_000);
    assert.equal(gw.router.openCount, 0);
  } finally {
    await gw.close();
    await hung.close();
    await sims[0]!.close();
  }
});

test('scrapes that time out twice in a row make an idle worker suspected; an answer in time clears it', async () => {
  const sims = await startSims(1);
  let hang = true;
  const held: ServerResponse[] = [];
  const flaky = await startStub((req, res) => {
    req.resume();
    if (hang) return void held.push(res);
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('vllm:num_requests_running{model_name="m"} 0\nvllm:kv_cache_usage_perc{model_name="m"} 0\n');
  });
  const { gw } = await startGateway([sims[0]!.url, flaky.url], {
    health: { intervalMs: 60_000 },
    scrape: { intervalMs: 60_000, timeoutMs: 100 },
    outlier: { minSilenceMs: 750 },
  }, { watchFleet: false });
  try {
    const w1 = gw.registry.get('w1')!;
    await gw.scraper.scrape(w1);
    assert.equal(w1.suspected, false, 'one slow scrape of an idle worker is not enough');
    await gw.scraper.scrape(w1);
    assert.equal(w1.suspected, true);
    // Suspicion steers, it never refuses: with every other worker gone, w1 is still routed to.
    gw.registry.get('w0')!.healthy = false;
    const route = gw.router.route({ id: 'probe', model: MODEL, promptText: 'x', promptTokens: [1, 2, 3], maxTokens: 1, state: new RequestState() }, gw.registry.workers);
    assert.equal(route.ok && route.decision.worker.id, 'w1');
    gw.router.complete('probe', false);
    gw.registry.get('w0')!.healthy = true;
    hang = false;
    await gw.scraper.scrape(w1);
    assert.equal(w1.lastScrapeError, null);
    assert.equal(w1.suspected, false);
  } finally {
    for (const r of held) r.destroy();
    await gw.close();
    await flaky.close();
    await sims[0]!.close();
  }
});
