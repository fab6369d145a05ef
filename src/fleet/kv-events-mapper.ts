/**
 * Maps one worker's KV events from the engine's hash space onto kvgate's and applies them to the
 * prefix index. The engine's chain is seeded per process, so its hashes cannot be recomputed; but
 * BlockStored carries the token ids, so each stored block's kvgate hash is the kvgate chain
 * continued from the parent's kvgate hash (or kvgate's root when the parent is null) over those
 * tokens (rooted in the adapter's chain for a LoRA adapter's blocks, as the prompts of requests
 * naming it are). The engine → kvgate map is kept per worker so BlockRemoved can be applied.
 *
 * The subscriber (kv-events.ts) and the tests that drive a real Engine use this same code.
 */
import { chainRoot, hashBlock } from '../kv/block-hash.js';
import type { KvEvent } from '../kv/events.js';
import { adapterRoot, KVGATE_HASH_SEED } from '../kv/prompt-blocks.js';
import type { KvBlockSink } from './kv-block-sink.js';

export interface KvEventMapperStats {
  stored: number;
  removed: number;
  cleared: number;
  /** BlockStored whose parent was never seen (stored before we connected, or lost): skipped. */
  unknownParent: number;
  /** BlockStored at a block size other than the one the index hashes prompts with: skipped. */
  blockSizeMismatch: number;
  /** Engine → kvgate entries currently mapped. */
  mapped: number;
}

export interface KvEventMapperOptions {
  /** Block size the index hashes this worker's prompts at (the worker's block size). */
  blockSize: number;
  seed?: number;
  /**
   * Bound on the engine → kvgate map. An engine reports every eviction, so the map tracks its
   * cached blocks; the bound only guards against a publisher that never sends BlockRemoved.
   */
  maxMapped?: number;
}

export class KvEventMapper {
  readonly workerId: string;
  blockSize: number;
  private readonly root: number;
  private readonly maxMapped: number;
  private readonly map = new Map<number, number>();
  private readonly counters = { stored: 0, removed: 0, cleared: 0, unknownParent: 0, blockSizeMismatch: 0 };
  /** Block size of the last BlockStored that did not match ours, or null. */
  lastForeignBlockSize: number | null = null;

  constructor(
    private readonly index: KvBlockSink,
    workerId: string,
    opts: KvEventMapperOptions,
  ) {
    this.workerId = workerId;
    this.blockSize = opts.blockSize;
    this.root = chainRoot(opts.seed ?? KVGATE_HASH_SEED);
    this.maxMapped = opts.maxMapped ?? 4_000_000;
  }

  /** Apply events in order. Returns the number of events that could not be mapped. */
  apply(events: readonly KvEvent[], now: number): number {
    let unmapped = 0;
    for (const e of events) {
      switch (e.type) {
        case 'BlockStored':
          if (!this.stored(e, now)) unmapped++;
          break;
        case 'BlockRemoved':
          for (const h of e.blockHashes) {
            const k = this.map.get(h);
            if (k === undefined) continue;
            this.map.delete(h);
            this.index.remove(this.workerId, k);
            this.counters.removed++;
          }
          break;
        case 'AllBlocksCleared':
          this.map.clear();
          this.index.clearWorker(this.workerId);
          this.counters.cleared++;
          break;
      }
    }
    return unmapped;
  }

  /** Forget everything learned from events (resynchronisation, publisher restart). */
  reset(): void {
    this.map.clear();
    this.index.clearWorker(this.workerId, ['event']);
  }

  /** The kvgate hash an engine hash maps to, if known. */
  lookup(engineHash: number): number | undefined {
    return this.map.get(engineHash);
  }

  stats(): KvEventMapperStats {
    return { ...this.counters, mapped: this.map.size };
  }

  private stored(e: Extract<KvEvent, { type: 'BlockStored' }>, now: number): boolean {
    const bs = e.blockSize;
    if (bs !== this.blockSize) {
      this.counters.blockSizeMismatch++;
      this.lastForeignBlockSize = bs;
      return false;
    }
    this.lastForeignBlockSize = null;
    let parent: number;
    // A sequence's first blocks: the adapter's chain for an adapter's blocks (a child's parent
    // already carries it).
    if (e.parentBlockHash === null) parent = e.loraName === undefined ? this.root : adapterRoot(this.root, e.loraName);
    else {
      const p = this.map.get(e.parentBlockHash);
      if (p === undefined) {
        this.counters.unknownParent++;
        return false;
      }
      parent = p;
    }
    const n = Math.min(e.blockHashes.length, Math.floor(e.tokenIds.length / bs));
    const kv = new Array<number>(n);
    for (let i = 0; i < n; i++) {
      parent = hashBlock(parent, e.tokenIds, i * bs, bs);
      kv[i] = parent;
      const eh = e.blockHashes[i]!;
      this.map.delete(eh); // re-insert at the end: insertion order is the age order for the bound
      this.map.set(eh, parent);
    }
    if (e.parentBlockHash === null) this.index.sequenceStart?.(this.workerId, kv);
    this.index.insert(this.workerId, kv, 'event', now);
    this.counters.stored += n;
    while (this.map.size > this.maxMapped) this.map.delete(this.map.keys().next().value!);
    return true;
  }
}
