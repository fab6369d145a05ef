/** The simulated worker's /metrics: vLLM V1 names, values that follow the traffic, legacy names, isolation. */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startSimWorker, type SimWorker } from '../../../src/sim/worker/server.js';
import { estimateTokenizer } from '../../../src/tokenizer/index.js';
import { longPrompt, metricValue, postJson, scrape } from './helpers.js';

const MODEL = 'llama-3.1-8b';
const L = { model_name: MODEL, engine: '0' };

describe('vLLM V1 metrics', () => {
  let w: SimWorker;
  before(async () => {
    w = await startSimWorker({ model: MODEL, speed: 200, numGpuBlocks: 4000 });
  });
  after(() => w.close());

  test('every documented series is present with vLLM labels before any traffic', async () => {
    const text = await scrape(w);
    for (const name of [
      'vllm:num_requests_running',
      'vllm:num_requests_waiting',
      'vllm:kv_cache_usage_perc',
      'vllm:prefix_cache_queries_total',
      'vllm:prefix_cache_hits_total',
      'vllm:num_preemptions_total',
      'vllm:prompt_tokens_total',
      'vllm:generation_tokens_total',
    ]) {
      assert.equal(metricValue(text, name, L), 0, name);
    }
    for (const reason of ['stop', 'length', 'abort']) {
      assert.equal(metricValue(text, 'vllm:request_success_total', { ...L, finished_reason: reason }), 0);
    }
    assert.match(text, /# TYPE vllm:prefix_cache_hits_total counter/);
    assert.match(text, /# TYPE vllm:kv_cache_usage_perc gauge/);
    assert.match(text, /# TYPE vllm:time_to_first_token_seconds histogram/);
    for (const h of ['time_to_first_token', 'inter_token_latency', 'e2e_request_latency', 'request_queue_time']) {
      assert.equal(metricValue(text, `vllm:${h}_seconds_count`, L), 0, h);
    }
    assert.equal(
      metricValue(text, 'vllm:cache_config_info', {
        block_size: '16',
        num_gpu_blocks: '4000',
        enable_prefix_caching: 'True',
        gpu_memory_utilization: '0.9',
        engine: '0',
      }),
      1,
    );
    assert.equal(metricValue(text, 'vllm:gpu_cache_usage_perc', L), undefined);
  });

  test('counters and histograms follow requests; a repeated long prompt hits the prefix cache', async () => {
    const prompt = longPrompt(200);
    const promptTokens = estimateTokenizer.encode(prompt).length;
    const before = await scrape(w);
    const a = await postJson(w, '/v1/completions', { prompt, max_tokens: 5, ignore_eos: true });
    const b = await postJson(w, '/v1/completions', { prompt, max_tokens: 5, ignore_eos: true });
    assert.equal(a.json.usage.prompt_tokens_details.cached_tokens, 0);
    // Full blocks of the prompt are cached; the last token is always recomputed (vLLM).
    const expectedHit = Math.floor((promptTokens - 1) / 16) * 16;
    assert.equal(b.json.usage.prompt_tokens_details.cached_tokens, expectedHit);
    const text = await scrape(w);
    const delta = (name: string, labels: Record<string, string> = L) => metricValue(text, name, labels)! - metricValue(before, name, labels)!;
    assert.equal(delta('vllm:prefix_cache_queries_total'), 2 * promptTokens);
    assert.equal(delta('vllm:prefix_cache_hits_total'), expectedHit);
    assert.equal(delta('vllm:prompt_tokens_total'), 2 * promptTokens);
    assert.equal(delta('vllm:generation_tokens_total'), 10);
    assert.equal(delta('vllm:request_success_total', { ...L, finished_reason: 'length' }), 2);
    assert.equal(delta('vllm:time_to_first_token_seconds_count'), 2);
    assert.equal(delta('vllm:inter_token_latency_seconds_count'), 8);
    assert.equal(delta('vllm:e2e_request_latency_seconds_count'), 2);
    assert.equal(delta('vllm:request_queue_time_seconds_count'), 2);
    // Latencies are in modelled seconds: positive and plausible for an 8B model on an H100.
    const ttft = delta('vllm:time_to_first_token_seconds_sum') / 2;
    const itl = delta('vllm:inter_token_latency_seconds_sum') / 8;
    assert.ok(ttft > 0.005 && ttft < 1, `mean TTFT ${ttft}`);
    assert.ok(itl > 0.003 && itl < 0.05, `mean ITL ${itl}`);
    // Idle again: nothing running, no KV in use by running requests.
    assert.equal(metricValue(text, 'vllm:num_requests_running', L), 0);
    assert.equal(metricValue(text, 'vllm:kv_cache_usage_perc', L), 0);
  });

  test('running, waiting and KV usage are visible while requests are in flight', async () => {
    const body = { prompt: longPrompt(300, 'inflight'), max_tokens: 400, ignore_eos: true };
    const pending = [1, 2, 3].map((i) => postJson(w, '/v1/completions', { ...body, seed: i }));
    let seen = false;
    for (let i = 0; i < 200 && !seen; i++) {
      const text = await scrape(w);
      const running = metricValue(text, 'vllm:num_requests_running', L)!;
      const kv = metricValue(text, 'vllm:kv_cache_usage_perc', L)!;
      if (running > 0 && kv > 0) seen = true;
      else await new Promise((r) => setTimeout(r, 2));
    }
    await Promise.all(pending);
    assert.ok(seen, 'in-flight requests show in num_requests_running and kv_cache_usage_perc');
  });

  test('stop strings finish as stop, not abort', async () => {
    const base = { prompt: 'One more prompt', max_tokens: 30, seed: 2, ignore_eos: true };
    const full = (await postJson(w, '/v1/completions', base)).json.choices[0].text as string;
    const before = await scrape(w);
    const r = await postJson(w, '/v1/completions', { ...base, stop: full.split(' ')[3] });
    assert.equal(r.json.choices[0].finish_reason, 'stop');
    const text = await scrape(w);
    const d = (reason: string) =>
      metricValue(text, 'vllm:request_success_total', { ...L, finished_reason: reason })! -
      metricValue(before, 'vllm:request_success_total', { ...L, finished_reason: reason })!;
    assert.equal(d('stop'), 1);
    assert.equal(d('abort'), 0);
  });
});

describe('legacy metric names', () => {
  test('legacyMetricNames emits vllm:gpu_cache_usage_perc and vllm:gpu_prefix_cache_*', async () => {
    const w = await startSimWorker({ model: MODEL, speed: 200, legacyMetricNames: true });
    try {
      const prompt = longPrompt(100);
      await postJson(w, '/v1/completions', { prompt, max_tokens: 2 });
      await postJson(w, '/v1/completions', { prompt, max_tokens: 2 });
      const text = await scrape(w);
      assert.equal(metricValue(text, 'vllm:gpu_cache_usage_perc', L), 0);
      assert.ok(metricValue(text, 'vllm:gpu_prefix_cache_queries_total', L)! > 0);
      assert.ok(metricValue(text, 'vllm:gpu_prefix_cache_hits_total', L)! > 0);
      assert.equal(metricValue(text, 'vllm:kv_cache_usage_perc', L), undefined);
      assert.equal(metricValue(text, 'vllm:prefix_cache_hits_total', L), undefined);
      assert.ok(metricValue(text, 'vllm:num_requests_running', L) !== undefined);
    } finally {
      await w.close();
    }
  });
});

describe('several workers in one process', () => {
  test('each has its own registry and model label', async () => {
    const a = await startSimWorker({ model: MODEL, speed: 200 });
    const b = await startSimWorker({ model: 'llama-3-8b', speed: 200 });
    try {
      await postJson(a, '/v1/completions', { prompt: 'only worker a', max_tokens: 3, ignore_eos: true });
      const ta = await scrape(a);
      const tb = await scrape(b);
      assert.equal(metricValue(ta, 'vllm:generation_tokens_total', L), 3);
      assert.equal(metricValue(tb, 'vllm:generation_tokens_total', { model_name: 'llama-3-8b', engine: '0' }), 0);
      assert.equal(metricValue(tb, 'vllm:generation_tokens_total', L), undefined);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});
