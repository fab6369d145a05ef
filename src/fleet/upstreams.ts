/**
 * Keep-alive connections per worker, so the hot path never pays a TCP handshake: one undici Pool
 * for metric scrapes, health probes and other calls, and one relay pool for relayed requests —
 * kvgate's own UpstreamPool (src/http/upstream-pool.ts) by default, or undici's with
 * `upstream.client: undici`.
 */
import { Pool } from 'undici';
import { UpstreamPool, type RelayDispatcher } from '../http/upstream-pool.js';

export interface UpstreamOptions {
  /** Connections per worker; 0 = unlimited. */
  connections: number;
  keepAliveTimeoutMs: number;
  connectTimeoutMs: number;
  /** Which client relays requests (default 'kvgate'). */
  relayClient?: 'kvgate' | 'undici';
  /** kvgate's client: send requests with the event loop turn's other writes (default true). */
  batchWrites?: boolean;
}

export class Upstreams {
  private readonly pools = new Map<string, Pool>();
  private readonly relayPools = new Map<string, RelayDispatcher>();
  /** Pools of retired workers still finishing their requests (closed by close() too). */
  private readonly detached = new Set<RelayDispatcher>();

  constructor(private readonly opts: UpstreamOptions) {}

  /** The pool for a worker's origin (created on first use). */
  for(workerId: string, url: string): Pool {
    let p = this.pools.get(workerId);
    if (!p) {
      p = new Pool(new URL(url).origin, {
        connections: this.opts.connections > 0 ? this.opts.connections : null,
        pipelining: 1,
        keepAliveTimeout: this.opts.keepAliveTimeoutMs,
        connect: { timeout: this.opts.connectTimeoutMs },
        // Deadlines are enforced by the relay (they depend on max_tokens), not by undici's fixed ones.
        headersTimeout: 0,
        bodyTimeout: 0,
      });
      this.pools.set(workerId, p);
    }
    return p;
  }

  /** The pool relayed requests go through (created on first use). */
  relayFor(workerId: string, url: string): RelayDispatcher {
    let p = this.relayPools.get(workerId);
    if (!p) {
      p = this.opts.relayClient === 'undici' ? (this.for(workerId, url) as unknown as RelayDispatcher) : new UpstreamPool(new URL(url).origin, this.opts);
      this.relayPools.set(workerId, p);
    }
    return p;
  }

  /** Open relay connections to a worker (idle and busy); null before its first request. */
  relayConnections(workerId: string): number | null {
    const p = this.relayPools.get(workerId);
    if (p === undefined) return null;
    return p instanceof UpstreamPool ? p.connections : (p as unknown as Pool).stats.connected;
  }

  /**
   * A worker left the fleet (config reload): its pool is no longer handed out (a worker added
   * again under the same id gets a new one); the requests already on it keep it. Returns what
   * closes it, gracefully, once they are done.
   */
  detach(workerId: string): () => Promise<void> {
    const ps = new Set<RelayDispatcher>();
    const p = this.pools.get(workerId);
    if (p) ps.add(p);
    const r = this.relayPools.get(workerId);
    if (r) ps.add(r);
    this.pools.delete(workerId);
    this.relayPools.delete(workerId);
    for (const x of ps) this.detached.add(x);
    return async () => {
      for (const x of ps) this.detached.delete(x);
      await Promise.all([...ps].map((x) => x.close().catch(() => undefined)));
    };
  }

  async close(): Promise<void> {
    const all = new Set<RelayDispatcher>([...this.pools.values(), ...this.relayPools.values(), ...this.detached]);
    this.pools.clear();
    this.relayPools.clear();
    this.detached.clear();
    await Promise.all([...all].map((p) => p.destroy().catch(() => undefined)));
  }
}
