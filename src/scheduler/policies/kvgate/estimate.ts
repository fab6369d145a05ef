/**
 * Producer `kvgate-estimate`: what the kvgate policy expects of each candidate for this request,
 * written to the request's state for the kvgate scorers (scorers.ts), its picker (picker.ts) and
 * its first-token hook. The formula, term by term, is in README.md beside this file.
 *
 * Per candidate w:
 *
 *   cached   = leading prompt tokens w holds (prefix index match; exact: the engine's probe), a
 *              block held only in host memory or on disk (KV events' medium) counted at
 *              hostHitWeight or diskHitWeight of a GPU block: loading it back is not free
 *   uncached = prompt tokens − cached
 *   ahead    = prefill tokens queued at w before this request: the gateway's own dispatched and
 *              not-yet-first-token prompt tokens (exact: the larger of that and the engine's
 *              pending prefill)
 *   ttftMs   = 1000 / prefillRate(w) · (ahead + uncached)
 *              + queueMsPerWaiting · waiting + decodeMsPerRunning · running
 *   headroom = clamp01((free blocks − blocks for the uncached tokens) / numGpuBlocks)
 *   session  = the request's session key was last routed to w
 *
 * and what the placement does to decoding, from the engine's step mechanics (vLLM V1, chunked
 * prefill): every step has one token budget; running decodes take one token each and prefill
 * chunks the rest, and a step's time grows by about 1 / prefill rate per prefill token in it
 * (compute) and by k = decodeMsPer1kContext / 1000 per context token of the decodes in it (each
 * reads its whole KV). With N = the requests in w's batch (running + waiting: the larger of the
 * last report and this gateway's own in-flight count), C = their context tokens (the gateway's
 * in-flight prompts plus half their expected outputs), S = Σ stallShare(their expected outputs)
 * (both scaled up from this gateway's requests to N), P = this prompt, out = its expected output,
 * W = tpotWorthMs, k and decodeStepMs scaled by the speed class's decodeScale:
 *
 *   decodeMs = W · k · C / headroom       each of this request's decode steps reads the batch's KV
 *              (0 for a one-token answer)
 *              + tailMs                  with e2eTail: what its own E2E loses beyond that
 *   tailMs   = max(0, (out − 1 − m̄) · k · C − W · k · C / headroom)
 *              an answer longer than the mean m̄ expected of the gateway's requests in flight
 *              (over the fleet) finishes last, its E2E is the tail's: each ms of TPOT costs it its
 *              tokens beyond m̄. A short answer's E2E is no tail; its TPOT price stands
 *   headroom = max(0.05, 1 − (decodeStepMs + k · C) / tpotTargetMs)
 *   stallMs  = what its prefill (and its KV read) costs the batch: stall.ts (stallModel); of it,
 *              readSlackMs the batch had to spare below its TPOT target
 *              + msPerToken · joinedPrefillTokens(uncached, B) where a prefill is ahead (ahead > 0):
 *              the first-token delay of the prompt ahead, whose last chunk shares its step with
 *              this prompt's first (stall.ts; B = prefillChunkTokens, the engine's step budget)
 *              + λ · U · (A + U / 2): the first-token delay of the requests expected to arrive
 *              behind it (λ = the worker's recent arrivals per ms, fleet/arrival-rate.ts; U = its
 *              own prefill time, msPerToken · uncached; A = the wait ahead, msPerToken · ahead)
 *   overlap  = min(out, m̄w / 2)          the steps shared with a neighbour: at most its remaining
 *                                         decode, on average half its expected output; m̄w = the
 *                                         mean expected output of the gateway's requests at w (this
 *                                         request's own when none is there)
 *   load     = min(1, (decodeStepMs + k · (C + P + out/2)) / tpotTargetMs)   the batch's TPOT
 *                                         with this request, as a share of the target
 *   batchHeadroom = max(0.05, 1 − load)
 *
 * and what it risks if w runs out of KV before its requests finish (vLLM then preempts the latest
 * arrival, frees its blocks and recomputes it from scratch):
 *
 *   inUse    = the larger of the blocks in use as last reported (plus what was reserved since) and
 *              the blocks this gateway reserved for everything it has in flight at w (admission's
 *              usedBlocks)
 *   need     = blocks of the uncached prompt + reserved output (as the kv-fit filter counts them)
 *   pOver    = min(1, max(0, inUse + need − numGpuBlocks) / need)
 *   preemptMs = pOver · (R + stallWeight · recompute stall(R)),  R = msPerToken · (P + out)
 *   costMs   = ttftMs + decodeMs + stallWeight · stallMs + preemptionWeight · preemptMs
 *
 * All terms are in milliseconds of TTFT (W converts TPOT: the ratio of the TTFT and TPOT
 * targets). The SLO is a threshold: a step 1 ms slower costs little at 10 ms of a 50 ms target and
 * everything at 45, so this request's TPOT is divided by the headroom left to it, and the gap it
 * puts in its neighbours' TPOT by theirs. A slower kind's longer bare step is not charged as such:
 * an idle worker of it still meets the target for one more request.
 *
 * waiting/running come from the last snapshot moved forward by this gateway's dispatches, first
 * tokens and completions since (WorkerState.currentQueue), free blocks from the last snapshot less
 * what was reserved since, or both from the gateway's in-flight accounting once the snapshot is
 * stale (flagged USED_STALE_METRICS); in exact mode from the probe. The table adds the candidates'
 * ranges (min ttft, min cost, min/max waiting and running) that the relative scorers normalise with
 * (waiting and running over every candidate before pruning, prune.ts).
 *
 * Estimates are kept until the request is dispatched: a second decision before then estimates only
 * the workers not seen before. At dispatch only the chosen worker's is kept (keepChosenEstimate),
 * so a retry after a worker failed estimates the others afresh; the others' objects are reused by
 * later decisions. An estimate's fractional fields are each a boxed number that a fresh object
 * allocates and a reused one overwrites in place: at 64 workers, fresh estimates were a fifth of
 * everything a simulated run allocated.
 */
