/**
 * The filter → producer → scorer → picker pipeline every named policy is built from.
 *
 * 1. Filters narrow the candidates in order; one that removes every worker ends the decision
 *    (400 if its `neverFits` says the request can never be served here, else 503).
 * 2. An optional pruner narrows the candidates to those worth pricing; producers write what the
 *    scorers and the picker read into the request's state.
 * 3. Each scorer rates every candidate in [0,1]; a candidate's score is Σ weight · rating, and
 *    each rating is kept in `parts` under the scorer's name.
 * 4. The picker chooses and says why.
 */
import type { WorkerState } from '../fleet/worker-state.js';
import type { PrefixIndex } from './index/prefix-index.js';
import { USED_STALE_METRICS } from './state-keys.js';
import type {
  Filter,
  Picker,
  Policy,
  PolicyOptions,
  Producer,
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
  /**
   * Narrows the filtered candidates to those worth pricing, after the filters and before the
   * producers (default: every candidate); returns them in their order.
   */
  prune?: (req: RouteRequest, candidates: readonly WorkerState[], ctx: RoutingContext) => readonly WorkerState[];
  /** Run after the filters, before the scorers (default none). */
  producers?: Producer[];
  scorers: WeightedScorer[];
  picker: Picker;
  /**
   * Expected prefix-hit fraction reported with the decision (for the x-kvgate-prefix-hit header
   * and reservations) when the picker states none; by default the 'prefix' scorer's output, else 0.
   */
  expectedPrefixHit?: (req: RouteRequest, picked: ScoredWorker) => number;
  /** See Policy. */
  scrapeIntervalMs?: number;
  prefixIndex?: PrefixIndex;
  usesOracle?: boolean;
  usesKvEvents?: boolean;
  readsPromptTokens?: boolean;
  /** See Policy.prepare. */
  prepare?: Policy['prepare'];
  /** Hooks for stateful plugins (indexes learned from decisions, reservations). */
  onDispatch?: Policy['onDispatch'];
  onFirstToken?: Policy['onFirstToken'];
  onComplete?: Policy['onComplete'];
  describeWorker?: Policy['describeWorker'];
  /** See Policy.retune (absent: options cannot change in place). */
  retune?: (options: PolicyOptions) => boolean;
}

export const clamp01 = (x: number): number => (x > 1 ? 1 : x > 0 ? x : 0);

/** Every scorer's clamped ratings of one decision's candidates, by scorer (aligned with names). */
interface Ratings {
  names: readonly string[];
  values: number[][];
}

/**
 * A candidate as the picker sees it. Its `parts` are read from the decision's ratings when asked
 * for (few pickers do): an object filled per candidate with one property per scorer name cost
 * several microseconds a decision, each store by a name known only at run time adding a property.
 */
class ScoredCandidate implements ScoredWorker {
  score = 0;
  constructor(
    readonly worker: WorkerState,
    private readonly index: number,
    private readonly ratings: Ratings,
  ) {}

  get parts(): Record<string, number> {
    const out: Record<string, number> = {};
    const { names, values } = this.ratings;
    for (let k = 0; k < names.length; k++) out[names[k]!] = values[k]![this.index]!;
    return out;
  }
}

const NO_PRODUCERS: readonly Producer[] = [];

export class PipelinePolicy implements Policy {
  readonly name: string;
  readonly scrapeIntervalMs?: number;
  readonly prefixIndex?: PrefixIndex;
  readonly usesOracle?: boolean;
  readonly usesKvEvents?: boolean;
  readonly readsPromptTokens?: boolean;
  readonly prepare?: Policy['prepare'];
  readonly onDispatch?: Policy['onDispatch'];
  readonly onFirstToken?: Policy['onFirstToken'];
  readonly onComplete?: Policy['onComplete'];
  readonly describeWorker?: Policy['describeWorker'];
  private readonly producers: readonly Producer[];
  private readonly scorerNames: readonly string[];

