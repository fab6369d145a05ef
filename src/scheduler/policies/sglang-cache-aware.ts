/**
 * Policy `sglang-cache-aware`: a baseline modelled on SGLang's router `cache_aware` policy, with
 * the defaults it publishes, built from the same pipeline as kvgate's policies so a side-by-side
 * benchmark compares policies, not plumbing.
 */
import type { WorkerState } from '../../fleet/worker-state.js';
import { healthyFilter } from '../filters/healthy.js';
import { CharRadixTree } from '../index/char-radix-tree.js';
import { argminRandom } from '../pickers/argmin-random.js';
import { PipelinePolicy } from '../pipeline.js';
import type { Pick, Picker, PolicyDefinition, PolicyOptions, ScoredWorker } from '../types.js';
import { numberOption } from './options.js';

const pickOf = (c: ScoredWorker | null, reason: string): Pick | null => c && { worker: c, reason };

export interface SglangParams {
  /** Imbalance needs max − min in-flight above this (default 64)… */
  balanceAbsThreshold: number;
  /** …and max above this × min (default 1.5). */
  balanceRelThreshold: number;
  /** Matched characters / prompt characters above this → best match (default 0.3). */
  cacheThreshold: number;
  /** Every this many ms, trim each worker's tree (default 120 s)… */
  evictionIntervalMs: number;
  /** …to at most this many characters (default 2^26). */
  maxTreeSize: number;
}

/**
 * Modelled on SGLang's router `cache_aware` policy (sgl-project/sglang router, now
 * lightseekorg/smg `model_gateway/src/policies/cache_aware.rs`). Load is the router's own
 * in-flight count per worker. If the load is imbalanced (max − min > balance_abs_threshold and
 * max > balance_rel_threshold · min) the least loaded worker wins outright. Otherwise the prompt's
 * characters are matched against one approximate radix tree per worker: a match rate above
 * cache_threshold sends it to the best match, else to the least loaded. The prompt is inserted
 * into the chosen worker's tree; every eviction_interval each tree is trimmed LRU-first to
 * max_tree_size characters. Ties break at random.
 */
export function createSglangPolicy(o?: PolicyOptions): PipelinePolicy {
  const p: SglangParams = {
    balanceAbsThreshold: numberOption(o, 'balanceAbsThreshold', 64, 0),
    balanceRelThreshold: numberOption(o, 'balanceRelThreshold', 1.5, 0),
    cacheThreshold: numberOption(o, 'cacheThreshold', 0.3, 0),
    evictionIntervalMs: numberOption(o, 'evictionIntervalMs', 120_000, 0),
    maxTreeSize: numberOption(o, 'maxTreeSize', 2 ** 26, 0),
  };
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

export const sglangCacheAwarePolicy: PolicyDefinition = {
  name: 'sglang-cache-aware',
  description: 'SGLang router cache_aware: character radix tree per worker, least in-flight when imbalanced (64 / 1.5), best match above 0.3.',
  create: createSglangPolicy,
};
