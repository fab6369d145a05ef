/**
 * Policy `sglang-cache-aware`: a baseline modelled on SGLang's router `cache_aware` policy
 * (sgl-project/sglang `sgl-model-gateway/src/policies/cache_aware.rs`, now also
 * lightseekorg/smg `model_gateway/src/policies/cache_aware.rs`) with the defaults it publishes,
 * built from the same pipeline as kvgate's policies so a side-by-side benchmark compares
 * policies, not plumbing.
 *
 *   healthy → sglang-cache-aware picker
 *
 * Load is the router's own in-flight count per worker. If the load is imbalanced (max − min >
 * balanceAbsThreshold and max > balanceRelThreshold · min) the least loaded worker wins outright
 * ('least-load'). Otherwise the prompt's characters are matched against one approximate radix
 * tree per worker (index/char-radix-tree.ts): a match rate above cacheThreshold sends it to the
 * best match ('prefix'), else to the least loaded. The prompt is inserted into the chosen
 * worker's tree at dispatch; every evictionIntervalMs each tree is trimmed LRU-first to
 * maxTreeSize characters. Ties break at random. The expected hit is the picked worker's matched
 * share of the prompt's characters.
 */
import { z } from 'zod';
import type { WorkerState } from '../../fleet/worker-state.js';
import { healthyFilter } from '../filters/healthy.js';
import { CharRadixTree } from '../index/char-radix-tree.js';
import { argminRandom } from '../pickers/argmin-random.js';
import { PipelinePolicy } from '../pipeline.js';
import type { Pick, Picker, PolicyDefinition, ScoredWorker } from '../types.js';
import { numberKnob } from './knobs.js';

/** SGLang's names in parentheses. */
export const sglangOptions = z.strictObject({
  balanceAbsThreshold: numberKnob(64, 'imbalanced when max − min in-flight exceeds this (balance_abs_threshold)…', {
    infinite: true,
  }),
  balanceRelThreshold: numberKnob(1.5, '…and max in-flight exceeds this × min (balance_rel_threshold)', { infinite: true }),
  cacheThreshold: numberKnob(0.3, 'matched / prompt characters above this send the request to the best match (cache_threshold)'),
  evictionIntervalMs: numberKnob(120_000, 'trim every tree this often, ms (eviction_interval)', { infinite: true }),
  maxTreeSize: numberKnob(2 ** 26, 'characters each tree keeps when trimmed (max_tree_size)', { infinite: true }),
});

export type SglangOptions = z.output<typeof sglangOptions>;

const pickOf = (c: ScoredWorker | null, reason: string): Pick | null => c && { worker: c, reason };

export function createSglangPolicy(p: SglangOptions): PipelinePolicy {
  const trees = new Map<string, CharRadixTree>();
  const tree = (w: WorkerState) => {
    let t = trees.get(w.id);
    if (!t) trees.set(w.id, (t = new CharRadixTree()));
    return t;
  };
  let lastEviction = -Infinity;
  const picker: Picker = {
    name: 'sglang-cache-aware',
    pick(req, candidates, ctx) {
      if (candidates.length === 0) return null;
      const load = (c: ScoredWorker) => c.worker.inflightCount;
      let min = Infinity;
      let max = -Infinity;
      for (const c of candidates) {
        min = Math.min(min, load(c));
        max = Math.max(max, load(c));
      }
      if (max - min > p.balanceAbsThreshold && max > p.balanceRelThreshold * min) {
        return pickOf(argminRandom(candidates, load, ctx.rng), 'least-load');
      }
      const text = req.promptText;
      const matched = new Map<ScoredWorker, number>();
      for (const c of candidates) matched.set(c, tree(c.worker).match(text));
      const best = argminRandom(candidates, (c) => -matched.get(c)!, ctx.rng)!;
      const rate = text.length > 0 ? matched.get(best)! / text.length : 0;
      if (rate > p.cacheThreshold) return { worker: best, reason: 'prefix' };
      return pickOf(argminRandom(candidates, load, ctx.rng), 'least-load');
    },
  };
  return new PipelinePolicy({
    name: 'sglang-cache-aware',
    filters: [healthyFilter],
    scorers: [],
    picker,
    // The tree counts characters; report the matched share of the prompt as the expected hit.
    expectedPrefixHit: (req, picked) => {
      const t = trees.get(picked.worker.id);
      return t && req.promptText.length > 0 ? t.match(req.promptText) / req.promptText.length : 0;
    },
    onDispatch(req, d, ctx) {
      tree(d.worker).insert(req.promptText, ctx.now);
      if (ctx.now - lastEviction >= p.evictionIntervalMs) {
        lastEviction = ctx.now;
        for (const t of trees.values()) t.evict(p.maxTreeSize);
      }
    },
  });
}

export const sglangCacheAwarePolicy: PolicyDefinition<typeof sglangOptions> = {
  name: 'sglang-cache-aware',
  description: 'SGLang router cache_aware: character radix tree per worker, least in-flight when imbalanced, else the best match above a threshold.',
  options: sglangOptions,
  create: createSglangPolicy,
};
