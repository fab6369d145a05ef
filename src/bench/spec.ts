/**
 * The speculative cascade in `kvgate bench` (`--spec-mode`): how a run's cascade is set up
 * (the draft pool, the controller, the draft's acceptance) and what its summary says.
 *
 * Summary fields (per policy, `speculative` in the results JSON):
 * - target_gpu_seconds / draft_gpu_seconds: modelled busy time of each pool (Σ step durations ×
 *   GPUs per worker); target-only runs leave the draft pool idle (0).
 * - cost_per_million_output_tokens: both pools' busy GPU time at their GPUs' prices, per million
 *   output tokens. Busy time, not provisioned time: what the tokens cost if idle GPUs are not
 *   paid for (an autoscaled or shared pool). The run-level cost_per_million_output_tokens prices
 *   the provisioned target fleet instead.
 * - target_gpu_ms_per_output_token: target busy GPU-ms / output tokens.
 * - spec_acceptance_rate: α̂ = accepted / tested draft tokens (a round tests its accepted tokens
 *   and the rejected one), as the controller estimates it; null without rounds.
 * - tokens_from_draft_fraction: output tokens that were accepted draft tokens / all output tokens.
 * - mean_k: mean k over every decision of the controller (a request's first decision and each
 *   later round's; 0 when it sends a request or the rest of one to the target alone); 0 for
 *   target-only.
 * - settle (with an acceptance shift): the controller's mean k before and after the shift and when
 *   it settled. Its decisions (probes of a switched-off class left out) are grouped in 1 s windows
 *   of virtual time; the steady value after the shift is the mean k over the last quarter of the
 *   post-shift time, and the controller has settled at the start of the first window from which
 *   on every window's mean k is within SETTLE_TOLERANCE_K of it (the same rule gives the steady
 *   value before the shift, over the last quarter of the pre-shift time). settled_after_s = that
 *   moment − the shift (null if the last window is off the steady value, or no decision came after
 *   the shift).
 */
import { buildEngineConfig, resolveGpu, type WeightDtype } from '../engine/profiles.js';
import type { EngineConfig } from '../engine/types.js';
import type { SimResult } from '../sim/fleet-sim.js';
import type { SimSpeculation } from '../sim/cascade-sim.js';
import { AcceptanceTracker } from '../speculative/acceptance.js';
import { AdaptiveK, FixedK, type KChooser } from '../speculative/controller.js';

export type SpecMode = { kind: 'target-only' } | { kind: 'fixed'; k: number } | { kind: 'adaptive' };

export type SpecAcceptance = number | { before: number; after: number; atMs: number };

export interface BenchSpecOptions {
  mode: SpecMode;
  /** The draft's per-token acceptance rate α, fixed or shifting once. */
  acceptance: SpecAcceptance;
  /**
   * α per tenant (the controller's prompt class in the simulation), overriding `acceptance` for
   * the tenants named: a draft that suits one kind of prompt (code) and not another (prose).
   */
  acceptanceByTenant?: Record<string, number>;
  draftModel: string;
  draftQuant: WeightDtype;
  draftGpu: string;
  draftWorkers: number;
  /**
   * The target pool's engine (default vllm): how a verification reaches it and what it can reuse.
   * sglang: /generate with logprob_start_len, which reads the prefix cache up to the scored
   * positions; vllm: the OpenAI route, whose prompt logprobs skip the prefix cache, unless
   * `verifyPrefixCache` (its /inference/v1/generate route with skip_reading_prefix_cache false).
   */
  targetEngine?: TargetEngine;
  /** Verification reads the target's prefix cache (default: true on sglang, false on vllm). */
  verifyPrefixCache?: boolean;
  /**
   * Every request's TPOT budget, ms (the gateway's speculative.controller.tpotBudgetMs). Without
   * one the adaptive controller keeps each request as fast as target-only generation would be.
   */
  tpotBudgetMs?: number;
}

export type TargetEngine = 'vllm' | 'sglang';

/** Whether a run's verifications read the target's prefix cache. */
export function verifyReadsCache(o: Pick<BenchSpecOptions, 'targetEngine' | 'verifyPrefixCache'>): boolean {
  return o.verifyPrefixCache ?? o.targetEngine === 'sglang';
}

export interface SpecSettle {
  shift_at_s: number;
  alpha_before: number;
  alpha_after: number;
  /** The controller's steady mean k before and after the shift (see the header); null: no decisions. */
  mean_k_before: number | null;
  mean_k_after: number | null;
  settled_after_s: number | null;
}

