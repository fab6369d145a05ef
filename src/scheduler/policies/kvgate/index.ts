/**
 * Policy `kvgate`: kvgate's own, and `oracle`, the same rules on exact engine state.
 *
 *   healthy → lora-affinity → kv-fit → prune (prune.ts) → kvgate-estimate (producer, estimate.ts) →
 *   prefix · wPrefix + ttft · wTtft + headroom · wHeadroom + queue · wQueue + load · wLoad
 *     + session · wSession (scorers.ts) → kvgate picker (picker.ts, the load guard)
 *
 * The estimate prices each candidate in milliseconds of TTFT: the prefill queued ahead and its own
 * uncached prefill at the worker's learned rate, what the batch's KV reads do to its TPOT, what its
 * prefill and KV read do to the batch's (stall.ts), and the risk of a preemption for lack of KV.
 * The picker takes the best weighted score among the workers whose cost is near the least, unless
 * the best-cached worker is worth its extra cost. At dispatch the prompt's blocks enter the prefix
 * index as predictions, so a burst sharing a prefix co-locates before any worker reports anything.
 *
 * The policy's state, each fed by the request hooks (onDispatch, onFirstToken, onComplete):
 *   - the prefix index and matcher (predict at dispatch, confirm at the first token, withdraw on
 *     failure) and the session table;
 *   - the in-flight batch per worker (batch.ts): charged at dispatch, released at completion;
 *   - the learners (learners/): prefill rate per speed class, decode speed and its floor per speed
 *     class, output length per prompt class.
 *
 * The formula, the knobs by group and the evidence for their defaults: README.md beside this file.
 */
import type { WorkerState } from '../../../fleet/worker-state.js';
import { knownGpu } from '../../../hardware/gpus.js';
import { stateKey } from '../../../util/state.js';
import { healthyFilter } from '../../filters/healthy.js';
import { kvFitFilter } from '../../filters/kv-fit.js';
import { loraAffinityFilter, SlotDemand } from '../../filters/lora-affinity.js';
import { PrefixIndex } from '../../index/prefix-index.js';
import { PrefixMatcher } from '../../index/prefix-match.js';
import { PipelinePolicy } from '../../pipeline.js';
import { RESERVE_OUTPUT_TOKENS_CAP } from '../../router.js';
import {
  requestSequences,
  type Policy,
  type PolicyDefinition,
  type RouteDecision,
  type RouteOutcome,
  type RouteRequest,
  type RoutingContext,
} from '../../types.js';
import { InflightBatches } from './batch.js';
import { keepChosenEstimate, kvgateEstimateProducer } from './estimate.js';
import { KVGATE_KNOB_GROUPS, kvgateOptions, type KvgateOptions } from './knobs.js';
import { DecodeFloorLearner } from './learners/decode-floor.js';
import { DecodeSpeedLearner } from './learners/decode-speed.js';
import { OutputLengthLearner } from './learners/output-length.js';
import { PrefillRateLearner } from './learners/prefill-rate.js';
import { kvgatePicker } from './picker.js';
import { KvgatePruner } from './prune.js';
import { InsertionFront } from '../../../util/insertion-front.js';
import {
  kvgateHeadroomScorer,
  kvgateLoadScorer,
  kvgatePrefixScorer,
  kvgateQueueScorer,
  kvgateSessionScorer,
  kvgateTtftScorer,
} from './scorers.js';

export { kvgateOptions };

/** The output tokens expected of the request (expectedOutput). */
const EXPECTED_OUTPUT = stateKey<number>('kvgate.expected-output');
/** The request's first token came back: its prediction is confirmed. */
const CONFIRMED = stateKey<true>('kvgate.confirmed');

