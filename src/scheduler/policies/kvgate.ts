/**
 * Policy `kvgate`: kvgate's own, and `oracle`, the same rules on exact engine state.
 *
 *   healthy → kv-fit → kvgate-estimate (producer) →
 *   prefix · wPrefix + ttft · wTtft + headroom · wHeadroom + queue · wQueue + load · wLoad
 *     + session · wSession → kvgate picker (the load guard)
 *
 * The estimate at its centre (producers/kvgate-estimate.ts), per worker:
 *
 *   ttftMs = 1000 · (prefill tokens queued ahead + this request's uncached tokens) / prefill rate
 *            + queueMsPerWaiting · waiting + decodeMsPerRunning · running
 *
 * "Queued ahead" is the gateway's own count of prompt tokens dispatched there and not yet past
 * their first token (WorkerState.inflightPrefillTokens), so it is exact for this gateway's traffic
 * and never stale; waiting/running come from the snapshot plus dispatches since, or from the
 * gateway's in-flight count once the snapshot is stale (say so, never fail closed). The prefill
 * rate is configured per deployment and, by default, learned per worker from observed first
 * tokens (onFirstToken).
 *
 * The picker (pickers/kvgate.ts) takes the best weighted score among the workers near the lowest
 * ttft, unless the best-cached worker is worth its extra wait ('prefix'); otherwise the prefix
 * spills ('spill'). At dispatch the prompt's blocks are inserted into the index as predictions,
 * so a burst sharing a prefix co-locates before any worker reports anything, and the Router's
 * synchronous reservation makes each pick visible to the next.
 */
import type { WorkerState } from '../../fleet/worker-state.js';
import { stateKey } from '../../util/state.js';
import { healthyFilter } from '../filters/healthy.js';
import { kvFitFilter } from '../filters/kv-fit.js';
import { PrefixIndex } from '../index/prefix-index.js';
import { PrefixMatcher } from '../index/prefix-match.js';
import { kvgatePicker } from '../pickers/kvgate.js';
import { PipelinePolicy } from '../pipeline.js';
import { kvgateEstimate, kvgateEstimateProducer } from '../producers/kvgate-estimate.js';
import {
  kvgateHeadroomScorer,
  kvgateLoadScorer,
  kvgatePrefixScorer,
  kvgateQueueScorer,
  kvgateSessionScorer,
  kvgateTtftScorer,
} from '../scorers/kvgate.js';
import type {
  Policy,
  PolicyDefinition,
  PolicyOptions,
  RouteDecision,
  RouteOutcome,
  RouteRequest,
  RoutingContext,
} from '../types.js';
import { boolOption, choiceOption, numberOption } from './options.js';

/** Every tunable of the kvgate policy, with its default. */
export interface KvgateParams {
  /** Assumed prefill throughput per worker, tokens/s, before anything is learned (default 10,000). */
  prefillTokensPerSec: number;
  /** Learn each worker's effective prefill rate from observed first tokens (default true). */
  learnPrefillRate: boolean;
  /** Weight of a new observation in the learned rate (default 0.2). */
  learnAlpha: number;
  /** Ignore first tokens of requests that had fewer tokens to prefill than this (default 256). */
  learnMinTokens: number;
  /** Added to the ttft estimate per waiting request at the worker, ms (default 2). */
  queueMsPerWaiting: number;
  /** Added to the ttft estimate per running request (decode steps share the batch), ms (default 0.5). */
  decodeMsPerRunning: number;
  /**
   * Near-least-loaded band: relative (default 0.25) and absolute (default 0 ms) slack. The slack
   * is relative so it scales with the workload: an absolute allowance (15 ms was the old default)
   * is larger than a whole short request's TTFT, and let cache affinity pile short chat prompts
   * onto the workers that first saw their prefix while others idled.
   */
  nearRelative: number;
  nearAbsoluteMs: number;
  /**
   * Stay on the best-cached worker while its ttft is within this of the alternative's: relative
   * (default 0.25; a larger share of a busy worker's whole ttft let shared documents pile their
   * decodes onto one worker, costing TPOT) and absolute (default 0 ms, for the same reason as
   * nearAbsoluteMs). The ttft estimate already charges the uncached tokens, so the slack is only
   * the exploit bias; most of it comes from spillSavedFraction, which scales with the prefix.
   */
  spillRelative: number;
  spillAbsoluteMs: number;
  /**
   * Plus this fraction (default 0.75) of the time B's extra cached tokens would take to prefill on
   * A. A long shared prefix is worth keeping home (moving it costs a long recompute and splits
   * its cache); a short one is cheap to recompute anywhere, so load balance wins.
   */
  spillSavedFraction: number;
  /** B must hold at least this much more of the prompt than A to be preferred (default 0.05). */
  minHitGain: number;
  /** Scorer weights used inside the near band. */
  wPrefix: number;
  wTtft: number;
  wHeadroom: number;
  wQueue: number;
  wLoad: number;
  wSession: number;
  /** KV fit when nobody fits now: keep all that could fit when idle, or the least overfull. */
  whenNoneFits: 'all' | 'least-overfull';
  overfullSlackBlocks: number;
  /**
   * Prefix index: bytes bound (default 256 MiB), lifetime of a pick-time prediction not yet
   * confirmed by a first token (default 15 s — a safety net: failed requests withdraw theirs),
   * window of routed blocks since last use (default Infinity: capacity ageing only).
   */
  indexMaxBytes: number;
  predictedTtlMs: number;
  approxTtlMs: number;
  maxWorkers: number;
  /** Session keys remembered for affinity (default 100,000). */
  sessionCapacity: number;
}

