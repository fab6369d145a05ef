/**
 * The in-memory store: entries bounded by bytes, least recently used evicted first, each with its
 * own TTL, and optionally a byte budget per tenant (evicting that tenant's own least recently
 * used entries, so one tenant cannot push every other tenant's answers out).
 *
 * Recency is the insertion order of a Map (a hit re-inserts), kept twice: over all entries for
 * the global bound, per tenant for the tenant's budget and for dropping one tenant. Expired
 * entries are dropped when read, and `sweep` walks a bounded number of entries per call so that
 * the byte count does not carry dead entries for long (the gateway runs it on a timer; the fleet
 * simulation relies on reads and eviction alone).
 *
 * The synchronous methods serve the fleet simulation, which calls the store in virtual time; the
 * gateway uses the CacheStore interface. Sizes count the entry's JSON in UTF-8, its key, and a
 * fixed per-entry overhead.
 */
import type { CacheEntry } from './entry.js';
import type { CacheStore, StoreStats } from './store.js';
import { InsertionFront } from '../util/insertion-front.js';

/** Bookkeeping bytes charged per entry (Map slots, node object, strings' headers). */
const ENTRY_OVERHEAD_BYTES = 128;

interface Node<V> {
  key: string;
  tenant: string;
  value: V;
  size: number;
  expiresAt: number;
}

/** A tenant's entries, least recently used first, and their bytes. */
interface TenantEntries<V> {
  nodes: Map<string, Node<V>>;
  oldest: InsertionFront<string, Node<V>>;
  bytes: number;
}

export interface MemoryStoreOptions {
  maxBytes: number;
  /** Clock for TTLs, ms (the gateway's monotonic clock, or the simulation's virtual one). */
  now: () => number;
}

export class MemoryLru<V> {
  private readonly all = new Map<string, Node<V>>();
  private readonly oldest = new InsertionFront(this.all);
  private readonly byTenant = new Map<string, TenantEntries<V>>();
  private sweepIt: Iterator<Node<V>> | null = null;
  bytes = 0;
  evictions = 0;

  constructor(private readonly o: MemoryStoreOptions) {}

  get size(): number {
    return this.all.size;
  }

  /** The value under `key` if present and not expired; marks it most recently used. */
  get(key: string): V | null {
    const n = this.all.get(key);
    if (n === undefined) return null;
    if (n.expiresAt <= this.o.now()) {
      this.remove(n);
      return null;
    }
    this.all.delete(key);
    this.all.set(key, n);
    const t = this.byTenant.get(n.tenant)!;
    t.nodes.delete(key);
    t.nodes.set(key, n);
    return n.value;
  }

  /**
   * Store `value` (of `size` bytes) for `ttlMs`. Returns false, storing nothing, if it alone is
   * larger than the store or the tenant's budget.
   */
  set(key: string, tenant: string, value: V, size: number, ttlMs: number, tenantMaxBytes?: number): boolean {
    if (size > this.o.maxBytes || (tenantMaxBytes !== undefined && size > tenantMaxBytes)) return false;
    const old = this.all.get(key);
    if (old) this.remove(old);
    const n: Node<V> = { key, tenant, value, size, expiresAt: this.o.now() + ttlMs };
    this.all.set(key, n);
    let t = this.byTenant.get(tenant);
    if (!t) {
      const nodes = new Map<string, Node<V>>();
      this.byTenant.set(tenant, (t = { nodes, oldest: new InsertionFront(nodes), bytes: 0 }));
    }
    t.nodes.set(key, n);
    t.bytes += size;
    this.bytes += size;
    if (tenantMaxBytes !== undefined) {
      while (t.bytes > tenantMaxBytes) this.evict(t.oldest.shift()![1]);
    }
    while (this.bytes > this.o.maxBytes) this.evict(this.oldest.shift()![1]);
    return true;
  }

  delete(key: string): boolean {
    const n = this.all.get(key);
    if (!n) return false;
    this.remove(n);
    return true;
  }

  /** Drop every entry, or one tenant's; returns how many. */
  clear(tenant?: string): number {
    if (tenant === undefined) {
      const n = this.all.size;
      this.all.clear();
      this.byTenant.clear();
      this.bytes = 0;
      this.sweepIt = null;
      return n;
    }
    const t = this.byTenant.get(tenant);
    if (!t) return 0;
    const n = t.nodes.size;
    for (const node of [...t.nodes.values()]) this.remove(node);
    return n;
  }

  tenantBytes(tenant: string): number {
    return this.byTenant.get(tenant)?.bytes ?? 0;
  }

  /** Drop expired entries among the next `limit` (continuing where the last call stopped). */
  sweep(limit: number): number {
    const now = this.o.now();
    let dropped = 0;
    for (let i = 0; i < limit; i++) {
      this.sweepIt ??= this.all.values();
      const r = this.sweepIt.next();
      if (r.done) {
        this.sweepIt = null;
        break;
      }
      if (r.value.expiresAt <= now && this.all.get(r.value.key) === r.value) {
        this.remove(r.value);
        dropped++;
      }
    }
    return dropped;
  }

  private evict(n: Node<V>): void {
    this.evictions++;
    this.remove(n);
  }

  private remove(n: Node<V>): void {
    this.all.delete(n.key);
    this.bytes -= n.size;
    const t = this.byTenant.get(n.tenant);
    if (t) {
      t.nodes.delete(n.key);
      t.bytes -= n.size;
      if (t.nodes.size === 0) this.byTenant.delete(n.tenant);
    }
  }
}

/** Size charged for an entry: its JSON in UTF-8, its key, the per-entry overhead. */
export function entrySize(key: string, json: string): number {
  return Buffer.byteLength(json, 'utf8') + key.length + ENTRY_OVERHEAD_BYTES;
}

/** The default store: a MemoryLru of entries behind the CacheStore interface. */
export class MemoryStore implements CacheStore {
  readonly kind = 'memory' as const;
  readonly lru: MemoryLru<CacheEntry>;
  private timer: NodeJS.Timeout | null = null;

  constructor(o: MemoryStoreOptions & { sweepEveryMs?: number }) {
    this.lru = new MemoryLru(o);
    if (o.sweepEveryMs !== undefined) {
      this.timer = setInterval(() => this.lru.sweep(2000), o.sweepEveryMs);
      this.timer.unref();
    }
  }

  get(key: string): Promise<CacheEntry | null> {
    return Promise.resolve(this.lru.get(key));
  }

  set(key: string, tenant: string, entry: CacheEntry, json: string, ttlMs: number, tenantMaxBytes?: number): Promise<void> {
    this.lru.set(key, tenant, entry, entrySize(key, json), ttlMs, tenantMaxBytes);
    return Promise.resolve();
  }

  clear(tenant?: string): Promise<number> {
    return Promise.resolve(this.lru.clear(tenant));
  }

  stats(): StoreStats {
    return { entries: this.lru.size, bytes: this.lru.bytes };
  }

  close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    return Promise.resolve();
  }
}