export interface SpecSummary {
  mode: string;
  draft: { model: string; quant: WeightDtype; gpu: string; workers: number };
  acceptance: number | { before: number; after: number; at_s: number };
  target_engine: TargetEngine;
  verify_prefix_cache: boolean;
  /** Target GPU-seconds the controller's probes spent (its own estimate; adaptive only). */
  probe_target_gpu_seconds: number | null;
  gpu_hour_cost: { target: number; draft: number };
  cascade_requests: number;
  /** Of the cascade requests, probes of a switched-off class (one round each, then the target alone unless it paid). */
  probe_requests: number;
  plain_requests: number;
  /** Requests too long for the draft model's context, sent to the target alone. */
  draft_refused: number;
  rounds: number;
  target_gpu_seconds: number;
  draft_gpu_seconds: number;
  target_gpu_ms_per_output_token: number | null;
  cost_per_million_output_tokens: number | null;
  spec_acceptance_rate: number | null;
  tokens_from_draft_fraction: number;
  mean_k: number;
  settle: SpecSettle | null;
  /** With per-tenant acceptance: what the controller did for each tenant (its prompt class). */
  by_tenant?: Record<string, SpecClassSummary>;
}

export interface SpecClassSummary {
  /** α configured for the tenant. */
  acceptance: number;
  /** α̂ measured on its cascade rounds (null: none ran). */
  spec_acceptance_rate: number | null;
  /** Mean k over the controller's decisions for the tenant (0 for a decision to stay off). */
  mean_k: number;
  cascade_requests: number;
  probe_requests: number;
  plain_requests: number;
}

export function specModeName(m: SpecMode): string {
  return m.kind === 'fixed' ? `fixed:${m.k}` : m.kind;
}

/** `target-only`, `fixed:K`, `adaptive` → the mode; throws a readable message on anything else. */
export function parseSpecMode(s: string): SpecMode {
  if (s === 'target-only' || s === 'adaptive') return { kind: s };
  const m = /^fixed:(\d+)$/.exec(s);
  if (m) {
    const k = Number(m[1]);
    if (k >= 1 && k <= 16) return { kind: 'fixed', k };
  }
  throw new Error(`must be target-only, fixed:K (K an integer from 1 to 16) or adaptive, got '${s}'`);
}

function fraction(s: string, what: string): number {
  const x = Number(s);
  if (s.trim() === '' || !Number.isFinite(x) || x < 0 || x > 1) throw new Error(`${what} must be a number from 0 to 1, got '${s}'`);
  return x;
}

export function parseAcceptance(s: string): number {
  return fraction(s, 'the acceptance rate');
}

/** `A1:A2@SECONDS` → α A1 until SECONDS of virtual time, A2 after. */
export function parseAcceptanceShift(s: string): { before: number; after: number; atMs: number } {
  const m = /^([^:@]+):([^:@]+)@([^:@]+)$/.exec(s);
  if (!m) throw new Error(`must be A1:A2@SECONDS (e.g. 0.8:0.3@60), got '${s}'`);
  const at = Number(m[3]);
  if (m[3]!.trim() === '' || !Number.isFinite(at) || at < 0) throw new Error(`the shift's moment must be a non-negative number of seconds, got '${m[3]}'`);
  return { before: fraction(m[1]!, 'the acceptance before the shift'), after: fraction(m[2]!, 'the acceptance after the shift'), atMs: at * 1000 };
}

/** `t0=0.9,t1=0.2` → α per tenant. */
export function parseAcceptanceByTenant(s: string): Record<string, number> {
  const out = new Map<string, number>();
  for (const part of s.split(',')) {
    const m = /^([^=]+)=(.*)$/.exec(part.trim());
    if (!m || m[1]!.trim() === '') throw new Error(`must be TENANT=A[,TENANT=A...] (e.g. t0=0.9,t1=0.2), got '${s}'`);
    const tenant = m[1]!.trim();
    if (out.has(tenant)) throw new Error(`names tenant '${tenant}' twice`);
    out.set(tenant, fraction(m[2]!.trim(), `the acceptance of tenant '${tenant}'`));
  }
  return Object.fromEntries(out);
}

export function acceptanceAt(a: SpecAcceptance, byTenant?: Record<string, number>): (nowMs: number, cls: string) => number {
  const base = typeof a === 'number' ? () => a : (t: number) => (t < a.atMs ? a.before : a.after);
  if (!byTenant) return base;
  const own = new Map(Object.entries(byTenant));
  return (t, cls) => own.get(cls) ?? base(t);
}

/** The draft pool's engine configuration (throws if the model does not fit its GPU). */
export function draftEngineConfig(o: BenchSpecOptions, hashSeed: number): EngineConfig {
  return buildEngineConfig({ gpu: o.draftGpu, model: o.draftModel, weightDtype: o.draftQuant, hashSeed, emitTokens: false, kvEvents: false });
}

