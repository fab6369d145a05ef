/**
 * What the KV-event subscriber writes into: the consumer-side view of a prefix index (the
 * scheduler's PrefixIndex satisfies it structurally). Declared here so the fleet never imports
 * the scheduler.
 */
import type { BlockSeq } from '../kv/prompt-blocks.js';
import type { KvTier } from '../kv/tiers.js';

/** Where a worker's view of its cache comes from, as shown in /admin/workers and the metrics. */
export type IndexSource = 'events' | 'approximate';

export interface KvBlockSink {
  /** Say whether `workerId`'s view is event-fed or approximate, and why. */
  setSource(workerId: string, source: IndexSource, reason: string, now: number): void;
  /** Record blocks (kvgate hashes, in chain order) the worker reported storing on `tier`. */
  insertEvent(workerId: string, hashes: BlockSeq, tier: KvTier, now: number): void;
  /**
   * Told before insertEvent() of GPU blocks that start a sequence (BlockStored with no parent: the
   * first blocks of a prompt the worker held nothing of). Optional: read by the parity watch.
   */
  sequenceStart?(workerId: string, hashes: BlockSeq): void;
  /** The worker evicted the block with kvgate hash `hash` from `tier` (every tier when absent). */
  remove(workerId: string, hash: number, tier?: KvTier): boolean | void;
  /** Forget what the worker holds (all of it, or only what came from events). */
  clearWorker(workerId: string, sources?: readonly 'event'[]): void;
}
