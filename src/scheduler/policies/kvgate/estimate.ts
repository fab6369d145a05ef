/**
 * Producer `kvgate-estimate`: what the kvgate policy expects of each candidate for this request,
 * written to the request's state for the kvgate scorers (scorers/kvgate.ts), its picker
 * (pickers/kvgate.ts) and its first-token hook.
 *
 * Per candidate w:
 *
 *   cached   = leading prompt tokens w holds (prefix index match; exact: the engine's probe)
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
 * reads its whole KV). So with N = the requests in w's batch (running + waiting: the larger of the
 * last report and this gateway's own in-flight count), C = their context tokens (the gateway's
 * in-flight prompts plus half their expected outputs), S = Σ stallShare(their expected outputs)
 * (both scaled up from this gateway's requests to N), P = this prompt, out = its expected output
 * (max_tokens, or the share of it that answers like this one have used: the policy's
 * OutputLengthModel, capped as for reservations), W = tpotWorthMs:
 *
 *   decodeMs = W · k · C / headroom       each of this request's decode steps reads the batch's
 *                                         KV: its TPOT grows by k · C, worth more the nearer
 *                                         that brings it to the target (0 for a one-token answer)
 *   headroom = max(0.05, 1 − (decodeStepMs + k · C) / tpotTargetMs)
 *   stallMs  = S · msPerToken · uncached  its prefill chunks ride in the batch's steps: a one-off
 *              / batchHeadroom            gap that adds T / (n − 1) to the TPOT of a request with
 *                                         n tokens to generate (stallShare = W / (n − 1): most to
 *                                         short answers about to finish), worth more the nearer
 *                                         the batch's TPOT is to the target with this request in it
 *              + N · overlap · k · (P + out/2)   and its KV is read in each step it shares with
 *                                         them, adding k · (P + out/2) ms to each of their steps
 *                                         (with readHeadroom, divided by batchHeadroom too)
 *   overlap  = min(out, n̄ / 2)           the steps shared: at most the neighbour's remaining
 *                                         decode, on average half its expected output; n̄ = W · N / S
 *                                         (the batch's expected outputs, harmonic mean)
 *   batchHeadroom = max(0.05, 1 − (decodeStepMs + k · (C + P + out/2)) / tpotTargetMs)
 *
 * and what it risks if w runs out of KV before its requests finish (vLLM then preempts the latest
 * arrival, frees its blocks and recomputes it from scratch):
 *
 *   inUse    = the larger of the blocks in use as last reported (plus what was reserved since) and
 *              the blocks this gateway reserved for everything it has in flight at w, which counts
 *              the output those requests will still write (no scrape can show it); admission's
 *              usedBlocks
 *   need     = blocks of the uncached prompt + reserved output (as the kv-fit filter counts them)
 *   pOver    = min(1, max(0, inUse + need − numGpuBlocks) / need)    the share of this request
 *                                         that does not fit if every request there grew to its end
 *   preemptMs = pOver · msPerToken · (P + out) · (1 + stallWeight · S / batchHeadroom)
 *                                         a recompute of its context, and the stall that recompute
 *                                         puts in the batch's steps, as its first prefill did
 *   costMs   = ttftMs + decodeMs + stallWeight · stallMs + preemptionWeight · preemptMs
 *
 * With stallModel 'misses' the stall is counted as the TPOT targets it breaks instead:
 *
 *   slackMs  = batchHeadroom · tpotTargetMs   the TPOT a neighbour has left below the target, in a
 *                                             batch that also reads this request's KV
 *   misses(T) = the batch's requests with 2 ≤ n < 1 + T / slackMs output tokens: those a gap of T
 *              ms (adding T / (n − 1) to their TPOT) pushes past the target, counted in this
 *              gateway's in-flight requests by their expected outputs and scaled up to N
 *   stallMs  = W · tpotTargetMs · misses(msPerToken · uncached)    a miss is worth the TTFT target
 *   preemptMs = pOver · (R + stallWeight · W · tpotTargetMs · misses(R)),  R = msPerToken · (P + out)
 *   decodeMs = min(W · tpotTargetMs, W · k · C / headroom)   this request's own TPOT is worth at
 *                                             most one miss too, as each neighbour's is
 *
 * and the neighbours' KV read enters only through slackMs. Uncapped, the own term reached 16
 * misses' worth (W · k · C / 0.05 with 40 ms of KV read) on a batch near the target, where the
 * neighbours' misses count nothing for a small gap: on agentic (seed 21, 8 workers) the 1–2% of
 * context between workers then outweighed a session's cached prefix, 12–21% of the turns left the
 * worker that held it (linear: 1–2%), the fleet prefilled 35% more tokens and every worker's TPOT
 * went past the target (capacity 0.91× linear's; capped, 0.96×). The stall of a long prompt spread over
 * a long answer's tokens (180 ms over 125 tokens: 1.4 ms of TPOT) breaks nothing there; over a
 * short answer's it does (60 ms over 4). A one-token answer has no TPOT, and its prefill runs
 * before a later arrival's: never a miss.
 *
 * stallModel 'learned' counts each neighbour with n ≥ 2 tokens to generate as the chance that its
 * TPOT crosses the target: the share of the worker's recent TPOTs (its last 128 finished requests)
 * in (target − d, target], with d = T / (n − 1) + k · (P + out/2) the TPOT this request adds to
 * it. Far below the target a long answer is no miss, as in 'misses'; on a worker whose requests
 * finish near the target every neighbour counts, by how near. A worker with nothing finished yet
 * shows nobody near the target.
 *
 * What each model does on the built-in workloads, and why 'linear' stays the default, is in the
 * README ("Capacity at SLO first"): the other two come closer to the latency targets at the
 * common load and do not let long prompts miss for the short ones' sake, but give up part of the
 * lead on bursty and agentic traffic by the aggregate count.
 *
 * costMs puts the TTFT a cached prefix saves against the TPOT that joining a crowded batch costs
 * this request and what its prefill and its KV cost the worker's running requests, all in
 * milliseconds of TTFT (W converts TPOT: the ratio of the TTFT and TPOT targets). The SLO is a
 * threshold: a step 1 ms slower costs little at 10 ms of a 50 ms target and everything at 45, so
 * this request's own TPOT is divided by the headroom left to it, and the gap it puts in its
 * neighbours' TPOT by theirs; decodeStepMs (a step's fixed part, reading the weights) only places
 * it against the target. The KV read is counted as the time it adds to the neighbours' decodes,
 * which keeps a hot worker's batch from growing while others have room (valued as TPOT instead it
 * barely counts: shared-prefix's TTFT p99 at the common load was then 0.43 s against 0.17 s). It
 * is bounded by the steps the neighbours have left: taking each to decode as long as this request
 * (N · out · k · (P + out/2)) priced the workers serving many short answers out of reach for a
 * long prompt with a long answer, and long prompts queued and preempted on the few workers full of
 * long contexts (bursty TTFT p99 7 s; README, "Capacity at SLO first"). The same stall term still
 * sends long prompts where few short answers decode, which are the workers already full of long
 * contexts; the preemption term is what stops that before their KV runs out. pOver is an upper
 * bound (requests seldom all reach their end at once), so its weight is below one; see the
 * policy's preemptionWeight. The prefill rate is the
 * one learned from first tokens; k and decodeStepMs are configured (KV bytes per token and weight
 * bytes over memory bandwidth) and scaled per speed class by how fast its workers are seen to decode
 * (decodeScale: the policy's learnDecodeSpeed).
 *
 * waiting/running come from the last snapshot moved forward by this gateway's dispatches, first
 * tokens and completions since (WorkerState.currentQueue), free blocks from the last snapshot
 * less what was reserved since, or both from the gateway's in-flight accounting once the snapshot
 * is stale (flagged USED_STALE_METRICS); in exact
 * mode from the probe. The table adds the candidates' ranges (min ttft, min cost, min/max waiting
 * and running) that the relative scorers normalise with.
 *
 * Inputs: the prefix matcher, the policy's learned prefill rate per worker, its in-flight batch
 * accounting per worker (context tokens, Σ stallShare(expected output)) and session table.
 * Options: queueMsPerWaiting, decodeMsPerRunning, decodeMsPer1kContext, tpotWorthMs, decodeStepMs,
 * tpotTargetMs, stallWeight, preemptionWeight (the kvgate policy's).
 *
 * Estimates are kept for the request's lifetime: a retry over other workers estimates only the
 * workers not seen before.
 */
