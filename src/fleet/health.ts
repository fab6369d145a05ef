/**
 * Probes each worker's /health. `failuresToMarkDown` consecutive failures take a worker out of
 * routing (WorkerState.healthy = false); one success brings it back.
 *
 * After a worker's first passing probe, again after it comes back, and then every
 * `modelsIntervalMs`, its /v1/models is read: for the model's `max_model_len` (vLLM lists it there;
 * WorkerState.maxModelLen), which the gateway's own /v1/models shows, and for the LoRA adapters it
 * lists under its model (`parent`), which it may load and unload at run time: they are passed to
 * `onModelList`. A worker that does not list them, or answers anything else, is not held against:
 * the fields are simply left out. The configured adapters the worker does not list there are
 * reported (WorkerState.unlistedAdapters, a warning in the log when that list changes).
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
  /** Read a worker's /v1/models again this often (ms); unset: only when it comes up. */
  modelsIntervalMs?: number;
  /** The worker's /v1/models does not list these of its configured LoRA adapters (now, not before). */
  onUnlistedAdapters?: (w: WorkerState, adapters: readonly string[]) => void;
  /**
   * The LoRA adapters the worker's /v1/models lists under its model. `epoch` is the worker's
   * adapterEpoch when the read began: if an operator changed its adapters since, the list is stale.
   */
  onModelList?: (w: WorkerState, adapters: string[], epoch: number) => void;
}

export class HealthProber {
  private readonly loop: PerWorkerLoop<WorkerState>;
  private readonly failures = new Map<string, number>();
  /** When each worker's /v1/models was last read (since it last came up), performance.now() ms. */
  private readonly modelReadAt = new Map<string, number>();

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
    this.modelReadAt.delete(id);
  }

  /** New settings (config reload), from each worker's next probe on. */
  retune(o: Pick<HealthProberOptions, 'intervalMs' | 'timeoutMs' | 'failuresToMarkDown' | 'modelsIntervalMs'>): void {
    this.opts.timeoutMs = o.timeoutMs;
    this.opts.modelsIntervalMs = o.modelsIntervalMs;
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
        this.modelReadAt.delete(w.id);
        this.opts.onChange?.(w, true, null);
      }
      const readAt = this.modelReadAt.get(w.id);
      const every = this.opts.modelsIntervalMs;
      if (readAt === undefined || (every !== undefined && performance.now() - readAt >= every)) {
        this.modelReadAt.set(w.id, performance.now());
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

  /** The worker's max_model_len and LoRA adapters for its model from its /v1/models. */
  private async readModel(w: WorkerState): Promise<void> {
    const epoch = w.adapterEpoch;
    try {
      const body = JSON.parse(await fetchText(this.opts.upstreams, w, '/v1/models', this.opts.timeoutMs, MODEL_LIST_MAX_BYTES)) as { data?: unknown };
      if (w.retired) return;
      const list = Array.isArray(body?.data) ? (body.data as Array<{ id?: unknown; max_model_len?: unknown; parent?: unknown } | null>) : [];
      const len = list.find((m) => m?.id === w.model)?.max_model_len;
      w.maxModelLen = Number.isSafeInteger(len) && (len as number) > 0 ? (len as number) : null;
      // vLLM lists its LoRA adapters there too, each with its base model as `parent`
      // (vllm/entrypoints/openai/serving_models.py, show_available_models).
      const listed: string[] = [];
      for (const m of list) {
        if (typeof m?.id === 'string' && m.id.length > 0 && m.id.length <= 256 && m.id !== w.model && m.parent === w.model) listed.push(m.id);
      }
      this.opts.onModelList?.(w, listed, epoch);
      // A configured adapter it does not list would be answered 404 by it until it is loaded.
      const ids = new Set(list.map((m) => m?.id));
      const before = w.unlistedAdapters;
      w.unlistedAdapters = w.configuredAdapters.filter((a) => !ids.has(a));
      if (w.unlistedAdapters.length > 0 && w.unlistedAdapters.join('\u0000') !== before.join('\u0000')) this.opts.onUnlistedAdapters?.(w, w.unlistedAdapters);
    } catch {
      // Not every server lists models the way vLLM does: leave the limit unknown.
      w.maxModelLen = null;
    }
  }
}
