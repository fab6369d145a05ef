/**
 * Speculation-aware routing among workers that speculate inside the engine. When a model is
 * served both by workers launched with vLLM's speculative decoding (they export
 * `vllm:spec_decode_*` counters) and by plain ones, this stage narrows a request's candidates:
 *
 *   - at high load (mean running sequences per candidate ≥ `busyRunning`, or a queue: two or
 *     more waiting) to the plain workers: a batch already fills the GPU, and speculation's extra
 *     draft steps and verification tokens only lengthen every step;
 *   - otherwise, to the speculating workers if their measured mean acceptance length
 *     (1 + accepted / drafts, pooled over the speculating workers' counters, once there are 50
 *     drafts to judge by) is at least `minAcceptanceLength`, else to the plain ones.
 *
 * The routing policy then picks among the remaining workers as usual. Acceptance is per worker,
 * not per prompt class: vLLM reports its counters per engine, not per request.
 */
import type { WorkerState } from '../fleet/worker-state.js';
import type { GatewayStage } from '../request/stage.js';
import { Counter, type Registry } from 'prom-client';

export interface SpecRoutingOptions {
  busyRunning: number;
  minAcceptanceLength: number;
}

/** Drafts behind an acceptance judgement. */
const MIN_DRAFTS = 50;

export type SpecRoutingChoice = { group: 'speculating' | 'plain' | 'all'; reason: string };

/** Which group of workers a request should go to (pure: unit-tested). */
export function chooseGroup(workers: readonly WorkerState[], o: SpecRoutingOptions): SpecRoutingChoice {
  const usable = workers.filter((w) => w.routable);
  const spec = usable.filter((w) => w.snapshot?.specDrafts !== undefined);
  const plain = usable.filter((w) => w.snapshot?.specDrafts === undefined);
  if (spec.length === 0 || plain.length === 0) return { group: 'all', reason: 'one_kind' };
  let running = 0;
  let waiting = 0;
  for (const w of usable) {
    running += Math.max(w.snapshot?.running ?? 0, w.inflightCount);
    waiting += w.snapshot?.waiting ?? 0;
  }
  if (waiting >= 2 || running / usable.length >= o.busyRunning) return { group: 'plain', reason: 'busy' };
  let drafts = 0;
  let accepted = 0;
  for (const w of spec) {
    drafts += w.snapshot!.specDrafts ?? 0;
    accepted += w.snapshot!.specAcceptedTokens ?? 0;
  }
  // Too few drafts to judge (a fresh worker): give speculation the benefit of the doubt.
  if (drafts < MIN_DRAFTS) return { group: 'speculating', reason: 'unmeasured' };
  return 1 + accepted / drafts >= o.minAcceptanceLength ? { group: 'speculating', reason: 'acceptance' } : { group: 'plain', reason: 'low_acceptance' };
}

export function specRoutingStage(o: SpecRoutingOptions, registry: Registry): GatewayStage {
  const routed = new Counter({
    name: 'kvgate_spec_routing_total',
    help: 'Requests of models with speculating and plain workers, by the group they were sent to and why',
    labelNames: ['model', 'group', 'reason'],
    registers: [registry],
  });
  return {
    name: 'speculation-aware-routing',
    handle(ctx) {
      const c = chooseGroup(ctx.candidates, o);
      if (c.group === 'all') return 'continue';
      routed.labels(ctx.model, c.group, c.reason).inc();
      ctx.candidates = ctx.candidates.filter((w) => (w.snapshot?.specDrafts !== undefined) === (c.group === 'speculating'));
      ctx.logFields = { ...ctx.logFields, specRouting: c.group };
      return 'continue';
    },
  };
}
