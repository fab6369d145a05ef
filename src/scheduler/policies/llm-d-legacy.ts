/**
 * Policy `llm-d-legacy`: the llm-d router's weighted blend, its default until August 2026 and now
 * called its legacy profile (llm-d/llm-d.github.io @ 9a8058f7,
 * `blog/2026-08-17_sticky-until-saturated-token-aware-routing.mdx`, "legacy blend"). Built from
 * the same pipeline as kvgate's policies so a side-by-side benchmark compares policies, not
 * plumbing. Scorers as in llm-d/llm-d-router @ ebab6879
 * `pkg/epp/framework/plugins/scheduling/scorer/{queuedepth,kvcacheutilization,prefix,nohitlru}/`
 * (llm-d-plugins.ts):
 *
 *   healthy → queue-scorer · queueWeight + kv-cache-utilization-scorer · kvCacheWeight
 *             + prefix-cache-scorer · prefixWeight + no-hit-lru-scorer · noHitLruWeight
 *             → max-score picker (random tie-break)
 *
 *   queue      = (max waiting − waiting) / (max − min) over the candidates; 1 if all equal
 *   kv         = 1 − KV usage
 *   prefix     = matched blocks / prompt blocks
 *   no-hit-lru = 0.5 everywhere if any candidate holds a block of the prompt; else by when each
 *                candidate last took such a cold request, never first: 1 − rank / (N − 1)
 *
 * Defaults: the blend as llm-d shipped it, llm-d/llm-d @ 29b59cbd
 * `guides/optimized-baseline/scheduler/optimized-baseline.values.yaml` (queue-scorer 2,
 * kv-cache-utilization-scorer 2, prefix-cache-scorer 3, no-hit-lru-scorer 2), the blend the blog
 * benchmarks as "legacy". The router's built-in profile with no configuration
 * (llm-d-router @ ebab6879 `pkg/epp/config/loader/defaults.go`, and the Helm chart's
 * `config/charts/routerlib/templates/_config.yaml` default-plugins.yaml) is the same without
 * no-hit-lru: `--set llm-d-legacy.noHitLruWeight=0`. Metrics refreshed every 50 ms
 * (`pkg/epp/server/options.go`); the max-score picker shuffles before the max
 * (`.../picker/maxscore/picker.go`).
 *
 * With loraWeight > 0 (0 by default) a lora-affinity-scorer joins them, as in the profiles llm-d
 * and the Gateway API Inference Extension configure for LoRA fleets.
 *
 * The prefix scorer's index is approximate and learned only from its own picks (llmdApproxPrefix):
 * a per-pod LRU of chained block hashes (seeded by model name) over blocks of blockSizeTokens
 * tokens estimated at bytesPerToken characters each. The metrics it reads are the last scrape as
 * is (no dispatches since), polled every scrapeIntervalMs.
 */
import { z } from 'zod';
import { healthyFilter } from '../filters/healthy.js';
import { maxScorePicker } from '../pickers/max-score.js';
import { PipelinePolicy } from '../pipeline.js';
import { prefixFractionScorer } from '../scorers/prefix-fraction.js';
import type { PolicyDefinition } from '../types.js';
import { numberKnob, retuneInPlace } from './knobs.js';
import { llmdApproxKnobs, llmdApproxPrefix, llmdKvCacheScorer, llmdLoraAffinityScorer, llmdQueueScorer, noHitLruScorer } from './llm-d-plugins.js';

export const llmdLegacyOptions = z.strictObject({
  ...llmdApproxKnobs,
  queueWeight: numberKnob(2, 'weight of queue-scorer (fewest waiting)'),
  kvCacheWeight: numberKnob(2, 'weight of kv-cache-utilization-scorer (1 − KV usage)'),
  prefixWeight: numberKnob(3, 'weight of prefix-cache-scorer (matched / prompt blocks)'),
  noHitLruWeight: numberKnob(2, 'weight of no-hit-lru-scorer (a cold request to the worker least recently sent one); 0: the router’s built-in profile'),
  lruSize: numberKnob(1024, 'no-hit-lru-scorer: workers its LRU tracks (lruSize)', { min: 1 }),
  loraWeight: numberKnob(0, 'weight of lora-affinity-scorer (adapter running there 1, a free slot 0.8, waiting 0.6); 0: not in the profile, as by default'),
  scrapeIntervalMs: numberKnob(50, 'metrics refresh interval the policy asks for, ms', { min: 1 }),
});

export type LlmdLegacyOptions = z.output<typeof llmdLegacyOptions>;

function createLlmdLegacyPolicy(o: LlmdLegacyOptions): PipelinePolicy {
  const approx = llmdApproxPrefix(o);
  const noHit = noHitLruScorer(approx.matches, o.lruSize);
  const scorers = [
    { scorer: llmdQueueScorer, weight: o.queueWeight },
    { scorer: llmdKvCacheScorer, weight: o.kvCacheWeight },
    { scorer: prefixFractionScorer(approx.matches), weight: o.prefixWeight },
    { scorer: noHit.scorer, weight: o.noHitLruWeight },
    { scorer: llmdLoraAffinityScorer, weight: o.loraWeight },
  ];
  const weights = () => [o.queueWeight, o.kvCacheWeight, o.prefixWeight, o.noHitLruWeight, o.loraWeight];
  return new PipelinePolicy({
    name: 'llm-d-legacy',
    filters: [healthyFilter],
    scorers,
    // The weights change in place; the block and index shape, the LRU and the polling interval do not.
    retune(next) {
      if (!retuneInPlace(o, next, ['blockSizeTokens', 'bytesPerToken', 'indexMaxBytes', 'maxWorkers', 'lruSize', 'scrapeIntervalMs'])) return false;
      weights().forEach((w, i) => (scorers[i]!.weight = w));
      return true;
    },
    picker: maxScorePicker,
    scrapeIntervalMs: o.scrapeIntervalMs,
    prefixIndex: approx.index,
    onDispatch(req, d, ctx) {
      noHit.dispatched(req, d.worker);
      approx.record(req, d.worker, ctx.now);
    },
  });
}

export const llmdLegacyPolicy: PolicyDefinition<typeof llmdLegacyOptions> = {
  name: 'llm-d-legacy',
  description:
    'llm-d router legacy weighted blend (its default before sticky-until-saturated): queue ×2, kv-cache-utilization ×2, approximate prefix-cache ×3, no-hit-lru ×2, max-score picker, fast metrics polling.',
  options: llmdLegacyOptions,
  create: createLlmdLegacyPolicy,
};
