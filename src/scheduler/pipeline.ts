/**
 * The filter → scorer → picker pipeline every named policy is built from.
 */
import type { WorkerState } from '../fleet/worker-state.js';
import type { PrefixIndex } from './index/prefix-index.js';
import type {
  Filter,
  Picker,
  Policy,
  RouteDecision,
  RouteOutcome,
  RouteRequest,
  RoutingContext,
  ScoredWorker,
  Scorer,
} from './types.js';

export interface WeightedScorer {
  scorer: Scorer;
  weight: number;
}

export interface PipelineConfig {
  name: string;
  filters: Filter[];
  scorers: WeightedScorer[];
  picker: Picker;
  /**
   * Expected prefix-hit fraction reported with the decision (for the x-kvgate-prefix-hit header
   * and reservations); by default the 'prefix' scorer's output, else 0.
   */
  expectedPrefixHit?: (req: RouteRequest, picked: ScoredWorker) => number;
  /** Hooks for stateful plugins (indexes learned from decisions, reservations). */
  onDispatch?: Policy['onDispatch'];
  onFirstToken?: Policy['onFirstToken'];
  onComplete?: Policy['onComplete'];
}

export const clamp01 = (x: number): number => (x > 1 ? 1 : x > 0 ? x : 0);

export class PipelinePolicy implements Policy {
  readonly name: string;
  scrapeIntervalMs?: number;
  prefixIndex?: PrefixIndex;
  usesOracle?: boolean;
  readonly onDispatch?: Policy['onDispatch'];
  readonly onFirstToken?: Policy['onFirstToken'];
  readonly onComplete?: Policy['onComplete'];

  constructor(private readonly cfg: PipelineConfig) {
    this.name = cfg.name;
    this.onDispatch = cfg.onDispatch;
    this.onFirstToken = cfg.onFirstToken;
    this.onComplete = cfg.onComplete;
  }

  route(req: RouteRequest, workers: readonly WorkerState[], ctx: RoutingContext): RouteOutcome {
    let candidates: readonly WorkerState[] = workers;
    for (const f of this.cfg.filters) {
      const before = candidates;
      candidates = f.filter(req, candidates, ctx);
      if (candidates.length === 0) return this.noWorker(req, before, f, ctx);
    }
    const scored: ScoredWorker[] = candidates.map((worker) => ({ worker, score: 0, parts: {} }));
    for (const { scorer, weight } of this.cfg.scorers) {
      const s = scorer.score(req, candidates, ctx);
      for (let i = 0; i < scored.length; i++) {
        const v = clamp01(s[i] ?? 0);
        scored[i]!.parts[scorer.name] = v;
        scored[i]!.score += weight * v;
      }
    }
    const picked = this.cfg.picker.pick(req, scored, ctx);
    if (!picked) {
      return { ok: false, status: 503, code: 'no_worker_available', message: 'no worker could be picked' };
    }
    const hit = this.cfg.expectedPrefixHit
      ? this.cfg.expectedPrefixHit(req, picked)
      : (picked.parts['prefix'] ?? 0);
    const decision: RouteDecision = {
      worker: picked.worker,
      policy: this.name,
      expectedPrefixHit: clamp01(hit),
      reason: (req.memo.get('reason') as string | undefined) ?? this.cfg.picker.name,
    };
    // Plugins that fell back to in-flight accounting say so through the memo.
    if (req.memo.get('usedStaleMetrics') === true) decision.usedStaleMetrics = true;
    return { ok: true, decision };
  }

  /** Explain why a filter emptied the candidate set: a request too large for every worker is a 400. */
  private noWorker(
    req: RouteRequest,
    before: readonly WorkerState[],
    f: Filter,
    ctx: RoutingContext,
  ): RouteOutcome {
    const fit = f as Filter & { neverFits?: (r: RouteRequest, w: readonly WorkerState[], c: RoutingContext) => string | null };
    const never = fit.neverFits?.(req, before, ctx);
    if (never) return { ok: false, status: 400, code: 'context_length_exceeded', message: never };
    return {
      ok: false,
      status: 503,
      code: 'no_worker_available',
      message: `no worker for model '${req.model}' can take the request now (${f.name})`,
    };
  }
}
