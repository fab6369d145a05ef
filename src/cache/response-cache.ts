/**
 * The response cache's decisions and bookkeeping, independent of HTTP: which requests are cached
 * and under which key, looking entries up and storing them through a CacheStore (timing, failure
 * counting, skipping a failing store), invalidation, and the single-flight table. The gateway's
 * cache stage (src/gateway/pipeline/cache-stage.ts) drives it per request; `kvgate bench --cache on` uses
 * the same plan and key derivation with a MemoryStore in virtual time.
 *
 * Policy:
 * - Only deterministic requests are cached unless the tenant opts in (`sampled`): temperature 0,
 *   or a fixed integer seed. A sampled request's answer is one draw among many; replaying it would
 *   change what the client asked for.
 * - `Cache-Control: no-store` bypasses the cache entirely; `no-cache` (or `max-age=0`) skips the
 *   lookup and stores the fresh answer; `max-age=N` accepts only entries at most N seconds old.
 * - Keys are namespaced per tenant and the tenant is hashed into them (key.ts); an entry also
 *   records its tenant and route, and a read entry whose tenant or route differs from the
 *   request's is ignored (never served).
 * - Clearing bumps a generation counter (all, or the tenant's): an answer that was being produced
 *   while its tenant's entries were cleared is not stored afterwards.
 */
import type { Tenant } from '../admission/tenants.js';
import { hasUsage, type CacheEntry } from './entry.js';
import { Flight } from './flight.js';
import { keyHash, samplingOf, storeKey, type CacheRoute, type RequestCacheControl } from './key.js';
import type { CacheMetrics, StoreOutcome } from './metrics.js';
import { MemoryStore, entrySize } from './memory-store.js';
import { StoreBreaker, type CacheStore } from './store.js';

/** A tenant's effective cache settings. */
export interface CacheSettings {
  enabled: boolean;
  ttlMs: number;
  maxEntryBytes: number;
  /** In-memory store: the tenant's byte budget (undefined: only the store's bound). */
  maxBytes: number | undefined;
  sampled: boolean;
}

export interface ResponseCacheOptions {
  /** Defaults for every tenant (`cache.*` in the config). */
  defaults: Omit<CacheSettings, 'maxBytes'>;
  singleFlight: boolean;
  keyPrefix: string;
  store: CacheStore;
  metrics: CacheMetrics | null;
  /** Monotonic clock, ms (timings, the breaker). */
  now: () => number;
  /** Wall clock, ms since the epoch (entries' storedAt). */
  wallNow?: () => number;
  breaker?: { failuresToOpen: number; coolDownMs: number };
}

export type BypassReason = 'disabled' | 'sampled' | 'no_store';

export type CachePlan =
  | { action: 'bypass'; reason: BypassReason }
  | {
      /** lookup: serve a fresh enough entry; refresh: skip the lookup (no-cache); both store the answer. */
      action: 'lookup' | 'refresh';
      key: string;
      tenant: string;
      route: CacheRoute;
      settings: CacheSettings;
      maxAgeS: number | null;
      /** Generation when planned: a clear in between keeps the answer out of the store. */
      generation: number;
    };

const flightSlot = (key: string, usage: boolean): string => (usage ? `${key}|u` : key);

export type LookupResult = { kind: 'hit'; entry: CacheEntry } | { kind: 'miss' } | { kind: 'error' };

export class ResponseCache {
  readonly store: CacheStore;
  readonly flights = new Map<string, Flight>();
  readonly singleFlight: boolean;
  private readonly breaker: StoreBreaker;
  private readonly settingsCache = new WeakMap<object, CacheSettings>();
  private generationAll = 0;
  private readonly generationOf = new Map<string, number>();

  constructor(private readonly o: ResponseCacheOptions) {
    this.store = o.store;
    this.singleFlight = o.singleFlight;
    this.breaker = new StoreBreaker(o.breaker?.failuresToOpen ?? 3, o.breaker?.coolDownMs ?? 1000, o.now);
  }

