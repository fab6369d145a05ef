/**
 * The prefix index: for each worker, which prompt blocks it probably holds.
 *
 * Blocks are identified by kvgate's own chained block hashes over token ids (blockHashes with
 * KVGATE_HASH_SEED). Engines seed their chains per process, so their hashes can never be
 * recomputed here; KV events are mapped onto this hash space through the token ids they carry
 * (src/fleet/kv-events-mapper.ts).
 *
 * Three kinds of knowledge, kept as flags on one (block, worker) node:
 * - predicted: inserted at pick time so a burst sharing a prefix co-locates before the worker has
 *   reported anything; expires after `predictedTtlMs` unless confirmed.
 * - routed: the worker produced a first token for a prompt routed there, so its prefill is done;
 *   ages out with a capacity model of the worker (and optionally `approxTtlMs`).
 * - event: the worker said so in a BlockStored event; removed by BlockRemoved / AllBlocksCleared.
 *   An event-fed block also records the media holding it (GPU, host memory, disk: vLLM's
 *   `medium`), so a policy can credit a hit in a slower tier less (`tierCounts`). A block on
 *   host memory or disk only still matches — the engine reloads it instead of recomputing it.
 *
 * Every worker's nodes sit on an LRU list bounded by the worker's KV capacity (numGpuBlocks), so
 * the index never believes in more blocks than the worker can hold. A prompt's blocks are touched
 * tail first, so its head is the most recent and — as in vLLM — the tail ages out first.
 *
 * Layout, for speed and memory: one open-addressing hash table from block hash to an entry, 16
 * bytes a slot (key, entry id and the entry's first worker-mask word: one cache line per lookup);
 * each entry has a bitmask of the workers holding it (one 32-bit word per 32 workers) and a list
 * of its nodes; nodes live in typed arrays linked into intrusive doubly linked per-worker LRU
 * lists. Each worker's blocks are prefix-closed (see `bisect`), so a prompt's match is found by
 * galloping then bisecting over its blocks: O(log(prompt blocks) × distinct match lengths ×
 * mask words) table lookups, hashing lazily only as far as the gallop reaches, nothing allocated
 * per block. An 8,000-token prompt over 16 workers takes a few dozen lookups, not 500. Pick-time inserts
 * can be deferred to idle time (insertLater) and are applied before any later use; a prediction
 * (`predict`) leaves a trail of the nodes its blocks went to, which its confirmation follows
 * instead of looking the blocks up again (`confirmRange`). The whole
 * structure is bounded by `maxBytes` (about 83 bytes per block with up to 32 workers).
 */
import type { IndexSource } from '../../fleet/kv-block-sink.js';
import { PromptBlocks, type BlockSeq } from '../../kv/prompt-blocks.js';
import type { KvTier } from '../../kv/tiers.js';

export type { IndexSource };


export type BlockSource = 'predicted' | 'routed' | 'event';

/**
 * Receives the routing knowledge this index makes itself — pick-time predictions and routed
 * (confirmed) blocks, never blocks learned from KV events or from other replicas — so that other
 * gateway replicas can learn it (`learn`). Called on the request path: it must only queue.
 */
export type RoutingKnowledgeObserver = (id: string, hashes: BlockSeq, source: 'predicted' | 'routed', now: number) => void;

/**
 * Where a prediction's blocks went: for each block, its node and the node's allocation stamp, as
 * the deferred insert left them (filled when it is applied). The prediction's confirmation walks
 * these nodes instead of looking every block up again; a node since freed or given to another
 * block (its stamp moved on) is looked up as usual.
 */
export interface PredictionTrail {
  /** [node, stamp & STAMP_MASK] per block, in block order; empty until the prediction is applied. */
  nodes: number[];
}

const F_PREDICTED = 1;
const F_ROUTED = 2;
const F_EVENT = 4;
const FLAG: Record<BlockSource, number> = { predicted: F_PREDICTED, routed: F_ROUTED, event: F_EVENT };
/** Media of an event-fed block, in the high bits of its flags (set only with F_EVENT). */
const M_GPU = 8;
const M_HOST = 16;
const M_DISK = 32;
const M_ALL = M_GPU | M_HOST | M_DISK;
const MEDIUM_BIT: Record<KvTier, number> = { gpu: M_GPU, host: M_HOST, disk: M_DISK };

/** The media bits an upsert of `flag` records when no tier is given: an event-fed block is on the GPU. */
function mediumOf(flag: number): number {
  return flag === F_EVENT ? M_GPU : 0;
}

/** True for a node whose block the worker holds only off the GPU (host memory or disk). */
function offGpu(flags: number): boolean {
  return (flags & (F_PREDICTED | F_ROUTED | M_GPU)) === 0 && (flags & (M_HOST | M_DISK)) !== 0;
}

const NIL = -1;

/** A BlockSeq's hashes as an array (a PromptBlocks hashes the rest of its prompt). */
function hashArray(seq: BlockSeq): readonly number[] {
  if (Array.isArray(seq)) return seq as readonly number[];
  if (seq instanceof PromptBlocks) return seq.all();
  return Array.from({ length: seq.length }, (_, i) => seq.at(i)!);
}

export interface PrefixIndexOptions {
  /** Upper bound of the index's typed-array memory, bytes. */
  maxBytes?: number;
  /**
   * Most workers one index tracks at once (1..65,535). Each 32 workers in use add 4 bytes to
   * every entry's worker mask.
   */
  maxWorkers?: number;
  /**
   * Lifetime of a pick-time prediction not yet confirmed by a first token, ms. A safety net:
   * requests that fail before their first token withdraw their prediction at once.
   */
  predictedTtlMs?: number;
  /**
   * Lifetime of a routed (confirmed, not event-backed) block since its last use, ms. Infinity:
   * routed blocks age out only through the worker's capacity model.
   */
  approxTtlMs?: number;
  /** Per-worker bound = numGpuBlocks × this. */
  capacityFactor?: number;
}

/**
 * Defaults of PrefixIndexOptions; the policy options that configure an index (indexMaxBytes,
 * maxWorkers, predictedTtlMs, approxTtlMs) take theirs from here.
 */
export const PREFIX_INDEX_DEFAULTS: Readonly<Required<PrefixIndexOptions>> = Object.freeze({
  maxBytes: 256 * 1024 * 1024, // ≈ 3.8 M blocks
  maxWorkers: 1024,
  predictedTtlMs: 15_000,
  approxTtlMs: Infinity,
  capacityFactor: 1,
});

export interface WorkerIndexStatus {
  id: string;
  source: IndexSource;
  reason: string;
  since: number;
  blocks: number;
  capacity: number;
}

