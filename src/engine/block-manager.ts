/**
 * Paged KV-cache blocks with prefix caching, following vLLM V1's block pool
 * (vllm/v1/core/block_pool.py, kv_cache_manager.py):
 *
 * - `numBlocks` blocks of `blockSize` tokens, each with a reference count.
 * - Only full blocks are cached, identified by their chained block hash.
 * - A block whose reference count drops to 0 joins the tail of the free queue but keeps its hash:
 *   it is still a cache hit until it is reused.
 * - Allocation takes the head of the free queue (least recently freed); if that block still holds
 *   a hash, the hash is evicted (BlockRemoved).
 * - A cache hit on a free block takes it out of the free queue ("touch").
 * - A request frees its blocks in reverse order, so a prompt's tail is evicted before its head.
 *
 * A hash maps to at most one block. When a second block computes a hash that is already cached
 * (two requests prefilled the same prefix in the same step), the second block stays unhashed: it
 * is used by its request but never becomes a cache entry, so the set of cached hashes — and the
 * KV events describing it — has no duplicates.
 *
 * Everything is O(1) per block touched (amortised): typed arrays for the per-block state, a ring
 * of block ids for the free queue, one open-addressing table from hash to block.
 *
 * Optional host-memory offload tier (vLLM's CPU offloading connector, `--kv-offloading-size`;
 * LMCache's local CPU backend): a cached block evicted from the GPU is kept in host memory, an LRU
 * of `numHostBlocks` blocks, and a later prompt that reaches it loads it back over PCIe instead
 * of recomputing it (engine.ts prices the load). Its KV events carry the medium, as vLLM's do: the
 * copy to host is published as BlockStored(medium "CPU") before the GPU's BlockRemoved, so a
 * subscriber knows the block by its hash when the host copy arrives without token ids; a host
 * eviction is BlockRemoved(medium "CPU").
 */

import type { KvEvent } from '../kv/events.js';
import type { IdList } from './array-pool.js';
import { OrderedMap53 } from '../util/ordered-map53.js';

const NO_HASH = -1;
const NIL = -1;
/** vLLM's medium string for blocks in host memory (the offloading connector's CPU; vllm/distributed/kv_events.py). */
const MEDIUM_CPU = 'CPU';

/**
 * Open-addressing map from block hash to block id. Block hashes are 53-bit integers, too wide
 * for V8's fast integer Map keys; a typed-array table probed by the hash's (already well mixed)
 * low 32 bits is several times faster than a Map on the admission path. It never holds more
 * entries than there are blocks, so it is sized once at twice the block count (load ≤ 0.5).
 * A slot is two doubles, the key and its block id side by side, so a probe reads one cache line
 * (the table of a worker's blocks is past the CPU's caches: a probe is a memory access).
 */
export class HashIndex implements BlockHashIndex {
  /** Slot i: key at 2i (NO_HASH when empty), block id at 2i + 1. */
  private readonly slots: Float64Array;
  private readonly mask: number;
  size = 0;

  constructor(maxEntries: number) {
    let cap = 16;
    while (cap < maxEntries * 2) cap *= 2;
    this.slots = new Float64Array(cap * 2).fill(NO_HASH);
    this.mask = cap - 1;
  }

  get(key: number): number {
    const slots = this.slots;
    const mask = this.mask;
    let i = (key >>> 0) & mask;
    for (;;) {
      const k = slots[2 * i]!;
      if (k === key) return slots[2 * i + 1]!;
      if (k === NO_HASH) return NIL;
      i = (i + 1) & mask;
    }
  }

  set(key: number, val: number): void {
    const slots = this.slots;
    const mask = this.mask;
    let i = (key >>> 0) & mask;
    for (;;) {
      const k = slots[2 * i]!;
      if (k === key) {
        slots[2 * i + 1] = val;
        return;
      }
      if (k === NO_HASH) {
        slots[2 * i] = key;
        slots[2 * i + 1] = val;
        this.size++;
        return;
      }
      i = (i + 1) & mask;
    }
  }