import { usedBlocks } from '../../../admission/kv-pressure.js';
import type { WorkerState } from '../../../fleet/worker-state.js';
import { blockKeysOf } from '../../../kv/prompt-blocks.js';
import { stateKey } from '../../../util/state.js';
import { blocksNeeded } from '../../filters/kv-fit.js';
import type { PrefixMatcher } from '../../index/prefix-match.js';
import { clamp01 } from '../../pipeline.js';
import { USED_STALE_METRICS } from '../../state-keys.js';
import { countInRange, lowerBound, upperBound } from '../../../util/sorted.js';
import type { Producer, RouteRequest } from '../../types.js';

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
  /** What the batch's KV reads cost this request's TPOT at w, in ms of TTFT. */
  decodeMs: number;
  /** What this request costs w's batch: its prefill stall weighted by stallShare, its KV read. */
  stallMs: number;
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
   * How the stall is priced: per ms of every neighbour's TPOT, per TPOT target it breaks, or per
   * target it would break given the worker's recent TPOTs.
   */
  stallModel?: 'linear' | 'misses' | 'learned';
  /**
   * The KV read the request adds to its neighbours' steps is weighed, like its prefill gap, by the
   * headroom their TPOT has left (default false: counted as it is).
   */
  readHeadroom?: boolean;
  /** TPOTs of the requests that recently finished at `w`, ascending ('learned'). */
  recentTpots?(w: WorkerState): readonly number[];
  /** What the expected cost of a preemption for lack of KV counts for (0: ignored). */
  preemptionWeight: number;
  /** Prefill throughput assumed for `w`, tokens/s. */
  prefillRate(w: WorkerState): number;
  /** Output tokens expected of the request (at most max_tokens, capped as for reservations). */
  expectedOutput(req: RouteRequest): number;
  /**
   * This gateway's requests in flight at `w` (their sequences number w.inflightSequences): their context
   * tokens (prompt plus half the expected output), Σ stallShare(expected output) and the expected
   * outputs themselves, ascending (kept and read by the 'misses' and 'learned' stall models).
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
  return {
    name: 'kvgate-estimate',
    produce(req, ws, ctx) {
      const m = estimatesOf(req);
      let complete = true;
      for (const w of ws) {
        if (!m.has(w)) {
          complete = false;
          break;
        }
      }
      if (!complete) {
        const matches = o.matcher.matches(req, ws, ctx);
        const prompt = req.promptTokens.length;
        const sessionWorker = req.sessionKey !== undefined ? o.sessionWorker(req.sessionKey) : undefined;
        const out = o.expectedOutput(req);
        const kPerTokenConfigured = o.decodeMsPer1kContext / 1000;
        // A neighbour's TPOT miss ('misses' stall model), in ms of TTFT.
        const missMs = o.tpotWorthMs * o.tpotTargetMs;
        for (const w of ws) {
          if (m.has(w)) continue;
          const probe = o.exact ? w.oracle : undefined;
          const cached = Math.min(prompt, probe ? probe.cachedPrefixTokens(req.promptTokens, blockKeysOf(req.state)) : (matches.get(w)?.tokens ?? 0));
          const uncached = prompt - cached;
          const stale = !probe && w.isStale(ctx.now, ctx.staleAfterMs);
          if (stale) req.state.set(USED_STALE_METRICS, true);
          const q = probe ? { running: probe.running(), waiting: probe.waiting() } : w.currentQueue(ctx.now, ctx.staleAfterMs);
          // The engine's pending prefill counts every gateway's traffic but not the chunk of the
          // step in flight (taken off at the step's start, its first token due only at the step's
          // end); the gateway's own in-flight prefill still counts that step. Take the larger.
          const ahead = Math.max(0, probe ? Math.max(probe.pendingPrefillTokens(), w.inflightPrefillTokens) : w.inflightPrefillTokens);
          const msPerToken = 1000 / o.prefillRate(w);
          const decodeScale = o.decodeScale?.(w) ?? 1;
          const kPerToken = kPerTokenConfigured * decodeScale;
          const stepMs = o.decodeStepMs * decodeScale;
          const ttftMs =
            msPerToken * (ahead + uncached) + o.queueMsPerWaiting * q.waiting + o.decodeMsPerRunning * q.running;
          // The batch this request joins: what runs and waits there now, all of which decodes
          // beside it. This gateway's own in-flight count is exact for its traffic; the last report
          // may show more (other gateways' requests). Its context is the gateway's own in-flight
          // context, scaled up to the batch, or this request's own context per request when nothing
          // of ours is there.
          const mine = w.inflightSequences;
          const batch = probe
            ? probe.running() + probe.waiting()
            : reportedBatch(mine, stale, q);
          const ours = o.inflightBatch(w);
          const scale = mine > 0 ? Math.max(1, batch / mine) : 0;
          const batchCtx = mine > 0 ? ours.contextTokens * scale : batch * (prompt + out / 2);
          const batchStall = mine > 0 ? ours.stallShare * scale : batch * stallShare(out, o.tpotWorthMs);
          // This request's TPOT here: a bare step plus the batch's KV. Its worth grows as it nears
          // the target (the SLO is a threshold: far below it a slower step costs little, near it
          // everything), 1 / the headroom left, floored so costs stay ordered beyond the target.
          const kvMs = kPerToken * batchCtx;
          const headroom = Math.max(MIN_TPOT_HEADROOM, 1 - (stepMs + kvMs) / o.tpotTargetMs);
          // On slower hardware (a mixed pool) both the bare step and the KV read scale with the
          // kind's decode speed, so the headroom is smaller and a batch there costs more. A slower
          // kind's longer bare step is not charged as such: an idle worker of it still meets the
          // target for one more request, and charging it (as the TPOT it adds over the fastest
          // candidate's, divided by the headroom) left the slow kind idle while the fast one
          // crowded past the target (4 A100s and 4 A10Gs, rag, seed 91: 0.91× llm-d-precise's
          // capacity at the SLO, 1.02× without it).
          // 'misses' prices every TPOT by the targets it breaks: this request's own is worth at most
          // one miss, as each neighbour's is (uncapped, 1 / headroom made a batch near the target
          // cost many misses' worth, and sessions left their cached prefixes to spread context).
          const decodeLinearMs = out > 1 ? (o.tpotWorthMs * kvMs) / headroom : 0;
          const decodeMs = o.stallModel === 'misses' ? Math.min(missMs, decodeLinearMs) : decodeLinearMs;
          // What it does to the batch: its prefill's gap in their TPOT (stallShare), weighed by the
          // headroom the batch has left with it, and its KV read in the steps it shares with them.
          const ownCtx = prompt + out / 2;
          const batchHeadroom = Math.max(MIN_TPOT_HEADROOM, 1 - (stepMs + kvMs + kPerToken * ownCtx) / o.tpotTargetMs);
          const overlap = batchStall > 0 ? Math.min(out, (o.tpotWorthMs * batch) / (2 * batchStall)) : 0;
          const batchMix: BatchMix | null =
            o.stallModel === 'misses' || o.stallModel === 'learned'
              ? {
                  outputs: ours.outputs,
                  mine,
                  scale,
                  batch,
                  out,
                  slackMs: o.tpotTargetMs * batchHeadroom,
                  recentTpots: o.stallModel === 'learned' ? (o.recentTpots?.(w) ?? []) : null,
                  tpotTargetMs: o.tpotTargetMs,
                  ownKvMs: kPerToken * ownCtx,
                }
              : null;
          const stallMs = batchMix
            ? missMs * missesOf(batchMix, msPerToken * uncached)
            : (batchStall * msPerToken * uncached) / batchHeadroom + (batch * overlap * kPerToken * ownCtx) / (o.readHeadroom === true ? batchHeadroom : 1);
          const free = probe ? probe.freeBlocks() : w.estimatedFreeBlocks(ctx.now, ctx.staleAfterMs);
          const need = Math.ceil(uncached / w.blockSize);
          // Room for the request to the end of its answer, with every request there at its end.
          const total = w.numGpuBlocks;
          const footprint = blocksNeeded(req, w, cached);
          const overflow = usedBlocks(total, free, w.inflightBlocks) + footprint - total;
          const recomputeMs = msPerToken * (prompt + out);
          const recomputeStallMs = batchMix ? missMs * missesOf(batchMix, recomputeMs) : (recomputeMs * batchStall) / batchHeadroom;
          const preemptMs = overflow > 0 ? Math.min(1, overflow / Math.max(1, footprint)) * (recomputeMs + o.stallWeight * recomputeStallMs) : 0;
          m.set(w, {
            hit: prompt > 0 ? cached / prompt : 0,
            cachedTokens: cached,
            uncachedTokens: uncached,
            aheadTokens: ahead,
            ttftMs,
            msPerToken,
            headroom: clamp01((free - need) / Math.max(1, w.numGpuBlocks)),
            waiting: q.waiting,
            running: q.running,
            session: sessionWorker === w.id,
            outputTokens: out,
            batchContextTokens: batchCtx,
            decodeMs,
            stallMs,
            preemptMs,
            costMs: ttftMs + decodeMs + o.stallWeight * stallMs + o.preemptionWeight * preemptMs,
          });
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
      req.state.set(KVGATE_ESTIMATE_TABLE, t);
    },
  };
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
 * 'learned': the expected number of neighbours a gap of `gapMs` pushes past the TPOT target. A
 * neighbour with n ≥ 2 tokens to generate gains d = gapMs / (n − 1) + ownKvMs of TPOT; the chance
 * that this crosses the target is taken as the share of the worker's recent TPOTs lying in
 * (target − d, target]. A worker with no finished requests yet shows none near the target.
 */
