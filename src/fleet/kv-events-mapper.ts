/**
 * Maps one worker's KV events from the engine's hash space onto kvgate's and applies them to the
 * prefix index. The engine's chain is seeded per process, so its hashes cannot be recomputed; but
 * BlockStored carries the token ids, so each stored block's kvgate hash is the kvgate chain
 * continued from the parent's kvgate hash (or kvgate's root when the parent is null) over those
 * tokens (rooted in the adapter's chain for a LoRA adapter's blocks, as the prompts of requests
 * naming it are). The engine → kvgate map is kept per worker so BlockRemoved can be applied.
 *
 * What else vLLM hashed into a block (BlockStored.extra_keys, vllm/v1/core/kv_cache_utils.py
 * generate_block_hash_extra_keys) is folded into the chain the same way kvgate folds it into a
 * prompt's: a sequence's first block keyed by a lone string is the request's cache_salt, which
 * kvgate salts its prompts' chains with (PROMPT_SALT); any other key (multimodal identifiers,
 * prompt-embedding hashes) forks the chain, so those blocks never match a prompt that merely has
 * the same placeholder tokens.
 *
 * Media: each block keeps the media it is on (BlockStored/BlockRemoved `medium`), so the index
 * credits a host-memory or disk hit as such. A block copied off the GPU may arrive with no token
 * ids (vLLM's offloading connector): it is found by its engine hash, known from the GPU's store.
 *
 * Hybrid models (vLLM's hybrid KV-cache manager, group_idx and kv_cache_spec_kind on the events):
 * every group stores the same block hashes, but a sliding-window group drops blocks that fall out
 * of its window and a mamba group keeps only recent state, while the full-attention group keeps
 * the whole prefix the engine's hit is measured by. Feeding every group into one index would let a
 * sliding-window BlockRemoved delete a block the full-attention group still holds. So exactly one
 * group feeds the index: the first full-attention group seen (group 0 when the events carry no
 * kind); the other groups' events are counted and skipped.
 *
 * The subscriber (kv-events.ts) and the tests that drive a real Engine use this same code.
 */
import { chainRoot, hashBlock, saltedRoot } from '../kv/block-hash.js';
import type { KvEvent } from '../kv/events.js';
import { adapterRoot, KVGATE_HASH_SEED } from '../kv/prompt-blocks.js';
import { tierOfMedium, type KvTier } from '../kv/tiers.js';
import type { KvBlockSink } from './kv-block-sink.js';
import { OrderedMap53 } from '../util/ordered-map53.js';

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
  /** Events of a KV-cache group that does not feed the index (hybrid models), skipped. */
  otherGroup: number;
  /** Events on a medium that is not the worker's own (or unknown), skipped. */
  otherMedium: number;
  /** Blocks stored off the GPU without token ids whose GPU copy was never seen, skipped. */
  unknownBlock: number;
}

/** vLLM's KVCacheSpecKind values (vllm/v1/kv_cache_interface.py) whose groups keep whole prefixes. */
const FULL_ATTENTION_KINDS = new Set(['full_attention', 'mla_attention', 'sink_full_attention']);

const TIER_BIT: Record<KvTier, number> = { gpu: 1, host: 2, disk: 4 };

