/**
 * Filter `kv-fit`: drops workers that cannot take the request without evicting blocks in use.
 *
 *   need(w) = ⌈uncached prompt tokens / blockSize⌉
 *             + sequences × ⌈min(maxTokens, RESERVE_OUTPUT_TOKENS_CAP) / blockSize⌉
 *   (a batch's prompts all counted, each sequence — a prompt's n answers — its own output blocks)
 *   free(w) = free blocks of the last snapshot minus what was reserved there since
 *             (WorkerState.estimatedFreeBlocks; with stale metrics, capacity minus the gateway's
 *             own in-flight reservations, flagged USED_STALE_METRICS); exact: the engine's probe
 *   keep w if need(w) ≤ free(w)
 *
 * Cached-but-unused blocks count as free, as in vLLM's kv usage; the cached prompt tokens come
 * from the prefix matcher (exact: the probe), none without one.
 *
 * If nobody fits now but some worker could when idle, the request is not refused: queueing at the
 * engine beats a 503. The filter flags KV_OVERFULL and, by `whenNoneFits`, keeps every worker that
 * could hold it ('all', the scorers then weigh headroom against cache) or only those within
 * `overfullSlackBlocks` of the least overfull ('least-overfull'). A worker could hold the prompt
 * when ⌈prompt tokens / blockSize⌉ + 1 ≤ numGpuBlocks (the engine's own admission rule); a request
 * no worker could ever hold is what `neverFits` explains, and the pipeline answers 400
 * context_length_exceeded.
 *
 * With rule 'ever' the filter only drops workers that could never hold the prompt and marks those
 * with room now (KV_ROOM) for the picker to prefer (the kvgate policy's default, see its `kvFit`
 * option).
 *
 * Options: rule, whenNoneFits, overfullSlackBlocks, exact (set by the policy that uses it).
 */
import { blockKeysOf } from '../../kv/prompt-blocks.js';
import type { WorkerState } from '../../fleet/worker-state.js';
import type { PrefixMatcher } from '../index/prefix-match.js';
import { RESERVE_OUTPUT_TOKENS_CAP } from '../router.js';
import { KV_OVERFULL, KV_ROOM, USED_STALE_METRICS } from '../state-keys.js';
import { requestSequences, uncachedRequestTokens, type Filter, type RouteRequest, type RoutingContext } from '../types.js';

export interface KvFitOptions {
  /**
   * 'now' (the default): keep the workers with room now, as above. 'ever': keep every worker that
   * could hold the prompt when idle, room now or not, and leave room to the policy: KV_ROOM holds
   * the kept workers with room now when only some have it, KV_OVERFULL flags a decision where
   * none had.
   */
  rule?: 'now' | 'ever';
  /** With rule 'now', when no worker has room now. */
  whenNoneFits: 'all' | 'least-overfull';
  /** With 'least-overfull': keep workers within this many blocks of the least overfull. */
  overfullSlackBlocks: number;
  /** Read cache and free blocks from WorkerState.oracle where present (the `oracle` policy). */
  exact?: boolean;
}

export interface KvFitFilter extends Filter {
  neverFits(req: RouteRequest, workers: readonly WorkerState[], ctx: RoutingContext): string | null;
}

/** Blocks a request needs at `w` given `cachedTokens` of its prompt already there. */
export function blocksNeeded(req: RouteRequest, w: WorkerState, cachedTokens: number): number {
  const bs = w.blockSize;
  // A batch's prompts and each of its sequences' output (RouteRequest.sequences).
  const uncached = uncachedRequestTokens(req, req.promptTokens.length, cachedTokens);
  return Math.ceil(uncached / bs) + requestSequences(req) * Math.ceil(Math.min(req.maxTokens, RESERVE_OUTPUT_TOKENS_CAP) / bs);
}

/** Can the prompt ever be held by `w` (the engine's own admission rule: prompt blocks + 1)? */
function couldEverFit(req: RouteRequest, w: WorkerState): boolean {
  return Math.ceil(req.promptTokens.length / w.blockSize) + 1 <= w.numGpuBlocks;
}

export function kvFitFilter(matcher: PrefixMatcher | null, opts: KvFitOptions): KvFitFilter {
  return {
    name: 'kv-fit',
    filter(req, workers, ctx) {
      const matches = matcher?.matches(req, workers, ctx);
      const fits: WorkerState[] = [];
      const possible: WorkerState[] = [];
      const over: number[] = [];
      let stale = false;
      for (const w of workers) {
        if (!couldEverFit(req, w)) continue;
        possible.push(w);
        const probe = opts.exact ? w.oracle : undefined;
        if (!probe && w.isStale(ctx.now, ctx.staleAfterMs)) stale = true;
        const cached = probe ? probe.cachedPrefixTokens(req.promptTokens, blockKeysOf(req.state)) : (matches?.get(w)?.tokens ?? 0);
        const need = blocksNeeded(req, w, cached);
        const free = probe ? probe.freeBlocks() : w.estimatedFreeBlocks(ctx.now, ctx.staleAfterMs);
        over.push(need - free);
        if (need <= free) fits.push(w);
      }
      if (stale) req.state.set(USED_STALE_METRICS, true);
      if (opts.rule === 'ever') {
        if (fits.length === 0 && possible.length > 0) req.state.set(KV_OVERFULL, true);
        else if (fits.length < possible.length) req.state.set(KV_ROOM, new Set(fits));
        return possible.length === workers.length ? workers : possible;
      }
      if (fits.length > 0) return fits.length === workers.length ? workers : fits;
      if (possible.length === 0) return [];
      req.state.set(KV_OVERFULL, true);
      if (opts.whenNoneFits === 'all') return possible;
      let least = Infinity;
      for (const o of over) if (o < least) least = o;
      return possible.filter((_, i) => over[i]! <= least + opts.overfullSlackBlocks);
    },
    neverFits(req, workers) {
      if (workers.length === 0 || workers.some((w) => couldEverFit(req, w))) return null;
      let largest = workers[0]!;
      for (const w of workers) if (w.numGpuBlocks * w.blockSize > largest.numGpuBlocks * largest.blockSize) largest = w;
      const capacity = largest.numGpuBlocks * largest.blockSize;
      return (
        `The prompt (${req.promptTokens.length} tokens) does not fit in the KV cache of any worker ` +
        `serving model '${req.model}' (largest: ${largest.numGpuBlocks} blocks of ${largest.blockSize} ` +
        `tokens = ${capacity} tokens). Please reduce the length of the prompt.`
      );
    },
  };
}
