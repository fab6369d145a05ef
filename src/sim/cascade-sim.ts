/**
 * The speculative cascade in the discrete-event fleet simulation (`kvgate bench --spec-mode`):
 * the simulation's driver of the round logic the live gateway runs (src/speculative/rounds.ts),
 * with the same controller (src/speculative/controller.ts) and acceptance tracker, on the
 * simulation's virtual clock.
 *
 * A request routed to a target worker asks the controller for its first k; 0 sends it down the
 * plain path (the fleet simulation dispatches it as usual). Otherwise it runs in rounds, each one
 * two engine requests, exactly the calls the live cascade makes:
 *   - draft: prompt = the context so far, max_tokens = k, on the request's draft engine (picked
 *     once per request: the draft worker with the fewest cascades; its prefix cache holds the
 *     context from round to round);
 *   - verify: prompt = context + the draft's tokens, max_tokens = 1, on the request's target
 *     engine, with the prefix cache skipped as vLLM's OpenAI route skips it for a prompt_logprobs
 *     request, or read up to the last context token (`verifyUsesPrefixCache`: SGLang's /generate
 *     with logprob_start_len, vLLM's /inference/v1/generate with skip_reading_prefix_cache false);
 * each submitted after the call delay, queued and batched with everything else on that engine
 * and answered after the step that completes it, plus the call delay. The controller is fed the
 * calls' virtual durations as the live one is fed their wall-clock ones. When the controller
 * stops speculating mid-request, the rest is one target-only request of the remaining tokens.
 *
 * What the workers answer. The target's output is the request's answer tokens (answerToken, as
 * on the plain path), at temperature 0: position j's argmax is answerToken(seed, j). The draft
 * proposes, at each of its k positions, the target's token with probability α(now) and another
 * token otherwise (independently per position), so the per-token acceptance rate is α — fixed,
 * or shifting at a moment of virtual time. Verification is then the real thing (verifyRound at
 * temperature 0 against the argmaxes), and the output is exactly the target's: the test in
 * test/sim/cascade-sim.test.ts compares it token for token.
 */
import { Engine } from '../engine/engine.js';
import type { EngineConfig, EngineRequest, FinishedOutput, StepResult } from '../engine/types.js';
import type { WorkerState } from '../fleet/worker-state.js';
import type { AcceptanceTracker } from '../speculative/acceptance.js';
import type { Decision, KChooser, RoundContext, RoundTiming } from '../speculative/controller.js';
import { OutputText } from '../speculative/output.js';
import { CascadeRounds, firstDecision, type DraftProposal, type Verification } from '../speculative/rounds.js';
import { seededRng, type Rng } from '../util/rng.js';
import { answerToken } from '../workload/tokens.js';
import type { BenchRequest } from '../workload/types.js';

export interface SimSpeculation {
  /** The draft engines' configuration (token emission and KV events are turned off). */
  draftEngineConfig: EngineConfig;
  draftWorkers: number;
  /** Chooses k per round (FixedK, AdaptiveK); null: target-only, the draft pool stays idle. */
  controller: KChooser | null;
  /** The controller's acceptance tracker (the cascade reports every round's outcome to it). */
  tracker: AcceptanceTracker;
  /** Per-token acceptance α of the draft at virtual time `nowMs` for a request of class `cls` (its tenant). */
  acceptance: (nowMs: number, cls: string) => number;
  /**
   * Verification reads the target's prefix cache up to the last context token (SGLang's /generate
   * with logprob_start_len; vLLM's /inference/v1/generate with skip_reading_prefix_cache false).
   * Default false: vLLM's OpenAI route, where prompt logprobs make every verification recompute
   * the whole context.
   */
  verifyUsesPrefixCache?: boolean;
  /** Every request's TPOT budget, ms (the gateway's controller.tpotBudgetMs); null: none. */
  tpotBudgetMs?: number | null;
  /** Called once with the simulation's virtual clock (ms), for a controller that keeps time. */
  bindClock?: (now: () => number) => void;
  /** Keep each cascade request's output tokens in the result (tests). */
  recordOutputs?: boolean;
}

