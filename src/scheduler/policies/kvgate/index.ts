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
 *   costMs = ttftMs + W · k · C / max(0.05, 1 − (decodeStepMs + k · C) / tpotTargetMs)
 *            + stallWeight · (S · uncached / prefill rate / batch headroom + N · overlap · k · context)
 *            + preemptionWeight · P(out of KV) · (recompute of its context + the stall that puts in the batch)
 *
 * "Queued ahead" is the gateway's own count of prompt tokens dispatched there and not yet past
 * their first token (WorkerState.inflightPrefillTokens), so it is exact for this gateway's traffic
 * and never stale; waiting/running come from the snapshot moved forward by this gateway's own
 * dispatches, first tokens and completions since (WorkerState.currentQueue), or from the
 * gateway's in-flight count once the snapshot is stale (say so, never fail closed). The prefill
 * rate is configured per deployment and, by default, learned per speed class (a pool's workers
 * of one declared `hardware`, or unlabelled, of about one KV capacity: fleet/speed-classes.ts)
 * from observed first tokens (onFirstToken); so is the decode speed (decodeStepMs and
 * decodeMsPer1kContext are an H100's figures, scaled per speed class by what its answers decoded
 * alone show, and raised by what any answer shows with the prefill beside it taken out:
 * learnDecodeSpeed, learnDecodeFloor).
 *
 * The cost is decode-aware: the N requests batched at the worker, with C context tokens between
 * them (the gateway's in-flight accounting), get this request's uncached prefill chunks in their
 * steps, a gap that adds T / (n − 1) to the TPOT of one with n tokens to generate (S sums
 * W / (n − 1) over the batch, W = tpotWorthMs, the ratio of the TTFT and TPOT targets); and every
 * decode step reads the KV of the whole batch at k = decodeMsPer1kContext per 1,000 tokens, which
 * slows this request's tokens (weighed by how close that brings its TPOT to tpotTargetMs) and
 * its neighbours' for the steps they share with it. So a long uncached prompt is not sent to a
 * worker whose running decodes it would stall (least of all short answers about to finish), and a
 * session or shared prefix does not pile onto a worker whose batch already makes every token slow,
 * unless the cache saves more than that costs.
 *
 * A request's expected output (n above, and its share of the batch's context) is not its max_tokens
 * as sent: most clients send a fixed cap and the answer ends at its EOS long before. The policy
 * learns from finished answers (their length, which the relay counts: api/output-tokens.ts) the
 * share of max_tokens that prompts of the same class use (scheduler/output-length.ts) and expects
 * that; where max_tokens is the exact length the share is 1 and nothing changes. KV reservations
 * (the Router's, kv-fit's room) keep min(max_tokens, cap): a mean is no bound, and reserving only
 * it lowered capacity on mixed and bursty traffic by 3–5% (`kvgate bench --declared-max-tokens`).
 *
 * KV room is a preference, not a veto (`kvFit: 'prefer'`, the default): the kv-fit filter drops
 * only workers that could never hold the prompt and marks those with room now for the uncached
 * prompt and expected output; the picker keeps to the marked ones while the cheapest of them costs
 * no more than the near band allows over the cheapest overall. A worker out of room admits the
 * request only chunk by chunk as blocks free, and preempts to finish it, so it is avoided while a
 * roomy worker is about as good; but when the roomy ones are much dearer (on bursty traffic at
 * high load, the few workers with room are those serving short answers, whose TPOT long prefills
 * would break) queueing on a full worker costs less. `kvFit: 'now'` vetoes workers without room:
 * capacity at SLO 4–16% lower on bursty traffic, but at round-robin's capacity a third of the
 * TTFT p99 (0.9 s against 2.6 s) and a tenth of the preemptions, at a TPOT p99 over the 50 ms
 * target (55–58 ms); `kvFit: 'ever'` ignores room (within about 2% of 'prefer' either way).
 * Measured in the README, "Capacity at SLO first".
 *
 * The picker (pickers/kvgate.ts) takes the best weighted score among the workers near the lowest
 * ttft, unless the best-cached worker is worth its extra wait ('prefix'); otherwise the prefix
 * spills ('spill'). At dispatch the prompt's blocks are inserted into the index as predictions,
 * so a burst sharing a prefix co-locates before any worker reports anything, and the Router's
 * synchronous reservation makes each pick visible to the next.
 */