export interface PrefixIndexStats {
  entries: number;
  nodes: number;
  workers: number;
  /** Bytes held by the typed arrays now. */
  bytes: number;
  /** Bytes per (block, worker) node when the arrays are full, hash table included. */
  bytesPerBlock: number;
  maxNodes: number;
  /** Nodes dropped because the byte bound was reached (not because a worker's capacity was). */
  evictedForMemory: number;
  evictedForCapacity: number;
  expired: number;
  /**
   * Blocks of confirmations that had their prediction's trail: found where the trail left them,
   * and looked up because their node had gone (freed, or given to another block) meanwhile.
   */
  confirmedAlongTrail: number;
  confirmedLookedUp: number;
}

interface WorkerSlot {
  id: string;
  slot: number;
  source: IndexSource;
  reason: string;
  since: number;
}

const INITIAL_NODES = 1024;

/** Hash-table slots for `nodes` entries: a power of two, at most half full. */
function tableSizeFor(nodes: number): number {
  let size = 2;
  while (size < nodes * 2) size *= 2;
  return size;
}

/** Longest an idle-time upkeep slice runs before yielding the event loop, ms. */
const IDLE_SLICE_MS = 0.2;
/** Blocks upserted between two looks at the clock in a sliced upkeep. */
const UPSERT_RUN = 32;
/** Least recently used nodes evicted together (trimWorker), their entries read first. */
const TRIM_RUN = 32;
/** A trail keeps 30 bits of a node's stamp, so that its array holds small integers only. */
const STAMP_MASK = 0x3fffffff;

export class PrefixIndex {
  readonly maxBytes: number;
  readonly maxWorkers: number;
  readonly predictedTtlMs: number;
  readonly approxTtlMs: number;
  readonly capacityFactor: number;
  /** 32-bit mask words per entry: grows with the highest worker slot in use. */
  private words = 1;

  // Hash table: block hash → entry id + 1 (0 = empty slot).
  /**
   * Open-addressing table, 16 bytes a slot so one cache line answers a lookup: the key (float64
   * at 2i), entry id + 1 (int32 at 4i+2, 0 = empty) and a copy of the entry's first worker-mask
   * word (int32 at 4i+3).
   */
  private tab: Float64Array;
  private tabI: Int32Array;
  private tMask: number;
  private tShift: number;

  // Entries (one per distinct block hash).
  private eHash: Float64Array;
  private eMask: Uint32Array;
  private eFirst: Int32Array; // first node of the entry, or next free entry when free
  private eSlot: Int32Array; // the entry's slot in the table
  private eFree = NIL;
  private eTop = 0;
  private entryCount = 0;

  // Nodes (one per block held by one worker).
  private nEntry: Int32Array;
  private nWorker: Uint16Array;
  private nPrev: Int32Array;
  private nNext: Int32Array; // LRU next, or next free node when free
  private nSib: Int32Array;
  private nFlags: Uint8Array;
  private nExpires: Float64Array;
  private nStamp: Uint32Array;
  private nFree = NIL;
  private nTop = 0;
  private nodeCount = 0;
  private nodeCap: number;
  maxNodes: number;

  // Per-worker LRU lists (head = most recent).
  private wHead: Int32Array;
  private wTail: Int32Array;
  private wCount: Int32Array;
  private wCap: Float64Array;
  /**
   * Blocks each worker holds only off the GPU: they do not count against its GPU capacity, so
   * the worker's LRU bound is its capacity plus these.
   */
  private wOff: Int32Array;
  private readonly slots = new Map<string, WorkerSlot>();
  private readonly freeSlots: number[] = [];

  // Predictions in expiry order (all share one TTL), as (node, stamp) pairs in a ring.
  private pNode: Int32Array;
  private pStamp: Uint32Array;
  private pExp: Float64Array;
  private pHead = 0;
  private pLen = 0;

  /** Latest clock time seen in a lookup or insert (idle-time expiry never runs ahead of it). */
  private lastNow = -Infinity;
  /** Deferred inserts, in order; `hs` is the hashes as an array once a (sliced) apply has made it. */
  private pending: Array<{ id: string; hashes: BlockSeq; source: BlockSource; now: number; trail?: PredictionTrail; hs?: readonly number[] }> = [];
  private flushTimer: NodeJS.Immediate | null = null;
  /** Where the tail-first walk of a part-applied pending insert (pending[0]) stopped; -1: none. */
  private pendingTo = -1;
  /** Scratch of matchSlots: each slot's match length, and bisect's stack of (lo, hi, set) frames. */
  private lengthsBuf = new Int32Array(32);
  private stackBuf = new Uint32Array(0);

  /** Where this index's own routing knowledge goes (sharing across replicas); null: nowhere. */
  observer: RoutingKnowledgeObserver | null = null;
  /** Block runs learned from other replicas (`learn`). */
  learnedRuns = 0;

  /** Blocks confirmed along a trail, and looked up instead (their node had gone). */
  private trailHits = 0;
  private trailMisses = 0;

  /** Where warmSlots leaves its sum, so that the compiler keeps its loads. */
  private sink = 0;
  /** The nodes trimWorker is about to evict. */
  private readonly trimRun = new Int32Array(TRIM_RUN);
  private evictedForMemory = 0;
  private evictedForCapacity = 0;
  private expiredCount = 0;

  constructor(opts: PrefixIndexOptions = {}) {
    const d = PREFIX_INDEX_DEFAULTS;
    this.maxBytes = opts.maxBytes ?? d.maxBytes;
    this.maxWorkers = opts.maxWorkers ?? d.maxWorkers;
    if (this.maxWorkers < 1 || this.maxWorkers > 65535) throw new Error('maxWorkers must be 1..65535');
    this.predictedTtlMs = opts.predictedTtlMs ?? d.predictedTtlMs;
    this.approxTtlMs = opts.approxTtlMs ?? d.approxTtlMs;
    this.capacityFactor = opts.capacityFactor ?? d.capacityFactor;
    this.maxNodes = this.nodesWithin(this.maxBytes);
    this.nodeCap = Math.min(INITIAL_NODES, this.maxNodes);
    const n = this.nodeCap;
    const size = tableSizeFor(n);
    this.tab = new Float64Array(size * 2);
    this.tabI = new Int32Array(this.tab.buffer);
    this.tMask = size - 1;
    this.tShift = 32 - Math.log2(size);
    this.eHash = new Float64Array(n);
    this.eMask = new Uint32Array(n * this.words);
    this.eFirst = new Int32Array(n);
    this.eSlot = new Int32Array(n);
    this.nEntry = new Int32Array(n);
    this.nWorker = new Uint16Array(n);
    this.nPrev = new Int32Array(n);
    this.nNext = new Int32Array(n);
    this.nSib = new Int32Array(n);
    this.nFlags = new Uint8Array(n);
    this.nExpires = new Float64Array(n);
    this.nStamp = new Uint32Array(n);
    this.pNode = new Int32Array(256);
    this.pStamp = new Uint32Array(256);
    this.pExp = new Float64Array(256);
    this.wHead = new Int32Array(this.maxWorkers).fill(NIL);
    this.wTail = new Int32Array(this.maxWorkers).fill(NIL);
    this.wCount = new Int32Array(this.maxWorkers);
    this.wCap = new Float64Array(this.maxWorkers);
    this.wOff = new Int32Array(this.maxWorkers);
    for (let s = this.maxWorkers - 1; s >= 0; s--) this.freeSlots.push(s);
  }

