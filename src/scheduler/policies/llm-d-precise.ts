/**
 * Policy `llm-d-precise`: llm-d's default profile, sticky until saturated (llm-d.ts), on a prefix
 * index fed by the engines' KV events instead of one guessed from its own picks: the
 * `precise-prefix-cache-producer` supplies the prefix-match information that both the
 * `prefix-cache-affinity-filter` and the `inflight-load-producer` read (their
 * `prefixMatchInfoProducerName: precise-prefix-cache-producer`), and prompts are counted in the
 * model's tokens (a `token-producer` with a tokenizer, not the 4-bytes-per-token estimate).
 *
 *   healthy → prefix-cache-affinity filter → token-load or active-request scorer → max-score picker
 *
 *   share    = leading full prompt blocks the worker holds, each weighted by its tier (gpu 1,
 *              cpuWeight in host memory, storageWeight on disk), / the prompt's full blocks, from
 *              the KV-event-fed index (usesKvEvents), at the workers' block size
 *   uncached = prompt tokens − matched blocks · block size
 *
 * Everything else (the gate, τ, the two scorers and the auto choice between them) as llm-d.ts.
 * With speculativeIndexing the prompt's blocks are also entered at the chosen worker at pick time,
 * for speculativeTtlMs.
 *
 * Defaults as published:
 * - llm-d/llm-d-router @ ebab6879: the sticky knobs as in llm-d.ts; the producer wiring as in its
 *   `pkg/epp/framework/plugins/scheduling/filter/prefixcacheaffinity/README.md` and the P/D
 *   configurations llm-d ships (prefill profile: precise-prefix-cache-producer →
 *   inflight-load-producer → prefix-cache-affinity-filter → token-load-scorer);
 *   `pkg/epp/framework/plugins/requestcontrol/dataproducer/preciseprefixcache/` (README.md,
 *   producer.go: speculativeIndexing false, speculativeTTL 2 s);
 * - llm-d/llm-d-kv-cache `pkg/kvcache/kvblock/token_processor.go` (block size 16 by default, full
 *   blocks only) and `pkg/kvcache/kvblock_scorer.go` (LongestPrefix: consecutive matches from the
 *   first block, each matched block adding its medium's weight) with the tier weights of
 *   `DefaultKVCacheBackendConfig` (pkg/kvcache: gpu 1.0, cpu 0.8, storage 0.3).
 * Blocks are the workers' own (16 on vLLM), the library default.
 */
import { z } from 'zod';
import { tierCredit } from '../../kv/tiers.js';
import { PrefixIndex } from '../index/prefix-index.js';
import { PrefixMatcher } from '../index/prefix-match.js';
import type { PipelinePolicy } from '../pipeline.js';
import { promptLength, type PolicyDefinition } from '../types.js';
import { booleanKnob, indexKnobs, numberKnob } from './knobs.js';
import { llmdStickyKnobs, stickyUntilSaturated } from './llm-d.js';

export const llmdPreciseOptions = z.strictObject({
  ...llmdStickyKnobs,
  cpuWeight: numberKnob(0.8, 'prefix credit of a block held in host memory, a GPU block being 1 (kvCacheBackendConfigs "cpu")', { max: 1 }),
  storageWeight: numberKnob(0.3, 'prefix credit of a block held on disk, a GPU block being 1 (kvCacheBackendConfigs "storage")', { max: 1 }),
  speculativeIndexing: booleanKnob(false, "enter the prompt's blocks at the chosen worker at pick time (speculativeIndexing)"),
  speculativeTtlMs: numberKnob(2000, 'lifetime of a speculative entry, ms (speculativeTTL)', { min: 1, infinite: true }),
  indexMaxBytes: indexKnobs.indexMaxBytes,
  maxWorkers: indexKnobs.maxWorkers,
});

export type LlmdPreciseOptions = z.output<typeof llmdPreciseOptions>;

function createLlmdPrecisePolicy(o: LlmdPreciseOptions): PipelinePolicy {
  const index = new PrefixIndex({
    maxBytes: o.indexMaxBytes,
    maxWorkers: o.maxWorkers,
    predictedTtlMs: o.speculativeTtlMs,
  });
  const matcher = new PrefixMatcher(index);
  return stickyUntilSaturated(
    'llm-d-precise',
    o,
    {
      index,
      matches: (req, ws, ctx) => matcher.matches(req, ws, ctx),
      inputTokens: promptLength,
      uncached: (req, x) => Math.max(0, promptLength(req) - x.blocks * x.blockSize),
      share: (x) => (x.promptBlocks > 0 ? tierCredit(x.tiers, { host: o.cpuWeight, disk: o.storageWeight }) / x.promptBlocks : 0),
      prepare: (req, ws) => matcher.prehash(req, ws),
      usesKvEvents: true,
      ...(o.speculativeIndexing ? { record: (req, w, now) => matcher.predict(req, w, now, { confirmed: false }) } : {}),
    },
    ['speculativeIndexing', 'speculativeTtlMs', 'indexMaxBytes', 'maxWorkers'],
  );
}

export const llmdPrecisePolicy: PolicyDefinition<typeof llmdPreciseOptions> = {
  name: 'llm-d-precise',
  description:
    "llm-d router's default (sticky until saturated) on a KV-event-fed prefix index: prefix-cache-affinity filter on precise, tier-weighted matches, then token-load or active-request scorer.",
  options: llmdPreciseOptions,
  create: createLlmdPrecisePolicy,
};
