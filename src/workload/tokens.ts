/**
 * Deterministic synthetic token content for traces that carry only lengths and block ids.
 *
 * - blockTokens(id): the tokens of a Mooncake hash id's 512-token block. Equal ids give equal
 *   blocks, so equal leading hash ids give a real shared prefix for the engine's block hashing.
 * - answerToken(seed, i): the i-th output token of a request whose outputSeed is `seed`; the fleet
 *   simulation's sampler and the multi-turn workload both use it, so a later turn that quotes an
 *   earlier answer hits the prefix cache exactly as on a real engine.
 * - synthText(tokens): a text rendering for character-based policies; equal token prefixes give
 *   equal text prefixes.
 *
 * Token ids are drawn from the synthetic vocabulary (below its punctuation and EOS), so they
 * decode to words.
 */
import { estimateTokenizer, VOCAB_SIZE } from '../tokenizer/index.js';
import { InsertionFront } from '../util/insertion-front.js';

/** Ids 0 .. WORD_IDS-1 are plain words of the vocabulary. */
const WORD_IDS = VOCAB_SIZE - 3;

const MOONCAKE_BLOCK_TOKENS = 512;

/** 32-bit integer mix (Murmur3 finaliser): a cheap, well-spread hash of (seed, index). */
export function mix32(a: number, b: number): number {
  return mixSeeded(Math.imul(a ^ 0x9e3779b9, 0x85ebca6b), b);
}

/** mix32(a, b) given a's part, Math.imul(a ^ 0x9e3779b9, 0x85ebca6b): a stream computes it once. */
function mixSeeded(seedPart: number, b: number): number {
  let h = seedPart ^ Math.imul(b + 0x7f4a7c15, 0xc2b2ae35);
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The i-th token of the stream named `seed`. */
function streamToken(seed: number, i: number): number {
  return mix32(seed, i) % WORD_IDS;
}

/** An answer's tokens are the stream named by its outputSeed under this salt. */
const ANSWER_SALT = 0x5bd1e995;

export function answerToken(seed: number, i: number): number {
  return streamToken(seed ^ ANSWER_SALT, i);
}

/** The first `n` output tokens of the request whose outputSeed is `seed`. */
export function answerTokens(seed: number, n: number): Int32Array {
  const out = new Int32Array(n);
  fillStream(out, 0, seed ^ ANSWER_SALT, n);
  return out;
}

/** Concatenate token arrays into one Int32Array. */
export function concatTokens(parts: ArrayLike<number>[]): Int32Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Int32Array(n);
  let at = 0;
  for (const p of parts) {
    if (p instanceof Int32Array) out.set(p, at);
    else for (let i = 0; i < p.length; i++) out[at + i] = p[i]!;
    at += p.length;
  }
  return out;
}

/**
 * `parts`, then `n` tokens of stream `seed` (a question, a user's message), in one Int32Array: the
 * stream is written in place rather than built on its own and copied.
 */
export function concatStream(parts: readonly Int32Array[], seed: number, n: number): Int32Array {
  let len = n;
  for (const p of parts) len += p.length;
  const out = new Int32Array(len);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  fillStream(out, at, seed, n);
  return out;
}

/** A session's next prompt: `prompt`, the first `n` tokens of the answer whose outputSeed is `seed`, then `user`. */
export function withAnswer(prompt: Int32Array, seed: number, n: number, user: ArrayLike<number>): Int32Array {
  const out = new Int32Array(prompt.length + n + user.length);
  out.set(prompt);
  fillStream(out, prompt.length, seed ^ ANSWER_SALT, n);
  out.set(user, prompt.length + n);
  return out;
}

/** Copy `n` tokens of stream `seed`, starting at its index `from`, into `out` at `at`. */
export function fillStream(out: Int32Array | number[], at: number, seed: number, n: number, from = 0): void {
  const seedPart = Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b);
  for (let i = 0; i < n; i++) out[at + i] = mixSeeded(seedPart, from + i) % WORD_IDS;
}

/** Bounded cache of Mooncake blocks: generated once per id while hot. */
export class BlockTokenCache {
  private readonly map = new Map<number, Int32Array>();
  private readonly oldest = new InsertionFront(this.map);
  constructor(
    private readonly salt: number,
    private readonly limit = 8192,
  ) {}

  get(id: number): Int32Array {
    const m = this.map;
    let b = m.get(id);
    if (b) {
      m.delete(id); // refresh recency (Map keeps insertion order)
      m.set(id, b);
      return b;
    }
    b = new Int32Array(MOONCAKE_BLOCK_TOKENS);
    fillStream(b, 0, mix32(this.salt, id), MOONCAKE_BLOCK_TOKENS);
    if (m.size >= this.limit) this.oldest.shift();
    m.set(id, b);
    return b;
  }

  get size(): number {
    return this.map.size;
  }
}

/**
 * Prompt tokens for a row of `inputLength` tokens made of the given 512-token blocks; tokens
 * beyond the listed blocks come from a stream private to the row (`uniqueSeed`).
 */
export function tokensFromBlocks(
  cache: BlockTokenCache,
  hashIds: readonly number[],
  inputLength: number,
  uniqueSeed: number,
): Int32Array {
  const out = new Int32Array(inputLength);
  let at = 0;
  for (let i = 0; i < hashIds.length && at < inputLength; i++) {
    const blk = cache.get(hashIds[i]!);
    const n = Math.min(MOONCAKE_BLOCK_TOKENS, inputLength - at);
    out.set(n === MOONCAKE_BLOCK_TOKENS ? blk : blk.subarray(0, n), at);
    at += n;
  }
  if (at < inputLength) fillStream(out, at, uniqueSeed, inputLength - at);
  return out;
}

export function synthText(tokens: ArrayLike<number>): string {
  return estimateTokenizer.decode(tokens);
}
