/**
 * A pool of SGLang workers (`engine: sglang`) served like a vLLM pool, end to end: the gateway
 * scrapes SGLang's metric names, routes chat and completions by prefix (the shared system prompt's
 * worker serves it from its radix cache, as its own sglang:cached_tokens_total shows), and
 * admission sheds sheddable work when the pool's KV (sglang:token_usage) is full.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { startSimWorker, type SimWorker } from '../../src/sim/worker/server.js';
import { estimateTokenizer, renderChat } from '../../src/tokenizer/index.js';
import { MODEL, metricValue, post, startGateway, waitFor } from './helpers.js';

const closers: Array<() => Promise<unknown>> = [];
after(async () => {
  for (const c of closers.reverse()) await c();
});

async function sglangSims(n: number, opts: { speed?: number; numGpuBlocks?: number } = {}): Promise<SimWorker[]> {
  const s = await Promise.all(Array.from({ length: n }, () => startSimWorker({ engine: 'sglang', model: MODEL, speed: opts.speed ?? 100, numGpuBlocks: opts.numGpuBlocks })));
  closers.push(() => Promise.all(s.map((w) => w.close())));
  return s;
}

async function sglangGateway(urls: string[], extra: object = {}) {
  const g = await startGateway([], { pools: [{ name: 'sg', model: MODEL, engine: 'sglang', workers: urls.map((url, i) => ({ url, id: `s${i}` })) }], ...extra } as never);
  closers.push(() => g.gw.close());
  // Capacity comes from sglang:cache_config_info: until the first scrape the gateway assumes a large GPU's.
  await waitFor(() => g.gw.registry.workers.every((w) => w.knownGpuBlocks !== undefined), 30_000);
  return g;
}

async function cachedTokens(workerUrl: string): Promise<number> {
  const m = await (await fetch(`${workerUrl}/metrics`)).text();
  return metricValue(m, 'sglang:cached_tokens_total', { model_name: MODEL }) ?? 0;
}

describe('a pool of SGLang workers', () => {
  it('is scraped by SGLang names and routed by prefix: the shared prompt is served from one worker’s cache', async () => {
    const sims = await sglangSims(4, { numGpuBlocks: 3000 });
    const { gw, url } = await sglangGateway(sims.map((s) => s.url));
    for (const w of gw.registry.workers) {
      assert.equal(w.engine, 'sglang');
      assert.equal(w.lastScrapeError, null);
      assert.equal(w.numGpuBlocks, 3000);
    }
    const system = 'You are the support assistant of a storage company. Answer precisely and cite the manual. '.repeat(40);
    const ask = (q: string) => post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'system', content: system }, { role: 'user', content: q }], max_tokens: 8 });
    const first = await ask('How do I resize a volume?');
    assert.equal(first.status, 200, first.text);
    const home = first.headers.get('x-kvgate-worker')!;
    const homeUrl = gw.registry.workers.find((w) => w.id === home)!.url;
    const before = await cachedTokens(homeUrl);
    const second = await ask('What is the snapshot retention?');
    assert.equal(second.status, 200, second.text);
    assert.equal(second.headers.get('x-kvgate-worker'), home, 'the shared prefix draws the second request to the same worker');
    const systemTokens = estimateTokenizer.count(renderChat([{ role: 'system', content: system }], false));
    const gained = (await cachedTokens(homeUrl)) - before;
    assert.ok(gained >= Math.floor(systemTokens / 16) * 16, `worker ${home} served only ${gained} of ${systemTokens} shared prompt tokens from its cache`);
    for (const w of gw.registry.workers.filter((x) => x.id !== home)) assert.equal(await cachedTokens(w.url), 0, `worker ${w.id} saw none of it`);

    // Completions go the same way (the OpenAI routes are the same on SGLang).
    const doc = 'Release notes of the storage appliance, version eleven, every change listed by component. '.repeat(40);
    const c1 = await post(url + '/v1/completions', { model: MODEL, prompt: doc + ' Question: where are the logs?', max_tokens: 4 });
    const c2 = await post(url + '/v1/completions', { model: MODEL, prompt: doc + ' Question: what changed in replication?', max_tokens: 4 });
    assert.equal(c1.status, 200, c1.text);
    assert.equal(c2.status, 200, c2.text);
    assert.equal(c2.headers.get('x-kvgate-worker'), c1.headers.get('x-kvgate-worker'));
  });

  it("sheds sheddable requests when the pool's KV is full, and serves the critical ones holding it", async () => {
    // Two slow workers of 64 pages of 16 tokens: one long answer fills each.
    const sims = await sglangSims(2, { speed: 0.1, numGpuBlocks: 64 });
    const { gw, url } = await sglangGateway(sims.map((s) => s.url), {
      tenants: [
        { id: 'front', keys: [{ value: 'sk-front-0001' }], priority: 'critical' },
        { id: 'batch', keys: [{ value: 'sk-batch-0001' }], priority: 'sheddable' },
      ],
    });
    const u = `${url}/v1/chat/completions`;
    const words = (n: number, salt: string) => Array.from({ length: n }, (_, i) => `${salt}${i}`).join(' ');
    const holders = [0, 1].map(() => {
      const ac = new AbortController();
      const response = fetch(u, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer sk-front-0001' },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: words(300, 'big') }], max_tokens: 400, stream: true }),
        signal: ac.signal,
      });
      response.catch(() => {});
      return { response, abort: () => ac.abort() };
    });
    await waitFor(() => gw.registry.workers.every((w) => w.inflightCount === 1), 30_000);
    assert.ok(gw.admission!.usage(MODEL) > 0.85, `fleet KV usage ${gw.admission!.usage(MODEL)}`);
    const burst = await Promise.all(
      Array.from({ length: 6 }, (_, i) => post(u, { model: MODEL, messages: [{ role: 'user', content: words(120, `b${i}x`) }], max_tokens: 48 }, { authorization: 'Bearer sk-batch-0001' })),
    );
    for (const r of burst) {
      assert.equal(r.status, 503, r.text);
      assert.equal(r.json.error.code, 'overloaded');
    }
    // The workers' own gauge (sglang:token_usage), scraped: KV in use on both.
    await waitFor(() => gw.registry.workers.every((w) => (w.snapshot?.kvUsage ?? 0) > 0.5), 10_000);
    for (const h of holders) {
      assert.equal((await h.response).status, 200);
      h.abort();
    }
  });
});
