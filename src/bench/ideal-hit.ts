/**
 * ideal_hit_rate: the prefix-cache hit rate one engine with unlimited KV capacity would reach on
 * the same requests — the workload's inherent prefix reuse, a ceiling for any routing policy.
 *
 * For each request in arrival order: its prompt's full blocks are hashed as a chain (blockHashes:
 * block i's hash covers every token up to the end of block i), the hit is the longest run of
 * leading blocks already seen, capped at ⌊(prompt − 1) / block⌋ blocks so the last prompt token is
 * always computed (vLLM's rule, and the engine model's). Then the request's own blocks are added:
 * every full block of its prompt and of the tokens it generates, except the last output token,
 * whose KV is never computed — the blocks a vLLM engine caches as it prefills and decodes. A
 * session's next turn, whose prompt is this prompt + this answer + a new message, so hits this
 * request's output blocks too, exactly as on the engine.
 *
 * Token-weighted like prefix_hit_rate: Σ hit tokens / Σ prompt tokens. Cost: one pass of hashing
 * over the prompt tokens, and the distinct block hashes, the one structure of a run that grows
 * with its tokens. While every block ever seen is held, the held blocks are closed under taking a
 * prefix (a block enters with every block before it in its chain), so they form a tree, kept as
 * runs (HeldChains): each request's new blocks are one run, stored side by side (8 bytes a block,
 * written in order) and found by the hash of its first block, and a request's hit is a walk along
 * the runs it shares — a lookup per run, not per block, where a hash set makes every new block a
 * random write into a table of hundreds of MiB. It is bounded: before IDEAL_MAX_BLOCKS distinct
 * blocks, the same blocks move into a set (util/hash-set53.ts, 11–21 bytes per hash) that, past
 * that many, keeps two generations of them (the blocks seen or hit most recently), so the figure
 * becomes that of a cache of at least IDEAL_MAX_BLOCKS blocks — 2^24 blocks of 16 tokens, 268M
 * tokens, over a hundred times the KV of 64 H100 workers — and the memory at most two tables of
 * 256 MiB. Every built-in workload at its default sizes stays far below.
 */
import { chainRoot, hashBlocksInto } from '../kv/block-hash.js';
import { answerToken } from '../workload/tokens.js';
import { HashSet53 } from '../util/hash-set53.js';
import type { BenchRequest } from '../workload/types.js';

/** Distinct blocks the ideal cache holds exactly; beyond, two generations of this many (above). */
const IDEAL_MAX_BLOCKS = 1 << 24;

/** A set of block hashes that keeps, past `max`, the last two generations of `max` each. */
class RecentBlocks {
  private current = new HashSet53();
  private previous: HashSet53 | null = null;
  constructor(private readonly max: number) {}

  /** True until the first generation is full: then has(h) ⇒ add(h) changes nothing. */
  get exact(): boolean {
    return this.previous === null;
  }

  /** Whether `h` is held; a hit in the older generation moves to the current one. */
  has(h: number): boolean {
    if (this.current.has(h)) return true;
    if (this.previous === null || !this.previous.has(h)) return false;
    this.add(h);
    return true;
  }

  add(h: number): void {
    if (this.current.add(h) && this.current.size >= this.max) {
      this.previous = this.current;
      this.current = new HashSet53();
    }
  }
}

/**
 * Every block seen, as long as none is dropped: a tree of chains stored as runs of consecutive
 * blocks, each found by its first block's hash. A hash is held at most once (a run holds only
 * blocks not held before, and no block after a new one can be held: its chain passes through the
 * new one), so the run a shared block lies in is the only one to follow.
 */
class HeldChains {
  private readonly runs = new Map<number, Float64Array>();
  /** Blocks held. */
  size = 0;

  /** How many leading blocks of `seq[0 … n)` are held. */
  leading(seq: Float64Array, n: number): number {
    let d = 0;
    while (d < n) {
      // A run starts here, or no block here is held.
      const run = this.runs.get(seq[d]!);
      if (run === undefined) return d;
      d++;
      for (let k = 1; k < run.length && d < n && run[k] === seq[d]; k++) d++;
    }
    return d;
  }

  /** Hold `seq[from … n)`, none of which is held, as one run. */
  add(seq: Float64Array, from: number, n: number): void {
    if (from >= n) return;
    this.runs.set(seq[from]!, seq.slice(from, n));
    this.size += n - from;
  }

