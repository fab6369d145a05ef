/**
 * How the gateway watches its fleet: a metrics scraper and a health prober over the registry's
 * workers, on the shared upstream pools, reporting into the gateway's metrics and log. A worker
 * the probes take out of routing is passed to `onWorkerDown` (the relay gives up the attempts
 * still waiting on it). The circuit breakers are the registry's own.
 */
import type { GatewayConfig } from '../../config/index.js';
import { HealthProber } from '../../fleet/health.js';
import { MetricsScraper } from '../../fleet/scraper.js';
import type { Upstreams } from '../../fleet/upstreams.js';
import type { WorkerState } from '../../fleet/worker-state.js';
import type { Logger } from '../../telemetry/logger.js';
import type { GatewayMetrics } from '../../telemetry/metrics.js';
import type { Clock } from '../../util/clock.js';

export interface FleetWatchOptions {
  config: Pick<GatewayConfig, 'scrape' | 'health'>;
  workers: readonly WorkerState[];
  upstreams: Upstreams;
  clock: Clock;
  logger: Logger;
  metrics: GatewayMetrics;
  /** The routing policy's own metrics interval, if it publishes one. */
  policyScrapeIntervalMs: number | undefined;
  onWorkerDown: (workerId: string) => void;
  /** Every scrape's and probe's outcome (outlier detection counts timeouts as suspicion). */
  onCheck?: (w: WorkerState, error: string | null) => void;
  /** The LoRA adapters a worker's /v1/models lists (HealthProberOptions.onModelList). */
  onModelList?: (w: WorkerState, adapters: string[], epoch: number) => void;
}

export interface FleetWatch {
  scraper: MetricsScraper;
  health: HealthProber;
}

/**
 * The scrape interval and timeout: a policy published with its own metrics interval (llm-d polls
 * every 50 ms) gets it unless the config sets one.
 */
export function scrapeTiming(scrape: GatewayConfig['scrape'], policyScrapeIntervalMs: number | undefined): { intervalMs: number; timeoutMs: number } {
  const intervalMs = !scrape.intervalExplicit && policyScrapeIntervalMs !== undefined ? policyScrapeIntervalMs : scrape.intervalMs;
  return { intervalMs, timeoutMs: Math.min(scrape.timeoutMs, Math.max(1, Math.floor(intervalMs * 0.8))) };
}

export function createFleetWatch(o: FleetWatchOptions): FleetWatch {
  const { config, logger, metrics } = o;
  const timing = scrapeTiming(config.scrape, o.policyScrapeIntervalMs);
  const scraper = new MetricsScraper(o.workers, {
    intervalMs: timing.intervalMs,
    timeoutMs: timing.timeoutMs,
    clock: o.clock,
    upstreams: o.upstreams,
    onResult: (w, error) => {
      o.onCheck?.(w, error);
      if (error !== null) {
        metrics.scrapeFailures.labels(w.id).inc();
        logger.debug({ worker: w.id, error }, 'metrics scrape failed');
      }
    },
  });
  const health = new HealthProber(o.workers, {
    intervalMs: config.health.intervalMs,
    timeoutMs: config.health.timeoutMs,
    failuresToMarkDown: config.health.failuresToMarkDown,
    modelsIntervalMs: config.health.modelsIntervalMs,
    upstreams: o.upstreams,
    onResult: o.onCheck,
    onModelList: o.onModelList,
    onUnlistedAdapters: (w, adapters) =>
      logger.warn({ worker: w.id, adapters }, 'worker does not list these configured LoRA adapters in /v1/models: requests for them will fail there until it serves them (vLLM --lora-modules, or /v1/load_lora_adapter)'),
    onChange: (w, healthy, reason) => {
      logger[healthy ? 'info' : 'warn']({ worker: w.id, healthy, reason: reason ?? undefined }, 'worker health');
      if (!healthy) o.onWorkerDown(w.id);
    },
  });
  return { scraper, health };
}