  /**
   * Bytes per node at full arrays: the node (4+2+4+4+4+1+8+4), an entry (8 + 4·words + 4 + 4)
   * and two hash-table slots (2 × 16; the table is kept ≤ half full). Entries and nodes share one
   * capacity because every entry has at least one node. The prediction ring (16 bytes per
   * outstanding prediction) is counted in `stats().bytes` as it grows.
   */
  private bytesPerNode(): number {
    return 31 + (16 + 4 * this.words) + 32;
  }

  /** Most nodes whose arrays, hash table included, fit in `bytes`. */
  private nodesWithin(bytes: number): number {
    const perNode = this.bytesPerNode() - 32;
    bytes -= this.ringBytes(); // the prediction ring's share
    let best = 16;
    for (let table = 32; table * 16 < bytes; table *= 2) {
      const n = Math.min(table / 2, Math.floor((bytes - 16 * table) / perNode));
      if (n > best) best = n;
    }
    return best;
  }

  // ---------------------------------------------------------------- workers

  /** Register a worker (idempotent) with its KV capacity in blocks. Returns its slot. */
  addWorker(id: string, capacityBlocks: number): number {
    let w = this.slots.get(id);
    if (!w) {
      const slot = this.freeSlots.pop();
      if (slot === undefined) throw new Error(`prefix index tracks at most ${this.maxWorkers} workers`);
      w = { id, slot, source: 'approximate', reason: 'no kv events', since: 0 };
      this.slots.set(id, w);
      this.ensureWords(slot);
    }
    this.setCapacity(id, capacityBlocks);
    return w.slot;
  }

  /** Widen every entry's worker mask so `slot` has a bit. */
  private ensureWords(slot: number): void {
    const need = (slot >>> 5) + 1;
    if (need <= this.words) return;
    const old = this.eMask;
    const w0 = this.words;
    const mask = new Uint32Array(this.nodeCap * need);
    for (let e = 0; e < this.eTop; e++) for (let k = 0; k < w0; k++) mask[e * need + k] = old[e * w0 + k]!;
    this.eMask = mask;
    this.words = need;
    this.maxNodes = this.nodesWithin(this.maxBytes);
  }

  get workerCount(): number {
    return this.slots.size;
  }

  hasWorker(id: string): boolean {
    return this.slots.has(id);
  }

  slotOf(id: string): number {
    return this.slots.get(id)?.slot ?? NIL;
  }

  /**
   * Register `id` if new and there is room (else −1), or keep its capacity in step: its slot. One
   * lookup where hasWorker, setCapacity and slotOf make three (once per candidate per decision).
   */
  track(id: string, capacityBlocks: number): number {
    const w = this.slots.get(id);
    if (w === undefined) return this.slots.size < this.maxWorkers ? this.addWorker(id, capacityBlocks) : NIL;
    if (this.wCap[w.slot] !== Math.max(1, Math.floor(capacityBlocks * this.capacityFactor))) this.setCapacity(id, capacityBlocks);
    return w.slot;
  }

  /** Update a worker's capacity (numGpuBlocks); shrinking evicts its oldest blocks. */
  setCapacity(id: string, capacityBlocks: number): void {
    this.flush();
    const w = this.slots.get(id);
    if (!w) return;
    const cap = Math.max(1, Math.floor(capacityBlocks * this.capacityFactor));
    if (this.wCap[w.slot] === cap) return;
    this.wCap[w.slot] = cap;
    this.trimWorker(w.slot);
  }

  removeWorker(id: string): void {
    this.flush();
    const w = this.slots.get(id);
    if (!w) return;
    this.clearSlot(w.slot, 0xff);
    this.slots.delete(id);
    this.wCap[w.slot] = 0;
    this.freeSlots.push(w.slot);
  }

  /** Record where a worker's view comes from (events or the approximate model) and why. */
  setSource(id: string, source: IndexSource, reason: string, now: number): void {
    const w = this.slots.get(id);
    if (!w) return;
    if (w.source !== source) w.since = now;
    w.source = source;
    w.reason = reason;
  }

  source(id: string): IndexSource {
    return this.slots.get(id)?.source ?? 'approximate';
  }

  workerStatus(id: string): WorkerIndexStatus | undefined {
    this.flush();
    const w = this.slots.get(id);
    if (!w) return undefined;
    return {
      id,
      source: w.source,
      reason: w.reason,
      since: w.since,
      blocks: this.wCount[w.slot]!,
      capacity: this.wCap[w.slot]!,
    };
  }

  workers(): WorkerIndexStatus[] {
    return [...this.slots.keys()].map((id) => this.workerStatus(id)!);
  }

  /** Blocks the index believes `id` holds. */
  blockCount(id: string): number {
    this.flush();
    const w = this.slots.get(id);
    return w ? this.wCount[w.slot]! : 0;
  }

  // ---------------------------------------------------------------- lookup

  /**
   * For each slot in `slots`, how many leading blocks of `hashes` the index believes that worker
   * holds. Writes into `out` (aligned with `slots`; a negative slot matches nothing).
   */
  matchSlots(hashes: BlockSeq, slots: ArrayLike<number>, out: Int32Array | number[], now: number): void {
    this.flush();
    if (now > this.lastNow) this.lastNow = now;
    this.expire(now);
    const W = this.words;
    const alive = new Uint32Array(W);
    let anyAlive = false;
    for (let i = 0; i < slots.length; i++) {
      out[i] = 0;
      const s = slots[i]!;
      if (s >= 0) {
        alive[s >>> 5]! |= 1 << (s & 31);
        anyAlive = true;
      }
    }
    const n = hashes.length;
    if (!anyAlive || n === 0) return;
    const lengths = this.scratchLengths(W);
    // Gallop: probe blocks 0, 1, 3, 7, … until none of the workers holds one, which bounds every
    // worker's match without hashing far past the longest of them.
    let hi = n;
    for (let probe = 0; probe < n; probe = 2 * probe + 1) {
      if (!this.anyHolds(hashes.at(probe)!, alive, W)) {
        hi = probe;
        break;
      }
    }
    // Then bisect 0..hi: one bisection per distinct match length, a few dozen lookups where a
    // walk block by block takes hundreds (the blocks the gallop probed are in cache by now).
    this.bisect(hashes, alive, W, 0, hi, lengths);
    for (let i = 0; i < slots.length; i++) {
      const s = slots[i]!;
      if (s >= 0) out[i] = lengths[s]!;
    }
  }

