/**
 * Connects a PrefixIndex to the workers a request is routed over: registers workers as they
 * appear (with their KV capacity), and answers "how many leading prompt tokens does each worker
 * hold" once per request, kept in the request's state for every plugin of the pipeline.
 */
import type { WorkerState } from '../../fleet/worker-state.js';
import type { PromptBlocks} from '../../kv/prompt-blocks.js';
import { KVGATE_HASH_SEED, promptBlocks } from '../../kv/prompt-blocks.js';
import { stateKey, type StateKey } from '../../util/state.js';
import type { PredictionTrail, PrefixIndex } from './prefix-index.js';
import type { RouteRequest, RoutingContext } from '../types.js';

/** A worker's match; shared between the workers with the same answer, so never changed. */
export interface PrefixMatch {
  /** Leading prompt blocks the worker is believed to hold. */
  blocks: number;
  /**
   * Those blocks in tokens, capped as the engine caps a hit: at least the prompt's last token is
   * always computed, so a fully cached prompt of n full blocks serves n − 1 of them.
   */
  tokens: number;
  /** Full blocks in the prompt at this worker's block size. */
  promptBlocks: number;
  blockSize: number;
  /**
   * Where the matched blocks are, [gpu, host memory, disk] (each block counted at its fastest
   * medium, from the workers' KV events; all on the GPU without offload tiers). A policy weights
   * a hit by it (src/kv/tiers.ts, tierCredit).
   */
  tiers: [number, number, number];
}

let nextMatcherId = 0;

export class PrefixMatcher {
  readonly index: PrefixIndex;
  readonly seed: number;
  /** This matcher's per-request answers (matchers differ in index, seed and block size). */
  private readonly matchesKey: StateKey<Map<WorkerState, PrefixMatch>>;
  /** The request's prediction: the worker and where its blocks went (for the confirmation). */
  private readonly trailKey: StateKey<{ w: WorkerState; trail: PredictionTrail }>;
  /** Fixed block size for every worker (llm-d's 64-token blocks), else each worker's own. */
  private readonly fixedBlockSize: number | undefined;
  /** Capacity per worker when fixed (llm-d's LRU size), else the worker's numGpuBlocks. */
  private readonly fixedCapacity: number | undefined;

  constructor(
    index: PrefixIndex,
    opts: { seed?: number; blockSize?: number; capacityBlocks?: number } = {},
  ) {
    this.index = index;
    this.seed = opts.seed ?? KVGATE_HASH_SEED;
    this.fixedBlockSize = opts.blockSize;
    this.fixedCapacity = opts.capacityBlocks;
    this.matchesKey = stateKey(`prefix-match:${nextMatcherId}`);
    this.trailKey = stateKey(`prefix-match-trail:${nextMatcherId++}`);
  }

  blockSizeOf(w: WorkerState): number {
    return this.fixedBlockSize ?? w.blockSize;
  }

  /**
   * Register `w` if new and keep its capacity in step with what it reports; its slot in the
   * index. A worker the index has no room for is simply not tracked (slot −1): it matches nothing,
   * which routing tolerates.
   */
  track(w: WorkerState): number {
    return this.index.track(w.id, this.fixedCapacity ?? w.numGpuBlocks);
  }

  /** The prompt's block hashes at `w`'s block size (lazy, kept in the request's state). */
  hashesFor(req: RouteRequest, w: WorkerState): PromptBlocks {
    return promptBlocks(req.state, req.promptTokens, this.blockSizeOf(w), this.seed);
  }

  /**
   * Hash the whole prompt now at every block size among `workers` (Policy.prepare), so a later
   * `matches` only looks the hashes up.
   */
  prehash(req: RouteRequest, workers: readonly WorkerState[]): void {
    let last = -1;
    for (const w of workers) {
      const bs = this.blockSizeOf(w);
      if (bs === last) continue;
      last = bs;
      promptBlocks(req.state, req.promptTokens, bs, this.seed).all();
    }
  }

  /** Drop the request's matches (the decision is made). */
  forget(req: RouteRequest): void {
    req.state.delete(this.matchesKey);
  }

  /** Each worker's match, computed for all of `workers` in one pass per block size. */
  matches(req: RouteRequest, workers: readonly WorkerState[], ctx: RoutingContext): Map<WorkerState, PrefixMatch> {
    let known = req.state.get(this.matchesKey);
    if (!known) {
      known = new Map();
      req.state.set(this.matchesKey, known);
    }
    let missing: WorkerState[] | null = null;
    for (const w of workers) if (!known.has(w)) (missing ??= []).push(w);
    if (!missing) return known;
    // Group by block size; a pool normally has one.
    const groups = new Map<number, WorkerState[]>();
    for (const w of missing) {
      const bs = this.blockSizeOf(w);
      const g = groups.get(bs);
      if (g) g.push(w);
      else groups.set(bs, [w]);
    }
    for (const [bs, ws] of groups) {
      const hashes = promptBlocks(req.state, req.promptTokens, bs, this.seed);
      const slots = ws.map((w) => this.track(w));
      const out = new Int32Array(ws.length);
      this.index.matchSlots(hashes, slots, out, ctx.now);
      const usable = Math.max(0, Math.floor((req.promptTokens.length - 1) / bs));
      // The workers that hold none of the prompt (most of a large pool) share one answer.
      let none: PrefixMatch | null = null;
      for (let i = 0; i < ws.length; i++) {
        const blocks = out[i]!;
        if (blocks <= 0) {
          known.set(ws[i]!, (none ??= { blocks: 0, tokens: 0, promptBlocks: hashes.length, blockSize: bs, tiers: [0, 0, 0] }));
          continue;
        }
        const tiers = slots[i]! < 0 ? ([0, 0, 0] as [number, number, number]) : this.index.tierCounts(hashes, ws[i]!.id, blocks);
        known.set(ws[i]!, { blocks, tokens: Math.min(blocks, usable) * bs, promptBlocks: hashes.length, blockSize: bs, tiers });
      }
    }
    return known;
  }

  /**
   * Record the request's full prompt blocks at `w` as predicted (pick time). Applied when the
   * event loop is next idle or before the index is next used, whichever is first: the next
   * decision sees it, this one does not wait for it. `confirmed: false` for a policy that never
   * confirms its predictions (they only expire): nothing is kept for a confirmation.
   */
  predict(req: RouteRequest, w: WorkerState, now: number, { confirmed = true }: { confirmed?: boolean } = {}): void {
    this.track(w);
    // The trail (where the blocks went) spares the confirmation a lookup of every block.
    if (confirmed) req.state.set(this.trailKey, { w, trail: this.index.predict(w.id, this.hashesFor(req, w), now) });
    else this.index.insertLater(w.id, this.hashesFor(req, w), 'predicted', now);
  }

  /** Record the request's prompt blocks at `w` as routed (prefill done, or the policy assumes so). */
  record(req: RouteRequest, w: WorkerState, now: number): void {
    this.track(w);
    this.index.insertLater(w.id, this.hashesFor(req, w), 'routed', now);
  }

  /** Withdraw a prediction (the request failed before its first token). */
  retract(req: RouteRequest, w: WorkerState): void {
    req.state.delete(this.trailKey);
    this.index.retract(w.id, this.hashesFor(req, w));
  }

  /** Confirm a prediction (first token came back). */
  confirm(req: RouteRequest, w: WorkerState, now: number): void {
    const p = req.state.get(this.trailKey);
    req.state.delete(this.trailKey);
    this.index.confirm(w.id, this.hashesFor(req, w), now, p !== undefined && p.w === w ? p.trail : undefined);
  }
}