  /** Map `key` to `val` unless it is mapped already (then false, and nothing changes): one probe. */
  add(key: number, val: number): boolean {
    const slots = this.slots;
    const mask = this.mask;
    let i = (key >>> 0) & mask;
    for (;;) {
      const k = slots[2 * i]!;
      if (k === key) return false;
      if (k === NO_HASH) {
        slots[2 * i] = key;
        slots[2 * i + 1] = val;
        this.size++;
        return true;
      }
      i = (i + 1) & mask;
    }
  }

  delete(key: number): boolean {
    const slots = this.slots;
    const mask = this.mask;
    let i = (key >>> 0) & mask;
    for (;;) {
      const k = slots[2 * i]!;
      if (k === NO_HASH) return false;
      if (k === key) break;
      i = (i + 1) & mask;
    }
    // Backward-shift deletion keeps probe chains intact without tombstones.
    let hole = i;
    let j = i;
    for (;;) {
      j = (j + 1) & mask;
      const k = slots[2 * j]!;
      if (k === NO_HASH) break;
      const home = (k >>> 0) & mask;
      // Move k into the hole unless its home lies cyclically in (hole, j].
      if (hole <= j ? home <= hole || home > j : home <= hole && home > j) {
        slots[2 * hole] = k;
        slots[2 * hole + 1] = slots[2 * j + 1]!;
        hole = j;
      }
    }
    slots[2 * hole] = NO_HASH;
    this.size--;
    return true;
  }

  readonly evictReadsTable = true;

  evict(key: number): void {
    this.delete(key);
  }

  peekHome(key: number): number {
    return this.slots[2 * ((key >>> 0) & this.mask)]!;
  }

  *keysIter(): IterableIterator<number> {
    const slots = this.slots;
    for (let i = 0; i < slots.length; i += 2) if (slots[i] !== NO_HASH) yield slots[i]!;
  }
}

/** What BlockManager asks of its map from block hash to block id. */
interface BlockHashIndex {
  readonly size: number;
  /** The block holding `key`, or NIL. */
  get(key: number): number;
  /** Map `key` to block `val` unless it is mapped already (then false, and nothing changes). */
  add(key: number, val: number): boolean;
  delete(key: number): boolean;
  /** `key` has left its block (the block's hash is being cleared). */
  evict(key: number): void;
  /**
   * Whether evict() reads the table (so that a batch of evictions should warm its slots first):
   * false where the entry is left in place, matching nothing once the block's own hash changes.
   */
  readonly evictReadsTable: boolean;
  /** Read the slot where `key`'s probe starts (its value is of no use: the read brings the slot into the cache). */
  peekHome(key: number): number;
  keysIter(): IterableIterator<number>;
}

/**
 * The same map in a quarter of HashIndex's memory, for a pool of up to 2^15 − 1 blocks (an 8B
 * model on one 80 GB GPU has ~28k): a slot is one 32-bit integer, the block id in its low k bits
 * and above them a fingerprint of the hash: the bits of its low word below those that pick the
 * slot's home. A probe compares fingerprints and reads the block's own hash (`blockHash`,
 * BlockManager's per-block state) only on a match, which a key that is not there almost never
 * makes (a fingerprint that repeated the home's bits would match every key of the same home). The
 * point is the size: every engine of a fleet has one of these tables, each probe of a table past
 * the CPU's caches is a memory access, and a 256 KiB table stays in them where a 1 MiB one does
 * not.
 *
 * A slot holds no home, so a deletion cannot move later keys back: it leaves a tombstone, which
 * probes pass over and insertions reuse. An eviction (a free block taken for new tokens, the
 * commonest removal) does not touch the table at all: the block's own hash changes, and a slot
 * naming a block whose hash is not the key probed for matches nothing, so the slot is left
 * stale. Taking a batch of blocks then reads no table slot, where a deletion would read one at
 * random per block. When keys, tombstones and stale slots together fill three quarters of the
 * table, it is rebuilt from the blocks' own hashes (one pass over `blockHash`), which drops the
 * last two.
 */