export const KVGATE_DEFAULTS: Readonly<KvgateParams> = Object.freeze({
  prefillTokensPerSec: 10_000,
  learnPrefillRate: true,
  learnAlpha: 0.2,
  learnMinTokens: 256,
  queueMsPerWaiting: 2,
  decodeMsPerRunning: 0.5,
  nearRelative: 0.25,
  nearAbsoluteMs: 0,
  spillRelative: 0.25,
  spillAbsoluteMs: 0,
  spillSavedFraction: 0.75,
  minHitGain: 0.05,
  wPrefix: 3,
  wTtft: 1,
  wHeadroom: 0.5,
  wQueue: 0.25,
  wLoad: 0.25,
  wSession: 0.5,
  whenNoneFits: 'all',
  overfullSlackBlocks: 0,
  indexMaxBytes: 256 * 1024 * 1024,
  predictedTtlMs: 15_000,
  approxTtlMs: Infinity,
  maxWorkers: 1024,
  sessionCapacity: 100_000,
});

export function kvgateParams(o?: PolicyOptions): KvgateParams {
  const d = KVGATE_DEFAULTS;
  const n = (k: keyof KvgateParams, min = 0) => numberOption(o, k, d[k] as number, min);
  return {
    prefillTokensPerSec: n('prefillTokensPerSec', 1),
    learnPrefillRate: boolOption(o, 'learnPrefillRate', d.learnPrefillRate),
    learnAlpha: n('learnAlpha'),
    learnMinTokens: n('learnMinTokens'),
    queueMsPerWaiting: n('queueMsPerWaiting'),
    decodeMsPerRunning: n('decodeMsPerRunning'),
    nearRelative: n('nearRelative'),
    nearAbsoluteMs: n('nearAbsoluteMs'),
    spillRelative: n('spillRelative'),
    spillAbsoluteMs: n('spillAbsoluteMs'),
    spillSavedFraction: n('spillSavedFraction'),
    minHitGain: n('minHitGain'),
    wPrefix: n('wPrefix'),
    wTtft: n('wTtft'),
    wHeadroom: n('wHeadroom'),
    wQueue: n('wQueue'),
    wLoad: n('wLoad'),
    wSession: n('wSession'),
    whenNoneFits: choiceOption(o, 'whenNoneFits', ['all', 'least-overfull'] as const, d.whenNoneFits),
    overfullSlackBlocks: n('overfullSlackBlocks'),
    indexMaxBytes: n('indexMaxBytes', 1024),
    predictedTtlMs: n('predictedTtlMs'),
    approxTtlMs: n('approxTtlMs'),
    maxWorkers: n('maxWorkers', 1),
    sessionCapacity: n('sessionCapacity', 1),
  };
}

/** Clock time the request was dispatched (written at dispatch, read at its first token). */
const DISPATCHED_AT = stateKey<number>('kvgate.dispatched-at');
/** The request's first token came back: its prediction is confirmed. */
const CONFIRMED = stateKey<true>('kvgate.confirmed');

export class KvgatePolicy implements Policy {
  readonly name: string;
  readonly params: KvgateParams;
  readonly matcher: PrefixMatcher;
  readonly prefixIndex: PrefixIndex;
  /** Learned prefill throughput per worker id, tokens/s. */
  readonly prefillRates = new Map<string, number>();
  /**
   * Read each worker's exact cache and queue through WorkerState.oracle (simulation only) instead
   * of the index and the metrics: the `oracle` policy, kvgate's decision rules with perfect
   * information. It bounds how much better information alone could buy, not what any router
   * could achieve: the rules are heuristics, and on some workloads exact state steers them no
   * better (occasionally worse, e.g. when the exact cache shows a conversation's decoded tokens
   * and the affinity rules consolidate on it) than kvgate's own estimate. `oracle-greedy`
   * (always the lowest estimated TTFT on exact state) is the other reference.
   */
  readonly exact: boolean;
  readonly usesOracle?: boolean;
  /** Session key → worker id of its last pick (insertion-ordered, bounded). */
  private readonly sessions = new Map<string, string>();
  private readonly pipeline: PipelinePolicy;

