/**
 * The scheduler really works through the EPP: requests that share a long system prompt are picked
 * to the worker that already holds it, and that worker's own vLLM metrics show the prompt served
 * from its prefix cache (the proxy's hop to the worker is plain HTTP here, as Envoy's would be).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { proxyExchange } from '../../src/epp/ext-proc-client.js';
import { endpointOfUrl, metricValue, MODEL, startEpp, startSims, waitFor } from './helpers.js';

async function prefixHits(workerUrl: string): Promise<number> {
  const m = await (await fetch(workerUrl + '/metrics')).text();
  return metricValue(m, 'vllm:prefix_cache_hits_total', { model_name: MODEL }) ?? 0;
}

test('a prompt whose prefix one worker holds is picked to that worker, and hits its prefix cache there', async () => {
  const sims = await startSims(4);
  const e = await startEpp(sims.map((s) => s.url));
  try {
    await waitFor(() => e.epp.registry.workers.every((w) => w.snapshot !== null));
    const system = 'You are the dispatcher of a regional rail network. Quote timetables exactly and name the platform. '.repeat(40);
    const ask = (q: string) =>
      proxyExchange(e.client, {
        path: '/v1/chat/completions',
        body: Buffer.from(JSON.stringify({ model: MODEL, max_tokens: 6, messages: [{ role: 'system', content: system }, { role: 'user', content: q }] })),
      });
    const first = await ask('When does the first train to the coast leave?');
    assert.equal(first.status, 200);
    const home = first.answer.endpoint!;
    const homeUrl = sims.find((s) => endpointOfUrl(s.url) === home)!.url;
    const before = await prefixHits(homeUrl);
    for (const q of ['And the last one?', 'Which platform for the airport?', 'Is there a night service?']) {
      const x = await ask(q);
      assert.equal(x.answer.endpoint, home, 'the shared prefix draws the request to the worker that holds it');
      assert.ok(JSON.parse(x.upstream.toString()).usage.prompt_tokens_details.cached_tokens > 800);
    }
    assert.ok((await prefixHits(homeUrl)) - before > 3 * 800, 'the worker served the shared prompt from its cache');
    for (const s of sims.filter((x) => x.url !== homeUrl)) assert.equal(await prefixHits(s.url), 0);
  } finally {
    await e.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});