export class PackedHashIndex implements BlockHashIndex {
  private readonly slots: Int32Array;
  private readonly mask: number;
  /** Bits of the block id (low bits of a slot). */
  private readonly idMask: number;
  /** A key's home is the top bits of its low word: that word shifted right by `homeShift`. */
  private readonly homeShift: number;
  /** The fingerprint is the key's low word shifted left by `fpShift`, its id bits cleared. */
  private readonly fpShift: number;
  /** A deleted key's slot: an all-ones block id (no block has it) under a zero fingerprint. */
  private readonly tomb: number;
  private tombs = 0;
  /** Slots left by evictions: they name a block that no longer holds their key. */
  private stale = 0;
  /** Keys, tombstones and stale slots past which the table is rebuilt. */
  private readonly maxUsed: number;
  size = 0;

  /** Whether a pool of `numBlocks` blocks fits: block id and home within 32 bits. */
  static fits(numBlocks: number): boolean {
    const k = PackedHashIndex.idBitsFor(numBlocks);
    return k + Math.log2(PackedHashIndex.capFor(numBlocks)) <= 32;
  }

  /** Block ids 0 … n − 1 and an all-ones id left free, so that −1 marks an empty slot. */
  private static idBitsFor(numBlocks: number): number {
    return Math.ceil(Math.log2(numBlocks + 1));
  }

  private static capFor(numBlocks: number): number {
    let cap = 16;
    while (cap < numBlocks * 2) cap *= 2;
    return cap;
  }

  /** `blockHash(b)`: the hash block b holds (BlockManager's own record of it), NO_HASH for none. */
  constructor(
    private readonly numBlocks: number,
    private readonly blockHash: Float64Array,
    private readonly stride: number,
  ) {
    const cap = PackedHashIndex.capFor(numBlocks);
    this.slots = new Int32Array(cap).fill(-1);
    this.mask = cap - 1;
    this.idMask = (1 << PackedHashIndex.idBitsFor(numBlocks)) - 1;
    this.homeShift = 32 - Math.log2(cap);
    this.fpShift = Math.log2(cap);
    this.tomb = this.idMask;
    this.maxUsed = (cap >>> 2) * 3;
  }

  private fingerprint(key: number): number {
    return (key << this.fpShift) & ~this.idMask;
  }

  /** Index of `key`'s slot, or of the empty slot ending its probe chain. */
  private find(key: number): number {
    const slots = this.slots;
    const mask = this.mask;
    const idMask = this.idMask;
    const fp = this.fingerprint(key);
    let i = (key >>> 0) >>> this.homeShift;
    for (;;) {
      const v = slots[i]!;
      if (v === -1) return i;
      if ((v & ~idMask) === fp && v !== this.tomb && this.blockHash[(v & idMask) * this.stride] === key) return i;
      i = (i + 1) & mask;
    }
  }

  get(key: number): number {
    const v = this.slots[this.find(key)]!;
    return v === -1 ? NIL : v & this.idMask;
  }

  add(key: number, val: number): boolean {
    if (this.size + this.tombs + this.stale >= this.maxUsed) this.rebuild();
    const slots = this.slots;
    const mask = this.mask;
    const idMask = this.idMask;
    const fp = this.fingerprint(key);
    let reuse = -1;
    let i = (key >>> 0) >>> this.homeShift;
    for (;;) {
      const v = slots[i]!;
      if (v === -1) break;
      if (v === this.tomb) {
        if (reuse < 0) reuse = i;
      } else if ((v & ~idMask) === fp && this.blockHash[(v & idMask) * this.stride] === key) {
        return false;
      }
      i = (i + 1) & mask;
    }
    if (reuse >= 0) {
      i = reuse;
      this.tombs--;
    }
    slots[i] = fp | val;
    this.size++;
    return true;
  }

  delete(key: number): boolean {
    const i = this.find(key);
    if (this.slots[i] === -1) return false;
    this.slots[i] = this.tomb;
    this.size--;
    this.tombs++;
    return true;
  }