  get metrics(): CacheMetrics | null {
    return this.o.metrics;
  }

  /** False while a failing store is being skipped. */
  get storeUp(): boolean {
    return !this.breaker.open;
  }

  settingsFor(tenant: Pick<Tenant, 'cache'>): CacheSettings {
    let s = this.settingsCache.get(tenant);
    if (!s) {
      const d = this.o.defaults;
      const t = tenant.cache;
      s = {
        enabled: t.enabled ?? d.enabled,
        ttlMs: t.ttlMs ?? d.ttlMs,
        maxEntryBytes: t.maxEntryBytes ?? d.maxEntryBytes,
        maxBytes: t.maxBytes,
        sampled: t.sampled ?? d.sampled,
      };
      this.settingsCache.set(tenant, s);
    }
    return s;
  }

  /** What to do with a request: bypass, or look up / refresh under which key. */
  plan(tenant: Tenant, route: CacheRoute, body: Readonly<Record<string, unknown>>, cc: RequestCacheControl): CachePlan {
    const settings = this.settingsFor(tenant);
    if (!settings.enabled) return { action: 'bypass', reason: 'disabled' };
    if (cc.noStore) return { action: 'bypass', reason: 'no_store' };
    // An embedding is the same for the same input whatever the request says about sampling.
    if (!settings.sampled && route !== 'embeddings' && samplingOf(body) === 'sampled') return { action: 'bypass', reason: 'sampled' };
    return {
      action: cc.noCache ? 'refresh' : 'lookup',
      key: storeKey(this.o.keyPrefix, tenant.id, keyHash(tenant.id, route, body)),
      tenant: tenant.id,
      route,
      settings,
      maxAgeS: cc.maxAgeS,
      generation: this.generation(tenant.id),
    };
  }

  /** Generation counter for a tenant's entries (bumped by clear). */
  generation(tenant: string): number {
    return this.generationAll + (this.generationOf.get(tenant) ?? 0);
  }

  /** Look an entry up; a failing or skipped store is an 'error' (counted), never a throw. */
  async lookup(key: string): Promise<LookupResult> {
    if (!this.breaker.allow()) return { kind: 'error' };
    const t0 = this.o.now();
    try {
      const entry = await this.store.get(key);
      this.breaker.success();
      this.o.metrics?.observe('get', (this.o.now() - t0) / 1000);
      return entry === null ? { kind: 'miss' } : { kind: 'hit', entry };
    } catch {
      this.breaker.failure();
      this.o.metrics?.storeError('get');
      return { kind: 'error' };
    }
  }

  /** May this entry answer this request? */
  usable(entry: CacheEntry, plan: Extract<CachePlan, { key: string }>, needsUsage: boolean): boolean {
    if (entry.tenant !== plan.tenant || entry.route !== plan.route) return false;
    if (needsUsage && !hasUsage(entry)) return false;
    if (plan.maxAgeS !== null && this.wallNow() - entry.storedAt > plan.maxAgeS * 1000) return false;
    return true;
  }

  /** A new entry for an answer (the body is kept as it is: do not mutate it afterwards). */
  entry(plan: Extract<CachePlan, { key: string }>, body: CacheEntry['body']): CacheEntry {
    return { v: 1, tenant: plan.tenant, route: plan.route, storedAt: this.wallNow(), body };
  }

  /** Store an answer; resolves with what happened (failures counted, never thrown). */
  async fill(plan: Extract<CachePlan, { key: string }>, entry: CacheEntry): Promise<StoreOutcome> {
    const outcome = await this.tryFill(plan, entry);
    this.o.metrics?.stored(outcome);
    return outcome;
  }

  /** The entry's JSON if it may be stored, else why not. */
  private admit(plan: Extract<CachePlan, { key: string }>, entry: CacheEntry): { json: string } | { outcome: StoreOutcome } {
    if (this.generation(plan.tenant) !== plan.generation) return { outcome: 'stale' };
    const json = JSON.stringify(entry);
    if (json.length > plan.settings.maxEntryBytes || Buffer.byteLength(json, 'utf8') > plan.settings.maxEntryBytes) return { outcome: 'too_large' };
    return { json };
  }

