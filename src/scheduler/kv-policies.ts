/**
 * Registers the KV-cache-aware policies: kvgate's own and the peer routers' baselines.
 */
import { KvgatePolicy } from './kvgate-policy.js';
import { createDynamoPolicy, createLlmdPolicy, createOraclePolicy, createSglangPolicy } from './peer-policies.js';
import { registerPolicy } from './policy-registry.js';

registerPolicy(
  'kvgate',
  'kvgate: expected prefix hit from a KV-event-fed index, KV fit, estimated TTFT with a load guard that spills hot prefixes, pick-time predictions.',
  (o) => new KvgatePolicy(o),
);
registerPolicy(
  'sglang-cache-aware',
  'SGLang router cache_aware: character radix tree per worker, least in-flight when imbalanced (64 / 1.5), best match above 0.3.',
  createSglangPolicy,
);
registerPolicy(
  'llm-d',
  'llm-d router defaults: queue 2, kv-cache-utilization 2, approximate prefix-cache 3 (64-token blocks from text), max-score picker, 50 ms metrics.',
  createLlmdPolicy,
);
registerPolicy(
  'dynamo',
  'NVIDIA Dynamo KV router (approximate): lowest prefill_load_scale·new prefill blocks + active decode blocks, 120 s overlap window.',
  createDynamoPolicy,
);
registerPolicy(
  'oracle',
  "Simulation only: kvgate's decision rules on each engine's exact cache and queue (perfect information, same heuristics; not a guaranteed bound).",
  (o) => new KvgatePolicy(o, 'oracle', true),
);
registerPolicy(
  'oracle-greedy',
  'Simulation only: exact engine cache and queue, always the lowest estimated TTFT.',
  createOraclePolicy,
);
