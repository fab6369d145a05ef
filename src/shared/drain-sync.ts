/**
 * Workers drained for maintenance, shared by gateway replicas through Redis: a drain (or its end)
 * sent to any replica's `/admin/workers/{id}/drain` is written to the hash `{keyPrefix}drained`
 * (worker id → worker URL), and every replica reads the hash every `pollMs` and drains exactly the
 * workers it lists, matched by id and URL as the breakers are (workers are configured the same in
 * every replica). So an operator drains a worker once, through the Service, and every replica
 * stops sending it new requests within a poll.
 *
 * A change made while Redis is away applies to the replica that took it and is written when Redis
 * is back (the last one per worker), before the hash is read again; until then this replica keeps
 * its own state. A read that overlaps a local change is not applied (the change is newer).
 */
import type { WorkerState } from '../fleet/worker-state.js';
import type { RedisLink } from './redis-link.js';

export interface DrainSyncOptions {
  link: RedisLink;
  /** The hash's key. */
  key: string;
  /** This replica's workers (read at every poll: a reload may change them). */
  workers: () => readonly WorkerState[];
  pollMs: number;
  /** A worker drained or put back because another replica said so. */
  onApplied?: (w: WorkerState, draining: boolean) => void;
}

export class DrainSync {
  /** Local changes not yet written, by worker id. */
  private readonly pending = new Map<string, { url: string; draining: boolean }>();
  /** Bumped by every local change: a read that started before one is not applied. */
  private changes = 0;
  private timer: NodeJS.Timeout | null = null;
  private polling = false;
  readonly counts = { written: 0, applied: 0, failed: 0 };

  constructor(private readonly o: DrainSyncOptions) {}

  /** This replica's operator drained `w` (or put it back): share it. */
  set(w: WorkerState, draining: boolean): void {
    this.changes++;
    this.pending.set(w.id, { url: w.url, draining });
    void this.flush();
  }

  start(): void {
    this.timer = setInterval(() => void this.poll(), this.o.pollMs);
    this.timer.unref();
    void this.poll();
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** Write the pending changes; true when none is left. */
  private async flush(): Promise<boolean> {
    if (!this.o.link.up) return this.pending.size === 0;
    for (const [id, c] of [...this.pending]) {
      try {
        if (c.draining) await this.o.link.client.hset(this.o.key, id, c.url);
        else await this.o.link.client.hdel(this.o.key, id);
        // Only if no newer change of the same worker came meanwhile.
        if (this.pending.get(id) === c) this.pending.delete(id);
        this.counts.written++;
      } catch {
        this.counts.failed++;
        return false;
      }
    }
    return this.pending.size === 0;
  }

  /** Read the shared set and apply it (exported for tests: a poll now). */
  async poll(): Promise<void> {
    if (this.polling || !this.o.link.up) return;
    this.polling = true;
    try {
      if (!(await this.flush())) return;
      const at = this.changes;
      let drained: Record<string, string>;
      try {
        drained = await this.o.link.client.hgetall(this.o.key);
      } catch {
        this.counts.failed++;
        return;
      }
      if (this.changes !== at) return;
      for (const w of this.o.workers()) {
        const draining = Object.hasOwn(drained, w.id) && drained[w.id] === w.url;
        if (w.draining === draining || w.retired) continue;
        w.draining = draining;
        this.counts.applied++;
        this.o.onApplied?.(w, draining);
      }
    } finally {
      this.polling = false;
    }
  }
}
