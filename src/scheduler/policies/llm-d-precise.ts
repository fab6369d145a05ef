/**
 * Policy `llm-d-precise`: a baseline modelled on the llm-d router's precise prefix-cache profile,
 * where the prefix scorer reads an index fed by the engines' KV events instead of guessing from
 * its own picks (`llm-d` is the default, approximate profile). Built from the same pipeline as
 * kvgate's policies so a side-by-side benchmark compares policies, not plumbing.
 *
 *   healthy → prefix-cache-scorer · prefixWeight + kv-cache-utilization-scorer · kvCacheWeight
 *             + queue-scorer · queueWeight → max-score picker (random tie-break)
 *
 *   prefix = leading full prompt blocks the worker holds, each weighted by its tier (gpu 1,
 *            cpuWeight in host memory, storageWeight on disk), / the prompt's full blocks, from
 *            the KV-event-fed index (usesKvEvents), at the workers' block size
 *   kv     = 1 − KV usage;   queue = (max waiting − waiting) / (max − min), 1 if all equal
 *
 * The metrics are the last scrape as is, polled every scrapeIntervalMs. With speculativeIndexing
 * the prompt's blocks are also entered at the chosen worker at pick time, for speculativeTtlMs.
 *
 * Defaults as published:
 * - llm-d/llm-d-router `deploy/config/epp-precise-prefix-cache-config.yaml` (the precise profile:
 *   precise-prefix-cache producer → prefix-cache-scorer weight 2, kv-cache-utilization-scorer 1,
 *   queue-scorer 1, max-score-picker; the same weights in llm-d-inference-scheduler's earlier
 *   single-plugin `precise-prefix-cache-scorer` profile);
 * - llm-d/llm-d-router `pkg/epp/framework/plugins/requestcontrol/dataproducer/preciseprefixcache/`
 *   (README.md, producer.go: speculativeIndexing false, speculativeTTL 2 s) and
 *   `pkg/epp/framework/plugins/scheduling/scorer/prefix/plugin.go` (score = match blocks / total
 *   blocks; matchLengthWeight 0);
 * - llm-d/llm-d-kv-cache `pkg/kvcache/kvblock/token_processor.go` (block size 16 by default, full
 *   blocks only) and `pkg/kvcache/kvblock_scorer.go` (LongestPrefix: consecutive matches from the
 *   first block, each matched block adding its medium's weight) with the tier weights of
 *   `DefaultKVCacheBackendConfig` (pkg/kvcache: gpu 1.0, cpu 0.8, storage 0.3, by the lowercased
 *   event medium);
 * - llm-d/llm-d-router `pkg/epp/datalayer/runtime.go` (metrics refreshed every 50 ms).
 * The sample profile hashes 64-token blocks from the events' token ids whatever the engine's block
 * size; here blocks are the workers' own (16 on vLLM), the library default.
 */
import { z } from 'zod';
import { healthyFilter } from '../filters/healthy.js';
import { PrefixIndex } from '../index/prefix-index.js';
import { PrefixMatcher } from '../index/prefix-match.js';
import { maxScorePicker } from '../pickers/max-score.js';
import { PipelinePolicy } from '../pipeline.js';
import { prefixFractionScorer } from '../scorers/prefix-fraction.js';
import type { PolicyDefinition } from '../types.js';
import { booleanKnob, indexKnobs, numberKnob, retuneInPlace } from './knobs.js';
import { llmdKvCacheScorer, llmdQueueScorer } from './llm-d.js';

export const llmdPreciseOptions = z.strictObject({
  prefixWeight: numberKnob(2, 'weight of prefix-cache-scorer (matched / prompt blocks, from KV events)'),
  kvCacheWeight: numberKnob(1, 'weight of kv-cache-utilization-scorer (1 − KV usage)'),
  queueWeight: numberKnob(1, 'weight of queue-scorer (fewest waiting)'),
  cpuWeight: numberKnob(0.8, 'prefix credit of a block held in host memory, a GPU block being 1 (kvCacheBackendConfigs "cpu")', { max: 1 }),
  storageWeight: numberKnob(0.3, 'prefix credit of a block held on disk, a GPU block being 1 (kvCacheBackendConfigs "storage")', { max: 1 }),
  speculativeIndexing: booleanKnob(false, "enter the prompt's blocks at the chosen worker at pick time (speculativeIndexing)"),
  speculativeTtlMs: numberKnob(2000, 'lifetime of a speculative entry, ms (speculativeTTL)', { min: 1, infinite: true }),
  indexMaxBytes: indexKnobs.indexMaxBytes,
  maxWorkers: indexKnobs.maxWorkers,
  scrapeIntervalMs: numberKnob(50, 'metrics refresh interval the policy asks for, ms', { min: 1 }),
});

export type LlmdPreciseOptions = z.output<typeof llmdPreciseOptions>;

function createLlmdPrecisePolicy(o: LlmdPreciseOptions): PipelinePolicy {
  const index = new PrefixIndex({
    maxBytes: o.indexMaxBytes,
    maxWorkers: o.maxWorkers,
    predictedTtlMs: o.speculativeTtlMs,
  });
  const matcher = new PrefixMatcher(index);
  const prefixScorer = prefixFractionScorer((req, ws, ctx) => matcher.matches(req, ws, ctx), () => ({ host: o.cpuWeight, disk: o.storageWeight }));
  const scorers = [
    { scorer: prefixScorer, weight: o.prefixWeight },
    { scorer: llmdKvCacheScorer, weight: o.kvCacheWeight },
    { scorer: llmdQueueScorer, weight: o.queueWeight },
  ];
  return new PipelinePolicy({
    name: 'llm-d-precise',
    prepare: (req, ws) => matcher.prehash(req, ws),
    filters: [healthyFilter],
    scorers,
    // The weights change in place; the index, speculative indexing and the polling interval do not.
    retune(next) {
      if (!retuneInPlace(o, next, ['speculativeIndexing', 'speculativeTtlMs', 'indexMaxBytes', 'maxWorkers', 'scrapeIntervalMs'])) return false;
      [scorers[0]!.weight, scorers[1]!.weight, scorers[2]!.weight] = [o.prefixWeight, o.kvCacheWeight, o.queueWeight];
      return true;
    },
    picker: maxScorePicker,
    scrapeIntervalMs: o.scrapeIntervalMs,
    prefixIndex: index,
    usesKvEvents: true,
    ...(o.speculativeIndexing
      ? {
          onDispatch(req, d, ctx) {
            matcher.predict(req, d.worker, ctx.now);
          },
        }
      : {}),
  });
}

export const llmdPrecisePolicy: PolicyDefinition<typeof llmdPreciseOptions> = {
  name: 'llm-d-precise',
  description:
    'llm-d router precise prefix-cache profile: prefix-cache scorer on a KV-event-fed index ×2, kv-cache-utilization ×1, queue ×1, max-score picker, fast metrics polling.',
  options: llmdPreciseOptions,
  create: createLlmdPrecisePolicy,
};
