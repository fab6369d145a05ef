/**
 * Speculative rejection sampling (Leviathan et al., "Fast Inference from Transformers via
 * Speculative Decoding", ICML 2023), over the distributions the workers report.
 *
 * Workers report raw log-probabilities (vLLM's default `logprobs_mode`, before temperature and
 * top-p) of a few candidates per position; the distribution a worker actually samples from is
 * rebuilt here with the same processing its sampler applies: scale by 1/temperature, renormalise
 * over the reported candidates, keep the smallest most-likely-first prefix whose mass reaches
 * top_p. That is exact when the reported candidates hold the whole support (the simulated model's
 * 16 candidates with 20 asked for); with a real vocabulary the tail beyond the top N is missing
 * from both p and q, which slightly biases the residual — see docs/speculative.md.
 *
 * One round, given draft tokens x_1..x_m drawn from q_i and the target's p_i at each position:
 *   for i = 1..m: accept x_i with probability min(1, p_i(x_i) / q_i(x_i));
 *     on the first rejection emit a token drawn from norm(max(0, p_i − q_i)) and stop;
 *   if all m are accepted emit the bonus token, a draw from p_{m+1} (the target samples it).
 * Every emitted token is then distributed exactly as the target's own next token. At temperature
 * 0 this is "accept while x_i is the target's most likely token; else emit that token".
 */
import type { Rng } from '../util/rng.js';

/** A processed distribution: token id → probability (sums to 1). */
export type Dist = Map<number, number>;

export interface SamplingParams {
  temperature: number;
  topP: number;
}

/**
 * The distribution a sampler with these parameters draws from, given raw log-probabilities of the
 * candidates (token id → logprob). Ties in probability go to the lower token id, as the simulated
 * worker orders them.
 */
export function processDist(raw: ReadonlyMap<number, number>, p: SamplingParams): Dist {
  const entries = [...raw.entries()].filter(([, lp]) => Number.isFinite(lp) && lp > -9999);
  if (entries.length === 0) return new Map();
  entries.sort((a, b) => b[1] - a[1] || a[0] - b[0]);
  const t = p.temperature;
  if (t === 0) return new Map([[entries[0]![0], 1]]);
  const max = entries[0]![1];
  const w = entries.map(([, lp]) => Math.exp((lp - max) / t));
  let z = 0;
  for (const x of w) z += x;
  let keep = entries.length;
  if (p.topP < 1) {
    let acc = 0;
    for (let i = 0; i < w.length; i++) {
      acc += w[i]! / z;
      if (acc >= p.topP) {
        keep = i + 1;
        break;
      }
    }
    z = 0;
    for (let i = 0; i < keep; i++) z += w[i]!;
  }
  const out: Dist = new Map();
  for (let i = 0; i < keep; i++) out.set(entries[i]![0], w[i]! / z);
  return out;
}

/** Draw from a distribution (iteration order, one uniform number). */
export function sample(d: Dist, rng: Rng): number {
  let r = rng();
  let last = -1;
  for (const [t, pr] of d) {
    last = t;
    r -= pr;
    if (r < 0) return t;
  }
  if (last < 0) throw new Error('cannot sample from an empty distribution');
  return last;
}

/** norm(max(0, p − q)); p itself when p ≤ q everywhere (then p = q and nothing is rejected in theory). */
export function residual(p: Dist, q: Dist): Dist {
  const r: Dist = new Map();
  let z = 0;
  for (const [t, pt] of p) {
    const v = pt - (q.get(t) ?? 0);
    if (v > 0) {
      r.set(t, v);
      z += v;
    }
  }
  if (z <= 1e-12) return p;
  for (const [t, v] of r) r.set(t, v / z);
  return r;
}

/** One draft position as the verifier sees it. */
export interface DraftPosition {
  /** The draft's token. */
  token: number;
  /** The draft's processed distribution here (unused at temperature 0). */
  q: Dist;
  /** The target's processed distribution here. */
  p: Dist;
  /** The target's most likely token here (rank 1). */
  targetArgmax: number;
}

export interface RoundVerdict {
  /** Leading draft tokens accepted. */
  accepted: number;
  /** The token emitted after them: the correction on a rejection, the bonus token otherwise (null: none given). */
  next: number | null;
  /** 'correction' after a rejection, 'bonus' when every draft token was accepted. */
  nextKind: 'correction' | 'bonus';
}

/**
 * Verify one round. `bonus` is the target's own draw after the last draft token (null when the
 * round has no bonus, e.g. the draft ended the sequence).
 */
export function verifyRound(positions: readonly DraftPosition[], bonus: number | null, params: SamplingParams, rng: Rng): RoundVerdict {
  for (let i = 0; i < positions.length; i++) {
    const pos = positions[i]!;
    if (params.temperature === 0) {
      if (pos.token === pos.targetArgmax) continue;
      return { accepted: i, next: pos.targetArgmax, nextKind: 'correction' };
    }
    const px = pos.p.get(pos.token) ?? 0;
    const qx = pos.q.get(pos.token) ?? 0;
    // qx = 0 cannot happen for a token the draft drew, unless the candidates it reported miss it.
    const ratio = qx > 0 ? px / qx : px > 0 ? 1 : 0;
    if (ratio >= 1 || rng() < ratio) continue;
    return { accepted: i, next: sample(residual(pos.p, pos.q), rng), nextKind: 'correction' };
  }
  return { accepted: positions.length, next: bonus, nextKind: 'bonus' };
}