import { usedBlocks } from '../../../admission/kv-pressure.js';
import type { WorkerState } from '../../../fleet/worker-state.js';
import { blockKeysOf } from '../../../kv/prompt-blocks.js';
import { DEFAULT_TIER_WEIGHTS, tierCredit, type TierWeights } from '../../../kv/tiers.js';
import { stateKey } from '../../../util/state.js';
import { blocksNeeded } from '../../filters/kv-fit.js';
import type { PrefixMatcher } from '../../index/prefix-match.js';
import { clamp01 } from '../../pipeline.js';
import { USED_STALE_METRICS } from '../../state-keys.js';
import type { Producer, RouteRequest, RoutingContext } from '../../types.js';
import { KVGATE_FLEET_RANGES } from './prune.js';
import { behindDelayMs, joinedPrefillTokens, linearStall, missesStall, type BatchView, type StallModel } from './stall.js';

/** What kvgate estimated for one worker. */
export interface KvgateEstimate {
  /** Expected prefix hit: cachedTokens / prompt tokens. */
  hit: number;
  cachedTokens: number;
  uncachedTokens: number;
  aheadTokens: number;
  ttftMs: number;
  /** Milliseconds per prefill token at this worker (1000 / its prefill rate). */
  msPerToken: number;
  headroom: number;
  waiting: number;
  running: number;
  session: boolean;
  /** Output tokens expected (the policy's expectedOutput). */
  outputTokens: number;
  /** Context tokens of the requests in w's batch (this request's decode steps read their KV). */
  batchContextTokens: number;
  /** What the batch's KV reads cost this request's TPOT at w (and, with e2eTail, its E2E), in ms of TTFT. */
  decodeMs: number;
  /**
   * The part of decodeMs that prices this request's own E2E beyond what its TPOT is worth
   * (e2eTail): a reason to place it, no reason to give up a cache hit (picker.ts).
   */
  tailMs: number;
  /** What this request costs w's batch: its prefill stall weighted by stallShare, its KV read. */
  stallMs: number;
  /**
   * stallWeight · the part of stallMs the batch had to spare below its TPOT target (stall.ts,
   * readSlackMs): in costMs, but no reason to give up a cache hit (picker.ts).
   */
  readSlackMs: number;
  /** What a preemption for lack of KV at w would cost, times its likelihood, in ms of TTFT. */
  preemptMs: number;
  /** ttftMs + decodeMs + stallWeight · stallMs + preemptionWeight · preemptMs, in ms of TTFT. */
  costMs: number;
}

/** The candidates of one decision, their estimates in the same order, and the ranges. */
export interface KvgateEstimateTable {
  ws: readonly WorkerState[];
  est: KvgateEstimate[];
  minTtft: number;
  minCost: number;
  minWait: number;
  maxWait: number;
  minRun: number;
  maxRun: number;
}

