/**
 * Chained block hashing over token ids, the way vLLM identifies cached prefix blocks:
 * hash(block i) = H(hash(block i-1), tokens of block i). Two prompts share block i's hash exactly
 * when they share every token up to the end of block i. Only full blocks are hashed.
 *
 * The hash is 53 bits wide so it is a plain JS number (fast Map keys, exact in JSON and msgpack).
 * The engine model seeds the chain per process (as vLLM does, unless PYTHONHASHSEED is set), and
 * the gateway's prefix index uses its own seed: the two hash spaces differ on purpose, and KV
 * events are mapped between them through the stored token ids.
 */

const M1 = 0x85ebca6b;
const M2 = 0xc2b2ae35;

function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, M1);
  h ^= h >>> 13;
  h = Math.imul(h, M2);
  h ^= h >>> 16;
  return h >>> 0;
}

/** hashBlock's answer, written by hashBlocksInto. */
const ONE = new Float64Array(1);

/** Hash one block of `blockSize` tokens starting at `start`, chained to `parent`. */
export function hashBlock(parent: number, tokens: ArrayLike<number>, start: number, blockSize: number): number {
  hashBlocksInto(ONE, 0, 1, parent, tokens, start, blockSize);
  return ONE[0]!;
}

/**
 * Hash a run of blocks into `out[from … to)`: block `from` starts at token `start` and is chained
 * to `parent`, each next block follows the one before. The same hashes as a hashBlock call a
 * block, about 1.5× faster (`npm run bench -- block-hash`): see the lanes below.
 */
export function hashBlocksInto(
  out: Float64Array,
  from: number,
  to: number,
  parent: number,
  tokens: ArrayLike<number>,
  start: number,
  blockSize: number,
): void {
  // The parent's low 32 bits and high part, each block seeded from its parent's. A block's hash
  // is made of the two lanes (below), so they are carried to the next block as they are: building
  // the 53-bit double and splitting it again (a division, conversions) would put a chain of
  // dependent steps between one block and the next.
  let lo = parent >>> 0;
  let hi = Math.floor(parent / 4294967296) >>> 0;
  let at = start;
  for (let blk = from; blk < to; blk++) {
    // Two independent 32-bit lanes. `>>> 0` of an integer is already its value mod 2^32 (a `%`
    // of a double would be a call to fmod).
    let a = lo ^ 0x9e3779b9;
    let b = hi ^ 0x7f4a7c15;
    const end = at + blockSize;
    for (let i = at; i < end; i++) {
      const t = tokens[i]! >>> 0;
      a = Math.imul(a ^ t, 0x01000193);
      a = (a << 13) | (a >>> 19);
      b = Math.imul(b + t, 0x5bd1e995);
      b ^= b >>> 15;
    }
    lo = fmix(a ^ blockSize);
    hi = fmix(b ^ Math.imul(lo, 0x27d4eb2f)) & 0x1fffff;
    // 21 high bits from lane b, 32 low bits from lane a: a 53-bit integer.
    out[blk] = hi * 4294967296 + lo;
    at = end;
  }
}

/** The root of a hash chain for a given seed (vLLM's NONE_HASH). */
export function chainRoot(seed: number): number {
  return fmix(seed ^ 0x5a17) * 2048 + (fmix(seed + 0x3c6ef372) & 0x7ff);
}

/**
 * Hashes of every full block of `tokens`. `limit` caps the number of blocks hashed (a caller
 * that only needs the first N blocks need not hash the rest).
 */
export function blockHashes(
  tokens: ArrayLike<number>,
  blockSize: number,
  seed: number,
  limit = Infinity,
): number[] {
  const n = Math.min(Math.floor(tokens.length / blockSize), limit);
  const out = new Array<number>(n);
  let parent = chainRoot(seed);
  for (let i = 0; i < n; i++) {
    parent = hashBlock(parent, tokens, i * blockSize, blockSize);
    out[i] = parent;
  }
  return out;
}

/**
 * The root of a salted chain: `root` mixed with `salt` (vLLM puts `cache_salt` into the first
 * block's extra keys; a salted root has the same effect: no block of a salted chain equals a block
 * of a chain with another salt, or none).
 */
export function saltedRoot(root: number, salt: string | number): number {
  let h = typeof salt === 'number' ? salt >>> 0 : 0x811c9dc5;
  if (typeof salt === 'string') for (let i = 0; i < salt.length; i++) h = Math.imul(h ^ salt.charCodeAt(i), 0x01000193);
  const a = fmix((root >>> 0) ^ fmix(h));
  const b = fmix((Math.floor(root / 4294967296) >>> 0) ^ fmix(h ^ 0x2545f491)) & 0x1fffff;
  return b * 4294967296 + a;
}