import { z } from 'zod';
import type { WorkerState } from '../../../fleet/worker-state.js';
import { knownGpu, GPUS } from '../../../hardware/gpus.js';
import { stateKey } from '../../../util/state.js';
import { healthyFilter } from '../../filters/healthy.js';
import { kvFitFilter } from '../../filters/kv-fit.js';
import { loraAffinityFilter } from '../../filters/lora-affinity.js';
import { PREFIX_INDEX_DEFAULTS, PrefixIndex } from '../../index/prefix-index.js';
import { PrefixMatcher } from '../../index/prefix-match.js';
import { kvgatePicker } from './picker.js';
import { PipelinePolicy } from '../../pipeline.js';
import { RESERVE_OUTPUT_TOKENS_CAP } from '../../router.js';
import { OutputLengthModel } from './learners/output-length.js';
import { kvgateEstimate, kvgateEstimateProducer, reportedBatch, stallShare, type InflightBatch } from './estimate.js';
import { insertSorted, RecentWindow, removeSorted } from '../../../util/sorted.js';
import {
  kvgateHeadroomScorer,
  kvgateLoadScorer,
  kvgatePrefixScorer,
  kvgateQueueScorer,
  kvgateSessionScorer,
  kvgateTtftScorer,
} from './scorers.js';
import {
  requestSequences,
  type Policy,
  type PolicyDefinition,
  type RouteDecision,
  type RouteOutcome,
  type RouteRequest,
  type RoutingContext,
} from '../../types.js';
import { booleanKnob, choiceKnob, indexKnobs, numberKnob } from '../knobs.js';

/**
 * The kvgate policy's options, with their defaults.
 *
 * The near band and the spill test compare costs (TTFT plus the decode delay the placement costs
 * this request and the worker's batch, in ms of TTFT) and are relative so they scale with the
 * workload: an absolute allowance larger than a short request's whole cost lets cache affinity pile short
 * prompts onto the workers that first saw their prefix while others idle. The spill test's slack
 * is only the exploit bias (the cost already charges the uncached tokens); most of it comes from
 * spillSavedFraction, which scales with the prefix: a long shared prefix is worth keeping home
 * (moving it costs a long recompute and splits its cache), a short one is cheap to recompute
 * anywhere.
 */