  /** Every key again from the blocks' hashes, into a table without tombstones. */
  private rebuild(): void {
    const slots = this.slots;
    const mask = this.mask;
    slots.fill(-1);
    this.tombs = 0;
    this.stale = 0;
    for (let b = 0; b < this.numBlocks; b++) {
      const key = this.blockHash[b * this.stride]!;
      if (key === NO_HASH) continue;
      let i = (key >>> 0) >>> this.homeShift;
      while (slots[i] !== -1) i = (i + 1) & mask;
      slots[i] = this.fingerprint(key) | b;
    }
  }

  readonly evictReadsTable = false;

  /**
   * The slot stays, stale: its block's hash is cleared by the caller, so no probe matches it.
   * (Were the block to be cached under the same key again, the slot would match anew beside the
   * one that insertion writes; every occupied slot is still counted once, as a key, a tombstone
   * or stale, and a rebuild makes the table exact again.)
   */
  evict(_key: number): void {
    this.size--;
    this.stale++;
  }

  peekHome(key: number): number {
    return this.slots[(key >>> 0) >>> this.homeShift]!;
  }

  /** Slots the rebuild threshold counts as taken (keys, tombstones, stale slots); a scan of the table finds exactly these. */
  get occupied(): number {
    return this.size + this.tombs + this.stale;
  }

  /** Occupied slots counted in the table itself (a check on `occupied`: a slot it missed would let the table fill and a probe never end). */
  countOccupiedSlots(): number {
    let n = 0;
    for (const v of this.slots) if (v !== -1) n++;
    return n;
  }

  /** From the blocks: a stale slot names a block whose hash may now be another key's. */
  *keysIter(): IterableIterator<number> {
    for (let b = 0; b < this.numBlocks; b++) {
      const key = this.blockHash[b * this.stride]!;
      if (key !== NO_HASH) yield key;
    }
  }
}

export class BlockManager {
  readonly numBlocks: number;
  readonly blockSize: number;
  /**
   * Per-block state, 16 bytes side by side so that touching a block reads one cache line, in one
   * buffer seen two ways: `blkHash[2b]` is its cached hash (NO_HASH when it is not a cache
   * entry); `blkInt[4b + 2]` the references held by requests (0 = in the free queue) and
   * `blkInt[4b + 3]` the ring index of its free-queue entry (NIL when it is not queued). Four
   * blocks to a line: every engine of a fleet has one of these, read at random.
   */
  private readonly blkHash: Float64Array;
  private readonly blkInt: Int32Array;
  /**
   * The free queue, least recently freed first: block ids at positions qHead … qTail − 1 (taken
   * modulo its length), NIL where a block left the queue from its middle (a prefix-cache hit on
   * a free block). Taking the first n blocks reads the ring in order and their lines in
   * independent loads, where a linked list would chase one block's line to find the next.
   */
  private readonly ring: Int32Array;
  private readonly ringMask: number;
  private qHead = 0;
  private qTail = 0;
  private freeCount = 0;
  private cachedFree = 0;
  private readonly byHash: BlockHashIndex;
  /** KV events in the order the operations happened; null when events are off. */
  private readonly events: KvEvent[] | null;
  /**
   * Hashes held in host memory, least recently used first; null: no tier. An OrderedMap53: a Map
   * keyed by the 53-bit hashes would box each one, and every GPU eviction offloads a block.
   */
  private readonly host: OrderedMap53 | null;
  readonly numHostBlocks: number;
  /** Where warming loads leave their sum, so that the compiler keeps them. */
  private sink = 0;

