/**
 * KV-cache-aware routing end to end, with the gateway's default configuration: requests that share
 * a long system prompt go to the worker that already holds it, and that worker's own vLLM metrics
 * show the prompt served from its prefix cache.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { estimateTokenizer, renderChat } from '../../src/tokenizer/index.js';
import { MODEL, metricValue, post, startGateway, startSims, waitFor } from './helpers.js';

async function prefixHits(workerUrl: string): Promise<number> {
  const m = await (await fetch(workerUrl + '/metrics')).text();
  return metricValue(m, 'vllm:prefix_cache_hits_total', { model_name: MODEL }) ?? 0;
}

test('two requests with the same long system prompt land on one worker; the second hits its prefix cache', async () => {
  const sims = await startSims(4);
  // No policy named: the gateway's default (kvgate) routes.
  const { gw, url } = await startGateway(sims.map((s) => s.url));
  try {
    await waitFor(() => gw.registry.workers.every((w) => w.snapshot !== null));
    const system = 'You are the support assistant of a storage company. Answer precisely and cite the manual. '.repeat(40);
    const ask = (q: string) =>
      post(url + '/v1/chat/completions', {
        model: MODEL,
        messages: [
          { role: 'system', content: system },
          { role: 'user', content: q },
        ],
        max_tokens: 8,
      });

    const first = await ask('How do I resize a volume?');
    assert.equal(first.status, 200, first.text);
    const home = first.headers.get('x-kvgate-worker')!;
    assert.ok(home, 'routed responses name their worker');
    assert.equal(Number(first.headers.get('x-kvgate-prefix-hit')), 0, 'nothing is cached anywhere yet');
    const homeUrl = gw.registry.workers.find((w) => w.id === home)!.url;
    const hitsBefore = await prefixHits(homeUrl);

    const second = await ask('What is the snapshot retention?');
    assert.equal(second.status, 200, second.text);
    assert.equal(second.headers.get('x-kvgate-worker'), home, 'the shared prefix draws the second request to the same worker');
    assert.ok(Number(second.headers.get('x-kvgate-prefix-hit')) > 0.8, `expected a high prefix hit, got ${second.headers.get('x-kvgate-prefix-hit')}`);

    // The worker's own counters: every full 16-token block of the shared system prompt came from its cache.
    const systemTokens = estimateTokenizer.count(renderChat([{ role: 'system', content: system }], false));
    assert.ok(systemTokens > 800);
    const gained = (await prefixHits(homeUrl)) - hitsBefore;
    assert.ok(gained >= Math.floor(systemTokens / 16) * 16, `worker ${home} served only ${gained} of ${systemTokens} shared prompt tokens from its cache`);
    assert.equal(second.json.usage.prompt_tokens_details.cached_tokens, gained);
    for (const w of gw.registry.workers.filter((x) => x.id !== home)) {
      assert.equal(await prefixHits(w.url), 0, `worker ${w.id} saw none of this traffic`);
    }
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});
