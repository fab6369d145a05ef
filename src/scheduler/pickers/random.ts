/**
 * Picker `random`: a candidate chosen uniformly at random (one ctx.rng() call), scores ignored.
 * Reason 'random'. No options.
 */
import type { Picker } from '../types.js';

export const randomPicker: Picker = {
  name: 'random',
  pick(_req, candidates, ctx) {
    if (candidates.length === 0) return null;
    return { worker: candidates[Math.floor(ctx.rng() * candidates.length)]!, reason: 'random' };
  },
};