  constructor(numBlocks: number, blockSize: number, recordEvents: boolean, numHostBlocks = 0) {
    if (!Number.isInteger(numBlocks) || numBlocks < 1) throw new Error(`numGpuBlocks must be a positive integer, got ${numBlocks}`);
    if (!Number.isInteger(blockSize) || blockSize < 1) throw new Error(`blockSize must be a positive integer, got ${blockSize}`);
    this.numBlocks = numBlocks;
    this.blockSize = blockSize;
    // Every block free, unhashed and unreferenced, queued in id order (what pushTail(0 … n − 1)
    // leaves), written in one pass: a fleet of 64 engines builds millions of these.
    const blkHash = (this.blkHash = new Float64Array(numBlocks * 2));
    const blkInt = (this.blkInt = new Int32Array(blkHash.buffer));
    // Room for holes: the ring is compacted when full, after at least 3 × numBlocks frees.
    let cap = 16;
    while (cap < numBlocks * 4) cap *= 2;
    const ring = (this.ring = new Int32Array(cap));
    this.ringMask = cap - 1;
    for (let b = 0; b < numBlocks; b++) {
      blkHash[2 * b] = NO_HASH;
      blkInt[4 * b + 3] = b;
      ring[b] = b;
    }
    this.qTail = numBlocks;
    this.freeCount = numBlocks;
    this.byHash = PackedHashIndex.fits(numBlocks) ? new PackedHashIndex(numBlocks, this.blkHash, 2) : new HashIndex(numBlocks);
    this.events = recordEvents ? [] : null;
    if (!Number.isInteger(numHostBlocks) || numHostBlocks < 0) throw new Error(`numHostBlocks must be a non-negative integer, got ${numHostBlocks}`);
    this.numHostBlocks = numHostBlocks;
    this.host = numHostBlocks > 0 ? new OrderedMap53(Math.min(numHostBlocks, 1 << 16)) : null;
  }

  /** True if `hash` can be loaded from host memory. */
  inHost(hash: number): boolean {
    return this.host !== null && this.host.has(hash);
  }

  /** Blocks held in host memory. */
  get numHostCached(): number {
    return this.host?.size ?? 0;
  }

  /** Mark a host block as just used (it is being loaded back), so evictions take others first. */
  touchHost(hash: number): void {
    const host = this.host;
    if (host === null || !host.has(hash)) return;
    host.setLast(hash, 0, 0);
  }

  /** Keep an evicted GPU block in host memory, making room by evicting the LRU host block. */
  private offload(hash: number): void {
    const host = this.host!;
    if (host.has(hash)) {
      host.setLast(hash, 0, 0); // already there (loaded back earlier): now the most recent
      return;
    }
    if (host.size >= this.numHostBlocks) {
      const old = host.oldestKey()!;
      host.delete(old);
      this.emitRemoved(old, MEDIUM_CPU);
    }
    host.setLast(hash, 0, 0);
    this.events?.push({ type: 'BlockStored', blockHashes: [hash], parentBlockHash: null, tokenIds: [], blockSize: this.blockSize, medium: MEDIUM_CPU });
  }

  /** Blocks in the free queue (including evictable cached ones). */
  get numFree(): number {
    return this.freeCount;
  }

  /** Blocks referenced by at least one request. */
  get numUsed(): number {
    return this.numBlocks - this.freeCount;
  }

  /** Free blocks that still hold a cached prefix. */
  get numCachedFree(): number {
    return this.cachedFree;
  }

  /** Number of distinct cached hashes (in use or free). */
  get numCached(): number {
    return this.byHash.size;
  }

  /** Block holding `hash`, or -1. Read-only. */
  lookup(hash: number): number {
    return this.byHash.get(hash);
  }

  /** True if block `b` is in the free queue (so a hit on it consumes a free block). */
  isFree(b: number): boolean {
    return this.blkInt[4 * b + 2] === 0;
  }

  refs(b: number): number {
    return this.blkInt[4 * b + 2]!;
  }

  hashOfBlock(b: number): number | null {
    const h = this.blkHash[2 * b]!;
    return h === NO_HASH ? null : h;
  }

  /** Take a reference on a cached block found by lookup(); removes it from the free queue if needed. */
  touch(b: number): void {
    if (this.blkInt[4 * b + 2] === 0) {
      this.unlink(b);
      if (this.blkHash[2 * b] !== NO_HASH) this.cachedFree--;
    }
    this.blkInt[4 * b + 2]!++;
  }

  /**
   * Allocate one fresh block (refcount 1), evicting its cached hash if it had one.
   * Returns -1 when the free queue is empty; callers check numFree first.
   */
  allocate(): number {
    if (this.freeCount === 0) return NIL;
    const b = this.popHead();
    const h = this.blkHash[2 * b]!;
    if (h !== NO_HASH) {
      this.cachedFree--;
      this.byHash.evict(h);
      this.blkHash[2 * b] = NO_HASH;
      if (this.host !== null) this.offload(h);
      this.emitRemoved(h);
    }
    this.blkInt[4 * b + 2] = 1;
    return b;
  }

