/**
 * Filter `healthy`: keeps the workers whose health probes pass, whose circuit breaker is closed
 * and which are not draining (WorkerState.routable); among them, those passive outlier detection does not suspect (WorkerState.suspected) —
 * unless it suspects them all, in which case they are kept: suspicion is a soft signal, never a
 * reason to refuse a request that a worker may yet serve (Envoy's outlier detection has the same
 * guard, max_ejection_percent). No options. Every built-in policy runs it first.
 */
import type { Filter } from '../types.js';

export const healthyFilter: Filter = {
  name: 'healthy',
  filter: (_req, workers) => {
    // Nearly always every worker is up and trusted: the same candidates, no new array.
    let keepAll = true;
    for (const w of workers) {
      if (!w.routable || w.suspected) {
        keepAll = false;
        break;
      }
    }
    if (keepAll) return workers;
    const up = workers.filter((w) => w.routable);
    if (!up.some((w) => w.suspected)) return up;
    const trusted = up.filter((w) => !w.suspected);
    return trusted.length > 0 ? trusted : up;
  },
};