/**
 * The least TPOT headroom (1 − expected TPOT / target) the decode term divides by: past the target
 * the request misses it anyway, and 1/20 keeps a worker far past it costlier than one just past.
 */
const MIN_TPOT_HEADROOM = 0.05;

/**
 * What a one-off stall of 1 ms costs a request in the middle of its decode, in milliseconds of
 * TTFT: its TTFT is behind it, and its TPOT grows by 1 / (n − 1) ms, worth tpotWorthMs each, so
 * tpotWorthMs / (n − 1) for n > 1 output tokens. A one-token answer is still waiting for that
 * token (1: the stall is TTFT to it).
 */
export function stallShare(out: number, tpotWorthMs: number): number {
  return out > 1 ? tpotWorthMs / (out - 1) : 1;
}

/** Every worker estimated for the request so far, by worker. */
export const KVGATE_ESTIMATES = stateKey<Map<WorkerState, KvgateEstimate>>('kvgate.estimates');
/** The current decision's candidates and their estimates. */
export const KVGATE_ESTIMATE_TABLE = stateKey<KvgateEstimateTable>('kvgate.estimate-table');

/** This gateway's requests in flight at a worker, as the estimate reads them. */
export interface InflightBatch {
  contextTokens: number;
  stallShare: number;
  /** Sequences, and their expected output tokens together. */
  n: number;
  outputTokens: number;
  /** Expected output tokens of each, ascending. */
  outputs: readonly number[];
}

export interface KvgateEstimateOptions {
  matcher: PrefixMatcher;
  /** Read cache, queue and free blocks from WorkerState.oracle where present. */
  exact: boolean;
  queueMsPerWaiting: number;
  decodeMsPerRunning: number;
  /**
   * How much a decode step lengthens per 1,000 context tokens in the batch, ms (the KV each step
   * reads); 0 drops the KV-read terms.
   */
  decodeMsPer1kContext: number;
  /** What a millisecond of TPOT is worth in milliseconds of TTFT (see stallShare). */
  tpotWorthMs: number;
  /** A decode step with nothing in the batch (reading the weights), ms. */
  decodeStepMs: number;
  /**
   * How much slower (> 1) or faster `w`'s pool decodes than decodeStepMs and decodeMsPer1kContext
   * say: both are memory reads, so other hardware scales both (default 1).
   */
  decodeScale?(w: WorkerState): number;
  /** The TPOT the fleet is run to, ms: this request's TPOT is weighed by the headroom left to it. */
  tpotTargetMs: number;
  /** What the delay of the other requests counts for against this request's own. */
  stallWeight: number;
  /**
   * The engine's prefill token budget per step (vLLM's max_num_batched_tokens): a prompt sent
   * where a prefill is under way takes the rest of the step in which that one finishes (0: not
   * counted).
   */
  prefillChunkTokens: number;
  /**
   * Count the first-token delay a prefill puts on the requests expected to arrive behind it
   * (default true; hand-worked tests of the other terms turn it off).
   */
  arrivalsBehind?: boolean;
  /** How the stall is priced (stall.ts; default linear). */
  stallModel?: 'linear' | 'misses';
  /**
   * The mean expected output of this gateway's sequences in flight, over the fleet (undefined:
   * none is). With it the E2E of longer answers is priced (tailMs here, the tail share in
   * stall.ts); without it, not (e2eTail off).
   */
  meanOutputInFlight?(): number | undefined;
  /** What the expected cost of a preemption for lack of KV counts for (0: ignored). */
  preemptionWeight: number;
  /** Credit of a cached block in host memory and on disk, a GPU block being 1 (default Dynamo's). */
  tierWeights?: TierWeights;
  /** Prefill throughput assumed for `w`, tokens/s. */
  prefillRate(w: WorkerState): number;
  /** Output tokens expected of the request (at most max_tokens, capped as for reservations). */
  expectedOutput(req: RouteRequest): number;
  /**
   * This gateway's requests in flight at `w` (their sequences number w.inflightSequences): their context
   * tokens (prompt plus half the expected output), Σ stallShare(expected output) and the expected
   * outputs themselves, ascending (kept for stallModel 'misses').
   */
  inflightBatch(w: WorkerState): InflightBatch;
  /** Worker id the session key was last routed to. */
  sessionWorker(sessionKey: string): string | undefined;
}