  /**
   * Allocate `n` fresh blocks onto the end of `out` (as many calls of allocate(); callers check
   * numFree first). The blocks to be taken are the free queue's first `n`: one walk along the
   * queue reads their lines (and, for an index whose eviction reads the table, the slots of the
   * hashes they give up) before any is taken, so the cache misses overlap instead of each
   * waiting for the one before.
   */
  allocateInto(out: IdList, n: number): void {
    if (n <= 0) return;
    if (n > 1) this.warmForAllocate(n);
    out.reserve(n);
    const ids = out.ids;
    for (let k = 0; k < n; k++) ids[out.length++] = this.allocate();
  }

  private warmForAllocate(n: number): void {
    const blkHash = this.blkHash;
    const byHash = this.byHash;
    const ring = this.ring;
    const mask = this.ringMask;
    const readsTable = byHash.evictReadsTable;
    let acc = 0;
    for (let pos = this.qHead, taken = 0; taken < n && pos < this.qTail; pos++) {
      const b = ring[pos & mask]!;
      if (b === NIL) continue;
      taken++;
      const h = blkHash[2 * b]!;
      if (h !== NO_HASH) acc += readsTable ? byHash.peekHome(h) : h;
    }
    this.sink += acc;
  }

  /**
   * Release one reference on each of `blocks`, last block first, so that among blocks freed
   * together the tail ones reach the head of the free queue (evicted) before the head ones.
   */
  freeAll(blocks: ArrayLike<number>, n = blocks.length): void {
    // The blocks' lines first, in independent loads whose misses overlap (as in warmForCache).
    const blkInt = this.blkInt;
    let acc = 0;
    for (let i = 0; i < n; i++) acc += blkInt[4 * blocks[i]! + 2]!;
    this.sink += acc;
    for (let i = n - 1; i >= 0; i--) this.release(blocks[i]!);
  }

  release(b: number): void {
    const rc = --this.blkInt[4 * b + 2]!;
    if (rc < 0) throw new Error(`block ${b} freed twice`);
    if (rc === 0) {
      this.pushTail(b);
      if (this.blkHash[2 * b] !== NO_HASH) this.cachedFree++;
    }
  }

  /**
   * Register full block `b` (held by a request) under `hash`. Returns false if the hash is
   * already cached in another block (the block stays unhashed) or the block already has a hash.
   */
  cache(b: number, hash: number): boolean {
    if (this.blkHash[2 * b] !== NO_HASH) return false;
    if (!this.byHash.add(hash, b)) return false;
    this.blkHash[2 * b] = hash;
    return true;
  }

  /**
   * Read, in one pass, the memory that caching `blocks[k]` under `hashes[k]` for k in [from, to)
   * touches: each block's own line and its hash's home slot. The loads are independent, so the
   * CPU overlaps their cache misses, where the caching loop that follows would wait on each in
   * turn (every engine of a fleet has its own tables, too large to stay in the CPU's caches).
   */
  warmForCache(blocks: ArrayLike<number>, hashes: ArrayLike<number>, from: number, to: number): void {
    const blkHash = this.blkHash;
    const byHash = this.byHash;
    let acc = 0;
    for (let k = from; k < to; k++) acc += byHash.peekHome(hashes[k]!) + blkHash[2 * blocks[k]!]!;
    this.sink += acc;
  }

  /** Read the index slots where looking up `hashes[from … to)` starts (as warmForCache). */
  warmLookups(hashes: ArrayLike<number>, from: number, to: number): void {
    const byHash = this.byHash;
    let acc = 0;
    for (let k = from; k < to; k++) acc += byHash.peekHome(hashes[k]!);
    this.sink += acc;
  }