export const kvgateOptions = z.strictObject({
  prefillTokensPerSec: numberKnob(
    10_000,
    "prefill throughput assumed per worker, tokens/s (kvgate: until it has learned its pool's)",
    { min: 1 },
  ),
  learnPrefillRate: booleanKnob(true, "learn each speed class's prefill rate (a pool's workers of one declared hardware, or of one KV capacity) from observed first tokens"),
  learnAlpha: numberKnob(0.2, 'weight of a new observation in the learned rate'),
  // decodeStepMs and decodeMsPer1kContext are one GPU's figures (an H100's); both are memory
  // reads, so on other hardware both scale with the bandwidth. Learned from streamed answers.
  learnDecodeSpeed: booleanKnob(
    true,
    "scale decodeStepMs and decodeMsPer1kContext by how fast each speed class is seen to decode (the low end of its answers' TPOT against the two)",
  ),
  decodeFiguresGpu: choiceKnob(
    Object.keys(GPUS) as [string, ...string[]],
    'h100',
    "the GPU decodeStepMs and decodeMsPer1kContext describe: a worker whose `hardware` names another known GPU starts from them scaled by the two GPUs' memory bandwidths, until its kind's decode speed is learned",
  ),
  learnMinTokens: numberKnob(256, 'learn only from requests with at least this many tokens to prefill'),
  learnOutputLength: booleanKnob(
    true,
    'expect the share of max_tokens that earlier answers to prompts of the same class used (false: expect max_tokens)',
  ),
  queueMsPerWaiting: numberKnob(2, 'added to the TTFT estimate per request waiting at the worker, ms'),
  decodeMsPerRunning: numberKnob(0.5, 'added to the TTFT estimate per running request (decodes share the batch), ms'),
  // Each decode step reads the KV of every request in the batch: bytes per token / bandwidth.
  // Llama-3.1-8B in bf16 holds 2 · 32 layers · 8 KV heads · 128 · 2 bytes = 128 KiB per token; an
  // H100 streams ~70% of 3.35 TB/s, so 1,000 tokens add ~0.056 ms. Set it for the deployment.
  decodeMsPer1kContext: numberKnob(
    0.06,
    "how much a decode step lengthens per 1,000 context tokens in the worker's batch, ms (KV bytes per token / memory bandwidth; 0 ignores decode crowding)",
  ),
  // A request is as late 1 ms over a 50 ms TPOT target as 20 ms over a 1 s TTFT target: the ratio
  // of the two latency targets the fleet is run to: a stall of T ms costs a running request with n
  // tokens to generate T · tpotWorthMs / (n − 1).
  tpotWorthMs: numberKnob(20, 'what a millisecond of TPOT is worth in milliseconds of TTFT (the ratio of the TTFT and TPOT targets)'),
  // A decode step reads the weights once whatever the batch: weight bytes / memory bandwidth plus
  // the step's fixed overhead. Llama-3.1-8B in bf16 is 16 GB; at ~70% of an H100's 3.35 TB/s that
  // is 6.9 ms, + ~0.5 ms. Set it for the deployment.
  decodeStepMs: numberKnob(7.5, 'a decode step with an empty batch (reading the weights), ms', { min: 0 }),
  // The TPOT target the fleet is run to (with tpotWorthMs, the TTFT target is their product).
  tpotTargetMs: numberKnob(50, 'TPOT target, ms: a worker whose batch would put this request near it costs it more', {
    min: 1,
  }),
  // 1: every request's delay counts the same as this one's.
  stallWeight: numberKnob(
    1,
    "what the delay the request causes the worker's other requests counts for against its own (1: all alike; 0: own TTFT and decode only)",
  ),
  // How the stall a prefill puts in a worker's batch is priced (producers/kvgate-estimate.ts).
  stallModel: choiceKnob(
    ['linear', 'misses', 'learned'],
    'linear',
    "what a prefill's stall costs the worker's other requests: tpotWorthMs per ms of each one's TPOT (linear); a TPOT target's worth for each one it pushes past the target, and at most that for the request's own TPOT (misses: only answers short enough for one stall to break); or that worth times the share of the worker's recent TPOTs the stall would push past the target (learned)",
  ),
  // Off by default: on Azure (seeds 5–7, at round-robin's capacity) it cut kvgate's TPOT p99 by
  // 10–15%, but capacity at SLO fell 3.6–4.8% on bursty and 12% on the elephants trace, where it
  // serves long prompts more evenly (README, "Capacity at SLO first").
  loraAffinity: booleanKnob(
    true,
    "place a LoRA adapter's requests by the workers' --max-loras slots: spread while free slots outnumber the adapters running nowhere, else stay on the workers running it while they keep up, never where other adapters hold every slot while another worker will do (filters/lora-affinity.ts); off: by cost alone",
  ),
  readHeadroom: booleanKnob(
    false,
    "weigh the KV read a request adds to its neighbours' decode steps by the headroom their TPOT has left, as its prefill gap is (fewer long contexts gathered on a few workers, lower TPOT tails; less traffic carried where long prompts compete)",
  ),
  // The preemption term's likelihood counts every request on the worker at its full length at
  // once, which they seldom reach together, so it is an upper bound weighed down. Capacity probes
  // of a few seconds hid what too little weight costs: replayed for a minute at round-robin's
  // capacity, bursty traffic on 16 workers (seed 5) preempted 99 times at weight 0.5 (TTFT p99
  // 2.7× dynamo's), 11 at 1, 8 at 2 and none at 4 (0.99×). Weight 4 carries the same traffic at
  // SLO as 0.5 on every built-in workload and both traces at 8 workers and on a KV-tight document
  // trace, and 5–7% less on bursty at 16 workers and on fresh seeds (still 1.03–1.07× dynamo),
  // where 0.5 reached its count by letting long prompts miss: its ≥ 8k-token band met the SLO for
  // 60–68% of requests, 4's for 72–84% (README, "Capacity at SLO first").
  preemptionWeight: numberKnob(
    4,
    'what the expected cost of a preemption for lack of KV (its recompute and the stall that puts in the batch) counts for in the cost (0: ignored)',
    { min: 0 },
  ),
  nearRelative: numberKnob(0.25, 'near band: workers with TTFT ≤ min TTFT · (1 + nearRelative) + nearAbsoluteMs'),
  nearAbsoluteMs: numberKnob(0, 'absolute slack of the near band, ms'),
  spillRelative: numberKnob(
    0.25,
    "keep the best-cached worker while its TTFT ≤ the near pick's · (1 + spillRelative) + spillAbsoluteMs + saved prefill",
  ),
  spillAbsoluteMs: numberKnob(0, 'absolute slack of the spill test, ms'),
  spillSavedFraction: numberKnob(
    0.75,
    "share of the prefill time the best-cached worker's extra cached tokens save that it may be slower by",
  ),
  minHitGain: numberKnob(0.05, 'the best-cached worker must hold this much more of the prompt to be preferred'),
  wPrefix: numberKnob(3, 'weight of the prefix scorer (expected prefix hit) in the near band'),
  wTtft: numberKnob(1, 'weight of the ttft scorer (min TTFT / TTFT)'),
  wHeadroom: numberKnob(0.5, 'weight of the headroom scorer (free KV blocks left after the request)'),
  wQueue: numberKnob(0.25, 'weight of the queue scorer (fewest waiting)'),
  wLoad: numberKnob(0.25, 'weight of the load scorer (fewest running)'),
  wSession: numberKnob(0.5, "weight of the session scorer (the session's last worker)"),
  kvFit: choiceKnob(
    ['prefer', 'ever', 'now'],
    'prefer',
    'workers without KV room now for the uncached prompt and expected output: avoided while a worker with room costs no more than the near band allows (prefer), weighed by cost alone (ever), or dropped (now)',
  ),
  whenNoneFits: choiceKnob(
    ['all', 'least-overfull'],
    'all',
    'with kvFit now, when no worker has KV room now: keep every worker that could hold the request when idle, or the least overfull',
  ),
  overfullSlackBlocks: numberKnob(0, 'least-overfull keeps workers within this many blocks of the least overfull'),
  indexMaxBytes: indexKnobs.indexMaxBytes,
  predictedTtlMs: numberKnob(
    PREFIX_INDEX_DEFAULTS.predictedTtlMs,
    'lifetime of a pick-time prediction no first token has confirmed, ms (failed requests withdraw theirs at once)',
    { infinite: true },
  ),
  approxTtlMs: numberKnob(
    PREFIX_INDEX_DEFAULTS.approxTtlMs,
    'lifetime of a routed block since its last use, ms (.inf: only the capacity model ages it)',
    { infinite: true },
  ),
  maxWorkers: indexKnobs.maxWorkers,
  sessionCapacity: numberKnob(100_000, 'session keys remembered for affinity', { min: 1 }),
});