  private async tryFill(plan: Extract<CachePlan, { key: string }>, entry: CacheEntry): Promise<StoreOutcome> {
    const a = this.admit(plan, entry);
    if ('outcome' in a) return a.outcome;
    const json = a.json;
    if (!this.breaker.allow()) return 'error';
    const t0 = this.o.now();
    try {
      await this.store.set(plan.key, plan.tenant, entry, json, plan.settings.ttlMs, plan.settings.maxBytes);
      this.breaker.success();
      this.o.metrics?.observe('set', (this.o.now() - t0) / 1000);
      return 'stored';
    } catch {
      this.breaker.failure();
      this.o.metrics?.storeError('set');
      return 'error';
    }
  }

  /**
   * Synchronous lookup and fill, for an in-memory store in virtual time (the fleet simulation):
   * the same keys, checks and store as the gateway's, without promises.
   */
  lookupNow(key: string): LookupResult {
    const entry = this.memory().lru.get(key);
    return entry === null ? { kind: 'miss' } : { kind: 'hit', entry };
  }

  fillNow(plan: Extract<CachePlan, { key: string }>, entry: CacheEntry): StoreOutcome {
    const a = this.admit(plan, entry);
    const outcome = 'outcome' in a ? a.outcome : this.memory().lru.set(plan.key, plan.tenant, entry, entrySize(plan.key, a.json), plan.settings.ttlMs, plan.settings.maxBytes) ? 'stored' : 'too_large';
    this.o.metrics?.stored(outcome);
    return outcome;
  }

  private memory(): MemoryStore {
    if (!(this.store instanceof MemoryStore)) throw new Error('lookupNow and fillNow need the in-memory store');
    return this.store;
  }

  /** Drop every entry or one tenant's (and keep answers in progress from being stored). Throws if the store fails. */
  async clear(tenant?: string): Promise<number> {
    if (tenant === undefined) this.generationAll++;
    else this.generationOf.set(tenant, (this.generationOf.get(tenant) ?? 0) + 1);
    try {
      return await this.store.clear(tenant);
    } catch (e) {
      this.o.metrics?.storeError('clear');
      throw e;
    }
  }

  /**
   * The flight for a key that a request needing usage (or not) can join, if any. A key has up to
   * two flights: one whose answer will carry usage, one whose answer will not (a stream without
   * include_usage); a request that needs usage can only join the first.
   */
  joinable(key: string, needsUsage: boolean): Flight | null {
    if (!this.singleFlight) return null;
    const withUsage = this.flights.get(flightSlot(key, true));
    if (withUsage && withUsage.accepts(needsUsage)) return withUsage;
    if (needsUsage) return null;
    const without = this.flights.get(flightSlot(key, false));
    return without && without.accepts(false) ? without : null;
  }

  /** Open a flight for a leader, unless one of its kind is running for the key. */
  open(key: string, streaming: boolean, willHaveUsage: boolean): Flight | null {
    if (!this.singleFlight) return null;
    const slot = flightSlot(key, willHaveUsage);
    const cur = this.flights.get(slot);
    if (cur && !cur.done) return null;
    const f = new Flight(key, streaming, willHaveUsage);
    this.flights.set(slot, f);
    return f;
  }

  /** Settle a flight and take it out of the table. */
  land(f: Flight, entry: CacheEntry | null): void {
    const slot = flightSlot(f.key, f.willHaveUsage);
    if (this.flights.get(slot) === f) this.flights.delete(slot);
    f.settle(entry);
  }

  private wallNow(): number {
    return this.o.wallNow?.() ?? Date.now();
  }

  close(): Promise<void> {
    for (const f of [...this.flights.values()]) this.land(f, null);
    return this.store.close();
  }
}
