/**
 * Learner `decode-speed`: how much slower (> 1) or faster than decodeStepMs and
 * decodeMsPer1kContext each speed class decodes, from the TPOT of answers decoded with nothing
 * prefilled beside them.
 *
 *   ratio = observed TPOT / (decodeStepMs + decodeMsPer1kContext / 1000 · batch context)
 *   scale = the lower quartile of the class's last DECODE_WINDOW ratios (once DECODE_MIN_SAMPLES)
 *
 * The batch context is the worker's (InflightBatches.contextAt) averaged over the answer's first
 * token and its end. Only answers with no prompt of this gateway's prefilled beside them count
 * (the worker's dispatch count is the same at both ends and nothing was waiting for its prefill at
 * the first token): a prefill chunk makes its step several times a decode step, and learning from
 * those answers would take a loaded pool for slow hardware, which the cost already counts as the
 * stall. Other gateways' prefills may still have stalled some, and a stall only adds: hence the
 * lower quartile rather than the median. Under steady load few answers qualify; decode-floor.ts
 * covers that case.
 *
 * Hooks: onDispatch, onFirstToken, onComplete (streamed, single-sequence answers). Knob:
 * learnDecodeSpeed (with decodeStepMs and decodeMsPer1kContext, what it scales).
 */
import type { WorkerState } from '../../../../fleet/worker-state.js';
import { RecentWindow } from '../../../../util/sorted.js';
import { stateKey } from '../../../../util/state.js';
import type { RouteRequest, RoutingContext } from '../../../types.js';
import type { KvgateOptions } from '../knobs.js';

/** Finished answers whose ratio each speed class keeps. */
export const DECODE_WINDOW = 128;
/** Answers seen in a speed class before its learned figure is used. */
export const DECODE_MIN_SAMPLES = 32;
/** Answers shorter than this say more about the prefills they waited behind than about decoding. */
export const DECODE_MIN_OUTPUT = 4;
/** The quantile of the ratios taken as the class's figure (stalls only add: below the median). */
export const DECODE_QUANTILE = 0.25;
/** The learned scale stays within these bounds of the configured figures. */
const DECODE_SCALE_MIN = 0.1;
export const DECODE_SCALE_MAX = 20;

/** The batch context at `w` as the estimate counts it (InflightBatches.contextAt). */
export type BatchContext = (w: WorkerState, ctx: RoutingContext) => number;

/** What decodeStepMs and decodeMsPer1kContext predict for one step over `contextTokens`, ms. */
export function predictedStepMs(p: KvgateOptions, contextTokens: number): number {
  return p.decodeStepMs + (p.decodeMsPer1kContext / 1000) * contextTokens;
}

/** What the answer's first token saw (read at its end). */
interface AtFirstToken {
  at: number;
  contextTokens: number;
  /** The worker's dispatch count then, if nothing was waiting for its prefill there. */
  aloneFrom: number | undefined;
}
const AT_FIRST_TOKEN = stateKey<AtFirstToken>('kvgate.decode-speed.first-token');

export class DecodeSpeedLearner {
  /** Learned scale per speed class. */
  readonly scales = new Map<string, number>();
  private readonly ratios = new Map<string, RecentWindow>();
  /** Requests dispatched to each worker so far, by worker id. */
  private readonly dispatches = new Map<string, number>();

  constructor(
    private readonly params: () => KvgateOptions,
    private readonly batchContext: BatchContext,
  ) {}

  onDispatch(w: WorkerState): void {
    this.dispatches.set(w.id, (this.dispatches.get(w.id) ?? 0) + 1);
  }

  onFirstToken(req: RouteRequest, w: WorkerState, ctx: RoutingContext): void {
    req.state.set(AT_FIRST_TOKEN, {
      at: ctx.now,
      contextTokens: this.batchContext(w, ctx),
      aloneFrom: w.inflightPrefillTokens === 0 ? (this.dispatches.get(w.id) ?? 0) : undefined,
    });
  }

  onComplete(req: RouteRequest, w: WorkerState, ctx: RoutingContext, outputTokens: number): void {
    const first = req.state.get(AT_FIRST_TOKEN);
    if (first === undefined || outputTokens < DECODE_MIN_OUTPUT) return;
    if (first.aloneFrom !== (this.dispatches.get(w.id) ?? 0)) return;
    const tpotMs = (ctx.now - first.at) / (outputTokens - 1);
    const predicted = predictedStepMs(this.params(), (first.contextTokens + this.batchContext(w, ctx)) / 2);
    if (!(predicted > 0) || !(tpotMs > 0)) return;
    let r = this.ratios.get(w.speedClass);
    if (!r) this.ratios.set(w.speedClass, (r = new RecentWindow(DECODE_WINDOW)));
    r.push(tpotMs / predicted);
    if (r.size < DECODE_MIN_SAMPLES) return;
    this.scales.set(w.speedClass, Math.min(DECODE_SCALE_MAX, Math.max(DECODE_SCALE_MIN, r.quantile(DECODE_QUANTILE))));
  }

  forgetWorker(w: WorkerState): void {
    this.dispatches.delete(w.id);
  }
}
