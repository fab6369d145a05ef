import type { Filter } from './types.js';

/** Drops workers whose health probes fail or whose circuit breaker is open. */
export const healthyFilter: Filter = {
  name: 'healthy',
  filter: (_req, workers) => workers.filter((w) => w.healthy && !w.circuitOpen),
};
