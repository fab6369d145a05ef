/**
 * This gateway's requests in flight at each worker, as the kvgate estimate reads a worker's batch:
 * their context tokens (prompt plus half the expected output, per sequence), Σ stallShare of their
 * expected outputs, how many sequences and their expected output tokens, and (for stallModel
 * 'misses', or with e2eTail) the expected outputs themselves, ascending. Charged at dispatch,
 * released at completion.
 */
import type { WorkerState } from '../../../fleet/worker-state.js';
import { insertSorted, removeSorted } from '../../../util/sorted.js';
import { stateKey } from '../../../util/state.js';
import { requestSequences, type RouteRequest, type RoutingContext } from '../../types.js';
import { reportedBatch, stallShare, type InflightBatch } from './estimate.js';

interface Batch {
  contextTokens: number;
  stallShare: number;
  n: number;
  /** Expected output tokens of its sequences. */
  outputTokens: number;
  outputs: number[];
}

/** What one request added to its worker's batch (taken off at completion). */
interface Charge {
  worker: string;
  contextTokens: number;
  stallShare: number;
  output: number;
  sequences: number;
}
const CHARGED = stateKey<Charge>('kvgate.batch-charged');

const NO_BATCH: InflightBatch = { contextTokens: 0, stallShare: 0, n: 0, outputTokens: 0, outputs: [] };

export class InflightBatches {
  private readonly batches = new Map<string, Batch>();
  /** Over every worker: the sequences in flight and their expected output tokens. */
  private sequences = 0;
  private outputTokens = 0;

  of(w: WorkerState): InflightBatch {
    return this.batches.get(w.id) ?? NO_BATCH;
  }

  /**
   * Charge `req` (expected output `out` per sequence) to `w`. Each sequence (a batch's prompts, n
   * answers each) decodes in the worker's batch on its own; a batch's prompts are taken to be as
   * long as the first. `keepOutputs`: also keep the expected outputs ('misses' and e2eTail read them).
   */
  charge(req: RouteRequest, w: WorkerState, out: number, tpotWorthMs: number, keepOutputs: boolean): void {
    const seqs = requestSequences(req);
    const charge: Charge = {
      worker: w.id,
      contextTokens: seqs * (req.promptTokens.length + out / 2),
      stallShare: seqs * stallShare(out, tpotWorthMs),
      output: out,
      sequences: seqs,
    };
    req.state.set(CHARGED, charge);
    let b = this.batches.get(w.id);
    if (!b) {
      b = { contextTokens: 0, stallShare: 0, n: 0, outputTokens: 0, outputs: [] };
      this.batches.set(w.id, b);
    }
    b.contextTokens += charge.contextTokens;
    b.stallShare += charge.stallShare;
    b.n += seqs;
    b.outputTokens += seqs * out;
    this.sequences += seqs;
    this.outputTokens += seqs * out;
    if (keepOutputs) for (let i = 0; i < seqs; i++) insertSorted(b.outputs, out);
  }

  /** Take `req`'s charge off its worker's batch (once). */
  release(req: RouteRequest): void {
    const charged = req.state.get(CHARGED);
    if (charged === undefined) return;
    req.state.delete(CHARGED);
    const b = this.batches.get(charged.worker);
    if (b) {
      b.outputTokens -= charged.sequences * charged.output;
      this.sequences -= charged.sequences;
      this.outputTokens -= charged.sequences * charged.output;
    }
    if (b && (b.n -= charged.sequences) > 0) {
      b.contextTokens -= charged.contextTokens;
      b.stallShare -= charged.stallShare;
      // Absent if it was charged without keepOutputs (the options changed since): nothing to remove.
      for (let i = 0; i < charged.sequences; i++) removeSorted(b.outputs, charged.output);
    } else this.batches.delete(charged.worker);
  }

  /**
   * The context tokens of the batch at `w` as the estimate counts them: this gateway's in-flight
   * context, scaled up to the batch the worker last reported when that is larger.
   */
  contextAt(w: WorkerState, ctx: RoutingContext): number {
    const mine = w.inflightSequences;
    const ours = this.batches.get(w.id);
    if (mine === 0 || ours === undefined) return 0;
    const batch = reportedBatch(mine, w.isStale(ctx.now, ctx.staleAfterMs), w.currentQueue(ctx.now, ctx.staleAfterMs));
    return ours.contextTokens * (batch / mine);
  }

  /** The mean expected output of this gateway's sequences in flight (undefined when none is). */
  meanOutput(): number | undefined {
    return this.sequences > 0 ? this.outputTokens / this.sequences : undefined;
  }

  forgetWorker(w: WorkerState): void {
    const b = this.batches.get(w.id);
    if (b === undefined) return;
    this.batches.delete(w.id);
    // Its requests are no longer charged anywhere (release finds no batch for them).
    this.sequences -= b.n;
    this.outputTokens -= b.outputTokens;
  }
}
