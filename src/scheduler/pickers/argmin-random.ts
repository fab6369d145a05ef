/**
 * Lowest-key choice with random tie-break, shared by the pickers of the peer policies that pick
 * by a cost (sglang-cache-aware, dynamo, oracle-greedy): keys within 1e-9 of the lowest are tied
 * and one is chosen uniformly (reservoir sampling in item order, one rng() call per tie met).
 */
export function argminRandom<T>(items: readonly T[], key: (t: T) => number, rng: () => number): T | null {
  let best: T | null = null;
  let bestKey = Infinity;
  let ties = 0;
  for (const it of items) {
    const k = key(it);
    if (best === null || k < bestKey - 1e-9) {
      best = it;
      bestKey = k;
      ties = 1;
    } else if (Math.abs(k - bestKey) <= 1e-9 && rng() * ++ties < 1) best = it;
  }
  return best;
}
