/**
 * Probes each worker's /health. `failuresToMarkDown` consecutive failures take a worker out of
 * routing (WorkerState.healthy = false); one success brings it back.
 */
import { PerWorkerLoop } from './periodic.js';
import { fetchText } from './scraper.js';
import type { Upstreams } from './upstreams.js';
import type { WorkerState } from './worker-state.js';

export interface HealthProberOptions {
  intervalMs: number;
  timeoutMs: number;
  failuresToMarkDown: number;
  upstreams: Upstreams;
  onChange?: (w: WorkerState, healthy: boolean, reason: string | null) => void;
  /** Every probe's outcome (error = null on success). */
  onResult?: (w: WorkerState, error: string | null) => void;
}

export class HealthProber {
  private readonly loop: PerWorkerLoop<WorkerState>;
  private readonly failures = new Map<string, number>();

  constructor(
    workers: readonly WorkerState[],
    private readonly opts: HealthProberOptions,
  ) {
    this.loop = new PerWorkerLoop(workers, opts.intervalMs, (w) => this.probe(w));
  }

  start(): void {
    this.loop.start();
  }

  stop(): void {
    this.loop.stop();
  }

  /** A worker joined the fleet (config reload): probe it from now on. */
  add(w: WorkerState): void {
    this.loop.add(w);
  }

  /** A worker left the fleet: no further probes. */
  remove(id: string): void {
    this.loop.remove(id);
    this.failures.delete(id);
  }

  /** New settings (config reload), from each worker's next probe on. */
  retune(o: Pick<HealthProberOptions, 'intervalMs' | 'timeoutMs' | 'failuresToMarkDown'>): void {
    this.opts.timeoutMs = o.timeoutMs;
    this.opts.failuresToMarkDown = o.failuresToMarkDown;
    this.opts.intervalMs = o.intervalMs;
    this.loop.setInterval(o.intervalMs);
  }

  probeAll(): Promise<void> {
    return this.loop.runOnce();
  }

  consecutiveFailures(id: string): number {
    return this.failures.get(id) ?? 0;
  }

  async probe(w: WorkerState): Promise<void> {
    try {
      await fetchText(this.opts.upstreams, w, '/health', this.opts.timeoutMs, 64 * 1024);
      // Removed by a config reload while the probe ran: it stays out of routing.
      if (w.retired) return;
      this.failures.set(w.id, 0);
      this.opts.onResult?.(w, null);
      if (!w.healthy) {
        w.healthy = true;
        this.opts.onChange?.(w, true, null);
      }
    } catch (e) {
      if (w.retired) return;
      this.opts.onResult?.(w, (e as Error).message || String(e));
      const n = (this.failures.get(w.id) ?? 0) + 1;
      this.failures.set(w.id, n);
      if (w.healthy && n >= this.opts.failuresToMarkDown) {
        w.healthy = false;
        this.opts.onChange?.(w, false, (e as Error).message);
      }
    }
  }
}
