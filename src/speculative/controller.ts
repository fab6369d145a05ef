/**
 * How many draft tokens a round asks for, and whether to speculate at all.
 *
 * FixedK: the configured k of each cascade, always.
 *
 * AdaptiveK: per model and prompt class, the k that maximises expected tokens per unit cost,
 *
 *     value(k) = E(α, k) / cost(k),   E(α, k) = (1 − α^(k+1)) / (1 − α),
 *     cost(k)  = draftPrice · (draftFixedMs + k · draftTokenMs) + targetPrice · verifyMs,
 *
 * against target-only generation, which costs targetPrice · targetTokenMs per token. The costs are
 * measured on the live calls (exponentially weighted: a draft call's time is fitted as fixed +
 * per-token, which includes the round trip; a verification call's time), the prices are the
 * relative prices of a draft and a target GPU-second (both 1: the controller minimises latency).
 * The cascade runs only when its best value beats target-only by `minGain`; otherwise the class
 * is switched off and its requests go straight to the target pool. It is also off when
 *   - the target worker is busy (at least `busyRunning` running sequences, or `busyWaiting`
 *     waiting): the GPU is already filled by batching and verification passes only add work;
 *   - the request has a TPOT budget that the cascade's expected time per token would break.
 * A switched-off class still runs a share `probeRate` of its requests through the cascade with a
 * short k, so that α keeps being measured and a recovered class is switched back on.
 *
 * Everything is plain code over an injected random source, unit-tested in
 * test/speculative/controller.test.ts.
 */
import type { Rng } from '../util/rng.js';
import { expectedTokensPerRound, type AcceptanceTracker } from './acceptance.js';

/** What a controller may look at when choosing k for one round. */
export interface RoundContext {
  model: string;
  cls: string;
  /** Running and waiting sequences of the request's target worker (null if unknown). */
  targetLoad: { running: number; waiting: number } | null;
  /** The request's time-per-output-token budget, if it has one. */
  tpotBudgetMs: number | null;
  /** True for the request's first round (probing decisions are taken per request). */
  firstRound: boolean;
  /** The request's first round was a probe of a switched-off class. */
  probing: boolean;
}

/** Measured times of one round, fed back to the controller. */
export interface RoundTiming {
  model: string;
  /** Draft tokens asked for (0: no draft call). */
  k: number;
  draftMs: number | null;
  verifyMs: number;
}

export interface Decision {
  /** Draft tokens for this round; 0 = do not speculate (first round: plain path; later: target alone). */
  k: number;
  /** Why: 'fixed', 'speculate', 'no_gain', 'busy', 'tpot', 'probe'. */
  reason: string;
}

export interface KChooser {
  chooseK(round: RoundContext): Decision;
  observe?(t: RoundTiming): void;
}

export class FixedK implements KChooser {
  constructor(private readonly byModel: ReadonlyMap<string, number>) {}

  chooseK(round: RoundContext): Decision {
    return { k: this.byModel.get(round.model) ?? 0, reason: 'fixed' };
  }
}

export interface AdaptiveOptions {
  /** Largest k considered. */
  kMax: number;
  /** α assumed for a class before it has been measured. */
  priorAcceptance: number;
  /** Tested tokens behind a class's estimate before it replaces the prior entirely. */
  minEvidence: number;
  /** Speculate only when the cascade's value is at least this multiple of target-only's. */
  minGain: number;
  /** Share of a switched-off class's requests that still run the cascade, to re-measure α. */
  probeRate: number;
  /** k of such a probe. */
  probeK: number;
  /** A target worker with this many running sequences is busy: no speculation. */
  busyRunning: number;
  /** Nor with this many waiting (a queue, not one request caught arriving by a scrape). */
  busyWaiting: number;
  /** Relative price of a draft GPU-second and a target GPU-second. */
  draftPrice: number;
  targetPrice: number;
  /** Cost of one target-only token (ms); null: taken as one verification call. */
  targetTokenMs: number | null;
  /** Costs assumed before the first measurements (ms). */
  initialDraftFixedMs: number;
  initialDraftTokenMs: number;
  initialVerifyMs: number;
}

const DEFAULT_ADAPTIVE: AdaptiveOptions = {
  kMax: 8,
  priorAcceptance: 0.6,
  minEvidence: 50,
  minGain: 1.1,
  probeRate: 0.05,
  probeK: 2,
  busyRunning: 64,
  busyWaiting: 2,
  draftPrice: 1,
  targetPrice: 1,
  targetTokenMs: null,
  initialDraftFixedMs: 5,
  initialDraftTokenMs: 5,
  initialVerifyMs: 20,
};

/**
 * Exponentially weighted least squares of y = a + b·x (x = k, y = draft call ms). Most rounds ask
 * for the same k, so x barely varies and a plain fit's slope is noise; the slope is therefore
 * shrunk toward the share of the mean call time that the initial costs attribute to tokens, with
 * the weight of `priorWeight` observations spread over 1..kMax.
 */
class LinearFit {
  private sw = 0;
  private sx = 0;
  private sy = 0;
  private sxx = 0;
  private sxy = 0;
  constructor(
    private readonly keep: number,
    private readonly kMax: number,
    /** Share of a call's time that is per-token, before evidence: b·x / (a + b·x) at x = 1. */
    private readonly priorTokenShare: number,
    private readonly priorWeight = 4,
  ) {}

  add(x: number, y: number): void {
    const f = this.keep;
    this.sw = this.sw * f + 1;
    this.sx = this.sx * f + x;
    this.sy = this.sy * f + y;
    this.sxx = this.sxx * f + x * x;
    this.sxy = this.sxy * f + x * y;
  }

