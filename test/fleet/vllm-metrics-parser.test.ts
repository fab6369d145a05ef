import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parsePromText } from '../../src/fleet/prom-text.js';
import { MetricsShapeError, snapshotFromSamples } from '../../src/fleet/vllm-metrics-parser.js';

const snap = (text: string) => snapshotFromSamples(parsePromText(text), 42);

test('V1 names: loads summed over engines, KV usage block-weighted, counters with _total', () => {
  const s = snap(`
vllm:num_requests_running{engine="0",model_name="m"} 3
vllm:num_requests_running{engine="1",model_name="m"} 2
vllm:num_requests_waiting{engine="0",model_name="m"} 1
vllm:num_requests_waiting{engine="1",model_name="m"} 4
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000",enable_prefix_caching="True"} 1
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="3000",enable_prefix_caching="True"} 1
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 100
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 40
vllm:num_preemptions_total{engine="0",model_name="m"} 2
vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e9
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 25
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 9
`);
  assert.equal(s.at, 42);
  assert.equal(s.running, 5);
  assert.equal(s.waiting, 5);
  assert.equal(s.numGpuBlocks, 4000);
  assert.equal(s.blockSize, 16);
  assert.equal(s.kvUsage, (0.5 * 1000 + 0.25 * 3000) / 4000);
  assert.equal(s.prefixQueries, 100);
  assert.equal(s.prefixHits, 40);
  assert.equal(s.preemptions, 2);
  assert.equal(s.specDrafts, 10);
  assert.equal(s.specDraftTokens, 40);
  assert.equal(s.specAcceptedTokens, 25);
});

test('older names: gpu_cache_usage_perc and gpu_prefix_cache_*, no _total suffix', () => {
  const s = snap(`
vllm:gpu_cache_usage_perc{model_name="m"} 0.75
vllm:num_requests_running{model_name="m"} 1
vllm:num_requests_waiting{model_name="m"} 0
vllm:gpu_prefix_cache_queries{model_name="m"} 50
vllm:gpu_prefix_cache_hits{model_name="m"} 5
`);
  assert.equal(s.kvUsage, 0.75);
  assert.equal(s.prefixQueries, 50);
  assert.equal(s.prefixHits, 5);
  assert.equal(s.numGpuBlocks, undefined);
});

test('the V1 KV name wins when both are exported', () => {
  const s = snap('vllm:gpu_cache_usage_perc 0.9\nvllm:kv_cache_usage_perc 0.1\nvllm:gpu_cache_usage_perc 0.9\n');
  assert.equal(s.kvUsage, 0.1);
});

test('a page without KV usage, or with an impossible value, is rejected', () => {
  assert.throws(() => snap('vllm:num_requests_running 1\n'), MetricsShapeError);
  assert.throws(() => snap('some_other_exporter 1\n'), MetricsShapeError);
  assert.throws(() => snap('vllm:kv_cache_usage_perc 7\n'), MetricsShapeError);
  assert.throws(() => snap('vllm:kv_cache_usage_perc NaN\n'), MetricsShapeError);
});

test('vllm:lora_requests_info: the newest label set is the state now; absent or malformed, no lora', () => {
  const s = snap(`
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.1
vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql-lora",waiting_lora_adapters=""} 1.7e9
vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql-lora,chat-lora",waiting_lora_adapters="x-lora"} 1.7000001e9
vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1.6e9
`);
  assert.deepEqual(s.lora, { maxLoras: 2, running: ['sql-lora', 'chat-lora'], waiting: ['x-lora'] });
  assert.equal(snap('vllm:kv_cache_usage_perc 0.1\n').lora, undefined);
  assert.equal(snap('vllm:kv_cache_usage_perc 0.1\nvllm:lora_requests_info{max_lora="x",running_lora_adapters="a"} 1\n').lora, undefined);
});
