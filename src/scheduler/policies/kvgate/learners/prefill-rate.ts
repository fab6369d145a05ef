/**
 * Learner `prefill-rate`: the prefill throughput of each speed class (WorkerState.speedClass: a
 * pool's workers of one declared `hardware`, or unlabelled, of about one KV capacity), learned
 * from the time to first token of the requests sent there.
 *
 *   observed = 1000 · (ahead + uncached) / (first token − dispatch)     tokens/s
 *   rate    += learnAlpha · (clamp(observed, base / 10, base · 10) − rate),  base = prefillTokensPerSec
 *
 * Learned per speed class, not per worker: what a first token measures is not the worker's speed
 * alone but how the policy loaded it (a burst's prefills share one step and look fast; a lone short
 * suffix waits out the steps in flight and looks slow). A rate per worker feeds back on the
 * placement: the worker that looks fastest draws the next burst and keeps looking fast. How loaded
 * each worker is, is the estimate's queue and batch terms' business; the hardware is the class's.
 *
 * Hooks: onDispatch (the dispatch time), onFirstToken (learn). Knobs: learnPrefillRate,
 * learnAlpha, learnMinTokens, prefillTokensPerSec.
 */
import type { WorkerState } from '../../../../fleet/worker-state.js';
import { stateKey } from '../../../../util/state.js';
import type { RouteRequest, RoutingContext } from '../../../types.js';
import { kvgateEstimate } from '../estimate.js';
import type { KvgateOptions } from '../knobs.js';

/** Clock time the request was dispatched (written at dispatch, read at its first token). */
const DISPATCHED_AT = stateKey<number>('kvgate.dispatched-at');

/** How far a learned rate may stray from the configured one, either way (a factor). */
const RATE_RANGE = 10;

export class PrefillRateLearner {
  /** Learned prefill throughput per speed class, tokens/s. */
  readonly rates = new Map<string, number>();

  constructor(private readonly params: () => KvgateOptions) {}

  /** The class's learned rate, else the configured one, tokens/s. */
  rate(w: WorkerState): number {
    return this.rates.get(w.speedClass) ?? this.params().prefillTokensPerSec;
  }

  learned(w: WorkerState): boolean {
    return this.rates.has(w.speedClass);
  }

  onDispatch(req: RouteRequest, ctx: RoutingContext): void {
    req.state.set(DISPATCHED_AT, ctx.now);
  }

  /** Learn from the time to first token of a request that timed one prefill (streamed, one sequence). */
  onFirstToken(req: RouteRequest, w: WorkerState, ctx: RoutingContext): void {
    const p = this.params();
    if (!p.learnPrefillRate) return;
    const est = kvgateEstimate(req, w);
    const at = req.state.get(DISPATCHED_AT);
    if (!est || at === undefined) return;
    const tokens = est.aheadTokens + est.uncachedTokens;
    const elapsedMs = ctx.now - at;
    if (tokens < p.learnMinTokens || elapsedMs <= 0) return;
    const observed = (1000 * tokens) / elapsedMs;
    const base = p.prefillTokensPerSec;
    const clamped = Math.min(base * RATE_RANGE, Math.max(base / RATE_RANGE, observed));
    const prev = this.rate(w);
    this.rates.set(w.speedClass, prev + p.learnAlpha * (clamped - prev));
  }
}
