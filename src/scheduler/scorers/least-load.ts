/**
 * Scorer `load` (least-load): fewest requests at the worker.
 *
 *   load(w)   = in-flight count if the snapshot is stale, else
 *               max(snapshot running + waiting + dispatched since, in-flight count)
 *   rating(w) = (max load − load(w)) / (max load − min load) over the candidates; 1 if all equal
 *
 * Inputs: WorkerState snapshot and the gateway's in-flight accounting. No options.
 */
import type { WorkerState } from '../../fleet/worker-state.js';
import type { RoutingContext, Scorer } from '../types.js';

/** Requests at the worker as best known: snapshot running + waiting (+ dispatched since), or in-flight. */
function queueLoad(w: WorkerState, ctx: RoutingContext): number {
  const q = w.estimatedQueue(ctx.now, ctx.staleAfterMs);
  return q.running + q.waiting;
}

/**
 * Least-load: fewest running + waiting requests from the last scrape plus the gateway's own
 * in-flight count, min-max normalised across the candidates (all equal → 1).
 */
export const leastLoadScorer: Scorer = {
  name: 'load',
  score(_req, workers, ctx) {
    const loads = workers.map((w) => {
      const stale = w.isStale(ctx.now, ctx.staleAfterMs);
      return stale ? w.inflightCount : Math.max(queueLoad(w, ctx), w.inflightCount);
    });
    return minMaxLow(loads);
  },
};

/** Map values to [0,1] so the lowest value scores 1 and the highest 0; all equal → all 1. */
function minMaxLow(values: readonly number[]): number[] {
  let min = Infinity;
  let max = -Infinity;
  for (const v of values) {
    if (v < min) min = v;
    if (v > max) max = v;
  }
  const span = max - min;
  return values.map((v) => (span > 0 ? (max - v) / span : 1));
}