/** What the fleet simulation lends the cascade. */
export interface CascadeHost {
  model: string;
  now(): number;
  /** Run `fn` at virtual time t (an event of the simulation's queue). */
  at(t: number, fn: () => void): void;
  /** Add a request to target worker w's engine, starting its step loop if it was idle. */
  submitTarget(w: number, req: EngineRequest): void;
  /** Request idx's first token became visible now. */
  firstToken(idx: number): void;
  /** Request idx is complete now (recorded like a plain request's finish). */
  finish(idx: number, w: number, f: FinishedOutput): void;
  /** Target worker w as the replica that routed request idx sees it (the controller's load input). */
  targetState(idx: number, w: number): WorkerState;
  /** Gateway → worker delay of each call, each way, ms. */
  callDelayMs: number;
  /** The request's cache salt (tenant isolation), or undefined. */
  cacheSalt(req: BenchRequest): string | undefined;
}

/** What the cascade did for one prompt class (tenant). */
export interface ClassCounts {
  cascadeRequests: number;
  /** Of those, probes of a switched-off class (one round, then the target alone unless it paid). */
  probeRequests: number;
  plainRequests: number;
  tested: number;
  accepted: number;
}

export interface SimSpecResult {
  draftWorkers: number;
  /** Modelled busy time of each draft worker, ms. */
  draftBusyMs: number[];
  /** Requests that ran the cascade / went down the plain path at their first decision. */
  cascadeRequests: number;
  plainRequests: number;
  /** Of the cascade requests, probes of a switched-off class. */
  probeRequests: number;
  /** Requests the draft model could not hold (context too long): sent to the target alone, no decision. */
  draftRefused: number;
  rounds: number;
  proposed: number;
  accepted: number;
  /** Draft tokens put to the test: accepted, plus the rejected one of each round that rejected one. */
  tested: number;
  /** Output tokens of cascade requests that came from the draft / the target. */
  fromDraft: number;
  fromTarget: number;
  /** Every decision of the controller, in order: virtual time, k (0: off), reason, class. */
  decisions: { t: number[]; k: number[]; reason: string[]; cls: string[] };
  /** Per class (the request's tenant): requests down each path, and the draft tokens tested and accepted. */
  byClass: Map<string, ClassCounts>;
  /** Output tokens of each cascade request by request index (with recordOutputs). */
  outputs: Map<number, number[]> | null;
  /** Target GPU time the controller's probes cost, ms of a worker (null: the controller does not probe). */
  probeTargetMs: number | null;
}

interface Run {
  idx: number;
  w: number;
  seed: number;
  /** The request's engine priority (vLLM's) and cache salt, for every call it makes. */
  priority: number;
  salt: { cacheSalt?: string };
  promptLen: number;
  cls: string;
  draft: number;
  r: CascadeRounds;
  out: OutputText;
  rng: Rng;
  sub: number;
  cachedTokens: number | null;
  firstSeen: boolean;
}

/** Decisions of the wrapped controller, logged with the virtual time. */
class RecordingChooser implements KChooser {
  constructor(
    private readonly inner: KChooser,
    private readonly now: () => number,
    private readonly log: SimSpecResult['decisions'],
  ) {}
  chooseK(round: RoundContext): Decision {
    const d = this.inner.chooseK(round);
    this.log.t.push(this.now());
    this.log.k.push(Math.max(0, d.k));
    this.log.reason.push(d.reason);
    this.log.cls.push(round.cls);
    return d;
  }
  observe(t: RoundTiming): void {
    this.inner.observe?.(t);
  }
}

const NONE: ReadonlySet<number> = new Set();
const NO_TEXT = new Map<number, string>();
const NO_DIST = new Map<number, number>();

