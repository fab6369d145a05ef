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
 *
 * AIBrix cuts prompts into 4-byte blocks, so a long prompt is tens of thousands of blocks and the
 * table hundreds of thousands: it is kept in flat typed arrays (an open-addressing hash index over
 * a slab of entries threaded on an intrusive LRU list, the workers of an entry as a bitmask)
 * rather than a Map of objects, which costs several times more per block.
 */
import type { BlockSeq } from '../../kv/prompt-blocks.js';

const NONE = -1;

export class BlockLruTable {
  // The entry slab: one slot per block held, free slots chained through `next`.
  private keys = new Float64Array(0);
  private stampedAt = new Float64Array(0);
  private prev = new Int32Array(0);
  private next = new Int32Array(0);
  /** Each entry's workers, `words` 32-bit words per entry (bit = the worker's index). */
  private masks = new Uint32Array(0);
  private words = 1;
  private freeHead = NONE;
  private fresh = 0;
  /** LRU list: head is the least recently stamped, tail the most. */
  private head = NONE;
  private tail = NONE;
  private count = 0;
  /** Open-addressing index (linear probing): entry + 1, 0 for an empty slot. */
  private slots = new Int32Array(1024);
  private readonly workerBits = new Map<string, number>();

  constructor(
    private capacity: number,
    private ttlMs: number,
  ) {}

  get size(): number {
    return this.count;
  }

  setLimits(capacity: number, ttlMs: number): void {
    this.capacity = capacity;
    this.ttlMs = ttlMs;
    this.trim();
  }

