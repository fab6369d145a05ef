/**
 * A prefix table in the manner of AIBrix's `PrefixHashTable` (vllm-project/aibrix
 * `pkg/utils/prefixcacheindexer/hash.go` over `pkg/utils/lrustore/lru_store.go`): one LRU of
 * chained block hashes shared by every worker, each block naming the workers it was routed to.
 *
 * - `add` stamps every block of a prompt for a worker, in prompt order, moving each to the head;
 *   past `capacity` blocks the least recently stamped one goes (a whole block, for every worker).
 * - `match` reads without touching the order (AIBrix's Get does not refresh an entry).
 * - `expire` drops blocks not stamped for longer than `ttlMs`. Entries are kept in stamp order
 *   (a Map's insertion order, re-inserted on every stamp), so the stale ones are at the front.
 */
import type { BlockSeq } from '../../kv/prompt-blocks.js';

interface BlockEntry {
  workers: Set<string>;
  /** Clock time of the last stamp, ms. */
  at: number;
}

export class BlockLruTable {
  private readonly blocks = new Map<number, BlockEntry>();

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
      let e = this.blocks.get(h);
      if (e) this.blocks.delete(h);
      else e = { workers: new Set(), at: now };
      e.workers.add(worker);
      e.at = now;
      this.blocks.set(h, e);
      this.trim();
    }
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
    for (const [h, e] of this.blocks) {
      if (now - e.at <= this.ttlMs) break;
      this.blocks.delete(h);
    }
  }

  private trim(): void {
    while (this.blocks.size > this.capacity) {
      const oldest = this.blocks.keys().next();
      if (oldest.done === true) return;
      this.blocks.delete(oldest.value);
    }
  }
}