  constructor(private readonly cfg: PipelineConfig) {
    this.name = cfg.name;
    this.producers = cfg.producers ?? NO_PRODUCERS;
    this.scorerNames = cfg.scorers.map((s) => s.scorer.name);
    if (cfg.scrapeIntervalMs !== undefined) this.scrapeIntervalMs = cfg.scrapeIntervalMs;
    if (cfg.prefixIndex !== undefined) this.prefixIndex = cfg.prefixIndex;
    if (cfg.usesOracle !== undefined) this.usesOracle = cfg.usesOracle;
    if (cfg.usesKvEvents !== undefined) this.usesKvEvents = cfg.usesKvEvents;
    if (cfg.readsPromptTokens !== undefined) this.readsPromptTokens = cfg.readsPromptTokens;
    this.prepare = cfg.prepare;
    this.onDispatch = cfg.onDispatch;
    this.onFirstToken = cfg.onFirstToken;
    this.onComplete = cfg.onComplete;
    this.describeWorker = cfg.describeWorker;
  }

  retune(options: PolicyOptions): boolean {
    return this.cfg.retune?.(options) ?? false;
  }

  route(req: RouteRequest, workers: readonly WorkerState[], ctx: RoutingContext): RouteOutcome {
    let candidates: readonly WorkerState[] = workers;
    for (const f of this.cfg.filters) {
      const before = candidates;
      candidates = f.filter(req, candidates, ctx);
      if (candidates.length === 0) return this.noWorker(req, before, f, ctx);
    }
    if (this.cfg.prune) candidates = this.cfg.prune(req, candidates, ctx);
    const producers = this.producers;
    for (let i = 0; i < producers.length; i++) producers[i]!.produce(req, candidates, ctx);
    const scorers = this.cfg.scorers;
    const ratings: Ratings = { names: this.scorerNames, values: new Array<number[]>(scorers.length) };
    const scored: ScoredCandidate[] = new Array<ScoredCandidate>(candidates.length);
    for (let i = 0; i < candidates.length; i++) scored[i] = new ScoredCandidate(candidates[i]!, i, ratings);
    for (let k = 0; k < scorers.length; k++) {
      const { scorer, weight } = scorers[k]!;
      const s = scorer.score(req, candidates, ctx);
      const v = new Array<number>(scored.length);
      for (let i = 0; i < scored.length; i++) {
        const x = clamp01(s[i] ?? 0);
        v[i] = x;
        scored[i]!.score += weight * x;
      }
      ratings.values[k] = v;
    }
    const pick = this.cfg.picker.pick(req, scored, ctx);
    if (!pick) {
      return { ok: false, status: 503, code: 'no_worker_available', message: 'no worker could be picked' };
    }
    const picked = pick.worker;
    const hit =
      pick.expectedPrefixHit ??
      (this.cfg.expectedPrefixHit ? this.cfg.expectedPrefixHit(req, picked) : (picked.parts['prefix'] ?? 0));
    const decision: RouteDecision = {
      worker: picked.worker,
      policy: this.name,
      expectedPrefixHit: clamp01(hit),
      reason: pick.reason,
    };
    if (req.state.get(USED_STALE_METRICS) === true) decision.usedStaleMetrics = true;
    return { ok: true, decision };
  }

  /** Explain why a filter emptied the candidate set: a request too large for every worker is a 400. */
  private noWorker(
    req: RouteRequest,
    before: readonly WorkerState[],
    f: Filter,
    ctx: RoutingContext,
  ): RouteOutcome {
    const never = f.neverFits?.(req, before, ctx);
    if (never) return { ok: false, status: 400, code: 'context_length_exceeded', message: never };
    return {
      ok: false,
      status: 503,
      code: 'no_worker_available',
      message: `no worker for model '${req.model}' can take the request now: ${unavailableCause(before, f.name)}`,
    };
  }
}

/** The real reason a filter removed every worker, in words a client or operator can act on. */
function unavailableCause(workers: readonly WorkerState[], filter: string): string {
  if (filter !== 'healthy') return filter === 'kv-fit' ? 'every worker is full (no KV-cache room)' : `every worker was filtered out (${filter})`;
  let down = 0;
  let open = 0;
  let draining = 0;
  for (const w of workers) {
    if (!w.healthy) down++;
    else if (w.circuitOpen) open++;
    else if (w.draining) draining++;
  }
  const parts: string[] = [];
  if (down > 0) parts.push(`${down} failing health checks`);
  if (open > 0) parts.push(`${open} with an open circuit breaker`);
  if (draining > 0) parts.push(`${draining} draining`);
  const n = workers.length;
  return `no healthy worker (${n} worker${n === 1 ? '' : 's'}: ${parts.join(', ') || 'unavailable'})`;
}
