/**
 * How many draft tokens a round asks for, and whether to speculate at all.
 *
 * FixedK: the configured k of each cascade, always.
 *
 * AdaptiveK: per model and prompt class, the k that maximises expected tokens per unit cost,
 *
 *     value(k) = E(α, k) / cost(k),   E(α, k) = (1 − α^(k+1)) / (1 − α),
 *
 * against target-only generation, among the k whose expected time per token keeps the request's
 * TPOT budget. The cascade runs only when its best value beats target-only by `minGain`;
 * otherwise the class is switched off and its requests go straight to the target pool.
 *
 * What a round and a target-only token cost, two ways:
 *   - With the target's step-time model (`targetStep`, the roofline of src/engine/time-model.ts;
 *     `kvgate bench` gives it) the costs are target GPU time as a step shares it. The target
 *     worker runs B sequences (its load, this request included); a decode step of B sequences at
 *     context C takes S_d, so a target-only token costs S_d / B. A verification replaces this
 *     request's decode in that step by a prefill of the tokens the engine cannot read from its
 *     prefix cache — n = C + k − reused(C): vLLM's OpenAI route reuses nothing (prompt logprobs
 *     skip the cache), SGLang's /generate and vLLM's /inference/v1/generate with
 *     skip_reading_prefix_cache false reuse the cached context up to the last context token
 *     (`verifyReuse`, `verifyReuseBlock`) — and the step becomes S_v. The round costs this
 *     request's share of the step, S_d / B, plus what it adds, S_v − S_d; plus the draft:
 *         cost(k) = targetPrice · (S_d / B + S_v − S_d) + draftPrice · (draftFixedMs + k · draftTokenMs).
 *     A loaded target (B large) makes S_d / B small and every verification prefill dear: the
 *     cascade switches itself off. Without a budget from the request, the TPOT budget is the
 *     target-only step S_d (× 1 + `tpotSlack`): the cascade may not make a request slower.
 *   - Without it (the live gateway by default) the costs are the measured call times: a draft
 *     call fitted as fixed + per-token, a verification call's time, and a target-only token
 *     `targetTokenMs` (default: one verification call):
 *         cost(k) = draftPrice · (draftFixedMs + k · draftTokenMs) + targetPrice · verifyMs.
 * The prices weigh a draft and a target GPU-second (both 1: the controller minimises latency).
 * Either way the cascade is off while the target worker is busy (at least `busyRunning` running
 * sequences, or `busyWaiting` waiting: a queue, where any extra prefill delays everyone).
 *
 * A switched-off class still probes: a request may run one round with a short k (`probeK`), so
 * that α keeps being measured and a recovered class is switched back on. It does only while a
 * draft that is always right could switch the class on, and only while a budget of target GPU
 * time holds the round's cost: the budget grows by `probeShare` of the elapsed time per target
 * worker (`targetWorkers`), so probes take at most that share of the pool's GPU time, however
 * many requests arrive.
 *
 * Everything is plain code over an injected clock, unit-tested in test/speculative/controller.test.ts.
 */
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
  /** Tokens of the request's context so far (prompt and output); null if unknown. */
  contextTokens?: number | null;
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
  /** Target GPU time the controller's probe rounds have cost so far, ms of a worker (by its cost model). */
  readonly probeSpentMs?: number;
}

export class FixedK implements KChooser {
  constructor(private readonly byModel: ReadonlyMap<string, number>) {}

  chooseK(round: RoundContext): Decision {
    return { k: this.byModel.get(round.model) ?? 0, reason: 'fixed' };
  }
}

/** One engine step's shape, as the roofline time model takes it (src/engine/types.ts StepShape). */
export interface TargetStepShape {
  prefill: Array<{ newTokens: number; contextLen: number }>;
  decodeSeqs: number;
  decodeContextTokens: number;
}

/** A target worker's step time, ms (src/engine/time-model.ts). */
export interface TargetStepModel {
  stepMs(shape: TargetStepShape): number;
}

/** How much of the context a verification reads from the target's prefix cache. */
export type VerifyReuse = 'none' | 'prefix';

