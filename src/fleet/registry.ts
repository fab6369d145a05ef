/**
 * The fleet as configured: one WorkerState per worker, indexed by id and by model, with each
 * worker's circuit breaker. Everything that watches or routes to workers reads this.
 *
 * A config reload adds and retires workers (add(), retire()). `workers` is changed in place (the
 * watchers iterate it), the per-model lists are replaced (a request keeps the list it was given,
 * and a retired worker in it is marked unhealthy, so no retry goes there). A retired worker's
 * breaker stays reachable through breaker() until its requests are done (dropRetired()).
 */
import { adapterNameProblem } from './adapter-name.js';
import { CircuitBreaker, type CircuitBreakerOptions } from './circuit-breaker.js';
import { describeSpeedClass } from './speed-classes.js';
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
  /** Per model name — base models and LoRA adapters — the workers serving it. */
  private readonly byModel = new Map<string, WorkerState[]>();
  /** LoRA adapter → the base model it is served on. */
  private readonly adapterBase = new Map<string, string>();
  /** Workers that load adapters on demand (WorkerState.resolveAdapters), in configuration order. */
  private readonly resolvers: WorkerState[] = [];
  readonly breakers = new Map<string, CircuitBreaker>();
  /** Breakers of retired workers whose requests are still running. */
  private readonly retiredBreakers = new Map<WorkerState, CircuitBreaker>();
  private readonly describers: WorkerDescriber[] = [];

  constructor(
    identities: readonly WorkerIdentity[],
    private readonly opts: WorkerRegistryOptions,
  ) {
    this.workers = [];
    for (const i of identities) this.add(i);
  }

  /** A new worker, routable at once (a config reload adds workers this way). */
  add(identity: WorkerIdentity): WorkerState {
    if (this.byId.has(identity.id)) throw new Error(`worker '${identity.id}' is already registered`);
    const w = new WorkerState(identity);
    (this.workers as WorkerState[]).push(w);
    this.byId.set(w.id, w);
    for (const name of [w.model, ...w.adapters]) this.byModel.set(name, [...(this.byModel.get(name) ?? []), w]);
    for (const a of w.adapters) this.adapterBase.set(a, w.model);
    if (w.resolveAdapters !== null) this.resolvers.push(w);
    this.breakers.set(w.id, new CircuitBreaker(w, this.opts.breaker));
    return w;
  }

  /**
   * Take a worker out of the fleet: no new request is routed to it; requests it is serving
   * finish (its breaker stays reachable by id until dropRetired()). Returns it, or undefined.
   */
  retire(id: string): WorkerState | undefined {
    const w = this.byId.get(id);
    if (!w) return undefined;
    w.retired = true;
    w.healthy = false;
    const list = this.workers as WorkerState[];
    list.splice(list.indexOf(w), 1);
    this.byId.delete(id);
    for (const name of [w.model, ...w.adapters]) this.unindex(name, w);
    const r = this.resolvers.indexOf(w);
    if (r >= 0) this.resolvers.splice(r, 1);
    const b = this.breakers.get(id)!;
    this.breakers.delete(id);
    this.retiredBreakers.set(w, b);
    return w;
  }

  /** A retired worker's requests are all done: release its breaker. */
  dropRetired(w: WorkerState): void {
    this.retiredBreakers.get(w)?.close();
    this.retiredBreakers.delete(w);
  }

  /**
   * New breaker thresholds for every worker (config reload): read by each breaker at its next
   * decision. The failure-rate window's length is fixed per breaker.
   */
  retuneBreakers(o: Pick<CircuitBreakerOptions, 'failuresToOpen' | 'coolDownMs' | 'overloadBackoffMs' | 'maxBackoffMs'> & { failureRate: { threshold: number; minRequests: number } }): void {
    const b = this.opts.breaker;
    b.failuresToOpen = o.failuresToOpen;
    b.coolDownMs = o.coolDownMs;
    b.overloadBackoffMs = o.overloadBackoffMs;
    b.maxBackoffMs = o.maxBackoffMs;
    if (b.failureRate) b.failureRate = { ...b.failureRate, threshold: o.failureRate.threshold, minRequests: o.failureRate.minRequests };
  }

  get(id: string): WorkerState | undefined {
    return this.byId.get(id);
  }

  /**
   * Why `name` cannot be served as a LoRA adapter of `base`, or null if it can: it is a served base
   * model's own name, or an adapter of another base model (an adapter belongs to one, as
   * config/schema/checks.ts checks for configured ones).
   */
  adapterConflict(name: string, base: string): string | null {
    const other = this.adapterBase.get(name);
    if (other === undefined && this.byModel.has(name)) return `'${name}' is a served model's own name`;
    if (other !== undefined && other !== base) return `adapter '${name}' is served on model '${other}': an adapter belongs to one base model`;
    return null;
  }

  /**
   * The adapters served on `w` beyond its configured ones become `names` (those listed by its
   * /v1/models, or loaded and unloaded through /admin/adapters); the model index follows. A name
   * that conflicts (adapterConflict) or is not in the safe form (adapter-name.ts) is left out and
   * returned in `refused`.
   */
  setLoadedAdapters(w: WorkerState, names: Iterable<string>): { added: string[]; removed: string[]; refused: Array<{ name: string; reason: string }> } {
    const refused: Array<{ name: string; reason: string }> = [];
    const keep = new Set<string>();
    for (const name of names) {
      if (name === w.model || keep.has(name)) continue;
      // A worker may list any name vLLM took; only the safe form becomes a model name here.
      const reason = adapterNameProblem(name) ?? this.adapterConflict(name, w.model);
      if (reason === null) keep.add(name);
      else refused.push({ name, reason });
    }
    const before = new Set(w.adapters);
    w.replaceLoadedAdapters(keep);
    const after = new Set(w.adapters);
    const added = [...after].filter((a) => !before.has(a));
    const removed = [...before].filter((a) => !after.has(a));
    if (w.retired) return { added, removed, refused };
    for (const a of added) {
      this.byModel.set(a, [...(this.byModel.get(a) ?? []), w]);
      this.adapterBase.set(a, w.model);
    }
    for (const a of removed) this.unindex(a, w);
    return { added, removed, refused };
  }

  /** `w` no longer serves model `name`: drop it from the index (and the name, served nowhere now). */
  private unindex(name: string, w: WorkerState): void {
    const rest = (this.byModel.get(name) ?? []).filter((x) => x !== w);
    if (rest.length > 0) this.byModel.set(name, rest);
    else {
      this.byModel.delete(name);
      this.adapterBase.delete(name);
    }
  }

  /**
   * Workers serving `model`, or undefined if no pool serves it: those serving it now, and for a
   * name that is not a base model's, the workers that would load it on demand
   * (WorkerState.resolveAdapters) — of the first such workers' base model.
   */
  forModel(model: string): readonly WorkerState[] | undefined {
    const known = this.byModel.get(model);
    if (this.resolvers.length === 0 || (known !== undefined && !this.adapterBase.has(model))) return known;
    const base = this.adapterBase.get(model) ?? this.resolvers.find((w) => w.resolveAdapters!.test(model))?.model;
    if (base === undefined) return known;
    const extra = this.resolvers.filter((w) => w.model === base && w.resolveAdapters!.test(model) && (known === undefined || !known.includes(w)));
    if (extra.length === 0) return known;
    return known === undefined ? extra : [...known, ...extra];
  }

  /** Workers known to serve `model` now (listed in /v1/models), not counting those that would load it. */
  serving(model: string): readonly WorkerState[] | undefined {
    return this.byModel.get(model);
  }

  /** Every model name served: base models and LoRA adapters. */
  models(): string[] {
    return [...this.byModel.keys()];
  }

  /**
   * The base model `name` is a LoRA adapter of (served, or one some worker would load on demand),
   * or undefined (a base model, or not served).
   */
  adapterOf(name: string): string | undefined {
    const base = this.adapterBase.get(name);
    if (base !== undefined || this.resolvers.length === 0 || this.byModel.has(name)) return base;
    return this.resolvers.find((w) => w.resolveAdapters!.test(name))?.model;
  }

  /** The worker's breaker (a retired worker's while its requests run, found by id if not replaced). */
  breaker(id: string): CircuitBreaker {
    const b = this.breakers.get(id);
    if (b) return b;
    let retired: CircuitBreaker | undefined;
    for (const [w, rb] of this.retiredBreakers) if (w.id === id) retired = rb;
    return retired!;
  }

  /** True when some model has at least one routable worker (healthy, circuit closed, not draining). */
  anyRoutable(): boolean {
    for (const w of this.workers) if (w.routable) return true;
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
      hardware: w.hardware,
      speedClass: describeSpeedClass(w.speedClass),
      healthy: w.healthy,
      circuitOpen: w.circuitOpen,
      draining: w.draining,
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
      maxModelLen: w.maxModelLen ?? null,
      prefixQueries: s?.prefixQueries ?? null,
      prefixHits: s?.prefixHits ?? null,
      preemptions: s?.preemptions ?? null,
      inflight: w.inflightCount,
      // KV blocks this gateway has reserved for its requests in flight there (prompt and output).
      reservedBlocks: w.inflightBlocks,
      routed: w.routed,
    };
    if (w.adapters.length > 0) {
      // The adapters it serves (configured, then loaded: listed by its /v1/models or loaded
      // through /admin/adapters); from its last scrape, --max-loras and those running and
      // waiting; this gateway's requests in flight per adapter.
      out.adapters = w.adapters;
      out.loadedAdapters = w.adapters.filter((a) => !w.configuredAdapters.includes(a));
      out.unlistedAdapters = w.unlistedAdapters;
      out.lora = s?.lora ?? null;
      out.inflightAdapters = Object.fromEntries(w.inflightAdapters);
    }
    for (const d of this.describers) Object.assign(out, d(w));
    return out;
  }

  describeAll(): Record<string, unknown>[] {
    return this.workers.map((w) => this.describe(w));
  }

  close(): void {
    for (const b of this.breakers.values()) b.close();
    for (const b of this.retiredBreakers.values()) b.close();
  }
}
