/**
 * The cascade's rounds, apart from how the workers are reached. One request's cascade is a
 * `CascadeRounds`: before each round a driver asks it for the round's plan (the controller picks
 * k; 0 stops speculating and the rest comes from the target alone), the driver obtains the
 * draft's k tokens and the target's verification of them however it reaches its workers, and
 * hands both back to `settle`, which accepts the longest passing prefix by speculative rejection
 * sampling (sampling.ts), appends the correction or bonus token, writes the verified tokens to
 * the output (which stops exactly where a target-only generation would) and to the context the
 * next round extends, and feeds the acceptance tracker and the controller.
 *
 * Two drivers run this same code: the live gateway stage (cascade.ts: HTTP calls to vLLM-style
 * workers, wall-clock time) and the discrete-event fleet simulation of `kvgate bench`
 * (src/sim/cascade-sim.ts: requests submitted to the simulated draft and target engines, virtual
 * time, queueing behind the other traffic on those engines).
 */
import type { WorkerState } from '../fleet/worker-state.js';
import type { Rng } from '../util/rng.js';
import type { AcceptanceTracker } from './acceptance.js';
import type { Decision, KChooser, RoundContext } from './controller.js';
import { processDist, verifyRound, type DraftPosition, type SamplingParams } from './sampling.js';

/** What a draft worker proposed: k token ids and, for sampling, its candidates' raw logprobs. */
export interface DraftProposal {
  tokens: number[];
  /** Raw logprobs of the reported candidates at each position (token id → logprob). */
  candidates: Array<Map<number, number>>;
  finishReason: string | null;
}

export interface ScoredPosition {
  /** token id → raw logprob, over the reported candidates. */
  raw: Map<number, number>;
  /** token id → its text as the target decodes it. */
  text: Map<number, string>;
  /** The rank-1 token. */
  argmax: number;
}

/** What the target's prefill-only pass over context + draft tokens says. */
export interface Verification {
  /** The target's distribution at each draft position, in order. */
  positions: ScoredPosition[];
  /** The target's own draw after the last draft token, and its text. */
  next: { token: number; text: string; finishReason: string | null };
}

/** Where verified tokens go: the client's output, which knows when it is complete. */
export interface RoundOutput {
  readonly finished: boolean;
  /** Tokens still allowed (max_tokens minus those taken). */
  readonly remaining: number;
  /** Append tokens (with their text, one string per token or one for all); returns how many were taken. */
  append(ids: readonly number[], texts: readonly string[] | string): number;
}

export interface CascadeRoundsOptions {
  model: string;
  /** The request's prompt class (tenant, or code vs prose). */
  cls: string;
  controller: KChooser;
  tracker: AcceptanceTracker;
  params: SamplingParams;
  /** The cascade's own draws (acceptance tests, residual samples). */
  rng: Rng;
  out: RoundOutput;
  /** Prompt token ids; verified tokens are appended to it in place. */
  context: number[];
  /** The controller's first decision (its k > 0: the request runs the cascade). */
  first: Decision;
  tpotBudgetMs: number | null;
  /** The first round verifies the prompt alone (k = 0): the first token is the target's (default true). */
  targetFirstToken?: boolean;
}

/** The next step of a request's cascade. */
export type RoundPlan =
  | { kind: 'done' }
  /** Generate the rest on the target alone; `stopped`: the controller turned speculation off just now. */
  | { kind: 'target-only'; stopped: boolean }
  /** One round of k draft tokens (k may be 0 near max_tokens: the target adds one token). */
  | { kind: 'round'; k: number };

export interface RoundOutcome {
  /** Draft tokens proposed and accepted this round. */
  proposed: number;
  accepted: number;
  /** Tokens the output took (the accepted ones and the correction or bonus, up to where it ended). */
  taken: number;
  /** Of those, the ones that came from the draft. */
  fromDraft: number;
  /** The verified tokens (what the output was offered) and their texts. */
  ids: number[];
  texts: string[];
}

const EMPTY: Map<number, number> = new Map();

export class CascadeRounds {
  rounds = 0;
  proposed = 0;
  accepted = 0;
  fromDraft = 0;
  fromTarget = 0;
  /** The first round was a probe of a switched-off class: the request keeps probing. */
  readonly probing: boolean;
  private k: number;
  private draft = true;

  constructor(private readonly o: CascadeRoundsOptions) {
    this.k = o.first.k;
    this.probing = o.first.reason === 'probe';
  }

  get out(): RoundOutput {
    return this.o.out;
  }

  get context(): number[] {
    return this.o.context;
  }

  /** True while the request still speculates (no stop by the controller, no draft failure). */
  get speculating(): boolean {
    return this.draft;
  }