  /** True if any worker in `set` holds `hash`. */
  private anyHolds(hash: number, set: Uint32Array, W: number): boolean {
    const t = this.findSlot(hash);
    if (t < 0) return false;
    const e = this.tabI[4 * t + 2]! - 1;
    for (let w = 0; w < W; w++) {
      const word = w === 0 ? this.tabI[4 * t + 3]! : this.eMask[e * W + w]!;
      if ((set[w]! & word) !== 0) return true;
    }
    return false;
  }

  private scratchLengths(W: number): Int32Array {
    if (this.lengthsBuf.length < W * 32) this.lengthsBuf = new Int32Array(W * 32);
    return this.lengthsBuf;
  }

  /**
   * Match lengths by bisection: every worker in `set` matches between `lo` and `hi` blocks
   * (inclusive). Probing block `mid` splits the set into those that hold it (match > mid) and
   * those that do not (match ≤ mid). Exact because each worker's blocks are prefix-closed: a
   * prompt's blocks are touched tail first, so for any worker a block is always at least as
   * recent as every block after it, and capacity eviction, expiry and retraction remove a
   * chain's tail before its head (vLLM evicts a freed request's blocks tail first, so KV events
   * keep this too). Writes each worker's length into `lengths` at its slot.
   */
  private bisect(hashes: BlockSeq, set0: Uint32Array, W: number, lo0: number, hi0: number, lengths: Int32Array): void {
    // Explicit stack of (lo, hi, set) frames; depth-first with one pending sibling per level.
    const frame = 2 + W;
    const depth = 2 * (33 - Math.clz32(hi0 + 1)) + 2;
    if (this.stackBuf.length < depth * frame) this.stackBuf = new Uint32Array(depth * frame);
    const st = this.stackBuf;
    st[0] = lo0;
    st[1] = hi0;
    for (let w = 0; w < W; w++) st[2 + w] = set0[w]!;
    let sp = 1;
    while (sp > 0) {
      sp--;
      const base = sp * frame;
      const lo = st[base]!;
      const hi = st[base + 1]!;
      if (lo === hi) {
        for (let w = 0; w < W; w++) {
          let a = st[base + 2 + w]!;
          while (a !== 0) {
            const bit = 31 - Math.clz32(a);
            lengths[w * 32 + bit] = lo;
            a = (a & ~(1 << bit)) >>> 0;
          }
        }
        continue;
      }
      const mid = (lo + hi) >>> 1;
      const t = this.findSlot(hashes.at(mid)!);
      const e = t < 0 ? -1 : this.tabI[4 * t + 2]! - 1;
      // Frame for the holders (match in mid+1..hi) is written above the non-holders (lo..mid),
      // reusing this frame's slot for the latter.
      const up = base + frame;
      let holders = 0;
      let others = 0;
      for (let w = 0; w < W; w++) {
        const a = st[base + 2 + w]!;
        const word = e < 0 ? 0 : w === 0 ? this.tabI[4 * t + 3]! : this.eMask[e * W + w]!;
        const m = (a & word) >>> 0;
        const r = (a & ~word) >>> 0;
        st[up + 2 + w] = m;
        st[base + 2 + w] = r;
        holders |= m;
        others |= r;
      }
      st[base + 1] = mid;
      st[up] = mid + 1;
      st[up + 1] = hi;
      if (others !== 0 && holders !== 0) sp += 2;
      else if (others !== 0) sp += 1;
      else if (holders !== 0) {
        // Move the holders' frame down into this slot.
        for (let k = 0; k < frame; k++) st[base + k] = st[up + k]!;
        sp += 1;
      }
    }
  }

  /** Leading blocks of `hashes` the index believes worker `id` holds. */
  matchWorker(hashes: BlockSeq, id: string, now: number): number {
    const out = [0];
    this.matchSlots(hashes, [this.slotOf(id)], out, now);
    return out[0]!;
  }

  /** True if worker `id` holds block `hash` (any source). */
  holds(id: string, hash: number): boolean {
    this.flush();
    const w = this.slots.get(id);
    if (!w) return false;
    const e = this.find(hash);
    return e >= 0 && (this.eMask[e * this.words + (w.slot >>> 5)]! & (1 << (w.slot & 31))) !== 0;
  }

  // ---------------------------------------------------------------- updates

  /**
   * Record that worker `id` holds blocks hashes[from..to) from `source`. Touches them tail first
   * so the prompt's head is the most recently used. Unknown workers are ignored.
   */
  insert(id: string, hashes: BlockSeq, source: BlockSource, now: number, from = 0, to = hashes.length): void {
    this.flush();
    this.insertNow(id, hashes, source, now, from, to);
  }

  /**
   * Like insert, but applied when the event loop is next idle — or before the next read or
   * write of the index, whichever comes first — so every later decision sees it exactly as if
   * it had been inserted now, while the request that caused it does not wait for it.
   */
  insertLater(id: string, hashes: BlockSeq, source: BlockSource, now: number): void {
    this.defer(id, hashes, source, now, undefined);
  }

  /**
   * A pick-time prediction, inserted like insertLater(…, 'predicted', …); the trail it returns
   * lets `confirm` find the prediction's nodes without looking its blocks up again.
   */
  predict(id: string, hashes: BlockSeq, now: number): PredictionTrail {
    const trail: PredictionTrail = { nodes: [] };
    this.defer(id, hashes, 'predicted', now, trail);
    return trail;
  }

  private defer(id: string, hashes: BlockSeq, source: BlockSource, now: number, trail: PredictionTrail | undefined): void {
    if (source !== 'event') this.observer?.(id, hashes, source, now);
    this.pending.push(trail === undefined ? { id, hashes, source, now } : { id, hashes, source, now, trail });
    if (now > this.lastNow) this.lastNow = now;
    this.scheduleUpkeep();
  }

  private scheduleUpkeep(): void {
    if (this.flushTimer !== null) return;
    this.flushTimer = setImmediate(() => {
      this.flushTimer = null;
      // A long prompt's insert (an 8,000-token prompt is 500 blocks, about a millisecond) is
      // applied in slices, so the upkeep never holds the event loop for long; what is left when
      // a slice ends waits for the next idle moment, or for the next read of the index.
      if (!this.maintain(IDLE_SLICE_MS)) this.scheduleUpkeep();
    });
    this.flushTimer.unref();
  }