export class KvgatePolicy implements Policy {
  readonly name: string;
  params: KvgateOptions;
  readonly matcher: PrefixMatcher;
  readonly prefixIndex: PrefixIndex;
  /**
   * Read each worker's exact cache and queue through WorkerState.oracle (simulation only) instead
   * of the index and the metrics: the `oracle` policy, kvgate's decision rules with perfect
   * information. It bounds how much better information alone could buy, not what any router
   * could achieve: the rules are heuristics, and exact state does not always steer them better.
   */
  readonly exact: boolean;
  readonly usesOracle?: boolean;
  /** This gateway's requests in flight per worker, as the estimate reads a batch. */
  private readonly batches = new InflightBatches();
  readonly prefillRates = new PrefillRateLearner(() => this.params);
  readonly decodeSpeed = new DecodeSpeedLearner(() => this.params, (w, ctx) => this.batches.contextAt(w, ctx));
  readonly decodeFloor = new DecodeFloorLearner(
    () => this.params,
    (w, ctx) => this.batches.contextAt(w, ctx),
    (w) => this.prefillRate(w),
  );
  /** Answer lengths learned from finished requests (used while `learnOutputLength`). */
  readonly outputLength = new OutputLengthLearner({ alpha: 0.1, maxClasses: 10_000 });
  /** hardwarePrior per declared hardware label (cleared when decodeFiguresGpu is retuned). */
  private readonly hardwarePriors = new Map<string, number>();
  /** LoRA requests' fresh-slot demand (lora-affinity), kept across retunes. */
  private readonly slotDemand = new SlotDemand();
  /** Session key → worker id of its last pick (insertion-ordered, bounded). */
  private readonly sessions = new Map<string, string>();
  private readonly oldestSession = new InsertionFront(this.sessions);
  private pipeline: PipelinePolicy;
  /** Which candidates the estimate prices (leastLoadedCandidates); exact (oracle) prices all. */
  private readonly pruner = new KvgatePruner(() => ({
    leastLoaded: this.exact ? 0 : this.params.leastLoadedCandidates,
    matcher: this.matcher,
    queueMsPerWaiting: this.params.queueMsPerWaiting,
    decodeMsPerRunning: this.params.decodeMsPerRunning,
    wTtft: this.params.wTtft,
    wHeadroom: this.params.wHeadroom,
    wQueue: this.params.wQueue,
    wLoad: this.params.wLoad,
    tierWeights: { host: this.params.hostHitWeight, disk: this.params.diskHitWeight },
    prefillRate: (w) => this.prefillRate(w),
    sessionWorker: (key) => this.sessions.get(key),
    ...(this.params.e2eTail ? { contextAt: (w: WorkerState, ctx: RoutingContext) => this.batches.contextAt(w, ctx) } : {}),
  }));

  /** `options` as parsed by kvgateOptions; createPolicy('kvgate', raw) parses and checks them. */
  constructor(options: KvgateOptions, name = 'kvgate', exact = false) {
    const p = options;
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
    this.pipeline = this.buildPipeline(p);
  }

  /**
   * Weights, thresholds and estimate parameters change in place (config reload); the index's own
   * knobs (its size, worker count and lifetimes) fix its layout and need a new policy.
   */
  retune(options: Record<string, unknown>): boolean {
    const p = options as KvgateOptions;
    const fixed = ['indexMaxBytes', 'maxWorkers', 'predictedTtlMs', 'approxTtlMs'] as const;
    if (fixed.some((k) => p[k] !== this.params[k])) return false;
    if (p.decodeFiguresGpu !== this.params.decodeFiguresGpu) this.hardwarePriors.clear();
    this.params = p;
    this.pipeline = this.buildPipeline(p);
    return true;
  }

