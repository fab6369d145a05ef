/**
 * Picker `kvgate` (the load guard): trades cache affinity against waiting and decode time, with
 * hysteresis. Reads the candidates' weighted scores and the estimates of the `kvgate-estimate`
 * producer, whose cost (TTFT + this request's decode slowdown at the worker + stallWeight · the
 * delay it causes the worker's batch, in ms of TTFT, delays of short answers counted as TPOT) is
 * what the bands compare.
 *
 *  0. with preferRoom, when the kv-fit filter marked some candidates as having KV room now
 *     (KV_ROOM): if the cheapest of those costs ≤ min cost · (1 + nearRelative) + nearAbsoluteMs,
 *     the candidates are those (a worker out of room admits chunk by chunk and preempts to finish);
 *     otherwise all of them (the roomy ones are much dearer, e.g. they serve short answers a long
 *     prefill would stall);
 *  1. near = candidates whose cost ≤ min cost · (1 + nearRelative) + nearAbsoluteMs;
 *  2. A = the near candidate with the best weighted score (prefix weighs most): among the near-
 *     cheapest the best cache match still wins, affinity is never discarded (falling back to
 *     pure least-load, as SGLang's router does, collapses the hit rate);
 *  3. B = the candidate with the largest expected prefix hit overall (among equals the lower cost);
 *  4. if B holds more than minHitGain more of the prompt than A, and its cost is within
 *       cost(A) · (1 + spillRelative) + spillAbsoluteMs
 *       + spillSavedFraction · (prefill time of the tokens B has cached beyond A, at A's rate),
 *     take B ('prefix'): a long prefix keeps its home through more load than a short one that is
 *     cheap to recompute anywhere. Otherwise take A: 'spill' when B was the better cache match but
 *     too costly (the prefix then gets cached on A as well, Preble's explore step), else 'prefix'
 *     if A holds part of the prompt, 'session' if A is the session's worker (and wSession > 0),
 *     'load' otherwise. '+overfull' is appended when the KV-fit filter found no worker with room.
 *
 * Because the cost charges a busy worker for the decodes an uncached prefill would stall and for
 * the KV its batch makes every decode step read, a hot prefix spills to a quieter worker as soon
 * as that costs less than it saves, whether or not the hot worker is "full".
 *
 * Ties break at random through ctx.rng (reservoir sampling, A's ties first, then B's).
 * Options: nearRelative, nearAbsoluteMs, spillRelative, spillAbsoluteMs, spillSavedFraction,
 * minHitGain, wSession, preferRoom (the kvgate policy's).
 */
import { KVGATE_ESTIMATES, type KvgateEstimate } from '../producers/kvgate-estimate.js';
import { KV_OVERFULL, KV_ROOM } from '../state-keys.js';
import type { Picker, ScoredWorker } from '../types.js';

export interface KvgatePickerOptions {
  nearRelative: number;
  nearAbsoluteMs: number;
  spillRelative: number;
  spillAbsoluteMs: number;
  spillSavedFraction: number;
  minHitGain: number;
  wSession: number;
  /** Keep to the workers the kv-fit filter marked as having room (KV_ROOM) while the cheapest of them is in the near band. */
  preferRoom?: boolean;
}

export function kvgatePicker(p: KvgatePickerOptions): Picker {
  return {
    name: 'kvgate',
    pick(req, candidates, ctx) {
      if (candidates.length === 0) return null;
      const est = req.state.get(KVGATE_ESTIMATES);
      if (!est) throw new Error('the kvgate picker needs the kvgate-estimate producer to run first');
      const e = (c: ScoredWorker): KvgateEstimate => est.get(c.worker)!;
      const nearBand = (minCost: number): number => minCost * (1 + p.nearRelative) + p.nearAbsoluteMs;
      let tmin = Infinity;
      for (const c of candidates) tmin = Math.min(tmin, e(c).costMs);
      let band = nearBand(tmin);
      // Workers with KV room now (the kv-fit filter's mark): keep to them while they cost little more.
      const room = p.preferRoom ? req.state.get(KV_ROOM) : undefined;
      if (room !== undefined) {
        let tminRoom = Infinity;
        for (const c of candidates) if (room.has(c.worker)) tminRoom = Math.min(tminRoom, e(c).costMs);
        if (tminRoom <= band) {
          candidates = candidates.filter((c) => room.has(c.worker));
          band = nearBand(tminRoom);
        }
      }
      // A: best weighted score among the near-least-loaded (reservoir-sampled ties).
      let a: ScoredWorker | null = null;
      let ties = 0;
      for (const c of candidates) {
        if (e(c).costMs > band) continue;
        if (a === null || c.score > a.score + 1e-9) {
          a = c;
          ties = 1;
        } else if (Math.abs(c.score - a.score) <= 1e-9 && ctx.rng() * ++ties < 1) a = c;
      }
      // B: best cache match overall; among equals the lower ttft, then random.
      let b: ScoredWorker | null = null;
      ties = 0;
      for (const c of candidates) {
        const ec = e(c);
        if (b === null || ec.hit > e(b).hit + 1e-9 || (Math.abs(ec.hit - e(b).hit) <= 1e-9 && ec.costMs < e(b).costMs - 1e-9)) {
          b = c;
          ties = 1;
        } else if (Math.abs(ec.hit - e(b).hit) <= 1e-9 && Math.abs(ec.costMs - e(b).costMs) <= 1e-9 && ctx.rng() * ++ties < 1) b = c;
      }
      const ea = e(a!);
      const eb = e(b!);
      let picked = a!;
      let hit = ea.hit;
      let reason: string;
      if (eb.hit > ea.hit + p.minHitGain) {
        const savedMs = p.spillSavedFraction * ea.msPerToken * (eb.cachedTokens - ea.cachedTokens);
        if (eb.costMs <= ea.costMs * (1 + p.spillRelative) + p.spillAbsoluteMs + savedMs) {
          picked = b!;
          hit = eb.hit;
          reason = 'prefix';
        } else reason = 'spill';
      } else if (ea.hit > 0) reason = 'prefix';
      else if (ea.session && p.wSession > 0) reason = 'session';
      else reason = 'load';
      if (req.state.get(KV_OVERFULL) === true) reason += '+overfull';
      return { worker: picked, reason, expectedPrefixHit: hit };
    },
  };
}