export type KvgateOptions = z.output<typeof kvgateOptions>;

const NO_BATCH: InflightBatch = { contextTokens: 0, stallShare: 0, outputs: [] };

/** The output tokens expected of the request (expectedOutput). */
const EXPECTED_OUTPUT = stateKey<number>('kvgate.expected-output');
/** Clock time of the request's first token (read at completion for its TPOT). */
const FIRST_TOKEN_AT = stateKey<number>('kvgate.first-token-at');
/** Finished requests whose TPOT each worker keeps for the 'learned' stall model. */
const RECENT_TPOTS = 128;
/** The batch's context tokens at the request's first token (read at completion). */
const CONTEXT_AT_FIRST_TOKEN = stateKey<number>('kvgate.context-at-first-token');
/**
 * At the request's first token no other prompt of this gateway's was waiting for its prefill at
 * the worker: the worker's dispatch count then. If it is the same at the end, nothing was prefilled
 * beside the answer's decode, and its TPOT is the decode alone.
 */
const DECODE_ALONE_FROM = stateKey<number>('kvgate.decode-alone-from');
/**
 * At the request's first token: the prompt tokens then waiting for their prefill at the worker,
 * and how many had been dispatched there in all. At its end, their sum less that total's value
 * then bounds the prefill work the worker did during the answer's decode (learnDecodeFloor).
 */
