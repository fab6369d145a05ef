/**
 * Policy `dynamo-approx`: NVIDIA Dynamo's KV router in its approximate mode (`use_kv_events=false`,
 * `--no-kv-events`): the same cost as `dynamo` (dynamo.ts) — prefill blocks less the overlap,
 * plus reference-counted active decode blocks and the prompt's new blocks — with the overlap taken
 * from an index the router fills from its own decisions instead of the engines' KV events.
 *
 *   healthy → dynamo picker; at dispatch the prompt's full blocks are recorded at the chosen worker
 *
 * Each routed block lives cacheWindowMs since it was last routed there (`router_ttl_secs`); each
 * worker's part of the index holds at most maxTreeSize blocks, the least recently routed pruned
 * first. Dynamo's approximate indexer never learns a worker's KV capacity or its evictions.
 *
 * Defaults as published in ai-dynamo/dynamo: `lib/kv-router/src/scheduling/config.rs`
 * (router_ttl_secs 120, router_max_tree_size 2^20, router_prune_target_ratio 0.8) and
 * `lib/kv-router/src/approx.rs` (PruneConfig; blocks inserted at the routing decision with a TTL
 * that a later insert renews; over max_tree_size the earliest-expiring blocks are pruned). Dynamo
 * bounds the whole tree and prunes to 80% of the bound; here the bound applies to each worker
 * separately and is kept exactly. The cost's defaults are dynamo's (see dynamo.ts).
 */
import { z } from 'zod';
import { PrefixIndex } from '../index/prefix-index.js';
import { PrefixMatcher } from '../index/prefix-match.js';
import type { PipelinePolicy } from '../pipeline.js';
import type { PolicyDefinition } from '../types.js';
import { dynamoCostKnobs, dynamoPipeline } from './dynamo.js';
import { indexKnobs, numberKnob } from './knobs.js';

/** Dynamo's names in parentheses. */
export const dynamoApproxOptions = z.strictObject({
  ...dynamoCostKnobs,
  cacheWindowMs: numberKnob(120_000, 'lifetime of a routed block in the overlap index since it was last routed, ms (router_ttl_secs)', {
    infinite: true,
  }),
  maxTreeSize: numberKnob(2 ** 20, "blocks the overlap index keeps per worker, least recently routed pruned first (router_max_tree_size)", {
    min: 1,
  }),
  indexMaxBytes: indexKnobs.indexMaxBytes,
  maxWorkers: indexKnobs.maxWorkers,
});

export type DynamoApproxOptions = z.output<typeof dynamoApproxOptions>;

function createDynamoApproxPolicy(o: DynamoApproxOptions): PipelinePolicy {
  const index = new PrefixIndex({
    maxBytes: o.indexMaxBytes,
    maxWorkers: o.maxWorkers,
    predictedTtlMs: 0,
    approxTtlMs: o.cacheWindowMs,
  });
  return dynamoPipeline('dynamo-approx', o, new PrefixMatcher(index, { capacityBlocks: o.maxTreeSize }), {
    recordRouted: true,
    fixed: ['cacheWindowMs', 'maxTreeSize', 'indexMaxBytes', 'maxWorkers'],
  });
}

export const dynamoApproxPolicy: PolicyDefinition<typeof dynamoApproxOptions> = {
  name: 'dynamo-approx',
  description:
    "NVIDIA Dynamo KV router without KV events (--no-kv-events): dynamo's cost with the overlap from its own decisions, each kept 120 s.",
  options: dynamoApproxOptions,
  create: createDynamoApproxPolicy,
};
