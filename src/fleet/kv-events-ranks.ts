/**
 * Data-parallel ranks: a vLLM server started with --data-parallel-size N runs N engines behind one
 * API endpoint, and each rank publishes its own KV events on the configured port plus its rank
 * (vllm/distributed/kv_events.py, ZmqEventPublisher.offset_endpoint_port: tcp ports are offset by
 * the rank, inproc endpoints get a `_dp<rank>` suffix). kvgate routes to the server, not to a
 * rank, so the worker holds a block when any of its ranks does.
 *
 * One subscriber per rank, each with its own sequence numbers, replay and engine → kvgate mapping,
 * writes through a RankMergingSink: a block stays in the worker's index while at least one rank
 * holds it (on that medium), a rank's AllBlocksCleared or restart clears only that rank's blocks,
 * and the worker's view is event-fed only while every rank's is.
 */
import type { BlockSeq } from '../kv/prompt-blocks.js';
import type { KvTier } from '../kv/tiers.js';
import type { IndexSource, KvBlockSink } from './kv-block-sink.js';

/** The endpoint rank `rank` publishes on, as vLLM offsets it. */
export function rankEndpoint(endpoint: string, rank: number): string {
  if (rank === 0) return endpoint;
  if (endpoint.includes('inproc')) return `${endpoint}_dp${rank}`;
  if (endpoint.includes('tcp')) {
    const colon = endpoint.lastIndexOf(':');
    const port = Number(endpoint.slice(colon + 1));
    if (!Number.isInteger(port)) throw new Error(`cannot offset the port of ${endpoint}: it has no numeric port`);
    return `${endpoint.slice(0, colon)}:${port + rank}`;
  }
  throw new Error(`cannot offset ${endpoint} by a data-parallel rank: it must be a tcp:// or inproc:// endpoint`);
}

/** The subscriber id of one rank of a worker (its label in the metrics). */
export function rankSubscriberId(workerId: string, rank: number): string {
  return `${workerId}/dp${rank}`;
}

const TIERS: readonly KvTier[] = ['gpu', 'host', 'disk'];
const BIT: Record<KvTier, number> = { gpu: 1, host: 2, disk: 4 };

export class RankMergingSink implements KvBlockSink {
  /** Per rank: kvgate hash → tiers that rank holds it on (BIT bits). */
  private readonly held: Array<Map<number, number>>;
  /** Per hash: how many ranks hold it, per tier. */
  private readonly count = new Map<number, [number, number, number]>();
  private readonly status: Array<{ source: IndexSource; reason: string }>;
  private shown: { source: IndexSource; reason: string } | null = null;
  private readonly rankOf = new Map<string, number>();

  constructor(
    private readonly index: KvBlockSink,
    readonly workerId: string,
    readonly ranks: number,
  ) {
    this.held = Array.from({ length: ranks }, () => new Map());
    this.status = Array.from({ length: ranks }, () => ({ source: 'approximate' as IndexSource, reason: 'waiting for the first kv event' }));
    for (let r = 0; r < ranks; r++) this.rankOf.set(rankSubscriberId(workerId, r), r);
  }

  private rank(id: string): number {
    const r = this.rankOf.get(id);
    if (r === undefined) throw new Error(`${id} is not a data-parallel rank of ${this.workerId}`);
    return r;
  }

  setSource(id: string, source: IndexSource, reason: string, now: number): void {
    this.status[this.rank(id)] = { source, reason };
    const bad = this.status.findIndex((s) => s.source !== 'events');
    const next = bad < 0 ? { source: 'events' as IndexSource, reason: `in sequence on all ${this.ranks} ranks` } : { source: 'approximate' as IndexSource, reason: `rank ${bad}: ${this.status[bad]!.reason}` };
    if (this.shown && this.shown.source === next.source && this.shown.reason === next.reason) return;
    this.shown = next;
    this.index.setSource(this.workerId, next.source, next.reason, now);
  }

  sequenceStart(id: string, hashes: BlockSeq): void {
    this.rank(id);
    this.index.sequenceStart?.(this.workerId, hashes);
  }

  insertEvent(id: string, hashes: BlockSeq, tier: KvTier, now: number): void {
    const held = this.held[this.rank(id)]!;
    const b = BIT[tier];
    const t = TIERS.indexOf(tier);
    for (let i = 0; i < hashes.length; i++) {
      const h = hashes.at(i)!;
      const bits = held.get(h) ?? 0;
      if (bits & b) continue;
      held.set(h, bits | b);
      let c = this.count.get(h);
      if (!c) this.count.set(h, (c = [0, 0, 0]));
      c[t]!++;
    }
    // Storing is idempotent in the index (and refreshes the blocks' recency): pass it all on.
    this.index.insertEvent(this.workerId, hashes, tier, now);
  }

  remove(id: string, hash: number, tier?: KvTier): boolean {
    const held = this.held[this.rank(id)]!;
    const bits = held.get(hash) ?? 0;
    let removed = false;
    for (const t of tier === undefined ? TIERS : [tier]) {
      if (!(bits & BIT[t])) continue;
      this.release(hash, t);
      removed = true;
    }
    const left = tier === undefined ? 0 : bits & ~BIT[tier];
    if (left === 0) held.delete(hash);
    else held.set(hash, left);
    return removed;
  }

  clearWorker(id: string): void {
    const held = this.held[this.rank(id)]!;
    for (const [h, bits] of held) for (const t of TIERS) if (bits & BIT[t]) this.release(h, t);
    held.clear();
  }

  /** One rank no longer holds `hash` on `tier`: the worker loses it when no rank does. */
  private release(hash: number, tier: KvTier): void {
    const c = this.count.get(hash);
    if (!c) return;
    const t = TIERS.indexOf(tier);
    if (--c[t]! === 0) this.index.remove(this.workerId, hash, tier);
    if (c[0] === 0 && c[1] === 0 && c[2] === 0) this.count.delete(hash);
  }
}
