/**
 * Policy `sglang-cache-aware`: a baseline modelled on SGLang's router `cache_aware` policy over
 * HTTP workers (the text path), built from the same pipeline as kvgate's policies so a
 * side-by-side benchmark compares policies, not plumbing.
 *
 *   healthy → sglang-cache-aware picker
 *
 * Load is the router's own in-flight count per worker. If the pool is imbalanced the least loaded
 * worker wins outright ('least-load'). Imbalanced is any of three triggers (#1621):
 * - overload: the highest KV usage among the workers' last scrapes > overloadTokenUsageThreshold;
 * - KV spread: the highest KV usage − the lowest > balanceTokenUsageThreshold;
 * - count spread: max − min in-flight > balanceAbsThreshold and max > balanceRelThreshold · min.
 * The two KV triggers read only workers with a scrape, and are off at their default 1.0 (usage is
 * at most 1, so "> 1" never holds). Otherwise the prompt's characters are matched against one radix tree per model
 * shared by all workers (index/char-radix-tree.ts): a match rate above cacheThreshold sends the
 * request to the worker the match resolves to — the owner of the deepest matched node, i.e. the
 * worker that first sent that prefix, for as long as it still holds it ('prefix'; sticky: among
 * workers holding the same prefix it is not the least loaded that wins). If that worker cannot
 * take the request (unhealthy, or excluded by a retry) the first candidate gets it without being
 * recorded ('fallback'). Below the threshold the least loaded worker wins. Ties between equally
 * loaded workers go to the one routed the fewest requests so far, then to the first listed. The
 * prompt is inserted under the chosen worker at dispatch; every evictionIntervalMs each worker's
 * share of the trees is trimmed LRU-first to maxTreeSize characters. The expected hit is the
 * picked worker's own matched share of the prompt's characters.
 *
 * Defaults and rules as published in lightseekorg/smg (SGLang's router, moved out of
 * sgl-project/sglang `sgl-model-gateway/src/policies/`):
 * - `model_gateway/src/main.rs` (CLI defaults): cache_threshold 0.3, balance_abs_threshold 64,
 *   balance_rel_threshold 1.5, eviction_interval 120 s, max_tree_size 2^26 (the library's
 *   CacheAwareConfig::default in `model_gateway/src/policies/mod.rs` is 0.5/32/1.1/30 s/10,000,
 *   but the router binary and the Python launcher start from the CLI's);
 *   balance_token_usage_threshold 1.0 and overload_token_usage_threshold 1.0, i.e. off.
 * - `model_gateway/src/policies/cache_aware.rs` @ 73da68ca9472 (select_worker, is_imbalanced,
 *   backend_token_usage_bounds, select_worker_with_text, select_worker_min_load): the three
 *   imbalance triggers (KV usage from the workers' load poll, lightseekorg/smg#1621), the match-rate rule, the (load, processed
 *   requests, index) tie-break of the least loaded (#1714), the first-healthy fallback, insert for
 *   the chosen worker also when imbalanced.
 * - `crates/kv_index/src/string_tree.rs` (and sgl-project/sglang
 *   `sgl-model-gateway/src/policies/tree.rs`): the shared tree, the node's cached `last_tenant`
 *   set by the node's creator and inherited on split, the 1-in-8 match stamp,
 *   `evict_tenant_by_size`.
 * Load stays the router's own in-flight count: reading the backends' running + waiting instead (a
 * "global backlog", smg#1863) was proposed and closed unmerged; it is not in smg's main branch.
 */
import { z } from 'zod';
import { stateKey } from '../../util/state.js';
import { healthyFilter } from '../filters/healthy.js';
import { CharRadixTree } from '../index/char-radix-tree.js';
import { PipelinePolicy } from '../pipeline.js';
import type { Pick, Picker, PolicyDefinition, ScoredWorker } from '../types.js';
import { numberKnob, retuneInPlace } from './knobs.js';

/** SGLang's names in parentheses. */
export const sglangOptions = z.strictObject({
  balanceAbsThreshold: numberKnob(64, 'imbalanced when max − min in-flight exceeds this (balance_abs_threshold)…', {
    infinite: true,
  }),
  balanceRelThreshold: numberKnob(1.5, '…and max in-flight exceeds this × min (balance_rel_threshold)', { infinite: true }),
  cacheThreshold: numberKnob(0.3, 'matched / prompt characters above this send the request to the matched worker (cache_threshold)'),
  evictionIntervalMs: numberKnob(120_000, 'trim every tree this often, ms (eviction_interval)', { infinite: true }),
  maxTreeSize: numberKnob(2 ** 26, 'characters each worker keeps in a tree when trimmed (max_tree_size)', { infinite: true }),
  balanceTokenUsageThreshold: numberKnob(
    1,
    'imbalanced when the highest KV usage − the lowest exceeds this, from the last scrapes (balance_token_usage_threshold; ≥ 1: off)',
  ),
  overloadTokenUsageThreshold: numberKnob(
    1,
    "imbalanced when any worker's KV usage exceeds this, from the last scrapes (overload_token_usage_threshold; ≥ 1: off)",
  ),
});