  /**
   * Idle-time upkeep: apply deferred inserts and expire predictions up to the latest time the
   * index has seen, so lookups on the request path rarely find anything left to do. With a
   * budget, stops once it has run for `budgetMs` (checked every few dozen blocks) and returns
   * false if work is left.
   */
  maintain(budgetMs = Infinity): boolean {
    if (!this.applyPending(budgetMs === Infinity ? Infinity : performance.now() + budgetMs)) return false;
    this.expire(this.lastNow);
    return true;
  }

  /** Deferred inserts not yet (fully) applied. */
  get deferredInserts(): number {
    return this.pending.length;
  }

  /** Apply deferred inserts now. */
  flush(): void {
    if (this.pending.length > 0) this.applyPending(Infinity);
  }

  /**
   * Apply deferred inserts in order until done (true) or `until` (performance.now()) has passed.
   * The first pending insert may be part-applied: `pendingTo` is where its tail-first walk
   * stopped. Its worker's capacity is enforced when the whole insert is in, as insertNow does,
   * so the result is the same whether or not the insert was sliced.
   */
  private applyPending(until: number): boolean {
    while (this.pending.length > 0) {
      const x = this.pending[0]!;
      const w = this.slots.get(x.id);
      if (w) {
        const flag = FLAG[x.source];
        const hs = (x.hs ??= hashArray(x.hashes));
        let to = this.pendingTo >= 0 ? this.pendingTo : hs.length;
        const trail = x.trail;
        // A prediction's trail gets a place for every block; a confirmation's is followed only if
        // it covers every block of this prompt.
        if (flag === F_PREDICTED && trail !== undefined && trail.nodes.length !== 2 * hs.length) trail.nodes = new Array<number>(2 * hs.length).fill(NIL);
        const follow = flag === F_ROUTED && trail !== undefined && trail.nodes.length === 2 * hs.length ? trail.nodes : null;
        while (to > 0) {
          const from = Math.max(0, to - UPSERT_RUN);
          if (follow !== null) this.confirmRange(w.slot, hs, follow, from, to, x.now);
          else this.upsertRange(w.slot, hs, from, to, flag, x.now, mediumOf(flag), flag === F_PREDICTED ? (trail?.nodes ?? null) : null);
          to = from;
          if (to > 0 && until !== Infinity && performance.now() >= until) {
            this.pendingTo = to;
            return false;
          }
        }
        this.trimWorker(w.slot);
      }
      this.pendingTo = -1;
      this.pending.shift();
    }
    return true;
  }

  /**
   * Read the table slots where the lookups of hashes[from..to) start, one independent load each,
   * before the upserts that look them up one after another: the table of a fleet's blocks is far
   * past the CPU's caches, and loads issued together wait for memory together instead of each in
   * turn (without it, an upsert's first probe is nine tenths of its time at 64 workers).
   */
  private warmSlots(hashes: readonly number[], from: number, to: number): void {
    const tabI = this.tabI;
    let acc = 0;
    for (let i = from; i < to; i++) acc += tabI[4 * this.slot(hashes[i]!) + 2]!;
    this.sink += acc;
  }

  private insertNow(id: string, hashes: BlockSeq, source: BlockSource, now: number, from: number, to: number): void {
    const w = this.slots.get(id);
    if (!w) return;
    const flag = FLAG[source];
    this.upsertRange(w.slot, hashArray(hashes), from, to, flag, now, mediumOf(flag));
    this.trimWorker(w.slot);
  }

  /** Upsert hashes[from..to) for worker `slot`, tail first, a run of UPSERT_RUN at a time, each warmed. */
  private upsertRange(slot: number, hs: readonly number[], from: number, to: number, flag: number, now: number, medium: number, trail: number[] | null = null): void {
    while (to > from) {
      const start = Math.max(from, to - UPSERT_RUN);
      this.warmSlots(hs, start, to);
      for (let i = to - 1; i >= start; i--) {
        const node = this.upsert(slot, hs, i, flag, now, medium);
        if (trail !== null) {
          trail[2 * i] = node;
          trail[2 * i + 1] = this.nStamp[node]! & STAMP_MASK;
        }
      }
      to = start;
    }
  }

  /**
   * Confirm hashes[from..to) for worker `slot` along a prediction's trail, tail first: a node the
   * trail still names (same stamp, still in use, this worker's) is touched where it is, as upsert
   * would touch it once found; any other block is upserted. Same result as upsertRange with
   * F_ROUTED, without the table lookup and the walk of the entry's nodes per block.
   */
  private confirmRange(slot: number, hs: readonly number[], trail: readonly number[], from: number, to: number, now: number): void {
    const nStamp = this.nStamp;
    // The run's nodes first, in independent loads (as warmSlots does for the table).
    let acc = 0;
    for (let i = from; i < to; i++) {
      const node = trail[2 * i]!;
      if (node !== NIL) acc += nStamp[node]!;
    }
    this.sink += acc;
    for (let i = to - 1; i >= from; i--) {
      const node = trail[2 * i]!;
      if (node !== NIL && (nStamp[node]! & STAMP_MASK) === trail[2 * i + 1] && this.nFlags[node] !== 0 && this.nWorker[node] === slot) {
        this.moveToHead(slot, node);
        this.mark(slot, node, F_ROUTED, now, 0);
        this.trailHits++;
      } else {
        this.upsert(slot, hs, i, F_ROUTED, now, 0);
        this.trailMisses++;
      }
    }
  }

  /**
   * A prediction came true (the worker produced the first token): predicted blocks become routed.
   * A worker whose view comes from events needs no routed copy — its BlockStored events carry
   * the truth — so its predictions are simply left to expire or be backed by events.
   */
  confirm(id: string, hashes: BlockSeq, now: number, trail?: PredictionTrail): void {
    const w = this.slots.get(id);
    if (!w || w.source === 'events') return;
    // Like a pick-time prediction, applied at the next idle moment or read: the first token of a
    // long prompt does not hold the event loop for its hundreds of blocks.
    this.defer(id, hashes, 'routed', now, trail);
  }

  /**
   * Routing knowledge another gateway replica made (its prediction or routed blocks for worker
   * `id`): applied like insertLater, but not passed to the observer, so it is never echoed
   * back. A worker this index does not track yet is registered with `capacityBlocks` (its
   * capacity is corrected when this replica routes to it); without room it is ignored. A
   * shared prediction expires after predictedTtlMs unless the replica that made it shares its
   * confirmation (as 'routed').
   */
  learn(id: string, hashes: BlockSeq, source: 'predicted' | 'routed', now: number, capacityBlocks?: number): void {
    if (!this.slots.has(id)) {
      if (capacityBlocks === undefined || this.workerCount >= this.maxWorkers) return;
      this.addWorker(id, capacityBlocks);
    }
    this.learnedRuns++;
    this.pending.push({ id, hashes, source, now });
    if (now > this.lastNow) this.lastNow = now;
    this.scheduleUpkeep();
  }