export class SimCascade {
  private readonly draftEngines: Engine[] = [];
  private readonly draftBusy: boolean[] = [];
  private readonly draftActive: number[] = [];
  private readonly res: SimSpecResult;
  private readonly controller: KChooser | null;
  /** Engine request id → what to do when it finishes (target and draft requests alike). */
  private readonly waiting = new Map<string, (f: FinishedOutput, now: number) => void>();
  /** Target engine request id → its run, for first tokens of target-only continuations. */
  private readonly firstOf = new Map<string, Run>();
  private pendingEvents = 0;

  constructor(
    private readonly spec: SimSpeculation,
    private readonly host: CascadeHost,
    private readonly seed: number,
  ) {
    const n = spec.draftWorkers;
    if (!Number.isInteger(n) || n < 1) throw new Error(`draft workers must be a positive integer, got ${n}`);
    const cfg: EngineConfig = { ...spec.draftEngineConfig, emitTokens: false, kvEvents: false };
    for (let i = 0; i < n; i++) {
      this.draftEngines.push(new Engine(cfg));
      this.draftBusy.push(false);
      this.draftActive.push(0);
    }
    this.res = {
      draftWorkers: n,
      draftBusyMs: new Array<number>(n).fill(0),
      cascadeRequests: 0,
      plainRequests: 0,
      probeRequests: 0,
      draftRefused: 0,
      rounds: 0,
      proposed: 0,
      accepted: 0,
      tested: 0,
      fromDraft: 0,
      fromTarget: 0,
      decisions: { t: [], k: [], reason: [], cls: [] },
      byClass: new Map(),
      outputs: spec.recordOutputs ? new Map() : null,
      probeTargetMs: null,
    };
    this.controller = spec.controller ? new RecordingChooser(spec.controller, () => host.now(), this.res.decisions) : null;
    spec.bindClock?.(() => host.now());
  }

  /** Events scheduled and not yet run: the simulation is not over while there are any. */
  get pending(): number {
    return this.pendingEvents;
  }

  /** True for an engine request id that belongs to a cascade (not a plain request). */
  owns(id: string): boolean {
    return this.waiting.has(id);
  }

  result(): SimSpecResult {
    this.res.probeTargetMs = this.spec.controller?.probeSpentMs ?? null;
    return this.res;
  }

  private classStats(cls: string): ClassCounts {
    let c = this.res.byClass.get(cls);
    if (!c) this.res.byClass.set(cls, (c = { cascadeRequests: 0, probeRequests: 0, plainRequests: 0, tested: 0, accepted: 0 }));
    return c;
  }

  private at(t: number, fn: () => void): void {
    this.pendingEvents++;
    this.host.at(t, () => {
      this.pendingEvents--;
      fn();
    });
  }

  /**
   * Request idx was routed to target worker w: run it as a cascade (true), or leave it to the
   * plain path (false) when there is no controller or the controller's first k is 0.
   */
  start(idx: number, w: number, req: BenchRequest): boolean {
    if (!this.controller) return false;
    // A request the draft model cannot hold (its context is shorter than the target's) would fail
    // its first draft call; the live cascade then generates it on the target alone.
    if (this.draftEngines[0]!.check(req.promptTokens.length, req.maxTokens) !== null) {
      this.res.draftRefused++;
      return false;
    }
    const host = this.host;
    const cls = req.tenant ?? 'default';
    const tpotBudgetMs = this.spec.tpotBudgetMs ?? null;
    const first = firstDecision(this.controller, host.model, cls, host.targetState(idx, w), tpotBudgetMs, req.promptTokens.length);
    const byClass = this.classStats(cls);
    if (first.k <= 0) {
      this.res.plainRequests++;
      byClass.plainRequests++;
      return false;
    }
    this.res.cascadeRequests++;
    byClass.cascadeRequests++;
    if (first.reason === 'probe') {
      this.res.probeRequests++;
      byClass.probeRequests++;
    }
    let draft = 0;
    for (let d = 1; d < this.draftActive.length; d++) if (this.draftActive[d]! < this.draftActive[draft]!) draft = d;
    this.draftActive[draft]!++;
    const out = new OutputText({ maxTokens: req.maxTokens, stop: [], stopTokenIds: NONE, eosTokenIds: NONE });
    const rng = seededRng((this.seed ^ Math.imul(idx + 1, 0x9e3779b1)) >>> 0);
    const context = Array.from(req.promptTokens);
    const run: Run = {
      idx,
      w,
      seed: req.outputSeed,
      priority: req.priority ?? 0,
      salt: ((x): { cacheSalt?: string } => (x === undefined ? {} : { cacheSalt: x }))(host.cacheSalt(req)),
      promptLen: context.length,
      cls,
      draft,
      out,
      rng,
      sub: 0,
      cachedTokens: null,
      firstSeen: false,
      r: new CascadeRounds({
        model: host.model,
        cls,
        controller: this.controller,
        tracker: this.spec.tracker,
        params: { temperature: 0, topP: 1 },
        rng,
        out,
        context,
        first,
        tpotBudgetMs,
      }),
    };
    this.next(run);
    return true;
  }

