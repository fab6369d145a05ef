/**
 * How the kvgate estimate prices what a placement does to the decodes batched at the worker
 * (stallModel). Both models see the same batch (BatchView) and differ in what a stall is worth.
 *
 * `linear` (default): every millisecond a prefill adds to a neighbour's TPOT costs tpotWorthMs /
 * (n − 1) for a neighbour with n tokens to generate (stallShare), weighed by the TPOT headroom the
 * batch has left; the request's KV is read in every step it shares with them, lengthening each by
 * k · (P + out/2) ms, counted as their time (which spreads long contexts over the fleet) and
 * weighed by the same headroom: a step lengthened where the batch already steps near the target
 * costs more than one where it steps fast.
 *
 * Of that time, the share the neighbours had to spare is `readSlackMs`: below the TPOT target a
 * step can lengthen without an answer missing anything, so only the share of the target the
 * batch's step takes (load = the batch's expected TPOT with this request / tpotTargetMs, at most
 * 1) is time they lose. A batch stepping at 10 ms of a 50 ms target keeps four fifths of it as
 * slack, a batch at the target none. The picker does not give up a cache hit for the slack.
 *
 *   read            = N · overlap · k · (P + out/2) / batchHeadroom
 *   prefill stall   = (S / batchHeadroom + T) · msPerToken · uncached + read
 *   read slack      = (1 − load) · read
 *   recompute stall = R · S / batchHeadroom
 *   own decode      = as the estimate computes it
 *
 * With e2eTail, T (the tail share) = Σ over the neighbours whose answers are longer than the mean m̄
 * expected in flight of 1 − m̄ / (n − 1): the share of a stall their E2E, the E2E tail, loses
 * beyond what an answer of m̄ tokens would (counted in this gateway's in-flight requests, scaled
 * up to N). Without, T = 0. A prefill of a long prompt then no longer goes where the other long
 * answers decode because fewer short ones are there to stall.
 *
 * `misses`: a stall costs a TPOT target's worth (tpotWorthMs · tpotTargetMs, the TTFT target) for
 * each neighbour it pushes past the target: answers of n ≥ 2 tokens with
 * T / (n − 1) > slack = tpotTargetMs · batchHeadroom, counted in this gateway's in-flight requests
 * by their expected outputs and scaled up to N. A long answer spreads a stall over its tokens and
 * is no miss; a short one is. The request's own TPOT is worth at most one miss too, as each
 * neighbour's is (uncapped, a batch near the target made it worth many, and sessions left their
 * cached prefixes to spread context). The request's KV read reaches the neighbours only through
 * the slack it leaves them. A one-token answer has no TPOT: never a miss.
 */
import { countInRange } from '../../../util/sorted.js';

/** The batch at a worker as the stall models read it. */
export interface BatchView {
  /** Requests in the batch (N). */
  batch: number;
  /** This gateway's sequences there, and N over that (0 when none). */
  mine: number;
  scale: number;
  /** Σ stallShare over the batch (S). */
  stallShare: number;
  /** This gateway's in-flight expected outputs there, ascending ('misses'). */
  outputs: readonly number[];
  /** This request's expected output: the stand-in for the batch's when none of ours is there. */
  out: number;
  /** 1 − the batch's expected TPOT with this request in it / the target, floored. */
  batchHeadroom: number;
  /** Steps this request shares with an average neighbour. */
  overlap: number;
  /** ms a decode step lengthens per context token (k). */
  kPerToken: number;
  /** This request's context, P + out / 2. */
  ownCtx: number;
  /** The batch's expected TPOT with this request in it over the target, at most 1 ('linear'). */
  tpotLoad: number;
  /** The TPOT a neighbour has left below the target, ms. */
  slackMs: number;
  /** The mean expected output of the requests in flight (Infinity: e2eTail off). */
  meanOutput: number;
}

export interface StallModel {
  /** This request's own decode cost from the linear figure (what the batch's KV reads cost its TPOT). */
  ownDecodeMs(linearMs: number): number;
  /** What its prefill of `uncached` tokens at `msPerToken` costs the batch. */
  prefillStallMs(b: BatchView, msPerToken: number, uncached: number): number;
  /** The part of prefillStallMs the batch had to spare below its TPOT target (0 where none is counted). */
  readSlackMs(b: BatchView): number;
  /** What a recompute of `recomputeMs` (after a preemption) costs the batch. */
  recomputeStallMs(b: BatchView, recomputeMs: number): number;
}