/**
 * The requests batched at a worker: this gateway's own in flight there (`mine`, exact for its
 * traffic), or the last report moved forward when that shows more (other gateways' requests),
 * unless the report is stale.
 */
export function reportedBatch(mine: number, stale: boolean, q: { running: number; waiting: number }): number {
  return Math.max(mine, stale ? 0 : q.running + q.waiting);
}

export function kvgateEstimateProducer(o: KvgateEstimateOptions): Producer {
  const stall = o.stallModel === 'misses' ? missesStall(o.tpotWorthMs, o.tpotTargetMs) : linearStall;
  return {
    name: 'kvgate-estimate',
    produce(req, ws, ctx) {
      const m = estimatesOf(req);
      if (ws.some((w) => !m.has(w))) {
        const matches = o.matcher.matches(req, ws, ctx);
        const sessionWorker = req.sessionKey !== undefined ? o.sessionWorker(req.sessionKey) : undefined;
        const out = o.expectedOutput(req);
        // With nothing in flight this request is the mean: no answer is the tail's yet.
        const meanOutput = o.meanOutputInFlight ? (o.meanOutputInFlight() ?? out) : Infinity;
        const inputs: WorkerInputs = { o, stall, out, meanOutput, indexTokens: 0, session: false };
        for (const w of ws) {
          if (m.has(w)) continue;
          const x = matches.get(w);
          // Tokens cached at the worker, each block weighed by its tier (all GPU without offload).
          inputs.indexTokens = x && x.blocks > 0 ? Math.round((x.tokens * tierCredit(x.tiers, o.tierWeights ?? DEFAULT_TIER_WEIGHTS)) / x.blocks) : 0;
          inputs.session = sessionWorker === w.id;
          m.set(w, estimateWorker(req, w, ctx, inputs, spareEstimates.pop() ?? blankEstimate()));
        }
      }
      const est = ws.map((w) => m.get(w)!);
      const t: KvgateEstimateTable = { ws, est, minTtft: Infinity, minCost: Infinity, minWait: Infinity, maxWait: -Infinity, minRun: Infinity, maxRun: -Infinity };
      for (const e of est) {
        if (e.ttftMs < t.minTtft) t.minTtft = e.ttftMs;
        if (e.costMs < t.minCost) t.minCost = e.costMs;
        if (e.waiting < t.minWait) t.minWait = e.waiting;
        if (e.waiting > t.maxWait) t.maxWait = e.waiting;
        if (e.running < t.minRun) t.minRun = e.running;
        if (e.running > t.maxRun) t.maxRun = e.running;
      }
      // Pruned to fewer candidates (prune.ts): the queue and load scorers rate against every candidate's range.
      const fleet = req.state.get(KVGATE_FLEET_RANGES);
      if (fleet !== undefined) {
        t.minWait = Math.min(t.minWait, fleet.minWait);
        t.maxWait = Math.max(t.maxWait, fleet.maxWait);
        t.minRun = Math.min(t.minRun, fleet.minRun);
        t.maxRun = Math.max(t.maxRun, fleet.maxRun);
      }
      req.state.set(KVGATE_ESTIMATE_TABLE, t);
    },
  };
}

interface WorkerInputs {
  o: KvgateEstimateOptions;
  stall: StallModel;
  /** This request's expected output tokens. */
  out: number;
  /** The mean expected output of the requests in flight (Infinity: e2eTail off). */
  meanOutput: number;
  /** Leading prompt tokens the prefix index says w holds (unless exact reads the engine's). */
  indexTokens: number;
  /** w is the session's last worker. */
  session: boolean;
}

/** Estimates given back at dispatch (keepChosenEstimate), for later decisions to fill. */
const spareEstimates: KvgateEstimate[] = [];
/** More than a decision over this many workers uses; past it, given-back estimates are dropped. */
const MAX_SPARE_ESTIMATES = 4096;

function blankEstimate(): KvgateEstimate {
  return {
    hit: 0,
    cachedTokens: 0,
    uncachedTokens: 0,
    aheadTokens: 0,
    ttftMs: 0,
    msPerToken: 0,
    headroom: 0,
    waiting: 0,
    running: 0,
    session: false,
    outputTokens: 0,
    batchContextTokens: 0,
    decodeMs: 0,
    tailMs: 0,
    stallMs: 0,
    readSlackMs: 0,
    preemptMs: 0,
    costMs: 0,
  };
}

