/**
 * The prompts the routing benchmarks route (bench route, bench route-ab): made-up prose of exactly
 * `promptTokens` tokens with the estimate tokenizer, a `sharedTokens` prefix shared by one of
 * `groups` groups plus a unique rest, drawn from `rng`.
 */
import { estimateTokenizer } from '../src/tokenizer/estimate.js';
import type { Rng } from '../src/util/rng.js';

const WORDS = ['the', 'model', 'cache', 'block', 'prefix', 'route', 'worker', 'token', 'answer', 'system', 'user', 'prompt', 'gateway', 'latency'];

/** A function giving the next prompt's text. */
export function routePrompts(rng: Rng, o: { groups: number; promptTokens: number; sharedTokens: number }): () => string {
  const words = (n: number, salt: string): string => {
    const out: string[] = [];
    for (let i = 0; i < n; i++) out.push(i % 7 === 0 ? `${salt}${i}` : WORDS[Math.floor(rng() * WORDS.length)]!);
    return out.join(' ');
  };
  /** Text of exactly `tokens` tokens (cut on a token boundary). */
  const textOf = (tokens: number, salt: string): string => {
    let t = words(Math.ceil(tokens * 0.5), salt);
    while (estimateTokenizer.count(t) < tokens) t += ' ' + words(200, salt);
    return estimateTokenizer.decode(estimateTokenizer.encode(t).slice(0, tokens));
  };
  const systems = Array.from({ length: o.groups }, (_, g) => textOf(o.sharedTokens, `sys${g}x`));
  let unique = 0;
  return () => {
    const g = Math.floor(rng() * o.groups);
    // The unique part starts with a space-led word, so the shared part tokenizes the same in every
    // prompt of the group.
    return systems[g]! + ' ' + textOf(o.promptTokens - o.sharedTokens - 1, `u${unique++}q`);
  };
}