  /**
   * A prediction will not come true (the request failed or was cancelled before its first
   * token): drop the blocks of `hashes` that worker `id` holds only as predictions. Blocks also
   * predicted by another request still in flight go too; its first token restores them. Until
   * then that request's own tail may sit behind the gap, and a match of its prompt lands
   * anywhere between the gap and the tail's end (an estimate either way, for one request's
   * time to first token).
   */
  retract(id: string, hashes: BlockSeq): void {
    this.flush();
    const w = this.slots.get(id);
    if (!w) return;
    for (let i = 0; i < hashes.length; i++) {
      const e = this.find(hashes.at(i)!);
      if (e < 0) continue;
      const node = this.findNode(e, w.slot);
      if (node !== NIL && this.nFlags[node] === F_PREDICTED) this.freeNode(node);
    }
  }

  /**
   * Worker `id` no longer holds `hash` (BlockRemoved) — on `tier` only when given: a block it
   * still holds on another medium stays, credited at that medium. Off the GPU, what routing
   * alone believed of the block goes too.
   */
  remove(id: string, hash: number, tier?: KvTier): boolean {
    this.flush();
    const w = this.slots.get(id);
    if (!w) return false;
    const e = this.find(hash);
    if (e < 0) return false;
    const node = this.findNode(e, w.slot);
    if (node === NIL) return false;
    if (tier === undefined) {
      this.freeNode(node);
      return true;
    }
    let f = this.nFlags[node]! & ~MEDIUM_BIT[tier];
    if (tier === 'gpu') f &= ~(F_PREDICTED | F_ROUTED);
    if ((f & M_ALL) === 0) f &= ~F_EVENT;
    if ((f & (F_PREDICTED | F_ROUTED | F_EVENT)) === 0) this.freeNode(node);
    else this.setFlags(w.slot, node, f);
    return true;
  }

  /**
   * Record that worker `id` reported storing blocks `hashes` (in chain order) on `tier`
   * (BlockStored with its medium). Like insert(…, 'event', …) for the GPU.
   */
  insertEvent(id: string, hashes: BlockSeq, tier: KvTier, now: number): void {
    this.flush();
    const w = this.slots.get(id);
    if (!w) return;
    const m = MEDIUM_BIT[tier];
    const hs = hashArray(hashes);
    this.upsertRange(w.slot, hs, 0, hs.length, F_EVENT, now, m);
    this.trimWorker(w.slot);
  }

  /**
   * Of the first `n` blocks of `hashes`, how many worker `id` holds at best on the GPU, in host
   * memory and on disk only ([gpu, host, disk]). Blocks it does not hold count nowhere. Blocks
   * known from routing alone are on the GPU. Cheap when the worker holds nothing off the GPU.
   */
  tierCounts(hashes: BlockSeq, id: string, n: number): [number, number, number] {
    this.flush();
    const w = this.slots.get(id);
    if (!w || n <= 0) return [0, 0, 0];
    if (this.wOff[w.slot] === 0) return [n, 0, 0];
    const out: [number, number, number] = [0, 0, 0];
    for (let i = 0; i < n && i < hashes.length; i++) {
      const e = this.find(hashes.at(i)!);
      if (e < 0) continue;
      const node = this.findNode(e, w.slot);
      if (node === NIL) continue;
      const f = this.nFlags[node]!;
      if (!offGpu(f)) out[0]++;
      else if (f & M_HOST) out[1]++;
      else out[2]++;
    }
    return out;
  }

  /**
   * Forget what worker `id` holds from the given sources (all by default). With events only, the
   * event flag is dropped and blocks also known from routing stay.
   */
  clearWorker(id: string, sources?: readonly BlockSource[]): void {
    this.flush();
    const w = this.slots.get(id);
    if (!w) return;
    let mask = 0xff;
    if (sources) {
      mask = 0;
      for (const s of sources) mask |= FLAG[s];
    }
    this.clearSlot(w.slot, mask);
  }

  /** Drop predictions and time-limited routed blocks whose time has passed. */
  expire(now: number): void {
    while (this.pLen > 0) {
      if (this.pExp[this.pHead]! > now) break;
      const node = this.pNode[this.pHead]!;
      // The record is stale if the node was freed and reused, confirmed, backed by an event or
      // predicted again later (a newer record then covers it).
      if (this.nStamp[node] === this.pStamp[this.pHead] && this.nFlags[node] === F_PREDICTED && this.nExpires[node]! <= now) {
        this.freeNode(node);
        this.expiredCount++;
      }
      this.pHead = (this.pHead + 1) % this.pNode.length;
      this.pLen--;
    }
    if (this.approxTtlMs !== Infinity) {
      for (const w of this.slots.values()) {
        let node = this.wTail[w.slot]!;
        // The LRU tail holds the least recently touched node; routed-only nodes past their
        // window go. Event-backed nodes stop the sweep (they are exact, not timed).
        while (node !== NIL && this.nFlags[node] === F_ROUTED && this.nExpires[node]! <= now) {
          const prev = this.nPrev[node]!;
          this.freeNode(node);
          this.expiredCount++;
          node = prev;
        }
      }
    }
  }

  stats(): PrefixIndexStats {
    this.flush();
    const bytes =
      this.tab.byteLength +
      this.eSlot.byteLength +
      this.eHash.byteLength +
      this.eMask.byteLength +
      this.eFirst.byteLength +
      this.nEntry.byteLength +
      this.nWorker.byteLength +
      this.nPrev.byteLength +
      this.nNext.byteLength +
      this.nSib.byteLength +
      this.nFlags.byteLength +
      this.nExpires.byteLength +
      this.nStamp.byteLength +
      this.pNode.byteLength +
      this.pStamp.byteLength +
      this.pExp.byteLength;
    return {
      entries: this.entryCount,
      nodes: this.nodeCount,
      workers: this.slots.size,
      bytes,
      bytesPerBlock: this.bytesPerNode(),
      maxNodes: this.maxNodes,
      evictedForMemory: this.evictedForMemory,
      evictedForCapacity: this.evictedForCapacity,
      expired: this.expiredCount,
      confirmedAlongTrail: this.trailHits,
      confirmedLookedUp: this.trailMisses,
    };
  }

  // ---------------------------------------------------------------- internals