  /**
   * What to do next. Every speculative round after the first asks the controller again, with the
   * load of the request's target worker; a k of 0 stops speculation for the rest of the request.
   */
  plan(target: WorkerState | null): RoundPlan {
    const o = this.o;
    if (o.out.finished) return { kind: 'done' };
    let stopped = false;
    // The first decision is the first speculative round's (after the target's own first token).
    const decided = o.targetFirstToken === false ? 1 : 2;
    if (this.rounds >= decided && this.draft) {
      const d = o.controller.chooseK(roundContext(o.model, o.cls, target, o.tpotBudgetMs, false, this.probing, o.context.length));
      this.k = d.k;
      if (d.k <= 0) {
        this.draft = false;
        stopped = true;
      }
    }
    if (!this.draft) return { kind: 'target-only', stopped };
    // The first token is the target's own, from a verification of the prompt alone: the same
    // prefill a target-only request starts with, so speculation does not delay the first token
    // (a draft call first would add its prefill and k steps to the TTFT).
    if (this.rounds === 0 && o.targetFirstToken !== false) return { kind: 'round', k: 0 };
    return { kind: 'round', k: Math.max(0, Math.min(this.k, o.out.remaining - 1)) };
  }

  /** The draft worker failed: the rest of the request comes from the target alone. */
  dropDraft(): void {
    this.draft = false;
  }

  /** Measured times of a round's calls, for the controller's cost model (ms, in the driver's clock). */
  timing(k: number, draftMs: number | null, verifyMs: number): void {
    // The first round's call is the prompt's prefill, not a verification: it says nothing of a round's cost.
    if (this.rounds === 0 && this.o.targetFirstToken !== false) return;
    this.o.controller.observe?.({ model: this.o.model, k, draftMs, verifyMs });
  }

  /** Accept what passes of one round's proposal, given the target's verification of it. */
  settle(proposal: DraftProposal, ver: Verification): RoundOutcome {
    const { params, rng, out, context, tracker, model, cls } = this.o;
    const greedy = params.temperature === 0;
    const positions: DraftPosition[] = proposal.tokens.map((token, i) => ({
      token,
      q: greedy ? EMPTY : processDist(proposal.candidates[i]!, params),
      p: greedy ? EMPTY : processDist(ver.positions[i]!.raw, params),
      targetArgmax: ver.positions[i]!.argmax,
    }));
    const verdict = verifyRound(positions, ver.next.token, params, rng);
    const ids = proposal.tokens.slice(0, verdict.accepted);
    const texts = ids.map((t, i) => ver.positions[i]!.text.get(t) ?? '');
    if (verdict.next !== null) {
      ids.push(verdict.next);
      texts.push(verdict.nextKind === 'bonus' ? ver.next.text : (ver.positions[verdict.accepted]!.text.get(verdict.next) ?? ''));
    }
    const taken = out.append(ids, texts);
    context.push(...ids.slice(0, taken));
    const fromDraft = Math.min(taken, verdict.accepted);
    this.rounds++;
    this.proposed += proposal.tokens.length;
    this.accepted += verdict.accepted;
    this.fromDraft += fromDraft;
    this.fromTarget += taken - fromDraft;
    tracker.observe(model, cls, verdict.accepted, verdict.accepted < proposal.tokens.length);
    return { proposed: proposal.tokens.length, accepted: verdict.accepted, taken, fromDraft, ids, texts };
  }

  /** Tokens the target generated alone (after speculation stopped); returns how many the output took. */
  takeTarget(ids: readonly number[], texts: readonly string[] | string): number {
    const taken = this.o.out.append(ids, texts);
    this.fromTarget += taken;
    this.o.context.push(...ids.slice(0, taken));
    return taken;
  }
}

/** What the controller sees of a round: the target worker's load (scraped, or in flight if more). */
function roundContext(model: string, cls: string, target: WorkerState | null, tpotBudgetMs: number | null, firstRound: boolean, probing: boolean, contextTokens: number | null): RoundContext {
  const s = target?.snapshot ?? null;
  // Between scrapes, the gateway's own in-flight count is the better lower bound on running.
  const targetLoad = target ? { running: Math.max(s?.running ?? 0, target.inflightCount), waiting: s?.waiting ?? 0 } : null;
  return { model, cls, targetLoad, tpotBudgetMs, firstRound, probing, contextTokens };
}

/** The controller's decision for a request's first round (k ≤ 0: the request takes the plain path). */
export function firstDecision(controller: KChooser, model: string, cls: string, target: WorkerState | null, tpotBudgetMs: number | null, promptTokens: number | null = null): Decision {
  return controller.chooseK(roundContext(model, cls, target, tpotBudgetMs, true, false, promptTokens));
}

/** The healthy worker with the fewest requests in flight (null if none). */
export function leastLoaded(ws: readonly WorkerState[]): WorkerState | null {
  let best: WorkerState | null = null;
  for (const w of ws) {
    if (!w.healthy || w.circuitOpen) continue;
    if (!best || w.inflightCount < best.inflightCount) best = w;
  }
  return best;
}
