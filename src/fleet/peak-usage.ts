/**
 * The most KV a worker's in-flight requests will hold at once, as they decode to their ends.
 *
 * Each request holds `held` tokens of KV now (its uncached prompt and what it has written so far,
 * per sequence) and grows by one token per sequence per decode step for `left` more steps, then
 * frees all of it. Summing every request at its final size counts them all at their largest at
 * once; they end at different steps, so the real peak is lower: at step t the worker holds
 *
 *   U(t) = Σ over requests with left ≥ t of (held + sequences · t)
 *
 * U grows between two ends and drops at each, so its maximum is just before some request ends:
 * at t = left_k, with every request that has at least left_k to go still there. Taken in order of
 * `left`, longest first, with running sums H = Σ held and S = Σ sequences of the requests so far,
 *
 *   peak = max over k of (H_k + S_k · left_k)
 *
 * O(n log n) for n requests. It assumes every request decodes from now on, one token per step,
 * none of them preempted and nothing new arriving: what the worker would need if it were sent
 * nothing more. Admission adds the request at hand to it (kv-pressure.ts).
 */

/** `held`, `left` and `sequences` of request i at index i; `n` of them are read. */
export interface GrowingRequests {
  held: Float64Array;
  left: Float64Array;
  sequences: Float64Array;
  n: number;
}

/** The peak of U(t) over t ≥ 0, in tokens (0 for no requests). */
export function peakHeldTokens(r: GrowingRequests, order: Uint32Array): number {
  const { held, left, sequences, n } = r;
  for (let i = 0; i < n; i++) order[i] = i;
  const idx = order.subarray(0, n);
  idx.sort((a, b) => left[b]! - left[a]!);
  let h = 0;
  let s = 0;
  let peak = 0;
  for (let k = 0; k < n; k++) {
    const i = idx[k]!;
    h += held[i]!;
    s += sequences[i]!;
    // Requests that end at the same step as the next one are all still there at that step.
    if (k + 1 < n && left[idx[k + 1]!] === left[i]) continue;
    const u = h + s * left[i]!;
    if (u > peak) peak = u;
  }
  return peak;
}
