/**
 * A simulated worker that speculates inside its engine exports vLLM's spec-decode counters, and
 * the gateway turns them into per-worker acceptance.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startSimWorker } from '../../../src/sim/worker/server.js';
import { parseConfig } from '../../../src/config/index.js';
import { createGateway } from '../../../src/gateway/gateway.js';
import { createLogger } from '../../../src/telemetry/logger.js';
import { metricValue, waitFor } from '../../support.js';

test('an in-engine speculating worker exports spec-decode counters; kvgate exports its acceptance', async () => {
  const spec = await startSimWorker({ model: 'llama-3.1-70b', tp: 4, speed: 200, speculative: { k: 3, draftModel: 'llama-3.1-8b', acceptance: 0.6 } });
  const plain = await startSimWorker({ model: 'llama-3.1-70b', tp: 4, speed: 200 });
  const gw = createGateway(
    parseConfig({
      listen: { host: '127.0.0.1', port: 0 },
      pools: [{ name: 'p', model: 'llama-3.1-70b', workers: [{ url: spec.url, id: 'spec' }, { url: plain.url, id: 'plain' }] }],
      scrape: { intervalMs: 100 },
      log: { level: 'silent' },
    }),
    { logger: createLogger({ level: 'silent' }) },
  );
  const { url } = await gw.start();
  try {
    for (let i = 0; i < 4; i++) {
      const r = await fetch(`${spec.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: `prompt ${i} about the sea`, max_tokens: 200, ignore_eos: true, temperature: 0 }),
      });
      const j = (await r.json()) as any;
      assert.equal(j.usage.completion_tokens, 200);
    }
    const m = await (await fetch(`${spec.url}/metrics`)).text();
    const drafts = metricValue(m, 'vllm:spec_decode_num_drafts_total')!;
    const draftTokens = metricValue(m, 'vllm:spec_decode_num_draft_tokens_total')!;
    const accepted = metricValue(m, 'vllm:spec_decode_num_accepted_tokens_total')!;
    assert.ok(drafts > 100 && draftTokens <= 3 * drafts, m);
    const pos0 = metricValue(m, 'vllm:spec_decode_num_accepted_tokens_per_pos_total', { position: '0' })!;
    assert.ok(Math.abs(pos0 / drafts - 0.6) < 0.08, `${pos0}/${drafts}`);
    assert.ok(accepted >= pos0);
    // A plain worker has none of them, as on vLLM without a speculative config.
    const pm = await (await fetch(`${plain.url}/metrics`)).text();
    assert.equal(metricValue(pm, 'vllm:spec_decode_num_drafts_total'), undefined);
    await waitFor(async () => metricValue(await (await fetch(`${url}/metrics`)).text(), 'kvgate_worker_spec_acceptance_rate', { worker: 'spec' }) !== undefined, 5_000);
    const gm = await (await fetch(`${url}/metrics`)).text();
    const rate = metricValue(gm, 'kvgate_worker_spec_acceptance_rate', { worker: 'spec' })!;
    assert.ok(Math.abs(rate - accepted / draftTokens) < 0.05, `${rate}`);
    assert.ok(metricValue(gm, 'kvgate_worker_spec_mean_acceptance_length', { worker: 'spec' })! > 1.5);
    assert.equal(metricValue(gm, 'kvgate_worker_spec_acceptance_rate', { worker: 'plain' }), undefined);
  } finally {
    await gw.close();
    await spec.close();
    await plain.close();
  }
});