export interface AdaptiveOptions {
  /** Largest k considered. */
  kMax: number;
  /** α assumed for a class before it has been measured. */
  priorAcceptance: number;
  /** Tested tokens behind a class's estimate before it replaces the prior entirely. */
  minEvidence: number;
  /** Speculate only when the cascade's value is at least this multiple of target-only's. */
  minGain: number;
  /** Probe rounds spend at most this share of the target pool's GPU time. */
  probeShare: number;
  /** Target workers whose GPU time the probe budget is a share of (1: a share of one worker's). */
  targetWorkers: number;
  /** The clock of the probe budget, ms. */
  now: () => number;
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
  /** The target's step-time model: costs as GPU time a step shares (see the header); null: measured call times. */
  targetStep: TargetStepModel | null;
  /** What a verification reuses of the context: 'prefix' (SGLang, vLLM's generate route) or nothing (vLLM's OpenAI route). */
  verifyReuse: VerifyReuse;
  /** The prefix cache's granularity, tokens (vLLM: its block size; SGLang: its page size, 1). */
  verifyReuseBlock: number;
  /** With `targetStep` and no budget from the request: the TPOT budget is the target-only step × (1 + this). */
  tpotSlack: number;
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
  probeShare: 0.01,
  targetWorkers: 1,
  now: () => performance.now(),
  probeK: 2,
  busyRunning: 64,
  busyWaiting: 2,
  draftPrice: 1,
  targetPrice: 1,
  targetTokenMs: null,
  targetStep: null,
  verifyReuse: 'none',
  verifyReuseBlock: 16,
  tpotSlack: 0,
  initialDraftFixedMs: 5,
  initialDraftTokenMs: 5,
  initialVerifyMs: 20,
};

/**
 * Call times are skewed one way: now and then a call is many times slower than its peers (a cold
 * connection, a collection pause, a queue in front of the worker), never many times faster. So a
 * cost estimate that holds at least OUTLIER_MIN_WEIGHT calls counts a call slower than
 * OUTLIER_FACTOR × its prediction as OUTLIER_FACTOR × the prediction: one slow call cannot switch
 * speculation off (and a switched-off class learns again only from probes), while a lasting
 * slowdown still moves the estimate, by up to (OUTLIER_FACTOR − 1) × the prediction ÷ the
 * estimate's weight per call. An estimate holding fewer calls, whose prediction a call beats
 * OUTLIER_FACTOR times over, starts again from that call: its first calls were the slow ones.
 */
const OUTLIER_FACTOR = 4;
const OUTLIER_MIN_WEIGHT = 4;

/** The observation an estimate predicting `predicted` takes for `y`, or null: start again from y. */
function boundedObservation(y: number, predicted: number, weight: number): number | null {
  if (!(predicted > 0)) return y;
  if (weight >= OUTLIER_MIN_WEIGHT) return Math.min(y, OUTLIER_FACTOR * predicted);
  return y * OUTLIER_FACTOR < predicted ? null : y;
}

/**
 * Exponentially weighted least squares of y = a + b·x (x = k, y = draft call ms). Most rounds ask
 * for the same k, so x barely varies and a plain fit's slope is noise; the slope is therefore
 * shrunk toward the share of the mean call time that the initial costs attribute to tokens, with
 * the weight of `priorWeight` observations spread over 1..kMax. Observations are bounded as
 * boundedObservation says.
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

  add(x: number, yObserved: number): void {
    let y: number | null = yObserved;
    const line = this.fit();
    if (line !== null) y = boundedObservation(yObserved, line.a + line.b * x, this.sw);
    if (y === null) {
      this.sw = this.sx = this.sy = this.sxx = this.sxy = 0;
      y = yObserved;
    }
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

/** Exponentially weighted mean of call times, observations bounded as boundedObservation says. */
class Ewma {
  value: number | null = null;
  /** The weight of the calls it holds, as a count (tends to 1 / weight). */
  private held = 0;
  constructor(private readonly weight: number) {}
  add(observed: number): void {
    const x = this.value === null ? observed : boundedObservation(observed, this.value, this.held);
    if (x === null || this.value === null) {
      this.value = observed;
      this.held = 1;
      return;
    }
    this.value += this.weight * (x - this.value);
    this.held = this.held * (1 - this.weight) + 1;
  }
}

interface ModelCosts {
  draft: LinearFit;
  verify: Ewma;
}

/** The best k of a round and what it is worth against target-only. */
export interface BestK {
  /** 0: no k keeps the TPOT budget. */
  k: number;
  /** Value per unit cost relative to target-only (1 = break-even). */
  gain: number;
  /** Expected time per output token at that k, ms. */
  msPerToken: number;
  /** The target GPU time a round at that k costs (ms of a target worker), for the probe budget. */
  targetMs: number;
}

/** The target-side costs of one round and of a target-only token, ms of a target worker's time. */
interface TargetCosts {
  /** A target-only token. */
  tokenMs: number;
  /** A round of k draft tokens: its share of the step, and the step's latency. */
  round(k: number): { costMs: number; latencyMs: number };
  /** The TPOT budget when the request has none: the target-only step. */
  budgetMs: number | null;
}

export class AdaptiveK implements KChooser {
  private readonly o: AdaptiveOptions;
  private readonly costs = new Map<string, ModelCosts>();
  /** Last decision per model and class (with the α it used), for inspection. */
  readonly last = new Map<string, Decision & { alpha: number }>();
  /** Target GPU time probes may still spend (ms of one worker), and when it was last topped up. */
  private probeBudgetMs = 0;
  private probeBudgetAt: number | null = null;
  /** Target GPU time spent on probe rounds so far (ms), for inspection. */
  probeSpentMs = 0;

