/**
 * SGLang workers' metrics: the scraper reads SGLang's names (as GIE's model-server protocol lists
 * them) into the snapshot vLLM's names fill, against the simulated SGLang worker over HTTP, and
 * each of SGLang's capacity forms and label layouts from text.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MetricsScraper } from '../../src/fleet/scraper.js';
import { MIN_BLOCK_TOKENS, snapshotFromSglangSamples } from '../../src/fleet/sglang-metrics-parser.js';
import { parsePromText } from '../../src/fleet/prom-text.js';
import { Upstreams } from '../../src/fleet/upstreams.js';
import { WorkerState } from '../../src/fleet/worker-state.js';
import { startSimWorker } from '../../src/sim/worker/server.js';
import { systemClock } from '../../src/util/clock.js';

const upstreamOpts = { connections: 0, keepAliveTimeoutMs: 1000, connectTimeoutMs: 500 };

test('an SGLang worker is scraped by its own names into queue, running, KV usage and capacity', async () => {
  const sim = await startSimWorker({ engine: 'sglang', speed: 20, numGpuBlocks: 400, maxNumSeqs: 2 });
  const ups = new Upstreams(upstreamOpts);
  const w = new WorkerState({ id: 's0', url: sim.url, pool: 'p', model: sim.model, engine: 'sglang' });
  const vllmView = new WorkerState({ id: 's0-as-vllm', url: sim.url, pool: 'p', model: sim.model });
  const scraper = new MetricsScraper([w, vllmView], { intervalMs: 1000, timeoutMs: 500, clock: systemClock, upstreams: ups });
  const prompt = Array.from({ length: 1500 }, (_, i) => 100 + (i % 900));
  const running: Array<Promise<Response>> = [];
  try {
    await scraper.scrape(w);
    assert.equal(w.lastScrapeError, null);
    assert.equal(w.snapshot?.numGpuBlocks, 400);
    assert.equal(w.snapshot?.blockSize, 16);
    assert.equal(w.snapshot?.kvUsage, 0);
    // Read as a vLLM worker, the same page has none of vLLM's names: the scrape fails.
    await scraper.scrape(vllmView);
    assert.match(vllmView.lastScrapeError ?? '', /vllm:kv_cache_usage_perc/);

    // Four long requests on a worker that runs two at a time: two run, two queue, KV fills.
    for (let i = 0; i < 4; i++) {
      running.push(fetch(`${sim.url}/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ input_ids: prompt.map((t) => t + i), sampling_params: { max_new_tokens: 400, ignore_eos: true, temperature: 0 } }),
      }));
    }
    let seen = false;
    for (let i = 0; i < 100 && !seen; i++) {
      await new Promise((r) => setTimeout(r, 20));
      await scraper.scrape(w);
      const s = w.snapshot;
      seen = s.running === 2 && s.waiting === 2 && s.kvUsage > 0.2;
    }
    assert.ok(seen, `expected 2 running, 2 waiting and KV in use, last snapshot ${JSON.stringify(w.snapshot)}`);
    for (const r of await Promise.all(running)) assert.equal(r.status, 200);
    await scraper.scrape(w);
    assert.equal(w.snapshot?.running, 0);
    assert.ok((w.snapshot?.prefixQueries ?? 0) >= 4 * prompt.length, 'prompt tokens counted');
  } finally {
    await ups.close();
    await sim.close();
  }
});

const L = 'model_name="m",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"';

test("SGLang's capacity forms: cache_config_info labels, the page gauges, max_total_num_tokens", () => {
  const base = `sglang:num_running_reqs{${L}} 3\nsglang:num_queue_reqs{${L}} 5\nsglang:token_usage{${L}} 0.25\n`;
  const info = snapshotFromSglangSamples(parsePromText(base + 'sglang:cache_config_info{page_size="32",num_pages="1000"} 1\n'), 7);
  assert.deepEqual([info.running, info.waiting, info.kvUsage, info.blockSize, info.numGpuBlocks], [3, 5, 0.25, 32, 1000]);
  const gauges = snapshotFromSglangSamples(parsePromText(base + `sglang:page_size{${L}} 64\nsglang:num_pages{${L}} 500\n`), 7);
  assert.deepEqual([gauges.blockSize, gauges.numGpuBlocks], [64, 500]);
  // One-token pages (SGLang's default) are counted in blocks of MIN_BLOCK_TOKENS: the same tokens.
  const tokens = snapshotFromSglangSamples(parsePromText(base + `sglang:max_total_num_tokens{${L}} 160000\n`), 7);
  assert.deepEqual([tokens.blockSize, tokens.numGpuBlocks], [MIN_BLOCK_TOKENS, 160000 / MIN_BLOCK_TOKENS]);
  const none = snapshotFromSglangSamples(parsePromText(base), 7);
  assert.equal(none.numGpuBlocks, undefined);
  assert.throws(() => snapshotFromSglangSamples(parsePromText(`sglang:num_running_reqs{${L}} 1\n`), 7), /sglang:token_usage/);
  assert.throws(() => snapshotFromSglangSamples(parsePromText(`sglang:token_usage{${L}} 1.5\n`), 7), /out of range/);
});

test('priority series are not summed into the totals; data-parallel ranks are; all-rank logging is not double counted', () => {
  const text = [
    // Priority scheduling: the total under priority="", one series per priority beside it.
    `sglang:num_queue_reqs{${L},priority="",dp_rank="0"} 6`,
    `sglang:num_queue_reqs{${L},priority="1",dp_rank="0"} 4`,
    `sglang:num_queue_reqs{${L},priority="2",dp_rank="0"} 2`,
    `sglang:num_queue_reqs{${L},priority="",dp_rank="1"} 1`,
    `sglang:num_running_reqs{${L},priority="",dp_rank="0"} 2`,
    `sglang:num_running_reqs{${L},priority="",dp_rank="1"} 3`,
    `sglang:token_usage{${L},dp_rank="0"} 0.5`,
    `sglang:token_usage{${L},dp_rank="1"} 0.1`,
    // Two tensor-parallel ranks of dp_rank 0 logging the same scheduler.
    `sglang:token_usage{model_name="m",engine_type="unified",tp_rank="1",pp_rank="0",moe_ep_rank="0",dp_rank="0"} 0.5`,
    `sglang:max_total_num_tokens{${L},dp_rank="0"} 32000`,
    `sglang:max_total_num_tokens{${L},dp_rank="1"} 32000`,
    `sglang:prompt_tokens_total{${L}} 1000`,
    `sglang:cached_tokens_total{${L}} 600`,
  ].join('\n');
  const s = snapshotFromSglangSamples(parsePromText(text), 1);
  assert.equal(s.waiting, 7);
  assert.equal(s.running, 5);
  assert.ok(Math.abs(s.kvUsage - 0.3) < 1e-9, String(s.kvUsage));
  assert.equal(s.numGpuBlocks, 64000 / MIN_BLOCK_TOKENS);
  assert.deepEqual([s.prefixQueries, s.prefixHits], [1000, 600]);
});