/**
 * The batch view the stall models read while one worker is estimated (they keep nothing of it):
 * one object overwritten per worker rather than one allocated, as for the estimates.
 */
const view: BatchView = {
  batch: 0,
  mine: 0,
  scale: 0,
  stallShare: 0,
  outputs: [],
  out: 0,
  batchHeadroom: 0,
  overlap: 0,
  kPerToken: 0,
  ownCtx: 0,
  tpotLoad: 0,
  slackMs: 0,
  meanOutput: 0,
};

/** The estimate for one candidate (the formula above), written into `e`. */
function estimateWorker(req: RouteRequest, w: WorkerState, ctx: RoutingContext, i: WorkerInputs, e: KvgateEstimate): KvgateEstimate {
  const { o, out } = i;
  const prompt = req.promptTokens.length;
  const probe = o.exact ? w.oracle : undefined;
  const cached = Math.min(prompt, probe ? probe.cachedPrefixTokens(req.promptTokens, blockKeysOf(req.state)) : i.indexTokens);
  const uncached = prompt - cached;
  const stale = !probe && w.isStale(ctx.now, ctx.staleAfterMs);
  if (stale) req.state.set(USED_STALE_METRICS, true);
  const q = probe ? { running: probe.running(), waiting: probe.waiting() } : w.currentQueue(ctx.now, ctx.staleAfterMs);
  // The engine's pending prefill counts every gateway's traffic but not the chunk of the step in
  // flight (taken off at the step's start, its first token due only at the step's end); the
  // gateway's own in-flight prefill still counts that step. Take the larger.
  const ahead = Math.max(0, probe ? Math.max(probe.pendingPrefillTokens(), w.inflightPrefillTokens) : w.inflightPrefillTokens);
  const msPerToken = 1000 / o.prefillRate(w);
  const decodeScale = o.decodeScale?.(w) ?? 1;
  const kPerToken = (o.decodeMsPer1kContext / 1000) * decodeScale;
  const stepMs = o.decodeStepMs * decodeScale;
  const ttftMs = msPerToken * (ahead + uncached) + o.queueMsPerWaiting * q.waiting + o.decodeMsPerRunning * q.running;
  // The batch this request joins: what runs and waits there now. This gateway's own in-flight
  // count is exact for its traffic; the last report may show more (other gateways' requests). Its
  // context is the gateway's own in-flight context, scaled up to the batch, or this request's own
  // context per request when nothing of ours is there.
  const mine = w.inflightSequences;
  const batch = probe ? probe.running() + probe.waiting() : reportedBatch(mine, stale, q);
  const ours = o.inflightBatch(w);
  const scale = mine > 0 ? Math.max(1, batch / mine) : 0;
  const batchCtx = mine > 0 ? ours.contextTokens * scale : batch * (prompt + out / 2);
  const batchStall = mine > 0 ? ours.stallShare * scale : batch * stallShare(out, o.tpotWorthMs);
  const kvMs = kPerToken * batchCtx;
  const headroom = Math.max(MIN_TPOT_HEADROOM, 1 - (stepMs + kvMs) / o.tpotTargetMs);
  const tpotDecodeMs = i.stall.ownDecodeMs(out > 1 ? (o.tpotWorthMs * kvMs) / headroom : 0);
  const tailMs = out - 1 > i.meanOutput ? Math.max(0, (out - 1 - i.meanOutput) * kvMs - tpotDecodeMs) : 0;
  const decodeMs = tpotDecodeMs + tailMs;
  const ownCtx = prompt + out / 2;
  const tpotLoad = Math.min(1, (stepMs + kvMs + kPerToken * ownCtx) / o.tpotTargetMs);
  const batchHeadroom = Math.max(MIN_TPOT_HEADROOM, 1 - tpotLoad);
  view.batch = batch;
  view.mine = mine;
  view.scale = scale;
  view.stallShare = batchStall;
  view.outputs = ours.outputs;
  view.out = out;
  view.batchHeadroom = batchHeadroom;
  // Steps shared with an average neighbour: half its expected output, the mean over the batch. A
  // mean weighted by 1 / (n − 1) (stallShare's) would count the steps of the short answers only.
  view.overlap = batch > 0 ? Math.min(out, (mine > 0 && ours.n > 0 ? ours.outputTokens / ours.n : out) / 2) : 0;
  view.kPerToken = kPerToken;
  view.ownCtx = ownCtx;
  view.tpotLoad = tpotLoad;
  view.slackMs = o.tpotTargetMs * batchHeadroom;
  view.meanOutput = i.meanOutput;
  // A prompt ahead still in prefill shares its last step with this one's first chunk: its first
  // token waits for those tokens, a delay to a TTFT, counted as this request's own would be.
  const joinMs = ahead > 0 ? msPerToken * joinedPrefillTokens(uncached, o.prefillChunkTokens) : 0;
  // The requests that will arrive behind it wait for its prefill too.
  const behindMs = o.arrivalsBehind === false ? 0 : behindDelayMs(w.arrivals.perMs(ctx.now), msPerToken * ahead, msPerToken * uncached);
  const stallMs = i.stall.prefillStallMs(view, msPerToken, uncached) + joinMs + behindMs;
  const free = probe ? probe.freeBlocks() : w.estimatedFreeBlocks(ctx.now, ctx.staleAfterMs);
  const need = Math.ceil(uncached / w.blockSize);
  // Room for the request to the end of its answer, with every request there at its end.
  const total = w.numGpuBlocks;
  const footprint = blocksNeeded(req, w, cached);
  const overflow = usedBlocks(total, free, w.inflightBlocks) + footprint - total;
  const recomputeMs = msPerToken * (prompt + out);
  const preemptMs =
    overflow > 0
      ? Math.min(1, overflow / Math.max(1, footprint)) * (recomputeMs + o.stallWeight * i.stall.recomputeStallMs(view, recomputeMs))
      : 0;
  e.hit = prompt > 0 ? cached / prompt : 0;
  e.cachedTokens = cached;
  e.uncachedTokens = uncached;
  e.aheadTokens = ahead;
  e.ttftMs = ttftMs;
  e.msPerToken = msPerToken;
  e.headroom = clamp01((free - need) / Math.max(1, w.numGpuBlocks));
  e.waiting = q.waiting;
  e.running = q.running;
  e.session = i.session;
  e.outputTokens = out;
  e.batchContextTokens = batchCtx;
  e.decodeMs = decodeMs;
  e.tailMs = tailMs;
  e.stallMs = stallMs;
  e.readSlackMs = o.stallWeight * i.stall.readSlackMs(view);
  e.preemptMs = preemptMs;
  e.costMs = ttftMs + decodeMs + o.stallWeight * stallMs + o.preemptionWeight * preemptMs;
  return e;
}

