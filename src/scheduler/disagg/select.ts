/**
 * The two workers of a disaggregated request, and the decider's inputs from them. The policy the
 * gateway routes with ranks each pool's candidates — prefix-aware and KV-aware exactly as it
 * routes any request — and its best decode and best prefill candidates are read without charging
 * them (the relay charges the workers it then uses). What the decider weighs:
 *   decode worker:  its uncached tokens for the prompt, and when it would have the prompt's KV by
 *                   prefilling itself: 1000 · (prefill in flight there + uncached) / rate
 *   prefill worker: the prefill in flight there (its queue, ms), its own uncached tokens' prefill,
 *                   and the transfer of the whole prompt's KV to the decode worker.
 * Rates are the policy's prefill throughput per worker (measured, or its default); "in flight" is
 * this gateway's accounting of prompts dispatched and not yet answered with a first token.
 */
import type { WorkerState } from '../../fleet/worker-state.js';
import { promptLength, type Policy, type RouteDecision, type RouteRequest, type RoutingContext } from '../types.js';
import { decide, type DeciderInput, type DeciderOptions, type DisaggDecision } from './decider.js';

/** The workers of a model split by what they may do. */
export interface RolePools {
  /** Workers that serve a request whole or decode one prefilled elsewhere (roles `decode`, `both`). */
  decode: WorkerState[];
  /** Workers that may prefill for another (roles `prefill`, `both`). */
  prefill: WorkerState[];
}

/**
 * Split a model's workers by role; null when none has a role other than `both` (the model is not
 * served disaggregated, and every worker serves whole requests as before).
 */
export function rolePools(workers: readonly WorkerState[]): RolePools | null {
  let roles = false;
  const decode: WorkerState[] = [];
  const prefill: WorkerState[] = [];
  for (const w of workers) {
    if (w.role !== 'both') roles = true;
    if (w.role !== 'prefill') decode.push(w);
    if (w.role !== 'decode') prefill.push(w);
  }
  return roles ? { decode, prefill } : null;
}

export interface DisaggPlanEnv {
  /** Prefill throughput the worker is assumed to have, tokens/s. */
  prefillRate(w: WorkerState): number;
  /** Time to move `tokens` tokens' KV from a prefill worker to a decode worker, ms. */
  transferMs(tokens: number, from: WorkerState, to: WorkerState): number;
}

export interface DisaggPlan {
  decision: DisaggDecision;
  input: DeciderInput;
  /** The decode pool's best candidate (not charged), or null when none can take the request. */
  decode: RouteDecision | null;
  /** The prefill pool's best candidate (not charged), or null when none can take the request. */
  prefill: RouteDecision | null;
}

/** Rank both pools with the policy and let the decider choose. */
export function planDisaggregation(
  policy: Policy,
  req: RouteRequest,
  pools: RolePools,
  ctx: RoutingContext,
  env: DisaggPlanEnv,
  options: DeciderOptions,
): DisaggPlan {
  const prompt = promptLength(req);
  const d = preview(policy, req, pools.decode, ctx);
  const decodeUncached = d ? uncached(prompt, d) : prompt;
  const decodeLocalPrefillMs = d ? (1000 * (d.worker.inflightPrefillTokens + decodeUncached)) / env.prefillRate(d.worker) : Infinity;
  // A worker of role `both` prefills for another, never for itself.
  const prefillCandidates = d ? pools.prefill.filter((w) => w !== d.worker) : pools.prefill;
  const p = d ? preview(policy, req, prefillCandidates, ctx) : null;
  const input: DeciderInput = {
    promptTokens: prompt,
    decodeUncachedTokens: decodeUncached,
    decodeLocalPrefillMs,
    prefill:
      p && d
        ? {
            queueMs: (1000 * p.worker.inflightPrefillTokens) / env.prefillRate(p.worker),
            prefillMs: (1000 * uncached(prompt, p)) / env.prefillRate(p.worker),
            transferMs: env.transferMs(prompt, p.worker, d.worker),
          }
        : null,
  };
  return { decision: decide(input, options), input, decode: d, prefill: p };
}

function uncached(prompt: number, d: RouteDecision): number {
  return Math.round(prompt * (1 - d.expectedPrefixHit));
}

/** The policy's pick among `workers`, without charging it. */
function preview(policy: Policy, req: RouteRequest, workers: readonly WorkerState[], ctx: RoutingContext): RouteDecision | null {
  if (workers.length === 0) return null;
  const out = policy.route(req, workers, ctx);
  return out.ok ? out.decision : null;
}