  /**
   * Drop the hashes of every free cached block. Returns the number dropped. Used blocks keep
   * theirs. Emits AllBlocksCleared when nothing at all is cached afterwards, BlockRemoved otherwise.
   */
  resetFreeCache(): number {
    const dropped: number[] = [];
    for (let pos = this.qHead; pos < this.qTail; pos++) {
      const b = this.ring[pos & this.ringMask]!;
      if (b === NIL) continue;
      const h = this.blkHash[2 * b]!;
      if (h !== NO_HASH) {
        this.byHash.delete(h);
        this.blkHash[2 * b] = NO_HASH;
        dropped.push(h);
      }
    }
    this.cachedFree = 0;
    // The host tier is dropped too (vLLM resets its offloading connector with the prefix cache).
    const hostDropped = this.host ? [...this.host.keysInOrder()] : [];
    this.host?.clear();
    if (this.events) {
      if (this.byHash.size === 0) this.events.push({ type: 'AllBlocksCleared' });
      else {
        if (dropped.length > 0) this.events.push({ type: 'BlockRemoved', blockHashes: dropped });
        if (hostDropped.length > 0) this.events.push({ type: 'BlockRemoved', blockHashes: hostDropped, medium: MEDIUM_CPU });
      }
    }
    return dropped.length;
  }

  /** Append a BlockStored event (caller batches consecutive blocks of one request). */
  emitStored(blockHashes: number[], parent: number | null, tokenIds: number[], loraName?: string): void {
    this.events?.push({ type: 'BlockStored', blockHashes, parentBlockHash: parent, tokenIds, blockSize: this.blockSize, ...(loraName !== undefined ? { loraName } : {}) });
  }

  get recordsEvents(): boolean {
    return this.events !== null;
  }

  /** Events produced since the last call, in order. */
  takeEvents(): KvEvent[] {
    if (!this.events || this.events.length === 0) return [];
    return this.events.splice(0, this.events.length);
  }

  /** Every cached hash, for tests and debugging (O(cached)). */
  cachedHashes(): Set<number> {
    return new Set(this.byHash.keysIter());
  }

  private emitRemoved(h: number, medium?: string): void {
    const ev = this.events;
    if (!ev) return;
    // Merge with an immediately preceding BlockRemoved of the same medium to keep event batches
    // small while still preserving the order of operations (a hash may be removed and stored
    // again in one step).
    const last = ev[ev.length - 1];
    if (last && last.type === 'BlockRemoved' && last.medium === medium) last.blockHashes.push(h);
    else ev.push(medium === undefined ? { type: 'BlockRemoved', blockHashes: [h] } : { type: 'BlockRemoved', blockHashes: [h], medium });
  }

  private pushTail(b: number): void {
    if (this.qTail - this.qHead === this.ring.length) this.compactQueue();
    // A position is a plain number (exact to 2^53); `& mask` takes it modulo the ring's length.
    const at = this.qTail++ & this.ringMask;
    this.ring[at] = b;
    this.blkInt[4 * b + 3] = at;
    this.freeCount++;
  }

  /** Take the least recently freed block out of the queue (freeCount > 0). */
  private popHead(): number {
    const ring = this.ring;
    const mask = this.ringMask;
    let pos = this.qHead;
    let b = ring[pos & mask]!;
    while (b === NIL) b = ring[++pos & mask]!;
    this.qHead = pos + 1;
    this.blkInt[4 * b + 3] = NIL;
    this.freeCount--;
    return b;
  }

  /** Take block `b` out of the queue wherever it is: its entry becomes a hole, skipped when reached. */
  private unlink(b: number): void {
    this.ring[this.blkInt[4 * b + 3]!] = NIL;
    this.blkInt[4 * b + 3] = NIL;
    this.freeCount--;
  }

  /** Close the holes of a full ring, keeping the queue's order. */
  private compactQueue(): void {
    const ring = this.ring;
    const mask = this.ringMask;
    let w = this.qHead;
    for (let pos = this.qHead; pos < this.qTail; pos++) {
      const b = ring[pos & mask]!;
      if (b === NIL) continue;
      ring[w & mask] = b;
      this.blkInt[4 * b + 3] = w & mask;
      w++;
    }
    this.qTail = w;
  }
}