/**
 * A fresh cascade setup for one fleet run. The adaptive controller prices draft and target
 * GPU time at their GPUs' hourly prices (× the target's tensor-parallel GPUs) and is given the
 * target engine's roofline step-time model, the engine's prefix-cache block and what a
 * verification reuses: it prices a round and a target-only token as GPU time a step shares at
 * the target worker's load (src/speculative/controller.ts).
 */
export function simSpeculation(
  o: BenchSpecOptions,
  run: { seed: number; model: string; tp: number; targetGpu: string; targetEngine: EngineConfig; draftEngine: EngineConfig; targetWorkers: number },
): SimSpeculation {
  const tracker = new AcceptanceTracker();
  let controller: KChooser | null = null;
  let clock: () => number = () => 0;
  if (o.mode.kind === 'fixed') controller = new FixedK(new Map([[run.model, o.mode.k]]));
  else if (o.mode.kind === 'adaptive') {
    controller = new AdaptiveK(tracker, {
      draftPrice: resolveGpu(o.draftGpu).hourlyUsd,
      targetPrice: resolveGpu(run.targetGpu).hourlyUsd * run.tp,
      targetStep: run.targetEngine.timeModel,
      verifyReuse: verifyReadsCache(o) ? 'prefix' : 'none',
      verifyReuseBlock: run.targetEngine.blockSize,
      targetWorkers: run.targetWorkers,
      now: () => clock(),
      ...initialDraftCosts(run.draftEngine),
    });
  }
  return {
    draftEngineConfig: run.draftEngine,
    draftWorkers: o.draftWorkers,
    controller,
    tracker,
    acceptance: acceptanceAt(o.acceptance, o.acceptanceByTenant),
    verifyUsesPrefixCache: verifyReadsCache(o),
    tpotBudgetMs: o.tpotBudgetMs ?? null,
    bindClock: (now) => {
      clock = now;
    },
  };
}

/**
 * A draft call's time before any is measured, from the draft engine's time model: one step that
 * prefills the few tokens verified since the last call (and yields the first draft token), then a
 * decode step per further token, at a 500-token context.
 */
function initialDraftCosts(draft: EngineConfig): { initialDraftFixedMs: number; initialDraftTokenMs: number } {
  const tm = draft.timeModel;
  const tokenMs = tm.stepMs({ prefill: [], decodeSeqs: 1, decodeContextTokens: 500 });
  const prefillMs = tm.stepMs({ prefill: [{ newTokens: 4, contextLen: 500 }], decodeSeqs: 0, decodeContextTokens: 0 });
  return { initialDraftFixedMs: Math.max(0, prefillMs - tokenMs), initialDraftTokenMs: tokenMs };
}

const round = (x: number, d = 3): number => Math.round(x * 10 ** d) / 10 ** d;

export function summarizeSpec(sim: SimResult, o: BenchSpecOptions, run: { tp: number; targetGpu: string; targetHourUsd?: number }): SpecSummary {
  const s = sim.speculative;
  if (!s) throw new Error('the run did not simulate the cascade');
  const c = sim.completed;
  let outputTokens = 0;
  for (let i = 0; i < c.outputTokens.length; i++) outputTokens += c.outputTokens[i]!;
  const targetS = (run.tp * sim.workers.reduce((a, w) => a + w.busyMs, 0)) / 1000;
  const draftS = s.draftBusyMs.reduce((a, b) => a + b, 0) / 1000;
  const targetPrice = run.targetHourUsd ?? resolveGpu(run.targetGpu).hourlyUsd;
  const draftPrice = resolveGpu(o.draftGpu).hourlyUsd;
  const cost = (targetS * targetPrice + draftS * draftPrice) / 3600;
  const d = s.decisions;
  let sumK = 0;
  for (const k of d.k) sumK += k;
  const a = o.acceptance;
  return {
    mode: specModeName(o.mode),
    draft: { model: o.draftModel, quant: o.draftQuant, gpu: o.draftGpu, workers: o.draftWorkers },
    acceptance: typeof a === 'number' ? a : { before: a.before, after: a.after, at_s: a.atMs / 1000 },
    target_engine: o.targetEngine ?? 'vllm',
    verify_prefix_cache: verifyReadsCache(o),
    probe_target_gpu_seconds: s.probeTargetMs === null ? null : round((run.tp * s.probeTargetMs) / 1000),
    gpu_hour_cost: { target: targetPrice, draft: draftPrice },
    cascade_requests: s.cascadeRequests,
    probe_requests: s.probeRequests,
    plain_requests: s.plainRequests,
    draft_refused: s.draftRefused,
    rounds: s.rounds,
    target_gpu_seconds: round(targetS),
    draft_gpu_seconds: round(draftS),
    target_gpu_ms_per_output_token: outputTokens > 0 ? round((targetS * 1000) / outputTokens, 4) : null,
    cost_per_million_output_tokens: outputTokens > 0 ? round(cost / (outputTokens / 1e6), 4) : null,
    spec_acceptance_rate: s.tested > 0 ? round(s.accepted / s.tested, 4) : null,
    tokens_from_draft_fraction: outputTokens > 0 ? round(s.fromDraft / outputTokens, 4) : 0,
    mean_k: d.k.length > 0 ? round(sumK / d.k.length, 3) : 0,
    settle: typeof a === 'number' ? null : settleOf(d, a),
    ...(o.acceptanceByTenant ? { by_tenant: byTenant(s, o) } : {}),
  };
}

