/**
 * Speculation settings per request, for servers that take them in the request body: llama.cpp's
 * server reads `"speculative.n_max"` (most draft tokens per step, 0: no speculation),
 * `"speculative.n_min"` and `"speculative.p_min"` from each request, and reports what happened in
 * the response's `timings` (`draft_n`: draft tokens proposed, `draft_n_accepted`: accepted) — in
 * the JSON body, or in the last chunk of a stream.
 *
 * For every request of a model listed in `speculative.perRequest`, this stage sets `n_max` to the
 * k that maximises expected tokens per unit of step cost for the request's prompt class:
 *
 *   gain(k) = E(α, k) / (1 + draftCost · k),   E(α, k) = (1 − α^(k+1)) / (1 − α)
 *
 * (a target step that verifies k draft tokens emits E of them on average; each draft token costs
 * draftCost of a target step). When the best gain is below `controller.minGain`, or the model's
 * workers are busy (batching already fills their GPUs, so draft work only lengthens each step),
 * n_max is 0; a switched-off class is still probed at `controller.probeRate` with `probeK` so a
 * recovered acceptance is noticed. A client that set `speculative.n_max` itself is left alone.
 *
 * α is learned from the responses: a request that ran with n_max = k and reports d proposed and a
 * accepted tokens is taken as d / k full rounds (llama.cpp may draft fewer near the end, or stop a
 * draft early below p_min: then α is underestimated a little), and α is the value whose expected
 * accepted tokens per round α(1 − α^k)/(1 − α) equals a / rounds. The estimate feeds the same
 * tracker as the cascade (kvgate_spec_acceptance_rate{model,class}).
 */
import type { WorkerState } from '../fleet/worker-state.js';
import type { GatewayStage } from '../request/stage.js';
import type { Rng } from '../util/rng.js';
import { expectedTokensPerRound, type AcceptanceTracker } from './acceptance.js';
import type { AdaptiveOptions } from './controller.js';
import type { SpecMetrics } from './metrics.js';
import { contentClass } from './plan.js';

export interface PerRequestModel {
  model: string;
  /** Largest n_max sent. */
  kMax: number;
  /** Cost of one draft token relative to one target step. */
  draftCost: number;
}

/** The controller settings this stage shares with the cascade's adaptive controller. */
export type PerRequestControl = Pick<AdaptiveOptions, 'priorAcceptance' | 'minEvidence' | 'minGain' | 'probeK' | 'busyRunning' | 'busyWaiting'> & {
  /** Share of a switched-off class's requests still sent probeK (the server's draft costs it no gateway call). */
  probeRate: number;
  classBy: 'tenant' | 'content';
};

export interface KChoice {
  k: number;
  reason: 'gain' | 'low_acceptance' | 'busy' | 'probe';
}

/** The n_max to send at acceptance α (pure; `rng` draws the probes). */
export function chooseRequestK(alpha: number, m: PerRequestModel, c: PerRequestControl, rng: Rng): KChoice {
  let best = 0;
  let bestGain = 1;
  for (let k = 1; k <= m.kMax; k++) {
    const gain = expectedTokensPerRound(alpha, k) / (1 + m.draftCost * k);
    if (gain > bestGain) {
      bestGain = gain;
      best = k;
    }
  }
  if (best > 0 && bestGain >= c.minGain) return { k: best, reason: 'gain' };
  return rng() < c.probeRate ? { k: Math.min(c.probeK, m.kMax), reason: 'probe' } : { k: 0, reason: 'low_acceptance' };
}

/** True when the candidates' batches are full enough that speculation only slows them. */
function workersBusy(ws: readonly WorkerState[], c: PerRequestControl): boolean {
  if (ws.length === 0) return false;
  let running = 0;
  let waiting = 0;
  for (const w of ws) {
    running += Math.max(w.snapshot?.running ?? 0, w.inflightCount);
    waiting += w.snapshot?.waiting ?? 0;
  }
  return running / ws.length >= c.busyRunning || waiting / ws.length >= c.busyWaiting;
}

