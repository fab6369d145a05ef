/**
 * Polls each worker's /metrics and turns it into WorkerState snapshots. A failed, slow or garbage
 * scrape marks the worker's data as failed (the old snapshot goes stale and policies fall back to
 * the gateway's own accounting); it never throws into the request path.
 */
import type { Clock } from '../util/clock.js';
import { checkDeadline } from './check-deadline.js';
import { PerWorkerLoop } from './periodic.js';
import { parsePromText } from './prom-text.js';
import type { Upstreams } from './upstreams.js';
import { snapshotFromSglangSamples } from './sglang-metrics-parser.js';
import { snapshotFromSamples } from './vllm-metrics-parser.js';
import type { WorkerState } from './worker-state.js';

export interface ScraperOptions {
  intervalMs: number;
  timeoutMs: number;
  clock: Clock;
  upstreams: Upstreams;
  /** Every scrape's outcome (error = null on success). */
  onResult?: (w: WorkerState, error: string | null) => void;
}

/** The longest a gateway's start waits for its first scrape of the fleet. */
export const FIRST_SCRAPE_WAIT_MS = 2_000;

/** Metrics pages larger than this are refused (a sane vLLM or SGLang page is tens of KiB). */
const MAX_METRICS_BYTES = 8 * 1024 * 1024;

export class MetricsScraper {
  private readonly loop: PerWorkerLoop<WorkerState>;
  intervalMs: number;
  private first: Promise<void> | null = null;
  /** performance.now() past which no caller waits for the first scrape. */
  private firstDeadline = 0;

  constructor(
    workers: readonly WorkerState[],
    private readonly opts: ScraperOptions,
  ) {
    this.intervalMs = opts.intervalMs;
    this.loop = new PerWorkerLoop(workers, opts.intervalMs, (w) => this.scrape(w));
  }

  start(): void {
    this.loop.start();
  }

  stop(): void {
    this.loop.stop();
  }

  /** A worker joined the fleet (config reload): scrape it from now on. */
  add(w: WorkerState): void {
    this.loop.add(w);
  }

  /** A worker left the fleet: no further scrapes. */
  remove(id: string): void {
    this.loop.remove(id);
  }

  /** New interval and timeout (config reload), from each worker's next scrape on. */
  retune(intervalMs: number, timeoutMs: number): void {
    this.intervalMs = intervalMs;
    this.opts.timeoutMs = timeoutMs;
    this.loop.setInterval(intervalMs);
  }

  /**
   * The fleet's first scrape: one round however many ask for it (the gateway's start, then the
   * KV-event service's, which needs each worker's block size), waited for at most
   * FIRST_SCRAPE_WAIT_MS from the first ask, by every caller together. Each scrape is also bounded by scrape.timeoutMs, but that is 0.8 of a
   * possibly long interval; a worker that has not answered in time is judged by what the gateway
   * sends it, and its scrape, still running, lands when it does.
   */
  firstScrape(): Promise<void> {
    if (this.first === null) {
      this.first = this.loop.runOnce();
      this.firstDeadline = performance.now() + FIRST_SCRAPE_WAIT_MS;
    }
    return settledWithin(this.first, Math.max(0, this.firstDeadline - performance.now()));
  }

  async scrape(w: WorkerState): Promise<void> {
    let error: string | null = null;
    try {
      const text = await fetchText(this.opts.upstreams, w, '/metrics', this.opts.timeoutMs, MAX_METRICS_BYTES);
      const samples = parsePromText(text);
      const now = this.opts.clock.now();
      w.applySnapshot(w.engine === 'sglang' ? snapshotFromSglangSamples(samples, now) : snapshotFromSamples(samples, now));
    } catch (e) {
      error = (e as Error).message || String(e);
      w.markScrapeFailed(this.opts.clock.now(), error);
    }
    this.opts.onResult?.(w, error);
  }
}

/** GET a worker path with a timeout; throws on non-2xx, oversize or timeout. */
export async function fetchText(
  upstreams: Upstreams,
  w: WorkerState,
  path: string,
  timeoutMs: number,
  maxBytes: number,
): Promise<string> {
  // Not AbortSignal.timeout: a stall of the gateway's own loop is not the worker's (check-deadline.ts).
  const deadline = checkDeadline(timeoutMs);
  const signal = deadline.signal;
  const base = new URL(w.url).pathname.replace(/\/$/, '');
  try {
    const r = await upstreams.for(w.id, w.url).request({ method: 'GET', path: base + path, signal, headers: w.upstreamHeaders });
    if (r.statusCode < 200 || r.statusCode >= 300) {
      await r.body.dump();
      throw new Error(`${path} answered ${r.statusCode}`);
    }
    let size = 0;
    const parts: Buffer[] = [];
    for await (const c of r.body) {
      size += (c as Buffer).length;
      if (size > maxBytes) {
        r.body.destroy();
        throw new Error(`${path} larger than ${maxBytes} bytes`);
      }
      parts.push(c as Buffer);
    }
    return Buffer.concat(parts).toString('utf8');
  } catch (e) {
    if (signal.aborted) throw new Error(`${path} timed out after ${timeoutMs} ms`);
    throw e;
  } finally {
    deadline.clear();
  }
}

/** Resolves when `p` settles or after `ms`, whichever is first (`p` runs on; it must not reject). */
function settledWithin(p: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const waited = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
    timer.unref();
  });
  return Promise.race([p, waited]).finally(() => clearTimeout(timer));
}