function byTenant(s: NonNullable<SimResult['speculative']>, o: BenchSpecOptions): Record<string, SpecClassSummary> {
  const alpha = acceptanceAt(o.acceptance, o.acceptanceByTenant);
  const k = new Map<string, { sum: number; n: number }>();
  const d = s.decisions;
  for (let i = 0; i < d.k.length; i++) {
    const x = k.get(d.cls[i]!) ?? { sum: 0, n: 0 };
    x.sum += d.k[i]!;
    x.n++;
    k.set(d.cls[i]!, x);
  }
  const out: Record<string, SpecClassSummary> = {};
  for (const cls of [...s.byClass.keys()].sort()) {
    const c = s.byClass.get(cls)!;
    const kk = k.get(cls);
    out[cls] = {
      acceptance: alpha(0, cls),
      spec_acceptance_rate: c.tested > 0 ? round(c.accepted / c.tested, 4) : null,
      mean_k: kk && kk.n > 0 ? round(kk.sum / kk.n, 3) : 0,
      cascade_requests: c.cascadeRequests,
      probe_requests: c.probeRequests,
      plain_requests: c.plainRequests,
    };
  }
  return out;
}

/** A window's mean k may differ this much from the steady value and count as settled. */
const SETTLE_TOLERANCE_K = 0.5;

interface Window {
  start: number;
  sum: number;
  n: number;
}

/** Decisions in [from, to), probes left out, in 1 s windows (only windows that have any). */
function windows(d: { t: number[]; k: number[]; reason: string[] }, from: number, to: number): Window[] {
  const by = new Map<number, Window>();
  for (let i = 0; i < d.t.length; i++) {
    const t = d.t[i]!;
    if (t < from || t >= to || d.reason[i] === 'probe') continue;
    const w = Math.floor((t - from) / 1000);
    let x = by.get(w);
    if (!x) by.set(w, (x = { start: from + w * 1000, sum: 0, n: 0 }));
    x.sum += d.k[i]!;
    x.n++;
  }
  return [...by.values()].sort((a, b) => a.start - b.start);
}

/** Mean k of the decisions in windows starting in the last quarter of [from, to), or null. */
function steady(ws: readonly Window[], from: number, to: number): number | null {
  let sum = 0;
  let n = 0;
  for (const w of ws) {
    if (w.start < from + 0.75 * (to - from)) continue;
    sum += w.sum;
    n += w.n;
  }
  return n > 0 ? sum / n : null;
}

/** When the controller's decisions reached their post-shift steady value (see the header). */
export function settleOf(d: { t: number[]; k: number[]; reason: string[] }, shift: { before: number; after: number; atMs: number }): SpecSettle {
  const end = d.t.length > 0 ? d.t[d.t.length - 1]! + 1 : shift.atMs;
  const first = d.t.length > 0 ? d.t[0]! : 0;
  const post = windows(d, shift.atMs, end);
  const before = steady(windows(d, first, shift.atMs), first, shift.atMs);
  const after = steady(post, shift.atMs, end);
  let settled: number | null = null;
  if (after !== null) {
    for (let i = post.length - 1; i >= 0 && Math.abs(post[i]!.sum / post[i]!.n - after) <= SETTLE_TOLERANCE_K; i--) settled = post[i]!.start;
  }
  return {
    shift_at_s: shift.atMs / 1000,
    alpha_before: shift.before,
    alpha_after: shift.after,
    mean_k_before: before === null ? null : round(before, 2),
    mean_k_after: after === null ? null : round(after, 2),
    settled_after_s: settled === null ? null : round((settled - shift.atMs) / 1000, 1),
  };
}
