/**
 * Filter `healthy`: keeps the workers whose health probes pass and whose circuit breaker is
 * closed and that passive outlier detection does not suspect (WorkerState.healthy && !circuitOpen
 * && !suspected). No options. Every built-in policy runs it first.
 */
import type { Filter } from '../types.js';

export const healthyFilter: Filter = {
  name: 'healthy',
  filter: (_req, workers) => workers.filter((w) => w.healthy && !w.circuitOpen && !w.suspected),
};
