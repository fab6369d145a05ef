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

/** Hash one block of `blockSize` tokens starting at `start`, chained to `parent`. */
export function hashBlock(
  parent: number,
  tokens: ArrayLike<number>,
  start: number,
  blockSize: number,
): number {
  // Two independent 32-bit lanes, seeded from the parent's high and low parts.
  let a = (parent % 4294967296) >>> 0;
  let b = Math.floor(parent / 4294967296) >>> 0;
  a ^= 0x9e3779b9;
  b ^= 0x7f4a7c15;
  const end = start + blockSize;
  for (let i = start; i < end; i++) {
    const t = tokens[i]! >>> 0;
    a = Math.imul(a ^ t, 0x01000193);
    a = (a << 13) | (a >>> 19);
    b = Math.imul(b + t, 0x5bd1e995);
    b ^= b >>> 15;
  }
  a = fmix(a ^ blockSize);
  b = fmix(b ^ Math.imul(a, 0x27d4eb2f));
  // 21 high bits from lane b, 32 low bits from lane a: a 53-bit integer.
  return (b & 0x1fffff) * 4294967296 + a;
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
  const a = fmix(((root % 4294967296) >>> 0) ^ fmix(h));
  const b = fmix((Math.floor(root / 4294967296) >>> 0) ^ fmix(h ^ 0x2545f491)) & 0x1fffff;
  return b * 4294967296 + a;
}

/**
 * Block hashes already computed for a token array, or for an array it begins with, so that a
 * prompt built on another (a session's next turn on the previous prompt, a tenant's request on
 * its system prompt) is hashed only past the part it shares: the chained hashes of a shared
 * prefix are the same for every array that has it. The workload's builders say which array
 * begins with which (markPrefix); whoever hashes a whole prompt keeps its hashes (keepHashes) and
 * asks for them first (knownHashes). Keyed by the arrays themselves (a WeakMap: an entry lives as
 * long as its array), per chain root and block size. An array must not change once marked.
 */
class KnownChain {
  roots: number[] = [];
  sizes: number[] = [];
  hashes: Float64Array[] = [];

  /** `prefix`: what is known of the array this one begins with, for its first `prefixLen` tokens. */
  constructor(
    public prefix: KnownChain | null,
    readonly prefixLen: number,
  ) {}

  find(root: number, blockSize: number): Float64Array | undefined {
    for (let i = 0; i < this.roots.length; i++) if (this.roots[i] === root && this.sizes[i] === blockSize) return this.hashes[i];
    return undefined;
  }
}

const known = new WeakMap<object, KnownChain>();

function chainOf(tokens: object): KnownChain {
  let c = known.get(tokens);
  if (c === undefined) known.set(tokens, (c = new KnownChain(null, 0)));
  return c;
}

/** Record that `tokens` begins with every token of `prefix` (it was built by copying them). */
export function markPrefix(tokens: object, prefix: ArrayLike<number>): void {
  if (typeof prefix !== 'object' || prefix.length === 0) return;
  known.set(tokens, new KnownChain(chainOf(prefix), prefix.length));
}

/**
 * Copy the leading block hashes of `tokens` known under (root, blockSize) into `out` from index
 * 0, and return how many: its own if kept, else its prefix's full blocks (0 when nothing is known).
 */
export function knownHashes(tokens: object, root: number, blockSize: number, out: { [i: number]: number }): number {
  const c = known.get(tokens);
  if (c === undefined) return 0;
  let h = c.find(root, blockSize);
  let n = h?.length ?? 0;
  if (h === undefined && c.prefix !== null) {
    h = c.prefix.find(root, blockSize);
    n = Math.min(h?.length ?? 0, Math.floor(c.prefixLen / blockSize));
  }
  for (let i = 0; i < n; i++) out[i] = h![i]!;
  return n;
}

/**
 * Keep the first `n` block hashes of `tokens` (every full block of it) under (root, blockSize), and
 * give the array it begins with its share of them if it has none yet (a system prompt is never
 * hashed alone: the first prompt built on it hashes it).
 */
export function keepHashes(tokens: object, root: number, blockSize: number, hashes: ArrayLike<number>, n: number): void {
  const c = known.get(tokens);
  if (c === undefined || c.find(root, blockSize) !== undefined) return;
  c.roots.push(root);
  c.sizes.push(blockSize);
  c.hashes.push(copyOf(hashes, n));
  const p = c.prefix;
  if (p !== null && p.find(root, blockSize) === undefined) {
    p.roots.push(root);
    p.sizes.push(blockSize);
    p.hashes.push(copyOf(hashes, Math.min(n, Math.floor(c.prefixLen / blockSize))));
  }
  // This array's own hashes cover its prefix's: the link would only keep the prefix's alive.
  c.prefix = null;
}

function copyOf(hashes: ArrayLike<number>, n: number): Float64Array {
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) out[i] = hashes[i]!;
  return out;
}
