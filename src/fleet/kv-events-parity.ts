/**
 * Token parity watched while serving: of the blocks a worker's KV events report at the start of a
 * sequence (BlockStored with no parent: the first blocks of a prompt whose prefix the worker did
 * not hold), the share kvgate had predicted for that worker when it routed the prompt there. With
 * kvgate's and the engine's token ids equal, a prompt routed by kvgate is stored under the very
 * hashes kvgate predicted, and the share stays near 1; with different ids it falls to 0, whatever
 * the load. Only sequence starts are counted: blocks the engine stores later in a sequence include
 * generated tokens, which no prediction covers.
 *
 * It sits between the event subscriber and the prefix index (a KvBlockSink): it reads the index
 * (`holds`, before the event's blocks go in) and passes every call through.
 */
import type { IndexSource, KvBlockSink } from './kv-block-sink.js';
import type { KvTier } from '../kv/tiers.js';
import type { BlockSeq } from '../kv/prompt-blocks.js';

/** The index as the watch reads it. */
export interface PredictionLookup {
  /** True if worker `id` holds block `hash` (predicted at pick time, routed, or from events). */
  holds(id: string, hash: number): boolean;
}

export interface ParityWindow {
  /** Sequence-start blocks reported in the window. */
  blocks: number;
  /** Of those, blocks kvgate had predicted for the worker. */
  matched: number;
}

export interface KvParityOptions {
  /** Blocks per window: the ratio is over the last one to two windows (default 512). */
  windowBlocks?: number;
  /** Below this share (with at least `minBlocks` seen) the worker is said to be off (default 0.5). */
  threshold?: number;
  /** Blocks needed before the ratio is judged (default 64). */
  minBlocks?: number;
  /** Told when a worker's ratio falls under the threshold, and again when it recovers. */
  onChange?: (workerId: string, low: boolean, ratio: number, blocks: number) => void;
}

interface WorkerParity {
  current: ParityWindow;
  previous: ParityWindow;
  total: ParityWindow;
  low: boolean;
}

export class KvEventsParity {
  private readonly workers = new Map<string, WorkerParity>();
  private readonly windowBlocks: number;
  readonly threshold: number;
  private readonly minBlocks: number;

  constructor(
    private readonly index: PredictionLookup,
    private readonly opts: KvParityOptions = {},
  ) {
    this.windowBlocks = opts.windowBlocks ?? 512;
    this.threshold = opts.threshold ?? 0.5;
    this.minBlocks = opts.minBlocks ?? 64;
  }

  /** The sink a worker's subscriber writes into: `inner`, watched. */
  sink(inner: KvBlockSink): KvBlockSink {
    return {
      setSource: (id: string, source: IndexSource, reason: string, now: number) => inner.setSource(id, source, reason, now),
      sequenceStart: (id: string, hashes: BlockSeq) => {
        if (hashes.length > 0) this.observe(id, hashes);
        inner.sequenceStart?.(id, hashes);
      },
      insertEvent: (id: string, hashes: BlockSeq, tier: KvTier, now: number) => inner.insertEvent(id, hashes, tier, now),
      remove: (id: string, hash: number, tier?: KvTier) => inner.remove(id, hash, tier),
      clearWorker: (id: string, sources?: readonly 'event'[]) => inner.clearWorker(id, sources),
    };
  }

  private observe(id: string, hashes: BlockSeq): void {
    let w = this.workers.get(id);
    if (!w) this.workers.set(id, (w = { current: { blocks: 0, matched: 0 }, previous: { blocks: 0, matched: 0 }, total: { blocks: 0, matched: 0 }, low: false }));
    let matched = 0;
    for (let i = 0; i < hashes.length; i++) if (this.index.holds(id, hashes.at(i)!)) matched++;
    w.current.blocks += hashes.length;
    w.current.matched += matched;
    w.total.blocks += hashes.length;
    w.total.matched += matched;
    if (w.current.blocks >= this.windowBlocks) {
      w.previous = w.current;
      w.current = { blocks: 0, matched: 0 };
    }
    const r = this.ratio(id);
    const seen = w.current.blocks + w.previous.blocks;
    if (r === null || seen < this.minBlocks) return;
    const low = r < this.threshold;
    if (low !== w.low) {
      w.low = low;
      this.opts.onChange?.(id, low, r, seen);
    }
  }

  /** Share of recent sequence-start blocks kvgate predicted; null before any were reported. */
  ratio(id: string): number | null {
    const w = this.workers.get(id);
    if (!w) return null;
    const blocks = w.current.blocks + w.previous.blocks;
    return blocks === 0 ? null : (w.current.matched + w.previous.matched) / blocks;
  }

  /** Counts since the worker was first seen. */
  totals(id: string): ParityWindow | null {
    const w = this.workers.get(id);
    return w ? { ...w.total } : null;
  }

  /** True while the worker's ratio is under the threshold. */
  isLow(id: string): boolean {
    return this.workers.get(id)?.low ?? false;
  }

  forget(id: string): void {
    this.workers.delete(id);
  }

  ids(): string[] {
    return [...this.workers.keys()];
  }
}