const PREFILL_MARK = stateKey<{ pending: number; dispatched: number }>('kvgate.prefill-mark');
/** Finished answers whose decode speed each speed class keeps (learnDecodeSpeed). */
const DECODE_WINDOW = 128;
/** Answers seen in a speed class before its decode speed is used instead of the configured one. */
const DECODE_MIN_SAMPLES = 32;
/** Answers shorter than this say more about the prefills they waited behind than about decoding. */
const DECODE_MIN_OUTPUT = 4;
/**
 * The quantile of observed / configured TPOT taken as the speed class's speed: the answers learned
 * from had no prefill of this gateway's beside them, but other gateways' may have stalled some, and
 * a stall only adds, so the lower quartile rather than the median.
 */
const DECODE_QUANTILE = 0.25;
/** The learned scale stays within these bounds of the configured figures. */
const DECODE_SCALE_MIN = 0.1;
const DECODE_SCALE_MAX = 20;
const NO_TPOTS: readonly number[] = [];
/** Clock time the request was dispatched (written at dispatch, read at its first token). */
const DISPATCHED_AT = stateKey<number>('kvgate.dispatched-at');
/** The request's first token came back: its prediction is confirmed. */
const CONFIRMED = stateKey<true>('kvgate.confirmed');
/** The context tokens this request added to its worker's in-flight context (released at completion). */
const BATCH_CHARGED = stateKey<{ worker: string; contextTokens: number; stallShare: number; output: number; sequences: number }>('kvgate.batch-charged');