  /** The next step of a run, now. */
  private next(run: Run): void {
    const host = this.host;
    const p = run.r.plan(host.targetState(run.idx, run.w));
    if (p.kind === 'done') return this.complete(run);
    if (p.kind === 'target-only') return this.targetOnly(run);
    const k = p.k;
    const t0 = host.now();
    const d = host.callDelayMs;
    if (k === 0) {
      this.at(t0 + d, () => this.verify(run, { tokens: [], candidates: [], finishReason: null }, 0, null));
      return;
    }
    // The draft's k tokens: the target's where it agrees (probability α each), another elsewhere.
    const base = run.r.context.length - run.promptLen;
    const alpha = this.spec.acceptance(t0, run.cls);
    const tokens: number[] = [];
    for (let i = 0; i < k; i++) {
      const t = answerToken(run.seed, base + i);
      tokens.push(run.rng() < alpha ? t : (t + 1 + Math.floor(run.rng() * 1000)) % 0x7fff);
    }
    const prompt = run.r.context.slice();
    this.at(t0 + d, () => {
      const id = `c${run.idx}.${run.sub++}`;
      this.waiting.set(id, (_f, now) => {
        this.waiting.delete(id);
        this.at(now + d, () => this.verify(run, { tokens, candidates: tokens.map(() => NO_DIST), finishReason: null }, k, host.now() - t0));
      });
      this.submitDraft(run.draft, { id, prompt, maxTokens: k, sampler: (c) => tokens[c.output.length]!, ignoreEos: true, priority: run.priority, ...run.salt });
    });
  }

  /** Send the context and the draft's tokens to the target for one prefill-only pass. */
  private verify(run: Run, proposal: DraftProposal, k: number, draftMs: number | null): void {
    const host = this.host;
    const t0 = host.now();
    const d = host.callDelayMs;
    const base = run.r.context.length - run.promptLen;
    const drafts = proposal.tokens;
    const id = `c${run.idx}.${run.sub++}`;
    this.waiting.set(id, (f, now) => {
      this.waiting.delete(id);
      if (run.cachedTokens === null) run.cachedTokens = f.cachedPromptTokens;
      this.at(now + d, () => {
        run.r.timing(drafts.length > 0 ? k : 0, draftMs, host.now() - t0);
        const ver: Verification = {
          positions: drafts.map((_, i) => ({ raw: NO_DIST, text: NO_TEXT, argmax: answerToken(run.seed, base + i) })),
          next: { token: answerToken(run.seed, base + drafts.length), text: '', finishReason: null },
        };
        const o = run.r.settle(proposal, ver);
        const s = this.res;
        s.rounds++;
        s.proposed += o.proposed;
        s.accepted += o.accepted;
        const tested = o.accepted + (o.accepted < o.proposed ? 1 : 0);
        s.tested += tested;
        const c = this.classStats(run.cls);
        c.tested += tested;
        c.accepted += o.accepted;
        if (o.taken > 0) this.seen(run);
        this.next(run);
      });
    });
    const prompt = drafts.length > 0 ? run.r.context.concat(drafts) : run.r.context.slice();
    host.submitTarget(run.w, {
      id,
      prompt,
      maxTokens: 1,
      sampler: () => answerToken(run.seed, base + drafts.length),
      ignoreEos: true,
      priority: run.priority, ...run.salt,
      skipPrefixCache: this.spec.verifyUsesPrefixCache !== true,
      // A verifier that reads the cache reads it up to the last context token at most: that
      // token's logits score the first draft token (SGLang's logprob_start_len; vLLM's generate
      // route returns no rows for cached positions).
      prefixCacheLimit: run.r.context.length - 1,
    });
  }