  /** Every block held, into a set. */
  into(set: RecentBlocks): void {
    for (const run of this.runs.values()) for (let i = 0; i < run.length; i++) set.add(run[i]!);
  }
}

export interface IdealHit {
  promptTokens: number;
  hitTokens: number;
  /** hitTokens / promptTokens (0 for no tokens). */
  rate: number;
}

/**
 * `each`, if given, is called with every request and its own ideal hit in tokens (work-bound.ts
 * prices each request's prefill from it).
 */
export function idealHitRate(
  requests: Iterable<BenchRequest>,
  blockSize = 16,
  seed = 0,
  each?: (r: BenchRequest, hitTokens: number) => void,
  maxBlocks = IDEAL_MAX_BLOCKS,
): IdealHit {
  const bs = blockSize;
  // The tree while it can hold every block; the set from the request that could take it to maxBlocks.
  let tree: HeldChains | null = new HeldChains();
  const seen = new RecentBlocks(maxBlocks);
  const root = chainRoot(seed);
  let promptTokens = 0;
  let hitTokens = 0;
  // Reused across requests: the prompt's block hashes, then its output blocks' (every block the
  // request computes, in chain order), and the tokens of its output blocks.
  let hashes = new Float64Array(1024);
  let tail = new Int32Array(1024);
  for (const r of requests) {
    const p = r.promptTokens;
    const n = p.length;
    promptTokens += n;
    const full = Math.floor(n / bs);
    // Output blocks: the prompt's partial last block continues with the generated tokens.
    const computed = n + Math.max(0, r.maxTokens - 1);
    const blocks = Math.max(full, Math.floor(computed / bs));
    if (hashes.length < blocks) hashes = new Float64Array(Math.max(blocks, hashes.length * 2));
    // The blocks of the part the prompt begins with are hashed once for every prompt built on it.
    const known = r.promptPart?.hashes(root, bs);
    const fromPart = known === undefined ? 0 : Math.min(known.length, full);
    if (fromPart > 0) hashes.set(fromPart === known!.length ? known! : known!.subarray(0, fromPart));
    hashBlocksInto(hashes, fromPart, full, fromPart > 0 ? hashes[fromPart - 1]! : root, p, fromPart * bs, bs);
    if (blocks > full) {
      const len = (blocks - full) * bs;
      if (tail.length < len) tail = new Int32Array(Math.max(len, tail.length * 2));
      let at = 0;
      for (let i = full * bs; i < n; i++) tail[at++] = p[i]!;
      for (let i = 0; at < len; i++) tail[at++] = answerToken(r.outputSeed, i);
      hashBlocksInto(hashes, full, blocks, full > 0 ? hashes[full - 1]! : root, tail, 0, bs);
    }
    const maxHit = Math.floor((n - 1) / bs);
    if (tree !== null && tree.size + blocks >= maxBlocks) {
      tree.into(seen);
      tree = null;
    }
    let hit: number;
    if (tree !== null) {
      // Every block of the request after the held ones is new: one run.
      const held = tree.leading(hashes, blocks);
      hit = Math.max(0, Math.min(held, maxHit));
      tree.add(hashes, held, blocks);
    } else {
      hit = seen.exact ? leadingHeld(seen, hashes, maxHit) : leadingHeldInOrder(seen, hashes, maxHit);
      // A block just found is in the set already (while it is exact: a hit moves no generation).
      for (let b = seen.exact ? hit : 0; b < blocks; b++) seen.add(hashes[b]!);
    }
    hitTokens += hit * bs;
    each?.(r, hit * bs);
  }
  return { promptTokens, hitTokens, rate: promptTokens > 0 ? hitTokens / promptTokens : 0 };
}

/**
 * The number of leading blocks of `hashes` held, by bisection: while the set is exact, a held
 * block's predecessor is held too (every block enters with every block before it in its chain),
 * so the held blocks are a prefix. A 53-bit hash collision could break this — as it would make
 * the in-order scan count a block that was never seen.
 */
function leadingHeld(seen: RecentBlocks, hashes: Float64Array, max: number): number {
  let lo = 0;
  let hi = max;
  while (lo < hi) {
    const mid = (lo + hi + 1) >>> 1;
    if (seen.has(hashes[mid - 1]!)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/** The number of leading blocks of `hashes` held, in order (a hit moves a block to the newer generation). */
function leadingHeldInOrder(seen: RecentBlocks, hashes: Float64Array, max: number): number {
  let hit = 0;
  while (hit < max && seen.has(hashes[hit]!)) hit++;
  return hit;
}