export class KvgatePolicy implements Policy {
  readonly name: string;
  params: KvgateOptions;
  readonly matcher: PrefixMatcher;
  readonly prefixIndex: PrefixIndex;
  /**
   * Learned prefill throughput per speed class (WorkerState.speedClass), tokens/s: one rate for
   * the pool's workers of one kind of hardware, learned from the first tokens of all of them.
   */
  readonly prefillRates = new Map<string, number>();
  /** Answer lengths learned from finished requests (used while `learnOutputLength`). */
  readonly outputLength = new OutputLengthModel({ alpha: 0.1, maxClasses: 10_000 });
  /**
   * Context tokens, TPOT share and number of this gateway's requests in flight, per worker id, and
   * their expected outputs (ascending) while a stall model other than 'linear' reads them.
   */
  private readonly inflightBatch = new Map<string, { contextTokens: number; stallShare: number; n: number; outputs: number[] }>();
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
  /**
   * TPOTs of the last RECENT_TPOTS requests that finished at each worker, ascending, and the same
   * in the order they finished (a ring: the oldest is replaced). The 'learned' stall model reads
   * how many are near the TPOT target.
   */
  private readonly recentTpots = new Map<string, RecentWindow>();
  /**
   * Per pool: observed TPOT / the TPOT decodeStepMs and decodeMsPer1kContext predict for the batch
   * it decoded in, for its last DECODE_WINDOW answers (learnDecodeSpeed); and the scale taken
   * from them, once there are enough.
   */
  private readonly decodeRatios = new Map<string, RecentWindow>();
  readonly decodeScales = new Map<string, number>();
  /**
   * Per speed class: a lower bound on the same ratio from every answer, with the prefill work
   * done beside it taken out (learnDecodeFloor), for its last DECODE_WINDOW answers; and the floor
   * taken from them, once there are enough.
   */
  private readonly decodeFloorRatios = new Map<string, RecentWindow>();
  readonly decodeFloors = new Map<string, number>();
  /** hardwarePrior per declared hardware label (cleared when decodeFiguresGpu is retuned). */
  private readonly hardwarePriors = new Map<string, number>();
  /** Requests dispatched to each worker so far (DECODE_ALONE_FROM). */
  private readonly dispatches = new Map<string, number>();
  /** Session key → worker id of its last pick (insertion-ordered, bounded). */
  private readonly sessions = new Map<string, string>();
  private pipeline: PipelinePolicy;

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
        ...(p.loraAffinity ? [loraAffinityFilter] : []),
        kvFitFilter(this.matcher, {
          rule: p.kvFit === 'now' ? 'now' : 'ever',
          whenNoneFits: p.whenNoneFits,
          overfullSlackBlocks: p.overfullSlackBlocks,
          exact,
        }),
      ],
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
          stallModel: p.stallModel,
          readHeadroom: p.readHeadroom,
          preemptionWeight: p.preemptionWeight,
          prefillRate: (w) => this.prefillRate(w),
          expectedOutput: (req) => this.expectedOutput(req),
          inflightBatch: (w) => this.inflightBatch.get(w.id) ?? NO_BATCH,
          recentTpots: (w) => this.recentTpots.get(w.id)?.sorted ?? NO_TPOTS,
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
        prefillRateLearned: this.prefillRates.has(w.speedClass),
        decodeStepMs: Math.round(this.params.decodeStepMs * this.decodeScale(w) * 100) / 100,
        decodeSpeedLearned: this.params.learnDecodeSpeed && this.decodeScales.has(w.speedClass),
        decodeFloorLearned: this.params.learnDecodeSpeed && this.decodeFloors.has(w.speedClass),
        outputLength: this.params.learnOutputLength ? this.outputLength.describe() : null,
      },
    };
  }

  /**
   * The prefill rate assumed for the worker: its speed class's learned rate (its pool's workers
   * of the same declared hardware, or of about the same KV capacity), else the configured rate.
   *
   * Learned per speed class, not per worker. What a first token measures, (ahead + uncached) /
   * elapsed, is not the worker's throughput alone: it depends on how the worker was loaded, which
   * is the policy's own doing. A worker sent a burst has its queued prefills batched into one step
   * and measures a high rate; one sent a lone request with a short uncached suffix measures the
   * steps it waited for as slow prefill. Learned per worker, identical workers drifted 2–4× apart
   * (0.015 against 0.06–0.1 ms per token on shared-prefix), and the fast-looking one drew every
   * request, since its rate divides the prefill time and the stall it puts in the batch — the
   * burst that kept its rate high: TTFT p99 164 ms at 16 workers, 69 ms with one rate per pool
   * (exact engine state: 73). The hardware is the speed class's; how loaded each worker is, is
   * the queue and batch terms' business. A pool that mixes hardware learned as one class sends
   * its slow workers more than they can serve: on 4 H100 and 4 A10G workers (shared-prefix, seed
   * 83), kvgate then carried 0.27× llm-d-precise's traffic at the SLO, and 0.96× with the workers
   * labelled or told apart by their KV capacity (README, "On mixed fleets").
   */
  prefillRate(w: WorkerState): number {
    return this.prefillRates.get(w.speedClass) ?? this.params.prefillTokensPerSec;
  }

  /**
   * Output tokens expected of the request: learned (learnOutputLength) or max_tokens, capped as
   * for reservations. Fixed at the first call, so the estimate, the KV fit, the reservation and
   * the batch charge all use one value.
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
   * speed class decodes: learned (learnDecodeSpeed); until then, or with learning off, the
   * hardware's prior (hardwarePrior), else 1.
   */
  decodeScale(w: WorkerState): number {
    if (!this.params.learnDecodeSpeed) return this.hardwarePrior(w);
    const scale = this.decodeScales.get(w.speedClass) ?? this.hardwarePrior(w);
    const floor = this.decodeFloors.get(w.speedClass);
    return floor !== undefined && floor > scale ? floor : scale;
  }

  /**
   * The decode speed a worker's declared hardware implies before any is learned: decodeStepMs and
   * decodeMsPer1kContext are both memory reads (weights, KV), so a GPU with half the bandwidth of
   * decodeFiguresGpu takes twice as long for both. 1 for a worker that declares no known GPU.
   *
   * Learning from answers decoded alone (learnDecodeSpeed) was not enough for a mixed pool: a
   * slow kind under load has almost none. On 4 A100s and 4 A10Gs (agentic, seed 84, a fifth of
   * its capacity) the A10Gs' speed was learned 734 s into an 874 s run, and until then they were
   * taken for as fast as the configured H100: sessions went on growing there past the TPOT
   * target. The prior closed that gap for a known GPU; the floor (learnDecodeFloor) closes it for
   * any other, or a kind told apart only by its capacity.
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

  private recordTpot(workerId: string, tpot: number): void {
    let r = this.recentTpots.get(workerId);
    if (!r) this.recentTpots.set(workerId, (r = new RecentWindow(RECENT_TPOTS)));
    r.push(tpot);
  }

  /**
   * The context tokens of the batch at `w` as the estimate counts them: this gateway's in-flight
   * context, scaled up to the batch the worker last reported when that is larger.
   */
  private batchContext(w: WorkerState, ctx: RoutingContext): number {
    const mine = w.inflightSequences;
    const ours = this.inflightBatch.get(w.id);
    if (mine === 0 || ours === undefined) return 0;
    const batch = reportedBatch(mine, w.isStale(ctx.now, ctx.staleAfterMs), w.currentQueue(ctx.now, ctx.staleAfterMs));
    return ours.contextTokens * (batch / mine);
  }

  /**
   * Learn the speed class's decode speed from an answer's TPOT: against what the configured step
   * and KV read predict for the batch it decoded in (its context at the first token and at the end,
   * averaged). Only answers decoded with no prefill beside them are learned from: a prefill chunk
   * makes its step several times a decode step, and a pool under steady load would otherwise
   * learn its prefill load as slow hardware (on an H100 at 45 requests a second, a quarter of the
   * answers were still 1.3× the configured figures), which the cost already counts as the stall.
   * Under steady load few answers qualify and the last learned speed stays, or until one is, the
   * hardware's prior (hardwarePrior) or the configured figures.
   */
  private learnDecodeSpeed(w: WorkerState, tpotMs: number, contextTokens: number): void {
    const predicted = this.params.decodeStepMs + (this.params.decodeMsPer1kContext / 1000) * contextTokens;
    if (!(predicted > 0) || !(tpotMs > 0)) return;
    let r = this.decodeRatios.get(w.speedClass);
    if (!r) this.decodeRatios.set(w.speedClass, (r = new RecentWindow(DECODE_WINDOW)));
    r.push(tpotMs / predicted);
    if (r.size < DECODE_MIN_SAMPLES) return;
    this.decodeScales.set(w.speedClass, Math.min(DECODE_SCALE_MAX, Math.max(DECODE_SCALE_MIN, r.quantile(DECODE_QUANTILE))));
  }

  /**
   * Learn a floor under the speed class's decode speed from any answer, however much was
   * prefilled beside it: its decode time less all the prefill work the worker could have done
   * meanwhile (the prompt tokens pending there at its first token and those dispatched there
   * since, at the class's prefill rate), against what the configured figures predict. Every step
   * with a prefill chunk in it still decoded a token of the answer, so taking all of the chunk's
   * time out leaves less than the answer's decode steps took: a bound from below, and a loose
   * one on a busy worker. The lower quartile of the class's recent bounds raises its decode scale
   * when it is above the learned one (or the prior); it never lowers it.
   *
   * This is what keeps a slow kind from being taken for a fast one under load, where few answers
   * are decoded alone (learnDecodeSpeed): on 4 A100s and 4 A10Gs (agentic, seed 84) with no
   * labels, the A10Gs' workers were a class of their own (fleet/speed-classes.ts) whose speed
   * the clean answers had not taught it by the time the run ended.
   */
  private learnDecodeFloor(w: WorkerState, elapsedMs: number, steps: number, contextTokens: number, prefillTokens: number): void {
    const predicted = this.params.decodeStepMs + (this.params.decodeMsPer1kContext / 1000) * contextTokens;
    if (!(predicted > 0) || !(steps > 0)) return;
    const decodeMs = Math.max(0, elapsedMs - (1000 * prefillTokens) / this.prefillRate(w));
    let r = this.decodeFloorRatios.get(w.speedClass);
    if (!r) this.decodeFloorRatios.set(w.speedClass, (r = new RecentWindow(DECODE_WINDOW)));
    r.push(decodeMs / steps / predicted);
    if (r.size < DECODE_MIN_SAMPLES) return;
    this.decodeFloors.set(w.speedClass, Math.min(DECODE_SCALE_MAX, r.quantile(DECODE_QUANTILE)));
  }

  /** TPOTs of the requests that recently finished at `workerId`, ascending. */
  recentTpotsAt(workerId: string): readonly number[] {
    return this.recentTpots.get(workerId)?.sorted ?? NO_TPOTS;
  }

  forgetWorker(w: WorkerState): void {
    this.inflightBatch.delete(w.id);
    this.dispatches.delete(w.id);
    this.recentTpots.delete(w.id);
    for (const [key, id] of this.sessions) if (id === w.id) this.sessions.delete(key);
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
    this.dispatches.set(w.id, (this.dispatches.get(w.id) ?? 0) + 1);
    const out = this.expectedOutput(req);
    // Each sequence (a batch's prompts, n answers each) decodes in the worker's batch on its own;
    // a batch's prompts are taken to be as long as the first.
    const seqs = requestSequences(req);
    const charge = {
      worker: w.id,
      contextTokens: seqs * (req.promptTokens.length + out / 2),
      stallShare: seqs * stallShare(out, this.params.tpotWorthMs),
      output: out,
      sequences: seqs,
    };
    req.state.set(BATCH_CHARGED, charge);
    let b = this.inflightBatch.get(w.id);
    if (!b) {
      b = { contextTokens: 0, stallShare: 0, n: 0, outputs: [] };
      this.inflightBatch.set(w.id, b);
    }
    b.contextTokens += charge.contextTokens;
    b.stallShare += charge.stallShare;
    b.n += seqs;
    if (this.params.stallModel !== 'linear') for (let i = 0; i < seqs; i++) insertSorted(b.outputs, out);
  }

  /** Confirm the prediction and learn the speed class's prefill rate from the time to first token. */
  onFirstToken(req: RouteRequest, w: WorkerState, ctx: RoutingContext): void {
    this.matcher.confirm(req, w, ctx.now);
    req.state.set(CONFIRMED, true);
    // A whole answer sent at once arrives at its end: neither its first token nor its TPOT is seen.
    // Several sequences at once (a batch, n > 1) time no one prefill or decode: nothing is learned.
    if (req.stream === false || requestSequences(req) > 1) return;
    if (this.params.stallModel === 'learned' || this.params.learnDecodeSpeed) req.state.set(FIRST_TOKEN_AT, ctx.now);
    if (this.params.learnDecodeSpeed) {
      req.state.set(CONTEXT_AT_FIRST_TOKEN, this.batchContext(w, ctx));
      req.state.set(PREFILL_MARK, { pending: w.inflightPrefillTokens, dispatched: w.prefillTokensDispatched });
      if (w.inflightPrefillTokens === 0) req.state.set(DECODE_ALONE_FROM, this.dispatches.get(w.id) ?? 0);
    }
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
    this.prefillRates.set(w.speedClass, prev + this.params.learnAlpha * (clamped - prev));
  }

  onComplete(req: RouteRequest, w: WorkerState, ok: boolean, ctx: RoutingContext, outputTokens?: number): void {
    if (ok && outputTokens !== undefined) {
      this.outputLength.learn(req, outputTokens);
      const first = req.state.get(FIRST_TOKEN_AT);
      if (outputTokens > 1 && first !== undefined) {
        const tpot = (ctx.now - first) / (outputTokens - 1);
        if (this.params.stallModel === 'learned') this.recordTpot(w.id, tpot);
        const atFirst = req.state.get(CONTEXT_AT_FIRST_TOKEN);
        const mark = req.state.get(PREFILL_MARK);
        if (this.params.learnDecodeSpeed && atFirst !== undefined && mark !== undefined && outputTokens >= DECODE_MIN_OUTPUT) {
          const context = (atFirst + this.batchContext(w, ctx)) / 2;
          if (req.state.get(DECODE_ALONE_FROM) === (this.dispatches.get(w.id) ?? 0)) this.learnDecodeSpeed(w, tpot, context);
          const prefillBeside = mark.pending + w.prefillTokensDispatched - mark.dispatched;
          this.learnDecodeFloor(w, ctx.now - first, outputTokens - 1, context, prefillBeside);
        }
      }
    }
    const charged = req.state.get(BATCH_CHARGED);
    if (charged !== undefined) {
      req.state.delete(BATCH_CHARGED);
      const b = this.inflightBatch.get(charged.worker);
      if (b && (b.n -= charged.sequences) > 0) {
        b.contextTokens -= charged.contextTokens;
        b.stallShare -= charged.stallShare;
        // Absent if it was dispatched under 'linear' (the model changed since): nothing to remove.
        for (let i = 0; i < charged.sequences; i++) removeSorted(b.outputs, charged.output);
      } else this.inflightBatch.delete(charged.worker);
    }
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
  create: (o) => new KvgatePolicy(o),
};

export const oraclePolicy: PolicyDefinition<typeof kvgateOptions> = {
  name: 'oracle',
  description:
    "Simulation only: kvgate's decision rules on each engine's exact cache and queue (perfect information, same heuristics; not a guaranteed bound).",
  options: kvgateOptions,
  create: (o) => new KvgatePolicy(o, 'oracle', true),
};