  /** Speculation stopped: the rest of the output in one target-only request. */
  private targetOnly(run: Run): void {
    this.releaseDraft(run);
    const host = this.host;
    const d = host.callDelayMs;
    const base = run.r.context.length - run.promptLen;
    const remaining = run.out.remaining;
    const prompt = run.r.context.slice();
    this.at(host.now() + d, () => {
      const id = `c${run.idx}.${run.sub++}`;
      this.firstOf.set(id, run);
      this.waiting.set(id, (f, now) => {
        this.waiting.delete(id);
        this.firstOf.delete(id);
        if (run.cachedTokens === null) run.cachedTokens = f.cachedPromptTokens;
        const ids: number[] = [];
        for (let i = 0; i < f.outputTokens; i++) ids.push(answerToken(run.seed, base + i));
        this.at(now + d, () => {
          run.r.takeTarget(ids, '');
          this.next(run);
        });
      });
      host.submitTarget(run.w, { id, prompt, maxTokens: remaining, sampler: (c) => answerToken(run.seed, base + c.output.length), ignoreEos: true, priority: run.priority, ...run.salt });
    });
  }

  private seen(run: Run): void {
    if (run.firstSeen) return;
    run.firstSeen = true;
    this.host.firstToken(run.idx);
  }

  private releaseDraft(run: Run): void {
    if (run.draft < 0) return;
    this.draftActive[run.draft]!--;
    run.draft = -1;
  }

  private complete(run: Run): void {
    this.releaseDraft(run);
    this.res.fromDraft += run.r.fromDraft;
    this.res.fromTarget += run.r.fromTarget;
    this.res.outputs?.set(run.idx, run.out.tokens.slice());
    this.seen(run);
    this.host.finish(run.idx, run.w, {
      id: String(run.idx),
      reason: 'length',
      promptTokens: run.promptLen,
      outputTokens: run.out.tokens.length,
      cachedPromptTokens: run.cachedTokens ?? 0,
    });
  }

  /** A target engine's step made a cascade request's first token visible (target-only continuations). */
  targetFirstToken(id: string): void {
    const run = this.firstOf.get(id);
    if (run) this.seen(run);
  }

  /** A target engine finished one of the cascade's requests. */
  targetFinished(f: FinishedOutput, now: number): void {
    this.waiting.get(f.id)?.(f, now);
  }

  // ---- the draft pool's engines, stepped on the same queue ----

  private submitDraft(d: number, req: EngineRequest): void {
    this.draftEngines[d]!.add(req);
    if (!this.draftBusy[d]) {
      this.draftBusy[d] = true;
      // After every other event of this instant, so calls arriving together share a step.
      this.at(this.host.now(), () => this.stepDraft(d));
    }
  }

  private stepDraft(d: number): void {
    const res = this.draftEngines[d]!.step();
    if (!res) {
      this.draftBusy[d] = false;
      return;
    }
    this.res.draftBusyMs[d]! += res.durationMs;
    this.at(this.host.now() + res.durationMs, () => this.draftStepDone(d, res));
  }

  private draftStepDone(d: number, res: StepResult): void {
    const now = this.host.now();
    for (const f of res.finished) this.waiting.get(f.id)?.(f, now);
    this.stepDraft(d);
  }
}