/**
 * α from one response: `rounds` = proposed / k full rounds, accepted tokens per round solved for
 * α by bisection (the expected accepted count per round grows with α). null when nothing was drafted.
 */
export function alphaFromTimings(proposed: number, accepted: number, k: number): number | null {
  if (!(proposed > 0) || !(k > 0) || accepted < 0) return null;
  const perRound = Math.min(k, (accepted * k) / proposed);
  const acceptedPerRound = (a: number): number => expectedTokensPerRound(a, k) - 1;
  let lo = 0;
  let hi = 1;
  for (let i = 0; i < 40; i++) {
    const mid = (lo + hi) / 2;
    if (acceptedPerRound(mid) < perRound) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}

const TAIL_BYTES = 4096;

/** The last `timings` draft counts in a JSON or SSE body's tail, or null. */
export function draftCounts(tail: string): { proposed: number; accepted: number } | null {
  const i = tail.lastIndexOf('"timings"');
  if (i < 0) return null;
  const t = tail.slice(i);
  const p = /"draft_n"\s*:\s*(\d+)/.exec(t);
  const a = /"draft_n_accepted"\s*:\s*(\d+)/.exec(t);
  return p && a ? { proposed: Number(p[1]), accepted: Number(a[1]) } : null;
}

export interface PerRequestDeps {
  models: ReadonlyMap<string, PerRequestModel>;
  control: PerRequestControl;
  tracker: AcceptanceTracker;
  metrics: SpecMetrics;
  rng: Rng;
}

export function perRequestSpeculationStage(d: PerRequestDeps): GatewayStage {
  return {
    name: 'per-request-speculation',
    handle(ctx) {
      const m = d.models.get(ctx.model);
      if (!m) return 'continue';
      const body = ctx.body as Record<string, unknown>;
      if (body['speculative.n_max'] !== undefined) {
        d.metrics.requests.labels(ctx.model, 'per_request', 'client_set').inc();
        return 'continue';
      }
      const cls = d.control.classBy === 'content' ? contentClass(ctx.routeRequest.promptText) : (ctx.tenant?.id ?? 'default');
      const measured = d.tracker.weight(m.model, cls) >= d.control.minEvidence ? d.tracker.alpha(m.model, cls) : null;
      const alpha = measured ?? d.control.priorAcceptance;
      const choice: KChoice = workersBusy(ctx.candidates, d.control) ? { k: 0, reason: 'busy' } : chooseRequestK(alpha, m, d.control, d.rng);
      body['speculative.n_max'] = choice.k;
      body['speculative.n_min'] = 0;
      ctx.bodyModified = true;
      d.metrics.requests.labels(ctx.model, 'per_request', choice.reason).inc();
      d.metrics.k.labels(ctx.model).observe(choice.k);
      ctx.logFields = { ...ctx.logFields, specK: choice.k };
      if (choice.k === 0) return 'continue';
      // Keep the body's tail: llama.cpp puts `timings` at the end (last JSON field, last chunk).
      let tail = '';
      ctx.taps.push((chunk) => {
        tail = (tail + chunk.toString('utf8')).slice(-TAIL_BYTES);
      });
      ctx.onFinish.push((c) => {
        if (c.status !== 200 || c.aborted) return;
        const counts = draftCounts(tail);
        if (!counts) return;
        d.metrics.draftTokens.labels(m.model, cls).inc(counts.proposed);
        d.metrics.acceptedTokens.labels(m.model, cls).inc(counts.accepted);
        const a = alphaFromTimings(counts.proposed, counts.accepted, choice.k);
        if (a === null) return;
        // The tested tokens behind `rounds` rounds at α: each tests its accepted tokens plus the one
        // rejected, except a round that accepts all k; in expectation E(α, k) − α^k per round.
        const rounds = counts.proposed / choice.k;
        const tested = rounds * (expectedTokensPerRound(a, choice.k) - Math.pow(a, choice.k));
        d.tracker.observeCounts(m.model, cls, a * tested, tested);
      });
      return 'continue';
    },
  };
}