  /** { a, b } in ms, or null before any observation. */
  fit(): { a: number; b: number } | null {
    if (this.sw === 0) return null;
    const meanX = this.sx / this.sw;
    const meanY = this.sy / this.sw;
    // The prior line through the observed mean, with the prior's split of fixed and per-token time.
    const s = this.priorTokenShare;
    const b0 = (meanY * s) / (1 - s + s * meanX);
    const a0 = meanY - b0 * meanX;
    // Pseudo-observations on that line at x = 1 and x = kMax.
    const w = this.priorWeight / 2;
    const xs = [1, this.kMax];
    let sw = this.sw;
    let sx = this.sx;
    let sy = this.sy;
    let sxx = this.sxx;
    let sxy = this.sxy;
    for (const x of xs) {
      const y = a0 + b0 * x;
      sw += w;
      sx += w * x;
      sy += w * y;
      sxx += w * x * x;
      sxy += w * x * y;
    }
    const det = sw * sxx - sx * sx;
    const b = det > 1e-12 ? (sw * sxy - sx * sy) / det : b0;
    const a = (sy - b * sx) / sw;
    return { a: Math.max(0, a), b: Math.max(0, b) };
  }
}

class Ewma {
  value: number | null = null;
  constructor(private readonly weight: number) {}
  add(x: number): void {
    this.value = this.value === null ? x : this.value + this.weight * (x - this.value);
  }
}

interface ModelCosts {
  draft: LinearFit;
  verify: Ewma;
}

export class AdaptiveK implements KChooser {
  private readonly o: AdaptiveOptions;
  private readonly costs = new Map<string, ModelCosts>();
  /** Last decision per model and class (with the α it used), for inspection. */
  readonly last = new Map<string, Decision & { alpha: number }>();

  constructor(
    private readonly tracker: AcceptanceTracker,
    private readonly rng: Rng,
    opts: Partial<AdaptiveOptions> = {},
  ) {
    this.o = { ...DEFAULT_ADAPTIVE, ...opts };
  }

  /** α for a class: the measurement blended with the prior until there is enough evidence. */
  alpha(model: string, cls: string): number {
    const measured = this.tracker.alpha(model, cls);
    if (measured === null) return this.o.priorAcceptance;
    const w = Math.min(1, this.tracker.weight(model, cls) / this.o.minEvidence);
    return w * measured + (1 - w) * this.o.priorAcceptance;
  }

  /** The costs in force for a model (ms). */
  costsOf(model: string): { draftFixedMs: number; draftTokenMs: number; verifyMs: number; targetTokenMs: number } {
    const c = this.costs.get(model);
    let draftFixedMs = this.o.initialDraftFixedMs;
    let draftTokenMs = this.o.initialDraftTokenMs;
    const f = c?.draft.fit() ?? null;
    if (f) {
      draftFixedMs = f.a;
      draftTokenMs = f.b;
    }
    const verifyMs = c?.verify.value ?? this.o.initialVerifyMs;
    return { draftFixedMs, draftTokenMs, verifyMs, targetTokenMs: this.o.targetTokenMs ?? verifyMs };
  }

  /** The best k and its value per unit cost relative to target-only (1 = break-even). */
  best(model: string, alpha: number): { k: number; gain: number; msPerToken: number } {
    const c = this.costsOf(model);
    const base = 1 / (this.o.targetPrice * c.targetTokenMs);
    let bestK = 1;
    let bestValue = -Infinity;
    for (let k = 1; k <= this.o.kMax; k++) {
      const cost = this.o.draftPrice * (c.draftFixedMs + k * c.draftTokenMs) + this.o.targetPrice * c.verifyMs;
      const v = expectedTokensPerRound(alpha, k) / cost;
      if (v > bestValue) {
        bestValue = v;
        bestK = k;
      }
    }
    const roundMs = c.draftFixedMs + bestK * c.draftTokenMs + c.verifyMs;
    return { k: bestK, gain: bestValue / base, msPerToken: roundMs / expectedTokensPerRound(alpha, bestK) };
  }

  chooseK(r: RoundContext): Decision {
    const alpha = this.alpha(r.model, r.cls);
    const d = this.decide(r, alpha);
    this.last.set(`${r.model}\u0000${r.cls}`, { ...d, alpha });
    return d;
  }

  private decide(r: RoundContext, alpha: number): Decision {
    const o = this.o;
    if (r.targetLoad && (r.targetLoad.waiting >= o.busyWaiting || r.targetLoad.running >= o.busyRunning)) return { k: 0, reason: 'busy' };
    const b = this.best(r.model, alpha);
    if (r.tpotBudgetMs !== null && b.msPerToken > r.tpotBudgetMs) return { k: 0, reason: 'tpot' };
    if (b.gain >= o.minGain) return { k: b.k, reason: 'speculate' };
    // Switched off. A request's first round may become a probe, and a probing request keeps
    // probing to its end (its class is measured meanwhile); the others go to the target alone.
    if (r.probing) return { k: o.probeK, reason: 'probe' };
    if (r.firstRound && this.rng() < o.probeRate) return { k: o.probeK, reason: 'probe' };
    return { k: 0, reason: 'no_gain' };
  }

  observe(t: RoundTiming): void {
    let c = this.costs.get(t.model);
    if (!c) {
      const share = this.o.initialDraftTokenMs / (this.o.initialDraftFixedMs + this.o.initialDraftTokenMs);
      this.costs.set(t.model, (c = { draft: new LinearFit(0.98, this.o.kMax, share), verify: new Ewma(0.05) }));
    }
    if (t.k > 0 && t.draftMs !== null) c.draft.add(t.k, t.draftMs);
    c.verify.add(t.verifyMs);
  }
}
