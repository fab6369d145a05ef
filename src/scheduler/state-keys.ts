/**
 * Request-state keys several plugins share: flags the filters and producers raise and the
 * pipeline or a picker reads. Keys owned by one plugin are declared beside it instead.
 */
import type { WorkerState } from '../fleet/worker-state.js';
import { stateKey } from '../util/state.js';

/**
 * Set by a plugin that found a candidate's metrics snapshot stale and fell back to the
 * gateway's own in-flight accounting; the pipeline reports it as RouteDecision.usedStaleMetrics.
 */
export const USED_STALE_METRICS = stateKey<true>('used-stale-metrics');

/**
 * Set by the KV-fit filter when no candidate had room for the request now and it kept workers
 * that could hold it once idle (the request will queue at the engine).
 */
export const KV_OVERFULL = stateKey<true>('kv-overfull');

/**
 * Set by the KV-fit filter with rule 'ever' when some but not all of the candidates it kept have
 * room for the request now: those. The kvgate picker prefers them while they cost little more.
 */
export const KV_ROOM = stateKey<ReadonlySet<WorkerState>>('kv-room');
