/**
 * The gateway's response cache in the fleet simulation (FleetSimOptions.cache): in the arrival
 * path, after admission and before routing, the gateway's own ResponseCache decides, with its
 * in-memory store in virtual time. Every request is taken as a temperature-0 completion of its
 * prompt tokens, keyed by tenant, model, prompt and max_tokens like a live request. A hit is
 * answered at arrival + overheadMs without touching a worker; a request identical to one in flight
 * follows it (single-flight: its first token and finish are the leader's, or its own arrival if
 * later) and is refused with the leader's status if the leader is refused; a miss is routed, and
 * its answer is stored when it finishes.
 */
import type { Tenant } from '../admission/tenants.js';
import type { CacheEntry } from '../cache/entry.js';
import type { ResponseCache } from '../cache/response-cache.js';
import type { FinishedOutput } from '../engine/types.js';
import { answerTokens, synthText } from '../workload/tokens.js';
import type { BenchRequest } from '../workload/types.js';
import type { SimFlight, SimRequest } from './sim-request.js';

export interface SimCacheCounts {
  hits: number;
  coalesced: number;
  misses: number;
  stored: number;
  /** Entries the store evicted to stay within its bytes. */
  evictions: number;
}

/** What the fleet simulation lends the cache. */
export interface CacheHost {
  model: string;
  /** Gateway + network delay, ms: a hit is answered this long after its arrival. */
  overheadMs: number;
  /** The max_tokens the request sends. */
  declaredMax(req: BenchRequest): number;
  /** Record `rec` as completed without a worker: 1 a cache hit, 2 a follower of a flight. */
  completeFromCache(rec: SimRequest, first: number, finish: number, outputTokens: number, fromCache: 1 | 2): void;
  /** `rec` is over at `now`: its session's next turn may follow. */
  followUp(rec: SimRequest, now: number): void;
}

/** Every simulated request asks for the cache's default behaviour (no Cache-Control). */
const NO_CACHE_CONTROL = { noStore: false, noCache: false, maxAgeS: null };

export class SimResponseCache {
  readonly counts: SimCacheCounts = { hits: 0, coalesced: 0, misses: 0, stored: 0, evictions: 0 };
  private readonly tenants = new Map<string, Tenant>();
  /** Flights by cache key. */
  private readonly flights = new Map<string, SimFlight>();

  constructor(
    private readonly cache: ResponseCache,
    private readonly host: CacheHost,
  ) {}

  /** Answer from the cache or join a flight (true: handled); otherwise `rec` leads its key. */
  lookup(rec: SimRequest, now: number): boolean {
    const { req } = rec;
    const host = this.host;
    const plan = this.cache.plan(this.tenantOf(req.tenant), 'completions', { model: host.model, prompt: Array.from(req.promptTokens), max_tokens: host.declaredMax(req), temperature: 0 }, NO_CACHE_CONTROL);
    if (plan.action === 'bypass') return false;
    const r = this.cache.lookupNow(plan.key);
    if (r.kind === 'hit' && this.cache.usable(r.entry, plan, true)) {
      this.counts.hits++;
      const usage = r.entry.body.usage as { completion_tokens?: number } | null | undefined;
      host.completeFromCache(rec, now + host.overheadMs, now + host.overheadMs, usage?.completion_tokens ?? req.maxTokens, 1);
      host.followUp(rec, now + host.overheadMs);
      return true;
    }
    const f = this.flights.get(plan.key);
    if (f) {
      this.counts.coalesced++;
      f.followers.push(rec);
      return true;
    }
    this.counts.misses++;
    const nf: SimFlight = { plan, followers: [] };
    this.flights.set(plan.key, nf);
    rec.flight = nf;
    return false;
  }

  /** The flight `rec` leads, ended (its followers are the caller's to settle), if it leads one. */
  take(rec: SimRequest): SimFlight | undefined {
    const f = rec.flight;
    if (f) {
      rec.flight = undefined;
      this.flights.delete(f.plan.key);
    }
    return f;
  }

  /**
   * A worker finished `rec` at `now` (`first`: its first token): store its answer, and complete
   * the requests that followed it.
   */
  finished(rec: SimRequest, f: FinishedOutput, first: number, now: number): void {
    const fl = this.take(rec);
    if (!fl) return;
    if (f.reason !== 'abort' && this.cache.fillNow(fl.plan, this.answerEntry(fl, rec, f.outputTokens)) === 'stored') this.counts.stored++;
    for (const x of fl.followers) {
      this.host.completeFromCache(x, Math.max(x.arrivedAt, first), now, f.outputTokens, 2);
      this.host.followUp(x, now);
    }
  }

  /** Entries the store has evicted so far. */
  evictions(): number {
    const store = this.cache.store as { lru?: { evictions: number } };
    return store.lru?.evictions ?? 0;
  }

  private tenantOf(id: string | undefined): Tenant {
    const k = id ?? 'default';
    let t = this.tenants.get(k);
    if (!t) this.tenants.set(k, (t = { id: k, cache: {}, priority: 'standard', limits: {}, caps: {}, models: null }));
    return t;
  }

  /** The answer a worker generated, as the gateway would store it. */
  private answerEntry(f: SimFlight, rec: SimRequest, outputTokens: number): CacheEntry {
    const { req } = rec;
    return this.cache.entry(f.plan, {
      id: `cmpl-${rec.idx}`,
      object: 'text_completion',
      created: 0,
      model: this.host.model,
      choices: [{ index: 0, text: synthText(answerTokens(req.outputSeed, outputTokens)), logprobs: null, finish_reason: 'length' }],
      usage: { prompt_tokens: req.promptTokens.length, completion_tokens: outputTokens, total_tokens: req.promptTokens.length + outputTokens },
    });
  }
}
