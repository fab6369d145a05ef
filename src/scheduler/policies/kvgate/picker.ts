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
 *  1. near = candidates whose cost ≤ min cost · (1 + nearRelative) + nearAbsoluteMs and whose TTFT
 *     ≤ the cheapest's TTFT + nearRelative · (its TTFT + decodeMs) + nearAbsoluteMs: the cost is
 *     mostly the neighbours' stall, and a slack relative to it alone lets the scores choose a
 *     first token hundreds of ms later than the cheapest worker's; this keeps the delay to a share
 *     of what the cheapest costs the request itself;
 *  2. A = the near candidate with the best weighted score (prefix weighs most): among the near-
 *     cheapest the best cache match still wins, affinity is never discarded (falling back to
 *     pure least-load, as SGLang's router does, collapses the hit rate);
 *  3. B = the candidate with the largest expected prefix hit overall (among equals the lower cost);
 *  4. if B holds more than minHitGain more of the prompt than A, and its cost is within
 *       cost(A) · (1 + spillRelative) + spillAbsoluteMs
 *       + spillSavedFraction · (prefill time of the tokens B has cached beyond A, at A's rate),
 *     both costs less their readSlackMs (the time their KV read takes from neighbours who had it
 *     to spare below the TPOT target: the prefill a spill gives up is real, that time is not) and
 *     their tailMs (with e2eTail, what a long answer's own E2E loses in a crowded batch: a reason
 *     to place it, not to give up its cached prefix), and its TTFT is within the near band's bound,
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
import { KVGATE_ESTIMATES, type KvgateEstimate } from './estimate.js';
import { KV_OVERFULL, KV_ROOM } from '../../state-keys.js';
import type { Picker, ScoredWorker } from '../../types.js';

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
      // Each candidate's estimate, looked up once (aligned with `candidates`).
      let cs: readonly ScoredWorker[] = candidates;
      let es: KvgateEstimate[] = new Array<KvgateEstimate>(cs.length);
      for (let i = 0; i < cs.length; i++) es[i] = est.get(cs[i]!.worker)!;
      const nearBand = (minCost: number): number => minCost * (1 + p.nearRelative) + p.nearAbsoluteMs;
      // Workers with KV room now (the kv-fit filter's mark): keep to them while they cost little more.
      const room = p.preferRoom ? req.state.get(KV_ROOM) : undefined;
      if (room !== undefined) {
        let tmin = Infinity;
        let tminRoom = Infinity;
        for (let i = 0; i < cs.length; i++) {
          tmin = Math.min(tmin, es[i]!.costMs);
          if (room.has(cs[i]!.worker)) tminRoom = Math.min(tminRoom, es[i]!.costMs);
        }
        if (tminRoom <= nearBand(tmin)) {
          const keep: ScoredWorker[] = [];
          const keepEs: KvgateEstimate[] = [];
          for (let i = 0; i < cs.length; i++) {
            if (!room.has(cs[i]!.worker)) continue;
            keep.push(cs[i]!);
            keepEs.push(es[i]!);
          }
          cs = keep;
          es = keepEs;
        }
      }
      // The band is anchored on the cheapest candidate left: its cost, and its first token delayed by
      // at most nearRelative of what it costs this request itself (its TTFT and decode, not its
      // neighbours' stall).
      let cheapest = es[0]!;
      for (let i = 1; i < es.length; i++) if (es[i]!.costMs < cheapest.costMs) cheapest = es[i]!;
      const band = nearBand(cheapest.costMs);
      const ttftCap = cheapest.ttftMs + p.nearRelative * (cheapest.ttftMs + cheapest.decodeMs) + p.nearAbsoluteMs;
      // A: best weighted score among the near-least-loaded (reservoir-sampled ties).
      let ai = -1;
      let ties = 0;
      for (let i = 0; i < cs.length; i++) {
        if (es[i]!.costMs > band || es[i]!.ttftMs > ttftCap) continue;
        const score = cs[i]!.score;
        if (ai < 0 || score > cs[ai]!.score + 1e-9) {
          ai = i;
          ties = 1;
        } else if (Math.abs(score - cs[ai]!.score) <= 1e-9 && ctx.rng() * ++ties < 1) ai = i;
      }
      // B: best cache match overall; among equals the lower cost, then random.
      let bi = -1;
      ties = 0;
      for (let i = 0; i < cs.length; i++) {
        const ec = es[i]!;
        const eb = bi < 0 ? null : es[bi]!;
        if (eb === null || ec.hit > eb.hit + 1e-9 || (Math.abs(ec.hit - eb.hit) <= 1e-9 && ec.costMs < eb.costMs - 1e-9)) {
          bi = i;
          ties = 1;
        } else if (Math.abs(ec.hit - eb.hit) <= 1e-9 && Math.abs(ec.costMs - eb.costMs) <= 1e-9 && ctx.rng() * ++ties < 1) bi = i;
      }
      const a = cs[ai]!;
      const b = cs[bi]!;
      const ea = es[ai]!;
      const eb = es[bi]!;
      let picked = a;
      let hit = ea.hit;
      let reason: string;
      if (eb.hit > ea.hit + p.minHitGain) {
        const savedMs = p.spillSavedFraction * ea.msPerToken * (eb.cachedTokens - ea.cachedTokens);
        // The prefill a spill gives up is real; the neighbours' slack below their TPOT target is not a
        // loss, and a long answer's E2E is no reason to leave its cached prefix (tailMs). Nor is
        // the cache worth a first token later than the band's.
        const affordable = eb.costMs - eb.readSlackMs - eb.tailMs <= (ea.costMs - ea.readSlackMs - ea.tailMs) * (1 + p.spillRelative) + p.spillAbsoluteMs + savedMs;
        if (affordable && eb.ttftMs <= ttftCap) {
          picked = b;
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