function estimatesOf(req: RouteRequest): Map<WorkerState, KvgateEstimate> {
  let m = req.state.get(KVGATE_ESTIMATES);
  if (!m) {
    m = new Map();
    req.state.set(KVGATE_ESTIMATES, m);
  }
  return m;
}

/** The estimate table the producer wrote for exactly these candidates. */
export function kvgateEstimateTable(req: RouteRequest, ws: readonly WorkerState[]): KvgateEstimateTable {
  const t = req.state.get(KVGATE_ESTIMATE_TABLE);
  if (!t || t.ws !== ws) throw new Error('the kvgate scorers need the kvgate-estimate producer to run first, over the same candidates');
  return t;
}

/** The estimate for `w` the producer wrote for this request. */
export function kvgateEstimate(req: RouteRequest, w: WorkerState): KvgateEstimate | undefined {
  return req.state.get(KVGATE_ESTIMATES)?.get(w);
}

/**
 * The request went to `w`: keep its estimate there (the first-token hook reads it) and drop the
 * others and the table. A request holds its state until it ends, and a decision's estimates of
 * every candidate kept that long would outlive the young generation: over 64 workers, most of the
 * collector's work.
 */
export function keepChosenEstimate(req: RouteRequest, w: WorkerState): void {
  req.state.delete(KVGATE_ESTIMATE_TABLE);
  const m = req.state.get(KVGATE_ESTIMATES);
  if (m === undefined || m.size <= 1) return;
  const e = m.get(w);
  // Nothing else holds the others now (the table is gone, the scorers and the picker are done).
  for (const other of m.values()) if (other !== e && spareEstimates.length < MAX_SPARE_ESTIMATES) spareEstimates.push(other);
  if (e === undefined) req.state.delete(KVGATE_ESTIMATES);
  else req.state.set(KVGATE_ESTIMATES, new Map([[w, e]]));
}