  /** Stamp every block of `hashes` for `worker` at `now`. */
  add(hashes: BlockSeq, worker: string, now: number): void {
    const bit = this.bitOf(worker);
    const word = bit >>> 5;
    const flag = 1 << (bit & 31);
    for (let i = 0; i < hashes.length; i++) {
      const h = hashes.at(i)!;
      let e = this.find(h);
      if (e === NONE) {
        e = this.alloc();
        this.keys[e] = h;
        this.masks.fill(0, e * this.words, (e + 1) * this.words);
        this.insertSlot(h, e);
        this.count++;
      } else {
        this.unlink(e);
      }
      this.masks[e * this.words + word]! |= flag;
      this.stampedAt[e] = now;
      this.linkTail(e);
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
    const W = this.words;
    const live = new Uint32Array(W);
    for (const w of workers) {
      const b = this.workerBits.get(w);
      if (b !== undefined) live[b >>> 5]! |= 1 << (b & 31);
    }
    // The last block index each worker bit was still in at.
    const lastIn = new Map<number, number>();
    const n = hashes.length;
    let any = live.some((x) => x !== 0);
    let i = 0;
    for (; i < n && any; i++) {
      const e = this.find(hashes.at(i)!);
      if (e === NONE) break;
      any = false;
      for (let k = 0; k < W; k++) {
        const before = live[k]!;
        const after = before & this.masks[e * W + k]!;
        let dropped = before & ~after;
        while (dropped !== 0) {
          const low = dropped & -dropped;
          if (i > 0) lastIn.set(k * 32 + 31 - Math.clz32(low), i - 1);
          dropped ^= low;
        }
        live[k] = after;
        if (after !== 0) any = true;
      }
    }
    for (let k = 0; k < W; k++) {
      let still = live[k]!;
      while (still !== 0 && i > 0) {
        const low = still & -still;
        lastIn.set(k * 32 + 31 - Math.clz32(low), i - 1);
        still ^= low;
      }
    }
    for (const w of workers) {
      const b = this.workerBits.get(w);
      const last = b === undefined ? undefined : lastIn.get(b);
      if (last !== undefined) out.set(w, Math.floor(((last + 1) * 100) / n));
    }
    return out;
  }

  /** Drop the blocks last stamped more than ttlMs before `now`. */
  expire(now: number): void {
    while (this.head !== NONE && now - this.stampedAt[this.head]! > this.ttlMs) this.dropHead();
  }

  private trim(): void {
    while (this.count > this.capacity && this.head !== NONE) this.dropHead();
  }

  private bitOf(worker: string): number {
    let b = this.workerBits.get(worker);
    if (b === undefined) {
      b = this.workerBits.size;
      this.workerBits.set(worker, b);
      if (b >= this.words * 32) this.widenMasks(this.words * 2);
    }
    return b;
  }

  private widenMasks(words: number): void {
    const entries = this.keys.length;
    const m = new Uint32Array(entries * words);
    for (let e = 0; e < entries; e++) m.set(this.masks.subarray(e * this.words, (e + 1) * this.words), e * words);
    this.masks = m;
    this.words = words;
  }

  private alloc(): number {
    if (this.freeHead !== NONE) {
      const e = this.freeHead;
      this.freeHead = this.next[e]!;
      return e;
    }
    if (this.fresh === this.keys.length) this.growSlab(Math.max(1024, this.keys.length * 2));
    return this.fresh++;
  }

  private growSlab(entries: number): void {
    const grow = <T extends Float64Array | Int32Array | Uint32Array>(a: T, n: number): T => {
      const b = new (a.constructor as new (n: number) => T)(n);
      b.set(a);
      return b;
    };
    this.keys = grow(this.keys, entries);
    this.stampedAt = grow(this.stampedAt, entries);
    this.prev = grow(this.prev, entries);
    this.next = grow(this.next, entries);
    this.masks = grow(this.masks, entries * this.words);
    // Keep the index at most half full.
    if (this.slots.length < entries * 2) this.rehash(entries * 2);
  }

  private unlink(e: number): void {
    const p = this.prev[e]!;
    const n = this.next[e]!;
    if (p === NONE) this.head = n;
    else this.next[p] = n;
    if (n === NONE) this.tail = p;
    else this.prev[n] = p;
  }

  private linkTail(e: number): void {
    this.prev[e] = this.tail;
    this.next[e] = NONE;
    if (this.tail === NONE) this.head = e;
    else this.next[this.tail] = e;
    this.tail = e;
  }

  private dropHead(): void {
    const e = this.head;
    this.unlink(e);
    this.removeSlot(this.keys[e]!);
    this.next[e] = this.freeHead;
    this.freeHead = e;
    this.count--;
  }

  /** A key's home slot: its low 32 bits (the hashes are already mixed). */
  private home(key: number): number {
    return (key >>> 0) & (this.slots.length - 1);
  }

  private find(key: number): number {
    const s = this.slots;
    const mask = s.length - 1;
    for (let i = this.home(key); ; i = (i + 1) & mask) {
      const v = s[i]!;
      if (v === 0) return NONE;
      if (this.keys[v - 1] === key) return v - 1;
    }
  }

  private insertSlot(key: number, e: number): void {
    const s = this.slots;
    const mask = s.length - 1;
    let i = this.home(key);
    while (s[i] !== 0) i = (i + 1) & mask;
    s[i] = e + 1;
  }

  /** Remove `key` from the index, shifting later entries of its probe run back (no tombstones). */
  private removeSlot(key: number): void {
    const s = this.slots;
    const mask = s.length - 1;
    let i = this.home(key);
    while (this.keys[s[i]! - 1] !== key) i = (i + 1) & mask;
    for (let j = (i + 1) & mask; s[j] !== 0; j = (j + 1) & mask) {
      const h = this.home(this.keys[s[j]! - 1]!);
      // Move s[j] into the hole at i unless its home lies cyclically in (i, j].
      const inRange = i <= j ? h > i && h <= j : h > i || h <= j;
      if (!inRange) {
        s[i] = s[j]!;
        i = j;
      }
    }
    s[i] = 0;
  }

  private rehash(size: number): void {
    let n = 1024;
    while (n < size) n *= 2;
    this.slots = new Int32Array(n);
    for (let e = this.head; e !== NONE; e = this.next[e]!) this.insertSlot(this.keys[e]!, e);
  }
}
