/**
 * Probes each worker's /health. `failuresToMarkDown` consecutive failures take a worker out of
 * routing (WorkerState.healthy = false); one success brings it back.
 *
 * After a worker's first passing probe, and again after it comes back, its /v1/models is read once
 * for the model's `max_model_len` (vLLM lists it there; WorkerState.maxModelLen), which the
 * gateway's own /v1/models shows. A worker that does not list it, or answers anything else, is
 * not held against: the field is simply left out. The LoRA adapters the worker is configured with
 * and does not list there are reported (WorkerState.unlistedAdapters, a warning in the log).
 */
import { PerWorkerLoop } from './periodic.js';
import { fetchText } from './scraper.js';
import type { Upstreams } from './upstreams.js';
import type { WorkerState } from './worker-state.js';

/** A model list larger than this is not read. */
const MODEL_LIST_MAX_BYTES = 1024 * 1024;

export interface HealthProberOptions {
  intervalMs: number;
  timeoutMs: number;
  failuresToMarkDown: number;
  upstreams: Upstreams;
  onChange?: (w: WorkerState, healthy: boolean, reason: string | null) => void;
  /** Every probe's outcome (error = null on success). */
  onResult?: (w: WorkerState, error: string | null) => void;
  /** The worker's /v1/models does not list these of its configured LoRA adapters. */
  onUnlistedAdapters?: (w: WorkerState, adapters: readonly string[]) => void;
}

export class HealthProber {
  private readonly loop: PerWorkerLoop<WorkerState>;
  private readonly failures = new Map<string, number>();
  /** Workers whose /v1/models has been read since they last came up. */
  private readonly modelRead = new Set<string>();

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
    this.modelRead.delete(id);
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
        // Back from a failure (perhaps restarted with other settings): read its limits again.
        this.modelRead.delete(w.id);
        this.opts.onChange?.(w, true, null);
      }
      if (!this.modelRead.has(w.id)) {
        this.modelRead.add(w.id);
        await this.readModel(w);
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

  /** The worker's max_model_len for its model from its /v1/models, if it lists one. */
  private async readModel(w: WorkerState): Promise<void> {
    try {
      const body = JSON.parse(await fetchText(this.opts.upstreams, w, '/v1/models', this.opts.timeoutMs, MODEL_LIST_MAX_BYTES)) as { data?: unknown };
      const list = Array.isArray(body?.data) ? (body.data as Array<{ id?: unknown; max_model_len?: unknown }>) : [];
      const len = list.find((m) => m?.id === w.model)?.max_model_len;
      w.maxModelLen = Number.isSafeInteger(len) && (len as number) > 0 ? (len as number) : null;
      // vLLM lists its LoRA modules there too; a configured adapter it does not list would be
      // answered 404 by it (loaded at run time since, it is served: so this is only reported).
      const ids = new Set(list.map((m) => m?.id));
      w.unlistedAdapters = w.adapters.filter((a) => !ids.has(a));
      if (w.unlistedAdapters.length > 0) this.opts.onUnlistedAdapters?.(w, w.unlistedAdapters);
    } catch {
      // Not every server lists models the way vLLM does: leave the limit unknown.
      w.maxModelLen = null;
    }
  }
}