  /**
   * Worker `slot` holds block hashes[i]. The hash is read here rather than passed: a 53-bit hash
   * is a double, and a double passed to a call is boxed, one allocation per block.
   */
  private upsert(slot: number, hashes: readonly number[], i: number, flag: number, now: number, medium: number): number {
    const hash = hashes[i]!;
    let e = this.find(hash);
    let node = NIL;
    if (e >= 0) node = this.findNode(e, slot);
    if (node === NIL) {
      node = this.allocNode(slot);
      // Allocation may have evicted nodes, even this hash's entry: look it up again.
      e = this.find(hash);
      if (e < 0) e = this.addEntry(hash);
      this.nEntry[node] = e;
      this.nWorker[node] = slot;
      this.nFlags[node] = 0;
      this.nSib[node] = this.eFirst[e]!;
      this.eFirst[e] = node;
      this.eMask[e * this.words + (slot >>> 5)]! |= 1 << (slot & 31);
      if (slot < 32) this.tabI[4 * this.eSlot[e]! + 3] = this.eMask[e * this.words]!;
      this.linkHead(slot, node);
      this.nodeCount++;
    } else {
      this.moveToHead(slot, node);
    }
    this.mark(slot, node, flag, now, medium);
    return node;
  }

  /** Node `node` of worker `slot` is known from `flag` (and on `medium`) as of `now`. */
  private mark(slot: number, node: number, flag: number, now: number, medium: number): void {
    let flags = this.nFlags[node]!;
    if (flag === F_ROUTED) flags &= ~F_PREDICTED;
    flags |= flag | medium;
    this.setFlags(slot, node, flags);
    if (flags & F_EVENT) this.nExpires[node] = Infinity;
    else if (flags & F_ROUTED) this.nExpires[node] = now + this.approxTtlMs;
    else {
      this.nExpires[node] = now + this.predictedTtlMs;
      this.pushPrediction(node);
    }
  }

  private pushPrediction(node: number): void {
    if (this.pLen === this.pNode.length) {
      if (this.pNode.length * 2 * 16 <= this.ringBytes()) this.growRing();
      else {
        // More outstanding predictions than the index could ever hold: drop the oldest record.
        // Its node, if still only predicted, then ages out through the worker's capacity LRU.
        this.pHead = (this.pHead + 1) % this.pNode.length;
        this.pLen--;
      }
    }
    const i = (this.pHead + this.pLen) % this.pNode.length;
    this.pNode[i] = node;
    this.pStamp[i] = this.nStamp[node]!;
    this.pExp[i] = this.nExpires[node]!;
    this.pLen++;
  }

  private clearSlot(slot: number, mask: number): void {
    let node = this.wHead[slot]!;
    while (node !== NIL) {
      const next = this.nNext[node]!;
      let f = this.nFlags[node]! & ~mask;
      if ((f & F_EVENT) === 0) f &= ~M_ALL;
      // A prediction whose expiry record is gone (it was event-backed) cannot expire: drop it.
      if (f === 0 || (f === F_PREDICTED && this.nExpires[node] === Infinity)) this.freeNode(node);
      else this.setFlags(slot, node, f);
      node = next;
    }
  }

  /** Set a node's flags, keeping its worker's count of off-GPU blocks in step. */
  private setFlags(slot: number, node: number, flags: number): void {
    const was = offGpu(this.nFlags[node]!);
    const is = offGpu(flags);
    if (was !== is) this.wOff[slot]! += is ? 1 : -1;
    this.nFlags[node] = flags;
  }

  /**
   * Evict worker `slot`'s least recently used nodes down to its capacity, TRIM_RUN at a time: the
   * run's nodes are taken from the tail first (freeing the tail takes them in this order), then
   * their entries and table slots are read in independent loads, as warmSlots does for upserts, so
   * that the frees, each of which needs them in turn, do not wait for memory one after another.
   */
  private trimWorker(slot: number): void {
    const cap = this.wCap[slot]! + this.wOff[slot]!;
    const run = this.trimRun;
    let excess = this.wCount[slot]! - cap;
    while (excess > 0) {
      const k = Math.min(excess, TRIM_RUN);
      let node = this.wTail[slot]!;
      for (let i = 0; i < k; i++) {
        run[i] = node;
        node = this.nPrev[node]!;
      }
      let acc = 0;
      for (let i = 0; i < k; i++) {
        const e = this.nEntry[run[i]!]!;
        acc += this.eFirst[e]! + this.tabI[4 * this.eSlot[e]! + 2]!;
      }
      this.sink += acc;
      for (let i = 0; i < k; i++) this.freeNode(run[i]!);
      this.evictedForCapacity += k;
      excess -= k;
    }
  }

  /** The node of entry `e` held by worker `slot`, or NIL (the mask says "not held" without a walk). */
  private findNode(e: number, slot: number): number {
    if ((this.eMask[e * this.words + (slot >>> 5)]! & (1 << (slot & 31))) === 0) return NIL;
    let n = this.eFirst[e]!;
    while (n !== NIL && this.nWorker[n] !== slot) n = this.nSib[n]!;
    return n;
  }

  private allocNode(forSlot: number): number {
    if (this.nFree === NIL && this.nTop === this.nodeCap) {
      if (this.nodeCap < this.maxNodes) this.grow(this.capacityNodes());
      else this.evictForMemory(forSlot);
    }
    let node: number;
    if (this.nFree !== NIL) {
      node = this.nFree;
      this.nFree = this.nNext[node]!;
    } else node = this.nTop++;
    this.nStamp[node] = (this.nStamp[node]! + 1) >>> 0;
    return node;
  }

  /** Memory bound reached: drop the LRU tail of the worker holding the most blocks. */
  private evictForMemory(forSlot: number): void {
    let victim = -1;
    let most = -1;
    for (const w of this.slots.values()) {
      const c = this.wCount[w.slot]!;
      if (c > most || (c === most && w.slot !== forSlot)) {
        most = c;
        victim = w.slot;
      }
    }
    if (victim < 0 || this.wTail[victim] === NIL) throw new Error('prefix index full with no evictable node');
    this.freeNode(this.wTail[victim]!);
    this.evictedForMemory++;
  }

  private freeNode(node: number): void {
    const slot = this.nWorker[node]!;
    const e = this.nEntry[node]!;
    // Unlink from the entry's node list.
    let p = this.eFirst[e]!;
    if (p === node) this.eFirst[e] = this.nSib[node]!;
    else {
      while (this.nSib[p] !== node) p = this.nSib[p]!;
      this.nSib[p] = this.nSib[node]!;
    }
    this.eMask[e * this.words + (slot >>> 5)]! &= ~(1 << (slot & 31));
    if (slot < 32) this.tabI[4 * this.eSlot[e]! + 3] = this.eMask[e * this.words]!;
    if (this.eFirst[e] === NIL) this.removeEntry(e);
    this.unlink(slot, node);
    if (offGpu(this.nFlags[node]!)) this.wOff[slot]!--;
    this.nFlags[node] = 0;
    this.nNext[node] = this.nFree;
    this.nFree = node;
    this.nodeCount--;
  }

