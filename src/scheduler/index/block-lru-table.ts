/**
 * A prefix table in the manner of AIBrix's `PrefixHashTable` (vllm-project/aibrix
 * `pkg/utils/prefixcacheindexer/hash.go` over `pkg/utils/lrustore/lru_store.go`): one LRU of
 * chained block hashes shared by every worker, each block naming the workers it was routed to.
 *
 * - `add` stamps every block of a prompt for a worker, in prompt order, making each the most
 *   recent; past `capacity` blocks the least recently stamped one goes (a whole block, for every
 *   worker).
 * - `match` reads without touching the order (AIBrix's Get does not refresh an entry).
 * - `expire` drops blocks not stamped for longer than `ttlMs`: the least recently stamped first,
 *   so it stops at the first block still fresh.
 */
import type { BlockSeq } from '../../kv/prompt-blocks.js';

interface BlockEntry {
  workers: Set<string>;
  /** Clock time of the last stamp, ms. */
  at: number;
  /** Sequence number of the last stamp: its place in the stamp queue. */
  seq: number;
}

export class BlockLruTable {
  private readonly blocks = new Map<number, BlockEntry>();
  /**
   * Every stamp in order, hash and sequence number interleaved; a block's live stamp is the one
   * with its entry's seq, earlier ones are skipped when reached. The least recently stamped block
   * is the first live stamp: a queue instead of re-inserting into the Map, which costs several
   * times more per block on prompts of thousands of blocks.
   */
  private stamps: number[] = [];
  private head = 0;
  private nextSeq = 0;

  constructor(
    private capacity: number,
    private ttlMs: number,
  ) {}

  get size(): number {
    return this.blocks.size;
  }

  setLimits(capacity: number, ttlMs: number): void {
    this.capacity = capacity;
    this.ttlMs = ttlMs;
    this.trim();
  }

  /** Stamp every block of `hashes` for `worker` at `now`. */
  add(hashes: BlockSeq, worker: string, now: number): void {
    for (let i = 0; i < hashes.length; i++) {
      const h = hashes.at(i)!;
      const seq = this.nextSeq++;
      const e = this.blocks.get(h);
      if (e) {
        e.workers.add(worker);
        e.at = now;
        e.seq = seq;
      } else {
        this.blocks.set(h, { workers: new Set([worker]), at: now, seq });
      }
      this.stamps.push(h, seq);
      this.trim();
    }
    this.compact();
  }

  /**
   * Each of `workers`' leading run of `hashes`, as AIBrix's `seqSearchPrefix` computes it: walking
   * the blocks in order, a worker that lacks a block drops out, and those still in at block i get
   * ⌊(i + 1) · 100 / blocks⌋ percent; the walk stops at a block no worker still in holds. Workers
   * that never matched are absent.
   */
  match(hashes: BlockSeq, workers: readonly string[]): Map<string, number> {
    const out = new Map<string, number>();
    let live = workers.slice();
    const n = hashes.length;
    for (let i = 0; i < n && live.length > 0; i++) {
      const e = this.blocks.get(hashes.at(i)!);
      if (!e) break;
      const still = live.filter((w) => e.workers.has(w));
      if (still.length === 0) break;
      const percent = Math.floor(((i + 1) * 100) / n);
      for (const w of still) out.set(w, percent);
      live = still;
    }
    return out;
  }

  /** Drop the blocks last stamped more than ttlMs before `now`. */
  expire(now: number): void {
    for (let e = this.oldest(); e !== undefined && now - e.entry.at > this.ttlMs; e = this.oldest()) this.dropOldest(e.hash);
    this.compact();
  }

  private trim(): void {
    while (this.blocks.size > this.capacity) {
      const e = this.oldest();
      if (e === undefined) return;
      this.dropOldest(e.hash);
    }
  }

  /** The least recently stamped block, skipping superseded stamps. */
  private oldest(): { hash: number; entry: BlockEntry } | undefined {
    const s = this.stamps;
    while (this.head < s.length) {
      const h = s[this.head]!;
      const e = this.blocks.get(h);
      if (e !== undefined && e.seq === s[this.head + 1]) return { hash: h, entry: e };
      this.head += 2;
    }
    return undefined;
  }

  private dropOldest(hash: number): void {
    this.blocks.delete(hash);
    this.head += 2;
  }

  /** Keep the queue within a few times the live blocks: drop the consumed and superseded stamps. */
  private compact(): void {
    const s = this.stamps;
    if (s.length < 4 * this.blocks.size + 4096) return;
    const kept: number[] = [];
    for (let i = this.head; i < s.length; i += 2) {
      const e = this.blocks.get(s[i]!);
      if (e !== undefined && e.seq === s[i + 1]) kept.push(s[i]!, s[i + 1]!);
    }
    this.stamps = kept;
    this.head = 0;
  }
}
