/**
 * Learner `decode-floor`: a lower bound under each speed class's decode speed, from every
 * streamed answer however much was prefilled beside it.
 *
 *   decodeMs = max(0, (end − first token) − 1000 · prefill beside / prefillRate(w))
 *   ratio    = decodeMs / (output tokens − 1) / (decodeStepMs + decodeMsPer1kContext / 1000 · batch context)
 *   floor    = min(DECODE_SCALE_MAX, the lower quartile of the class's last DECODE_WINDOW ratios)
 *
 * "Prefill beside" is the prompt tokens pending at the worker at the first token plus those
 * dispatched there since. Every step with a prefill chunk in it still decoded a token of the
 * answer, so taking the whole chunk's time out leaves less than the decode took: a bound from
 * below (a loose one on a busy worker). It only ever raises the class's scale (decode-speed.ts or
 * the hardware prior), which keeps a slow kind from being taken for a fast one under load, where
 * few answers are decoded alone.
 *
 * Hooks: onFirstToken, onComplete (streamed, single-sequence answers). Knob: learnDecodeSpeed.
 */
import type { WorkerState } from '../../../../fleet/worker-state.js';
import { RecentWindow } from '../../../../util/sorted.js';
import { stateKey } from '../../../../util/state.js';
import type { RouteRequest, RoutingContext } from '../../../types.js';
import type { KvgateOptions } from '../knobs.js';
import {
  DECODE_MIN_OUTPUT,
  DECODE_MIN_SAMPLES,
  DECODE_QUANTILE,
  DECODE_SCALE_MAX,
  DECODE_WINDOW,
  predictedStepMs,
  type BatchContext,
} from './decode-speed.js';

/** What the answer's first token saw (read at its end). */
interface AtFirstToken {
  at: number;
  contextTokens: number;
  /** Prompt tokens then waiting for their prefill at the worker. */
  pending: number;
  /** Prompt tokens dispatched to the worker in all, then. */
  dispatched: number;
}
const AT_FIRST_TOKEN = stateKey<AtFirstToken>('kvgate.decode-floor.first-token');

export class DecodeFloorLearner {
  /** Learned floor per speed class. */
  readonly floors = new Map<string, number>();
  private readonly ratios = new Map<string, RecentWindow>();

  constructor(
    private readonly params: () => KvgateOptions,
    private readonly batchContext: BatchContext,
    private readonly prefillRate: (w: WorkerState) => number,
  ) {}

  onFirstToken(req: RouteRequest, w: WorkerState, ctx: RoutingContext): void {
    req.state.set(AT_FIRST_TOKEN, {
      at: ctx.now,
      contextTokens: this.batchContext(w, ctx),
      pending: w.inflightPrefillTokens,
      dispatched: w.prefillTokensDispatched,
    });
  }

  onComplete(req: RouteRequest, w: WorkerState, ctx: RoutingContext, outputTokens: number): void {
    const first = req.state.get(AT_FIRST_TOKEN);
    if (first === undefined || outputTokens < DECODE_MIN_OUTPUT) return;
    const steps = outputTokens - 1;
    const predicted = predictedStepMs(this.params(), (first.contextTokens + this.batchContext(w, ctx)) / 2);
    if (!(predicted > 0) || !(steps > 0)) return;
    const prefillBeside = first.pending + w.prefillTokensDispatched - first.dispatched;
    const decodeMs = Math.max(0, ctx.now - first.at - (1000 * prefillBeside) / this.prefillRate(w));
    let r = this.ratios.get(w.speedClass);
    if (!r) this.ratios.set(w.speedClass, (r = new RecentWindow(DECODE_WINDOW)));
    r.push(decodeMs / steps / predicted);
    if (r.size < DECODE_MIN_SAMPLES) return;
    this.floors.set(w.speedClass, Math.min(DECODE_SCALE_MAX, r.quantile(DECODE_QUANTILE)));
  }
}
