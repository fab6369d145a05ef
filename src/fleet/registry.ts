/**
 * The fleet as configured: one WorkerState per worker, indexed by id and by model, with each
 * worker's circuit breaker. Everything that watches or routes to workers reads this.
 */
import { CircuitBreaker, type CircuitBreakerOptions } from './circuit-breaker.js';
import { WorkerState, type WorkerIdentity } from './worker-state.js';

/** Extra fields for /admin/workers (policies add their per-worker view, e.g. prefix-index size). */
export type WorkerDescriber = (w: WorkerState) => Record<string, unknown>;

export interface WorkerRegistryOptions {
  breaker: CircuitBreakerOptions;
  /** For `stale` in descriptions. */
  staleAfterMs: number;
  now: () => number;
}

export class WorkerRegistry {
  readonly workers: WorkerState[];
  private readonly byId = new Map<string, WorkerState>();
  private readonly byModel = new Map<string, WorkerState[]>();
  readonly breakers = new Map<string, CircuitBreaker>();
  private readonly describers: WorkerDescriber[] = [];

  constructor(
    identities: readonly WorkerIdentity[],
    private readonly opts: WorkerRegistryOptions,
  ) {
    this.workers = identities.map((i) => new WorkerState(i));
    for (const w of this.workers) {
      this.byId.set(w.id, w);
      let list = this.byModel.get(w.model);
      if (!list) this.byModel.set(w.model, (list = []));
      list.push(w);
      this.breakers.set(w.id, new CircuitBreaker(w, opts.breaker));
    }
  }

  get(id: string): WorkerState | undefined {
    return this.byId.get(id);
  }

  /** Workers serving `model`, or undefined if no pool serves it. */
  forModel(model: string): readonly WorkerState[] | undefined {
    return this.byModel.get(model);
  }

  models(): string[] {
    return [...this.byModel.keys()];
  }

  breaker(id: string): CircuitBreaker {
    return this.breakers.get(id)!;
  }

  /** True when some model has at least one worker that is healthy and not circuit-open. */
  anyRoutable(): boolean {
    for (const w of this.workers) if (w.healthy && !w.circuitOpen) return true;
    return false;
  }

  addDescriber(d: WorkerDescriber): void {
    this.describers.push(d);
  }

  describe(w: WorkerState): Record<string, unknown> {
    const now = this.opts.now();
    const s = w.snapshot;
    const out: Record<string, unknown> = {
      id: w.id,
      url: w.url,
      pool: w.pool,
      model: w.model,
      healthy: w.healthy,
      circuitOpen: w.circuitOpen,
      suspected: w.suspected,
      circuitState: this.breakers.get(w.id)?.state ?? 'closed',
      stale: w.isStale(now, this.opts.staleAfterMs),
      lastScrapeError: w.lastScrapeError,
      snapshotAgeMs: s ? Math.round(now - s.at) : null,
      kvUsage: s?.kvUsage ?? null,
      running: s?.running ?? null,
      waiting: s?.waiting ?? null,
      numGpuBlocks: w.numGpuBlocks,
      blockSize: w.blockSize,
      prefixQueries: s?.prefixQueries ?? null,
      prefixHits: s?.prefixHits ?? null,
      preemptions: s?.preemptions ?? null,
      inflight: w.inflightCount,
      routed: w.routed,
    };
    for (const d of this.describers) Object.assign(out, d(w));
    return out;
  }

  describeAll(): Record<string, unknown>[] {
    return this.workers.map((w) => this.describe(w));
  }

  close(): void {
    for (const b of this.breakers.values()) b.close();
  }
}
