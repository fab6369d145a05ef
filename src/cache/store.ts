/**
 * The contract between the response cache and where it keeps entries: the in-memory store
 * (memory-store.ts, the default) and Redis (redis-store.ts). Both take an entry with its JSON
 * text (computed once by the caller), a TTL and the tenant it belongs to, and give back entries;
 * both can drop every entry or one tenant's.
 *
 * A store may fail (Redis down, slow, full): its promises reject, and the caller (ResponseCache)
 * counts the failure and serves the request as if there were no cache. StoreBreaker keeps a
 * failing store from costing every request its timeout.
 */
import type { CacheEntry } from './entry.js';

export type StoreKind = 'memory' | 'redis';

export interface StoreStats {
  /** Entries held, or null when the store cannot tell (yet). */
  entries: number | null;
  /** Bytes of entries held (keys and values), or null. */
  bytes: number | null;
}

export interface CacheStore {
  readonly kind: StoreKind;
  get(key: string): Promise<CacheEntry | null>;
  /**
   * @param json the entry as JSON (its size is what caps apply to)
   * @param tenantMaxBytes the tenant's share of the store, where the store supports one
   */
  set(key: string, tenant: string, entry: CacheEntry, json: string, ttlMs: number, tenantMaxBytes?: number): Promise<void>;
  /** Drop every entry, or one tenant's; resolves with the number dropped. */
  clear(tenant?: string): Promise<number>;
  stats(): StoreStats;
  /** Connect (Redis); resolves even if the store is not reachable yet. */
  start?(): Promise<void>;
  close(): Promise<void>;
}

/**
 * Skips a failing store for a while: `failuresToOpen` consecutive failures open it for
 * `coolDownMs`; then one operation is let through as a probe, whose success closes it again.
 */
export class StoreBreaker {
  private failures = 0;
  private openUntil = -Infinity;
  private probing = false;

  constructor(
    private readonly failuresToOpen: number,
    private readonly coolDownMs: number,
    private readonly now: () => number,
  ) {}

  /** May an operation go to the store now? */
  allow(): boolean {
    if (this.failures < this.failuresToOpen) return true;
    if (this.now() < this.openUntil || this.probing) return false;
    this.probing = true;
    return true;
  }

  get open(): boolean {
    return this.failures >= this.failuresToOpen;
  }

  success(): void {
    this.failures = 0;
    this.probing = false;
  }

  failure(): void {
    this.failures++;
    this.probing = false;
    if (this.failures >= this.failuresToOpen) this.openUntil = this.now() + this.coolDownMs;
  }
}