  private linkHead(slot: number, node: number): void {
    const h = this.wHead[slot]!;
    this.nPrev[node] = NIL;
    this.nNext[node] = h;
    if (h !== NIL) this.nPrev[h] = node;
    else this.wTail[slot] = node;
    this.wHead[slot] = node;
    this.wCount[slot]!++;
  }

  private unlink(slot: number, node: number): void {
    const p = this.nPrev[node]!;
    const n = this.nNext[node]!;
    if (p !== NIL) this.nNext[p] = n;
    else this.wHead[slot] = n;
    if (n !== NIL) this.nPrev[n] = p;
    else this.wTail[slot] = p;
    this.wCount[slot]!--;
  }

  private moveToHead(slot: number, node: number): void {
    if (this.wHead[slot] === node) return;
    this.unlink(slot, node);
    this.linkHead(slot, node);
  }

  private addEntry(hash: number): number {
    let e: number;
    if (this.eFree !== NIL) {
      e = this.eFree;
      this.eFree = this.eFirst[e]!;
    } else e = this.eTop++;
    this.eHash[e] = hash;
    this.eFirst[e] = NIL;
    for (let w = 0; w < this.words; w++) this.eMask[e * this.words + w] = 0;
    this.tableInsert(hash, e);
    this.entryCount++;
    return e;
  }

  private removeEntry(e: number): void {
    this.tableDelete(this.eSlot[e]!);
    this.eFirst[e] = this.eFree;
    this.eFree = e;
    this.entryCount--;
  }

  /**
   * Home slot of `hash`: Fibonacci hashing of both halves, so keys whose low bits are poorly
   * mixed (folded external hashes, test data) still spread over the table.
   */
  private slot(hash: number): number {
    return Math.imul((hash >>> 0) ^ ((hash / 4294967296) >>> 0), 0x9e3779b1) >>> this.tShift;
  }

  /** Table slot holding `hash`, or -1. Linear probing. */
  private findSlot(hash: number): number {
    const tab = this.tab;
    const tabI = this.tabI;
    const mask = this.tMask;
    let i = this.slot(hash);
    for (;;) {
      if (tabI[4 * i + 2] === 0) return -1;
      if (tab[2 * i] === hash) return i;
      i = (i + 1) & mask;
    }
  }

  /** Entry id of `hash`, or -1. */
  private find(hash: number): number {
    const t = this.findSlot(hash);
    return t < 0 ? -1 : this.tabI[4 * t + 2]! - 1;
  }

  private tableInsert(hash: number, e: number): void {
    let i = this.slot(hash);
    while (this.tabI[4 * i + 2] !== 0) i = (i + 1) & this.tMask;
    this.tab[2 * i] = hash;
    this.tabI[4 * i + 2] = e + 1;
    this.tabI[4 * i + 3] = this.eMask[e * this.words]!;
    this.eSlot[e] = i;
  }

  /**
   * Empty table slot `at` (an entry's eSlot: no probe needed), shifting later keys back, so probe
   * chains stay unbroken without tombstones.
   */
  private tableDelete(at: number): void {
    const tab = this.tab;
    const tabI = this.tabI;
    const mask = this.tMask;
    let i = at;
    tabI[4 * i + 2] = 0;
    let j = i;
    for (;;) {
      j = (j + 1) & mask;
      if (tabI[4 * j + 2] === 0) return;
      const k = this.slot(tab[2 * j]!);
      const between = i <= j ? i < k && k <= j : i < k || k <= j;
      if (between) continue;
      tab[2 * i] = tab[2 * j]!;
      tabI[4 * i + 2] = tabI[4 * j + 2]!;
      tabI[4 * i + 3] = tabI[4 * j + 3]!;
      this.eSlot[tabI[4 * i + 2]! - 1] = i;
      tabI[4 * j + 2] = 0;
      i = j;
    }
  }

  /** Share of `maxBytes` the prediction ring may grow to: a sixteenth. */
  private ringBytes(): number {
    return Math.floor(this.maxBytes / 16);
  }

  /**
   * The prediction ring grows on demand (outstanding predictions are usually far fewer than
   * indexed blocks, so it is not sized like the node arrays).
   */
  private growRing(): void {
    const n = this.pNode.length * 2;
    const pn = new Int32Array(n);
    const ps = new Uint32Array(n);
    const pe = new Float64Array(n);
    for (let k = 0; k < this.pLen; k++) {
      const i = (this.pHead + k) % this.pNode.length;
      pn[k] = this.pNode[i]!;
      ps[k] = this.pStamp[i]!;
      pe[k] = this.pExp[i]!;
    }
    this.pNode = pn;
    this.pStamp = ps;
    this.pExp = pe;
    this.pHead = 0;
  }

  /** Nodes the workers' capacities add up to: what the index holds once every worker is full. */
  private capacityNodes(): number {
    let n = 0;
    for (const w of this.slots.values()) n += this.wCap[w.slot]!;
    return n;
  }

  /**
   * Grow to twice the nodes, or at once to the next power of two that holds `wanted`: an index
   * fills up to its workers' capacities, and each doubling on the way copies every array and
   * rehashes the table (untouched pages of the larger arrays cost no memory until used).
   */
  private grow(wanted = 0): void {
    let n = this.nodeCap * 2;
    while (n < wanted) n *= 2;
    n = Math.min(n, this.maxNodes);
    const g = <T extends Float64Array | Int32Array | Uint32Array | Uint16Array | Uint8Array>(a: T, len: number): T => {
      const b = new (a.constructor as new (n: number) => T)(len);
      b.set(a);
      return b;
    };
    this.eHash = g(this.eHash, n);
    this.eMask = g(this.eMask, n * this.words);
    this.eFirst = g(this.eFirst, n);
    this.eSlot = g(this.eSlot, n);
    this.nEntry = g(this.nEntry, n);
    this.nWorker = g(this.nWorker, n);
    this.nPrev = g(this.nPrev, n);
    this.nNext = g(this.nNext, n);
    this.nSib = g(this.nSib, n);
    this.nFlags = g(this.nFlags, n);
    this.nExpires = g(this.nExpires, n);
    this.nStamp = g(this.nStamp, n);
    // Rehash into a table twice the node count.
    const oldTab = this.tab;
    const oldTabI = this.tabI;
    const size = tableSizeFor(n);
    this.tab = new Float64Array(size * 2);
    this.tabI = new Int32Array(this.tab.buffer);
    this.tMask = size - 1;
    this.tShift = 32 - Math.log2(size);
    for (let i = 0; i < oldTab.length / 2; i++) {
      const v = oldTabI[4 * i + 2]!;
      if (v !== 0) this.tableInsert(oldTab[2 * i]!, v - 1);
    }
    this.nodeCap = n;
  }
}
