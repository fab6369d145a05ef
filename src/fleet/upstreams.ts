/**
 * One undici Pool per worker: keep-alive connections reused across requests, metric scrapes and
 * health probes, so the hot path never pays a TCP handshake.
 */
import { Pool } from 'undici';

export interface UpstreamOptions {
  /** Connections per worker; 0 = unlimited. */
  connections: number;
  keepAliveTimeoutMs: number;
  connectTimeoutMs: number;
}

export class Upstreams {
  private readonly pools = new Map<string, Pool>();
  /** Pools of retired workers still finishing their requests (closed by close() too). */
  private readonly detached = new Set<Pool>();

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

  /**
   * A worker left the fleet (config reload): its pool is no longer handed out (a worker added
   * again under the same id gets a new one); the requests already on it keep it. Returns what
   * closes it, gracefully, once they are done.
   */
  detach(workerId: string): () => Promise<void> {
    const p = this.pools.get(workerId);
    this.pools.delete(workerId);
    if (p) this.detached.add(p);
    return async () => {
      if (!p) return;
      this.detached.delete(p);
      await p.close().catch(() => undefined);
    };
  }

  async close(): Promise<void> {
    const all = [...this.pools.values(), ...this.detached];
    this.pools.clear();
    this.detached.clear();
    await Promise.all(all.map((p) => p.destroy().catch(() => undefined)));
  }
}
