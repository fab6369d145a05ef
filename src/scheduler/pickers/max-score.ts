/**
 * Picker `max-score`: the candidate with the highest weighted score; candidates within 1e-9 of
 * the best are tied and one of them is chosen uniformly at random (reservoir sampling in
 * candidate order, one ctx.rng() call per tie met), so a burst of equal scores spreads. Reason
 * 'max-score'. No options.
 */
import type { Picker, ScoredWorker } from '../types.js';

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