  constructor(
    private readonly tracker: AcceptanceTracker,
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

  /** Context tokens a verification reads from the target's prefix cache (the rest it computes). */
  reusedTokens(contextTokens: number): number {
    if (this.o.verifyReuse === 'none' || contextTokens < 1) return 0;
    // Up to the last context token, whose logits score the first draft token; whole blocks only.
    const b = Math.max(1, this.o.verifyReuseBlock);
    return Math.floor((contextTokens - 1) / b) * b;
  }

  /** The target's side of a round and of a target-only token, modelled or measured. */
  private targetCosts(model: string, r: Pick<RoundContext, 'targetLoad' | 'contextTokens'>): TargetCosts {
    const c = this.costsOf(model);
    const step = this.o.targetStep;
    const ctx = r.contextTokens ?? null;
    if (step === null || ctx === null) {
      return { tokenMs: c.targetTokenMs, round: () => ({ costMs: c.verifyMs, latencyMs: c.verifyMs }), budgetMs: null };
    }
    // B sequences in the target's batch, this request's among them.
    const b = Math.max(1, r.targetLoad?.running ?? 1);
    const sd = step.stepMs({ prefill: [], decodeSeqs: b, decodeContextTokens: b * ctx });
    const reused = this.reusedTokens(ctx);
    return {
      tokenMs: sd / b,
      round: (k) => {
        const sv = step.stepMs({ prefill: [{ newTokens: ctx + k - reused, contextLen: ctx + k }], decodeSeqs: b - 1, decodeContextTokens: (b - 1) * ctx });
        // The call's latency is measured (queueing and round trips included) once there is one.
        return { costMs: sd / b + sv - sd, latencyMs: this.costs.get(model)?.verify.value ?? sv };
      },
      budgetMs: sd * (1 + this.o.tpotSlack),
    };
  }

  /**
   * The best k for a round: the greatest value per unit cost among the k whose expected time per
   * token keeps `budgetMs` (the request's, else the modelled target-only step; null: no limit).
   */
  best(model: string, alpha: number, r: Pick<RoundContext, 'targetLoad' | 'contextTokens'> & { tpotBudgetMs?: number | null } = { targetLoad: null }): BestK {
    const o = this.o;
    const c = this.costsOf(model);
    const t = this.targetCosts(model, r);
    const budget = r.tpotBudgetMs ?? t.budgetMs;
    const base = 1 / (o.targetPrice * t.tokenMs);
    let out: BestK = { k: 0, gain: 0, msPerToken: Infinity, targetMs: 0 };
    let bestValue = -Infinity;
    for (let k = 1; k <= o.kMax; k++) {
      const draftMs = c.draftFixedMs + k * c.draftTokenMs;
      const tr = t.round(k);
      const e = expectedTokensPerRound(alpha, k);
      const msPerToken = (draftMs + tr.latencyMs) / e;
      if (budget !== null && msPerToken > budget) continue;
      const v = e / (o.draftPrice * draftMs + o.targetPrice * tr.costMs);
      if (v > bestValue) {
        bestValue = v;
        out = { k, gain: v / base, msPerToken, targetMs: tr.costMs };
      }
    }
    return out;
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
    const b = this.best(r.model, alpha, r);
    if (b.k > 0 && b.gain >= o.minGain) return { k: b.k, reason: 'speculate' };
    // Switched off. A request's first decision may make it a probe: one round of probeK draft
    // tokens, after which it goes on to the target alone unless that round switched its class
    // back on. One round keeps a probe's request about as fast as the others.
    const off: Decision = { k: 0, reason: b.k === 0 ? 'tpot' : 'no_gain' };
    if (!r.firstRound) return off;
    // A class that would not pay even with a draft that is always right (α = 1) — the target is
    // too loaded, the verification too dear, the TPOT budget too tight — has nothing to find.
    const ideal = this.best(r.model, 1, r);
    if (ideal.k === 0 || ideal.gain < o.minGain) return off;
    const cost = this.targetCosts(r.model, r).round(o.probeK).costMs;
    if (!this.spendProbe(cost)) return off;
    return { k: o.probeK, reason: 'probe' };
  }

  /** Pay `ms` of target GPU time from the probe budget, if it holds that much. */
  private spendProbe(ms: number): boolean {
    const o = this.o;
    const now = o.now();
    const rate = o.probeShare * o.targetWorkers;
    // The budget starts empty and holds at most a minute's accrual: no burst of probes after a lull.
    if (this.probeBudgetAt !== null) this.probeBudgetMs = Math.min(rate * PROBE_BUDGET_WINDOW_MS, this.probeBudgetMs + rate * Math.max(0, now - this.probeBudgetAt));
    this.probeBudgetAt = now;
    if (this.probeBudgetMs < ms) return false;
    this.probeBudgetMs -= ms;
    this.probeSpentMs += ms;
    return true;
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

/** The probe budget accrues over at most this much time (ms). */
const PROBE_BUDGET_WINDOW_MS = 60_000;
