/**
 * The response cache's Prometheus series (registered into the gateway's registry):
 *
 *   kvgate_cache_requests_total{result}  hit | coalesced (served by a concurrent identical
 *       request's answer) | miss | refresh (Cache-Control: no-cache) | bypass (not cacheable:
 *       sampled, no-store, disabled for the tenant) | error (the store failed or is skipped
 *       after failures: served as if there were no cache)
 *   kvgate_cache_hit_ratio  (hit + coalesced) / (hit + coalesced + miss + error), since start
 *   kvgate_cache_stores_total{outcome}  stored | too_large | incomplete (the answer did not end
 *       normally) | stale (the cache was cleared while it was produced) | error
 *   kvgate_cache_store_errors_total{op}  failed or timed-out store operations: get | set | clear
 *   kvgate_cache_store_seconds{op}  store operation latency, get | set
 *   kvgate_cache_entries, kvgate_cache_bytes  what the store holds (Redis: sampled)
 *   kvgate_cache_store_up  1 while the store is used, 0 while skipped after failures
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { StoreStats } from './store.js';

export type CacheResult = 'hit' | 'coalesced' | 'miss' | 'refresh' | 'bypass' | 'error';
export type StoreOutcome = 'stored' | 'too_large' | 'incomplete' | 'stale' | 'error';
export type StoreOp = 'get' | 'set' | 'clear';

const RESULTS: CacheResult[] = ['hit', 'coalesced', 'miss', 'refresh', 'bypass', 'error'];

export class CacheMetrics {
  private readonly requests: Counter<'result'>;
  private readonly stores: Counter<'outcome'>;
  private readonly errors: Counter<'op'>;
  private readonly latency: Histogram<'op'>;
  /** Counts by result since start (for the ratio and /admin/cache). */
  readonly counts: Record<CacheResult, number> = { hit: 0, coalesced: 0, miss: 0, refresh: 0, bypass: 0, error: 0 };
  private readonly children: Record<CacheResult, { inc(): void }>;
  private readonly getLatency: { observe(v: number): void };
  private readonly setLatency: { observe(v: number): void };

  constructor(registry: Registry, store: string, stats: () => StoreStats, up: () => boolean) {
    const registers = [registry];
    this.requests = new Counter({
      name: 'kvgate_cache_requests_total',
      help: 'Inference requests by response-cache result: hit, coalesced, miss, refresh, bypass, error',
      labelNames: ['result'],
      registers,
    });
    this.children = Object.fromEntries(RESULTS.map((r) => [r, this.requests.labels(r)])) as Record<CacheResult, { inc(): void }>;
    const counts = this.counts;
    new Gauge({
      name: 'kvgate_cache_hit_ratio',
      help: 'Share of cacheable requests answered without a worker: (hit + coalesced) / (hit + coalesced + miss + error), since start',
      registers,
      collect() {
        const served = counts.hit + counts.coalesced;
        const all = served + counts.miss + counts.error;
        this.set(all === 0 ? 0 : served / all);
      },
    });
    this.stores = new Counter({
      name: 'kvgate_cache_stores_total',
      help: 'Answers offered to the cache, by outcome: stored, too_large, incomplete, stale, error',
      labelNames: ['outcome'],
      registers,
    });
    this.errors = new Counter({
      name: 'kvgate_cache_store_errors_total',
      help: 'Failed or timed-out cache store operations, by operation (get, set, clear)',
      labelNames: ['op'],
      registers,
    });
    this.latency = new Histogram({
      name: 'kvgate_cache_store_seconds',
      help: 'Cache store operation latency, by operation (get, set)',
      labelNames: ['op', 'store'],
      buckets: [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25],
      registers,
    });
    this.getLatency = this.latency.labels('get', store);
    this.setLatency = this.latency.labels('set', store);
    const gauge = (name: string, help: string, pick: (s: StoreStats) => number | null) =>
      new Gauge({
        name,
        help,
        labelNames: ['store'],
        registers,
        collect() {
          const v = pick(stats());
          this.reset();
          if (v !== null) this.set({ store }, v);
        },
      });
    gauge('kvgate_cache_entries', 'Entries in the response cache store (Redis: sampled periodically)', (s) => s.entries);
    gauge('kvgate_cache_bytes', 'Bytes held by the response cache store (Redis: sampled periodically)', (s) => s.bytes);
    new Gauge({
      name: 'kvgate_cache_store_up',
      help: '1 while the cache store is used, 0 while it is skipped after failures',
      labelNames: ['store'],
      registers,
      collect() {
        this.set({ store }, up() ? 1 : 0);
      },
    });
  }

  result(r: CacheResult): void {
    this.counts[r]++;
    this.children[r].inc();
  }

  stored(o: StoreOutcome): void {
    this.stores.labels(o).inc();
  }

  storeError(op: StoreOp): void {
    this.errors.labels(op).inc();
  }

  observe(op: 'get' | 'set', seconds: number): void {
    (op === 'get' ? this.getLatency : this.setLatency).observe(seconds);
  }
}