/** The neighbours' time this request's KV read takes over the steps it shares with them, weighed by the batch's TPOT headroom. */
function readMs(b: BatchView): number {
  return (b.batch * b.overlap * b.kPerToken * b.ownCtx) / b.batchHeadroom;
}

export const linearStall: StallModel = {
  ownDecodeMs: (linearMs) => linearMs,
  prefillStallMs: (b, msPerToken, uncached) =>
    (b.stallShare * msPerToken * uncached) / b.batchHeadroom + tailShare(b) * msPerToken * uncached + readMs(b),
  readSlackMs: (b) => (1 - b.tpotLoad) * readMs(b),
  recomputeStallMs: (b, recomputeMs) => (recomputeMs * b.stallShare) / b.batchHeadroom,
};

/**
 * Σ over this gateway's requests at the worker expecting more than the mean m̄ of 1 − m̄ / (n − 1),
 * scaled up to the batch (0 without requests of ours there, or with e2eTail off).
 */
function tailShare(b: BatchView): number {
  if (b.mine === 0) return 0;
  let share = 0;
  for (let i = b.outputs.length - 1; i >= 0; i--) {
    const decodes = b.outputs[i]! - 1;
    if (decodes <= b.meanOutput) break;
    share += 1 - b.meanOutput / decodes;
  }
  return share * b.scale;
}

export function missesStall(tpotWorthMs: number, tpotTargetMs: number): StallModel {
  const missMs = tpotWorthMs * tpotTargetMs;
  return {
    ownDecodeMs: (linearMs) => Math.min(missMs, linearMs),
    prefillStallMs: (b, msPerToken, uncached) => missMs * missesOf(b, msPerToken * uncached),
    readSlackMs: () => 0,
    recomputeStallMs: (b, recomputeMs) => missMs * missesOf(b, recomputeMs),
  };
}

/**
 * The neighbours a gap of `gapMs` pushes past the TPOT target: answers of n ≥ 2 tokens with
 * gapMs / (n − 1) > slackMs, counted in this gateway's requests and scaled up to the batch.
 * Without requests of ours there to count, the batch is taken to answer like this one.
 */
function missesOf(b: BatchView, gapMs: number): number {
  const below = 1 + gapMs / b.slackMs;
  if (b.mine > 0) return countInRange(b.outputs, 2, below) * b.scale;
  return b.out >= 2 && b.out < below ? b.batch : 0;
}

/**
 * The prefill tokens a prompt of `uncached` tokens puts into the step in which the prompt ahead of
 * it at a worker finishes its prefill, delaying that prompt's first token. vLLM V1's scheduler
 * (vllm/v1/core/sched/scheduler.py, `schedule`) gives each step's token budget to the running
 * requests first, a prefill in progress taking its next chunk, and only then to the waiting ones:
 * a prompt that arrives behind a prefill waits for it and takes what its last chunk leaves of
 * the budget B (`max_num_batched_tokens`). That rest is not known to the gateway (the chunks
 * already done are not reported); taken as uniform on [0, B], the expected tokens joined are
 * E[min(u, L)] = u − u² / (2B) for u ≤ B, B / 2 beyond. B = 0: not counted.
 */
export function joinedPrefillTokens(uncached: number, budget: number): number {
  if (budget <= 0 || uncached <= 0) return 0;
  return uncached <= budget ? uncached - (uncached * uncached) / (2 * budget) : budget / 2;
}

/**
 * The first-token delay a prefill of `prefillMs` puts on the requests expected to reach the worker
 * behind it, at `arrivalsPerMs` (the worker's recent rate): those arriving while it waits its
 * `aheadMs` turn wait all of it, those arriving during it half of it on average. A long prompt sent
 * where many requests follow, such as a worker holding a prefix many share, costs the most.
 */
export function behindDelayMs(arrivalsPerMs: number, aheadMs: number, prefillMs: number): number {
  return arrivalsPerMs * prefillMs * (aheadMs + prefillMs / 2);
}