/** A stable text for an extra key tuple (strings, numbers, bytes, nested tuples). */
function keyText(v: unknown): string {
  if (typeof v === 'string') return `s${v.length}:${v}`;
  if (typeof v === 'number' || typeof v === 'bigint') return `n${String(v)}`;
  if (v instanceof Uint8Array) return `b${Buffer.from(v).toString('hex')}`;
  if (Array.isArray(v)) return `[${v.map(keyText).join(',')}]`;
  return v === null || v === undefined ? '-' : `?${JSON.stringify(v)}`;
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
  /**
   * Engine block hash → kvgate block hash, oldest first (the bound drops the oldest), each tagged
   * with the media holding the block (TIER_BIT bits).
   */
  private readonly map = new OrderedMap53();
  /** The KV-cache group that feeds the index, once known. */
  private fedGroup: number | null = null;
  private readonly counters = {
    stored: 0,
    removed: 0,
    cleared: 0,
    unknownParent: 0,
    blockSizeMismatch: 0,
    otherGroup: 0,
    otherMedium: 0,
    unknownBlock: 0,
  };
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
        case 'BlockRemoved': {
          if ((e.groupIdx ?? 0) !== (this.fedGroup ?? 0)) {
            this.counters.otherGroup++;
            break;
          }
          const tier = tierOfMedium(e.medium);
          if (tier === null) {
            this.counters.otherMedium++;
            break;
          }
          const bit = TIER_BIT[tier];
          for (const h of e.blockHashes) {
            const k = this.map.get(h);
            if (k === undefined) continue;
            const left = this.map.tag(h) & ~bit;
            if (left === 0) this.map.delete(h);
            else this.map.setTag(h, left);
            this.index.remove(this.workerId, k, tier);
            this.counters.removed++;
          }
          break;
        }
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
    this.fedGroup = null;
    this.index.clearWorker(this.workerId, ['event']);
  }

  /** The kvgate hash an engine hash maps to, if known. */
  lookup(engineHash: number): number | undefined {
    return this.map.get(engineHash);
  }

  stats(): KvEventMapperStats {
    return { ...this.counters, mapped: this.map.size };
  }

  /** Whether a BlockStored of this group feeds the index (see the module comment). */
  private feeds(e: Extract<KvEvent, { type: 'BlockStored' }>): boolean {
    const g = e.groupIdx ?? 0;
    if (e.kvCacheSpecKind === undefined) return g === (this.fedGroup ?? 0);
    if (!FULL_ATTENTION_KINDS.has(e.kvCacheSpecKind)) return false;
    this.fedGroup ??= g;
    return g === this.fedGroup;
  }

  private stored(e: Extract<KvEvent, { type: 'BlockStored' }>, now: number): boolean {
    if (!this.feeds(e)) {
      this.counters.otherGroup++;
      return true; // skipped on purpose, not lost
    }
    const tier = tierOfMedium(e.medium);
    if (tier === null) {
      this.counters.otherMedium++;
      return true;
    }
    const bs = e.blockSize;
    if (tier !== 'gpu' && e.tokenIds.length < e.blockHashes.length * bs) return this.storedKnown(e, tier, now);
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
      const extra = e.extraKeys?.[i];
      if (extra && extra.length > 0) parent = this.keyed(parent, extra, e.loraName, i === 0 && e.parentBlockHash === null);
      parent = hashBlock(parent, e.tokenIds, i * bs, bs);
      kv[i] = parent;
      this.remember(e.blockHashes[i]!, parent, tier);
    }
    if (e.parentBlockHash === null) this.index.sequenceStart?.(this.workerId, kv);
    this.index.insertEvent(this.workerId, kv, tier, now);
    this.counters.stored += n;
    this.bound();
    return true;
  }

  /** Blocks stored off the GPU without their tokens: known by their engine hash, or skipped. */
  private storedKnown(e: Extract<KvEvent, { type: 'BlockStored' }>, tier: KvTier, now: number): boolean {
    const kv: number[] = [];
    for (const eh of e.blockHashes) {
      const k = this.map.get(eh);
      if (k === undefined) {
        this.counters.unknownBlock++;
        continue;
      }
      kv.push(k);
      this.remember(eh, k, tier);
    }
    if (kv.length > 0) this.index.insertEvent(this.workerId, kv, tier, now);
    this.counters.stored += kv.length;
    return kv.length === e.blockHashes.length;
  }

  /** The chain parent a block's extra keys turn `parent` into (see the module comment). */
  private keyed(parent: number, extra: readonly unknown[], lora: string | undefined, first: boolean): number {
    // The LoRA name is among the keys; the adapter's chain root already stands for it.
    const rest = lora === undefined ? extra : extra.filter((k) => k !== lora);
    if (rest.length === 0) return parent;
    if (first && rest.length === 1 && typeof rest[0] === 'string') return saltedRoot(parent, rest[0]);
    return saltedRoot(parent, `extra\u0000${keyText(rest)}`);
  }

  private remember(engineHash: number, kvHash: number, tier: KvTier): void {
    // Set again at the end: insertion order is the age order for the bound.
    this.map.setLast(engineHash, kvHash, this.map.tag(engineHash) | TIER_BIT[tier]);
  }

  private bound(): void {
    while (this.map.size > this.maxMapped) this.map.delete(this.map.oldestKey()!);
  }
}
