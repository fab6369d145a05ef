import type { Picker, ScoredWorker } from './types.js';

/** Highest score wins; ties (within 1e-9) are broken at random so bursts spread. */
export const maxScorePicker: Picker = {
  name: 'max-score',
  pick(_req, candidates, ctx) {
    let best: ScoredWorker | null = null;
    let ties = 0;
    for (const c of candidates) {
      if (best === null || c.score > best.score + 1e-9) {
        best = c;
        ties = 1;
      } else if (Math.abs(c.score - best.score) <= 1e-9) {
        // Reservoir sampling over the tied set: each tied worker is equally likely.
        ties++;
        if (ctx.rng() * ties < 1) best = c;
      }
    }
    return best && { worker: best, reason: 'max-score' };
  },
};

/** Uniformly random among the candidates. */
export const randomPicker: Picker = {
  name: 'random',
  pick(_req, candidates, ctx) {
    if (candidates.length === 0) return null;
    return { worker: candidates[Math.floor(ctx.rng() * candidates.length)]!, reason: 'random' };
  },
};

/** Cycles through the candidates in worker-id order, like a Kubernetes Service. */
export function roundRobinPicker(): Picker {
  let next = 0;
  return {
    name: 'round-robin',
    pick(_req, candidates) {
      if (candidates.length === 0) return null;
      const c = candidates[next % candidates.length]!;
      next = (next + 1) % 1_000_000_007;
      return { worker: c, reason: 'round-robin' };
    },
  };
}