  private buildPipeline(p: KvgateOptions): PipelinePolicy {
    const { name, exact } = this;
    return new PipelinePolicy({
      name,
      filters: [
        healthyFilter,
        ...(p.loraAffinity ? [loraAffinityFilter({ spreadRisk: p.loraSpreadRisk, demand: this.slotDemand })] : []),
        kvFitFilter(this.matcher, {
          rule: p.kvFit === 'now' ? 'now' : 'ever',
          whenNoneFits: p.whenNoneFits,
          overfullSlackBlocks: p.overfullSlackBlocks,
          exact,
        }),
      ],
      prune: (req, ws, ctx) => this.pruner.prune(req, ws, ctx),
      producers: [
        kvgateEstimateProducer({
          matcher: this.matcher,
          exact,
          queueMsPerWaiting: p.queueMsPerWaiting,
          decodeMsPerRunning: p.decodeMsPerRunning,
          decodeMsPer1kContext: p.decodeMsPer1kContext,
          tpotWorthMs: p.tpotWorthMs,
          decodeStepMs: p.decodeStepMs,
          tpotTargetMs: p.tpotTargetMs,
          stallWeight: p.stallWeight,
          prefillChunkTokens: p.prefillChunkTokens,
          stallModel: p.stallModel,
          ...(p.e2eTail ? { meanOutputInFlight: () => this.batches.meanOutput() } : {}),
          preemptionWeight: p.preemptionWeight,
          tierWeights: { host: p.hostHitWeight, disk: p.diskHitWeight },
          prefillRate: (w) => this.prefillRate(w),
          expectedOutput: (req) => this.expectedOutput(req),
          inflightBatch: (w) => this.batches.of(w),
          decodeScale: (w) => this.decodeScale(w),
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
      picker: kvgatePicker({ ...p, preferRoom: p.kvFit === 'prefer' }),
    });
  }

  prepare(req: RouteRequest, workers: readonly WorkerState[]): void {
    this.matcher.prehash(req, workers);
  }

  route(req: RouteRequest, workers: readonly WorkerState[], ctx: RoutingContext): RouteOutcome {
    return this.pipeline.route(req, workers, ctx);
  }

  /** What /admin/workers shows for this policy per worker. */
  describeWorker(w: WorkerState): Record<string, unknown> {
    return {
      kvgate: {
        prefillTokensPerSec: Math.round(this.prefillRate(w)),
        prefillRateLearned: this.prefillRates.learned(w),
        decodeStepMs: Math.round(this.params.decodeStepMs * this.decodeScale(w) * 100) / 100,
        decodeSpeedLearned: this.params.learnDecodeSpeed && this.decodeSpeed.scales.has(w.speedClass),
        decodeFloorLearned: this.params.learnDecodeSpeed && this.decodeFloor.floors.has(w.speedClass),
        outputLength: this.params.learnOutputLength ? this.outputLength.describe() : null,
      },
    };
  }

  /** The prefill rate assumed for the worker: its speed class's learned rate, else the configured one. */
  prefillRate(w: WorkerState): number {
    return this.prefillRates.rate(w);
  }

  /**
   * Output tokens expected of the request: learned (learnOutputLength) or max_tokens, capped as
   * for reservations. Fixed at the first call, so the estimate, the KV fit, the reservation and
   * the batch charge all use one value. KV reservations (the Router's, kv-fit's room) keep
   * min(max_tokens, cap) whatever this says: a mean is no bound.
   */
  expectedOutput(req: RouteRequest): number {
    let out = req.state.get(EXPECTED_OUTPUT);
    if (out === undefined) {
      out = Math.min(this.params.learnOutputLength ? this.outputLength.expected(req) : req.maxTokens, RESERVE_OUTPUT_TOKENS_CAP);
      req.state.set(EXPECTED_OUTPUT, out);
    }
    return out;
  }

  /**
   * How much slower (> 1) or faster than decodeStepMs and decodeMsPer1kContext say the worker's
   * speed class decodes: the learned scale (learners/decode-speed.ts), else the hardware's prior,
   * raised to the learned floor (learners/decode-floor.ts) where that is higher; with
   * learnDecodeSpeed off, the prior alone.
   */
  decodeScale(w: WorkerState): number {
    if (!this.params.learnDecodeSpeed) return this.hardwarePrior(w);
    const scale = this.decodeSpeed.scales.get(w.speedClass) ?? this.hardwarePrior(w);
    const floor = this.decodeFloor.floors.get(w.speedClass);
    return floor !== undefined && floor > scale ? floor : scale;
  }

  /**
   * The decode speed a worker's declared hardware implies before any is learned: decodeStepMs and
   * decodeMsPer1kContext are both memory reads (weights, KV), so a GPU with half the bandwidth of
   * decodeFiguresGpu takes twice as long for both. 1 for a worker that declares no known GPU. A
   * slow kind under load decodes few answers alone, so its learned speed can come late; the prior
   * covers a known GPU until then, the floor any other.
   */
  hardwarePrior(w: WorkerState): number {
    if (w.hardware === null) return 1;
    let prior = this.hardwarePriors.get(w.hardware);
    if (prior === undefined) {
      const gpu = knownGpu(w.hardware);
      const ref = knownGpu(this.params.decodeFiguresGpu)!;
      prior = gpu ? ref.bandwidth / gpu.bandwidth : 1;
      this.hardwarePriors.set(w.hardware, prior);
    }
    return prior;
  }

  forgetWorker(w: WorkerState): void {
    this.batches.forgetWorker(w);
    this.decodeSpeed.forgetWorker(w);
    for (const [key, id] of this.sessions) if (id === w.id) this.sessions.delete(key);
  }

  /** Predict the prompt's blocks at the worker, remember the session's worker, charge the batch. */
  onDispatch(req: RouteRequest, d: RouteDecision, ctx: RoutingContext): void {
    const w = d.worker;
    keepChosenEstimate(req, w);
    this.matcher.forget(req);
    this.matcher.predict(req, w, ctx.now);
    if (req.sessionKey !== undefined) {
      this.sessions.delete(req.sessionKey);
      this.sessions.set(req.sessionKey, w.id);
      if (this.sessions.size > this.params.sessionCapacity) {
        this.oldestSession.shift();
      }
    }
    this.prefillRates.onDispatch(req, ctx);
    this.decodeSpeed.onDispatch(w);
    this.batches.charge(req, w, this.expectedOutput(req), this.params.tpotWorthMs, this.params.stallModel === 'misses' || this.params.e2eTail);
  }

  /** Confirm the prediction; the learners read the first token of a request that times one prefill. */
  onFirstToken(req: RouteRequest, w: WorkerState, ctx: RoutingContext): void {
    this.matcher.confirm(req, w, ctx.now);
    req.state.set(CONFIRMED, true);
    // A whole answer sent at once arrives at its end: neither its first token nor its TPOT is seen.
    // Several sequences at once (a batch, n > 1) time no one prefill or decode: nothing is learned.
    if (req.stream === false || requestSequences(req) > 1) return;
    if (this.params.learnDecodeSpeed) {
      this.decodeSpeed.onFirstToken(req, w, ctx);
      this.decodeFloor.onFirstToken(req, w, ctx);
    }
    this.prefillRates.onFirstToken(req, w, ctx);
  }

  onComplete(req: RouteRequest, w: WorkerState, ok: boolean, ctx: RoutingContext, outputTokens?: number): void {
    if (ok && outputTokens !== undefined) {
      this.outputLength.onComplete(req, outputTokens);
      if (this.params.learnDecodeSpeed) {
        this.decodeSpeed.onComplete(req, w, ctx, outputTokens);
        this.decodeFloor.onComplete(req, w, ctx, outputTokens);
      }
    }
    this.batches.release(req);
    if (req.state.get(CONFIRMED) === true) return;
    // A non-streamed request may complete without a first-token callback: its prefill is done
    // too. One that failed before its first token never filled the cache: withdraw its prediction.
    if (ok) this.matcher.confirm(req, w, ctx.now);
    else this.matcher.retract(req, w);
  }
}

export const kvgatePolicy: PolicyDefinition<typeof kvgateOptions> = {
  name: 'kvgate',
  description:
    'kvgate: expected prefix hit from a KV-event-fed index, KV fit, estimated TTFT with a load guard that spills hot prefixes, pick-time predictions.',
  options: kvgateOptions,
  knobGroups: KVGATE_KNOB_GROUPS,
  create: (o) => new KvgatePolicy(o),
};

export const oraclePolicy: PolicyDefinition<typeof kvgateOptions> = {
  name: 'oracle',
  description:
    "Simulation only: kvgate's decision rules on each engine's exact cache and queue (perfect information, same heuristics; not a guaranteed bound).",
  options: kvgateOptions,
  knobGroups: KVGATE_KNOB_GROUPS,
  create: (o) => new KvgatePolicy(o, 'oracle', true),
};