  constructor(options?: PolicyOptions, name = 'kvgate', exact = false) {
    const p = kvgateParams(options);
    this.name = name;
    this.params = p;
    this.exact = exact;
    if (exact) this.usesOracle = true;
    this.prefixIndex = new PrefixIndex({
      maxBytes: p.indexMaxBytes,
      maxWorkers: p.maxWorkers,
      predictedTtlMs: p.predictedTtlMs,
      approxTtlMs: p.approxTtlMs,
    });
    this.matcher = new PrefixMatcher(this.prefixIndex);
    this.pipeline = new PipelinePolicy({
      name,
      filters: [
        healthyFilter,
        kvFitFilter(this.matcher, { whenNoneFits: p.whenNoneFits, overfullSlackBlocks: p.overfullSlackBlocks, exact }),
      ],
      producers: [
        kvgateEstimateProducer({
          matcher: this.matcher,
          exact,
          queueMsPerWaiting: p.queueMsPerWaiting,
          decodeMsPerRunning: p.decodeMsPerRunning,
          prefillRate: (w) => this.prefillRate(w),
          sessionWorker: (key) => this.sessions.get(key),
        }),
      ],
      scorers: [
        { scorer: kvgatePrefixScorer, weight: p.wPrefix },
        { scorer: kvgateTtftScorer, weight: p.wTtft },
        { scorer: kvgateHeadroomScorer, weight: p.wHeadroom },
        { scorer: kvgateQueueScorer, weight: p.wQueue },
        { scorer: kvgateLoadScorer, weight: p.wLoad },
        { scorer: kvgateSessionScorer, weight: p.wSession },
      ],
      picker: kvgatePicker(p),
    });
  }

  route(req: RouteRequest, workers: readonly WorkerState[], ctx: RoutingContext): RouteOutcome {
    return this.pipeline.route(req, workers, ctx);
  }

  /** What /admin/workers shows for this policy per worker. */
  describeWorker(w: WorkerState): Record<string, unknown> {
    return { kvgate: { prefillTokensPerSec: Math.round(this.prefillRate(w)), prefillRateLearned: this.prefillRates.has(w.id) } };
  }

  prefillRate(w: WorkerState): number {
    return this.prefillRates.get(w.id) ?? this.params.prefillTokensPerSec;
  }

  /** Predict the prompt's blocks at the worker and remember the session's worker. */
  onDispatch(req: RouteRequest, d: RouteDecision, ctx: RoutingContext): void {
    const w = d.worker;
    this.matcher.predict(req, w, ctx.now);
    if (req.sessionKey !== undefined) {
      this.sessions.delete(req.sessionKey);
      this.sessions.set(req.sessionKey, w.id);
      if (this.sessions.size > this.params.sessionCapacity) {
        this.sessions.delete(this.sessions.keys().next().value!);
      }
    }
    req.state.set(DISPATCHED_AT, ctx.now);
  }

  /** Confirm the prediction and learn the worker's prefill rate from the time to first token. */
  onFirstToken(req: RouteRequest, w: WorkerState, ctx: RoutingContext): void {
    this.matcher.confirm(req, w, ctx.now);
    req.state.set(CONFIRMED, true);
    if (!this.params.learnPrefillRate) return;
    const est = kvgateEstimate(req, w);
    const at = req.state.get(DISPATCHED_AT);
    if (!est || at === undefined) return;
    const tokens = est.aheadTokens + est.uncachedTokens;
    const elapsedMs = ctx.now - at;
    if (tokens < this.params.learnMinTokens || elapsedMs <= 0) return;
    const observed = (1000 * tokens) / elapsedMs;
    const base = this.params.prefillTokensPerSec;
    const clamped = Math.min(base * 10, Math.max(base / 10, observed));
    const prev = this.prefillRate(w);
    this.prefillRates.set(w.id, prev + this.params.learnAlpha * (clamped - prev));
  }

  onComplete(req: RouteRequest, w: WorkerState, ok: boolean, ctx: RoutingContext): void {
    if (req.state.get(CONFIRMED) === true) return;
    // A non-streamed request may complete without a first-token callback: its prefill is done
    // too. One that failed before its first token never filled the cache: withdraw its prediction.
    if (ok) this.matcher.confirm(req, w, ctx.now);
    else this.matcher.retract(req, w);
  }
}

export const kvgatePolicy: PolicyDefinition = {
  name: 'kvgate',
  description:
    'kvgate: expected prefix hit from a KV-event-fed index, KV fit, estimated TTFT with a load guard that spills hot prefixes, pick-time predictions.',
  create: (o) => new KvgatePolicy(o),
};

export const oraclePolicy: PolicyDefinition = {
  name: 'oracle',
  description:
    "Simulation only: kvgate's decision rules on each engine's exact cache and queue (perfect information, same heuristics; not a guaranteed bound).",
  create: (o) => new KvgatePolicy(o, 'oracle', true),
};