function learnedMissesOf(b: BatchMix, tpots: readonly number[], gapMs: number): number {
  if (b.mine === 0 || tpots.length === 0) return 0;
  const atTarget = upperBound(tpots, b.tpotTargetMs);
  let expected = 0;
  for (let i = lowerBound(b.outputs, 2); i < b.outputs.length; i++) {
    const d = gapMs / (b.outputs[i]! - 1) + b.ownKvMs;
    expected += atTarget - upperBound(tpots, b.tpotTargetMs - d);
  }
  return (expected / tpots.length) * b.scale;
}

/** What the 'misses' and 'learned' stall models read of a worker's batch. */
interface BatchMix {
  /** This gateway's in-flight expected outputs there, ascending, and how many they are. */
  outputs: readonly number[];
  mine: number;
  /** The batch (N) over `mine`. */
  scale: number;
  batch: number;
  /** This request's expected output: the stand-in for the batch's when none of ours is there. */
  out: number;
  /** The TPOT a neighbour has left below the target, ms. */
  slackMs: number;
  /** 'learned': the worker's recent TPOTs, ascending; null for 'misses'. */
  recentTpots: readonly number[] | null;
  tpotTargetMs: number;
  /** What this request's KV adds to each of the batch's decode steps, ms. */
  ownKvMs: number;
}

/**
 * The neighbours a gap of `gapMs` pushes past the TPOT target: answers of n ≥ 2 tokens with
 * gapMs / (n − 1) > slackMs, counted in this gateway's requests and scaled up to the batch.
 * Without requests of ours there to count, the batch is taken to answer like this one.
 */
function missesOf(b: BatchMix, gapMs: number): number {
  if (b.recentTpots !== null) return learnedMissesOf(b, b.recentTpots, gapMs);
  const below = 1 + gapMs / b.slackMs;
  if (b.mine > 0) return countInRange(b.outputs, 2, below) * b.scale;
  return b.out >= 2 && b.out < below ? b.batch : 0;
}
