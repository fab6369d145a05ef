/**
 * Picker `round-robin`: the n-th decision takes candidate n mod (number of candidates), in the
 * order the candidates come (the pool's worker order), like a Kubernetes Service; scores ignored.
 * Each picker made by roundRobinPicker() keeps its own counter. Reason 'round-robin'. No options.
 */
import type { Picker } from '../types.js';

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