export type SglangOptions = z.output<typeof sglangOptions>;

/** The decision was SGLang's first-healthy fallback: nothing is inserted for it. */
const SGLANG_NO_INSERT = stateKey<true>('sglang.no-insert');

/** The least loaded candidate, ties to the fewest routed so far, then the first listed. */
function leastLoaded(candidates: readonly ScoredWorker[]): ScoredWorker | null {
  let best: ScoredWorker | null = null;
  for (const c of candidates) {
    if (
      best === null ||
      c.worker.inflightCount < best.worker.inflightCount ||
      (c.worker.inflightCount === best.worker.inflightCount && c.worker.routed < best.worker.routed)
    ) {
      best = c;
    }
  }
  return best;
}

const pickOf = (c: ScoredWorker | null, reason: string): Pick | null => c && { worker: c, reason };

/** smg's is_imbalanced: the KV overload and spread triggers, then the in-flight count spread. */
function imbalanced(candidates: readonly ScoredWorker[], p: SglangOptions): boolean {
  let minUsage = Infinity;
  let maxUsage = -Infinity;
  let min = Infinity;
  let max = -Infinity;
  for (const c of candidates) {
    const usage = c.worker.snapshot?.kvUsage;
    if (usage !== undefined) {
      minUsage = Math.min(minUsage, usage);
      maxUsage = Math.max(maxUsage, usage);
    }
    min = Math.min(min, c.worker.inflightCount);
    max = Math.max(max, c.worker.inflightCount);
  }
  if (maxUsage > p.overloadTokenUsageThreshold || maxUsage - minUsage > p.balanceTokenUsageThreshold) return true;
  return max - min > p.balanceAbsThreshold && max > p.balanceRelThreshold * min;
}

function createSglangPolicy(p: SglangOptions): PipelinePolicy {
  const trees = new Map<string, CharRadixTree>();
  const tree = (model: string) => {
    let t = trees.get(model);
    if (!t) trees.set(model, (t = new CharRadixTree()));
    return t;
  };
  let lastEviction = -Infinity;
  const picker: Picker = {
    name: 'sglang-cache-aware',
    pick(req, candidates) {
      if (candidates.length === 0) return null;
      if (imbalanced(candidates, p)) return pickOf(leastLoaded(candidates), 'least-load');
      const text = req.promptText;
      const m = tree(req.model).match(text);
      const rate = text.length > 0 ? m.matched / text.length : 0;
      if (rate > p.cacheThreshold) {
        const owner = candidates.find((c) => c.worker.id === m.tenant);
        if (owner) return { worker: owner, reason: 'prefix' };
        req.state.set(SGLANG_NO_INSERT, true);
        return { worker: candidates[0]!, reason: 'fallback' };
      }
      return pickOf(leastLoaded(candidates), 'least-load');
    },
  };
  return new PipelinePolicy({
    name: 'sglang-cache-aware',
    filters: [healthyFilter],
    scorers: [],
    picker,
    // The tree counts characters; report the picked worker's matched share of the prompt.
    expectedPrefixHit: (req, picked) => {
      const t = trees.get(req.model);
      return t && req.promptText.length > 0 ? t.matchFor(req.promptText, picked.worker.id) / req.promptText.length : 0;
    },
    // Every knob is read at decision time.
    retune: (next) => retuneInPlace(p, next, []),
    onDispatch(req, d, ctx) {
      if (req.state.get(SGLANG_NO_INSERT) === true) req.state.delete(SGLANG_NO_INSERT);
      else tree(req.model).insert(req.promptText, d.worker.id);
      if (ctx.now - lastEviction >= p.evictionIntervalMs) {
        lastEviction = ctx.now;
        for (const t of trees.values()) t.evict(p.maxTreeSize);
      }
    },
  });
}

export const sglangCacheAwarePolicy: PolicyDefinition<typeof sglangOptions> = {
  name: 'sglang-cache-aware',
  description:
    'SGLang router cache_aware: shared character radix tree, least in-flight when imbalanced (in-flight spread, or KV usage when its triggers are set), else the worker that first sent the best match above a threshold.',
  options: sglangOptions,
  create: createSglangPolicy,
};
