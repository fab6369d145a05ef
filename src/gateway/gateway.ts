/**
 * A kvgate gateway: createGateway builds its members (composition/compose.ts), its HTTP or HTTPS
 * server (server/http-server.ts) and its start and stop (lifecycle.ts), and hands them out as one
 * object. Embedded by `kvgate serve`, `kvgate demo` and the tests, which all get the same gateway:
 * its stages in the order pipeline/stages.ts declares, speculation included when configured.
 */
import type { Server } from 'node:http';
import type { AdmissionController } from '../admission/controller.js';
import type { TenantDirectory } from '../admission/tenants.js';
import type { ResponseCache } from '../cache/response-cache.js';
import type { CacheStore } from '../cache/store.js';
import type { GatewayConfig } from '../config/index.js';
import type { HealthProber } from '../fleet/health.js';
import type { WorkerDescriber, WorkerRegistry } from '../fleet/registry.js';
import type { MetricsScraper } from '../fleet/scraper.js';
import type { WorkerState } from '../fleet/worker-state.js';
import type { Router } from '../scheduler/router.js';
import type { SpeculativeInstall, SpeculativeOptions } from '../speculative/install.js';
import type { Logger } from '../telemetry/logger.js';
import type { GatewayMetrics } from '../telemetry/metrics.js';
import type { Tokenizer } from '../tokenizer/types.js';
import type { Clock } from '../util/clock.js';
import type { Rng } from '../util/rng.js';
import type { ReloadOutcome } from './admin/config-reload.js';
import { composeWithDefaults } from './composition/compose.js';
import type { OutlierDetector } from './fleet-watch/outliers.js';
import { createLifecycle } from './lifecycle.js';
import type { GatewayStage } from '../request/stage.js';
import type { TenantSlots } from './pipeline/tenant-slots.js';
import { createGatewayServer } from './server/http-server.js';
import type { ConnectionGuard } from './server/connections.js';
import type { GatewayService } from './types.js';

export type { GatewayService };

export interface GatewayOptions {
  clock?: Clock;
  logger?: Logger;
  rng?: Rng;
  /**
   * Tokenizer per model, overriding `config.tokenizers` (which defaults to the shared `estimate`
   * tokenizer for every model).
   */
  tokenizerFor?: (model: string) => Tokenizer;
  /** Start the scraper and health prober with start() (default true; tests may drive them by hand). */
  watchFleet?: boolean;
  /** A response-cache store to use instead of the configured one (when `cache.enabled`). */
  cacheStore?: CacheStore;
  /** The file the config was read from and its SHA-256 (shown by /admin/config). */
  configSource?: { path: string; hash: string };
  /** How the speculative stages are built when `speculative` is configured (tests: probe, controller, rng). */
  speculative?: SpeculativeOptions;
}

export interface Gateway {
  readonly config: GatewayConfig;
  readonly registry: WorkerRegistry;
  readonly router: Router;
  readonly metrics: GatewayMetrics;
  readonly scraper: MetricsScraper;
  readonly health: HealthProber;
  readonly logger: Logger;
  readonly server: Server;
  /** API keys → tenants. */
  readonly tenants: TenantDirectory;
  /** The response cache, when `cache.enabled`. */
  readonly cache: ResponseCache | null;
  /** KV-pressure admission, when `admission.enabled`. */
  readonly admission: AdmissionController<WorkerState> | null;
  /** Add a pipeline stage after the gateway's own (pipeline/stages.ts); an `early` one before tokenization. */
  use(stage: GatewayStage): void;
  /** The stages' names in the order a request meets them. */
  stageNames(): string[];
  /** What the speculative cascades installed at start() (null before start, or none configured). */
  readonly speculative: SpeculativeInstall | null;
  /** Run a service with the gateway's lifecycle (started by start(), closed by close()). */
  addService(s: GatewayService): void;
  /** Add fields to each worker's /admin/workers entry. */
  addWorkerDescriber(d: WorkerDescriber): void;
  /** Requests being handled right now. */
  readonly inflight: number;
  /** Install the speculative stages (probing their workers: ConfigError if they cannot verify), then listen. */
  start(): Promise<{ url: string; port: number }>;
  /**
   * Stop accepting, let in-flight requests finish within `shutdown.graceMs`, end the rest with a
   * clean error, stop watching the fleet, release all sockets.
   */
  close(): Promise<void>;
  /**
   * Shut down as load balancers expect (SIGTERM): `/ready` answers 503 for `shutdown.drainDelayMs`
   * while everything else is still served, then close().
   */
  shutdown(): Promise<void>;
  /** True from shutdown() on: /ready answers 503. */
  readonly draining: boolean;
  /** Client connection caps (counts of open, evicted and refused connections). */
  readonly connections: ConnectionGuard;
  /** Each tenant's requests counted from its key read (refusals of stalled bodies past a bound). */
  readonly tenantSlots: TenantSlots;
  /** Passive outlier detection (hung workers). */
  readonly outliers: OutlierDetector | null;
  /**
   * Apply a new, validated config to the running gateway (config-reload.ts): workers added and
   * retired, weights, thresholds, timeouts, keys and limits changed; in-flight requests untouched.
   */
  reloadConfig(next: GatewayConfig, fileHash?: string | null): ReloadOutcome;
  /** A new config was invalid: the old one stays; the errors are logged and shown by /admin/config. */
  rejectConfig(errors: string[], fileHash?: string | null): ReloadOutcome;
  /** What /admin/config shows: version, when applied, file hash, the active config (secrets redacted). */
  configStatus(): Record<string, unknown>;
}

export function createGateway(config: GatewayConfig, opts: GatewayOptions = {}): Gateway {
  const g = composeWithDefaults(config, opts);
  const logger = g.logger;
  const http = createGatewayServer(config, g.handler, logger);
  const life = createLifecycle(g, http, { watchFleet: opts.watchFleet, speculative: opts.speculative });
  return {
    config,
    registry: g.registry,
    router: g.router,
    metrics: g.metrics,
    scraper: g.scraper,
    health: g.health,
    logger,
    server: http.server,
    tenants: g.tenants,
    cache: g.cache,
    admission: g.admission.controller,
    connections: http.connections,
    tenantSlots: g.tenantSlots,
    outliers: g.outliers,
    get draining() {
      return g.life.draining;
    },
    get speculative() {
      return life.speculative;
    },
    get inflight() {
      return g.active.size;
    },
    use: (stage) => g.pipeline.add(stage),
    stageNames: () => g.pipeline.names(),
    addWorkerDescriber: (d) => g.registry.addDescriber(d),
    addService: (svc) => life.addService(svc),
    reloadConfig: (next, fileHash = null) => {
      const outcome = g.reloader.apply(next, fileHash);
      http.refreshTls();
      return outcome;
    },
    rejectConfig: (errors, fileHash = null) => g.reloader.reject(errors, fileHash),
    configStatus: () => g.reloader.status(),
    start: () => life.start(),
    shutdown: () => life.shutdown(),
    close: () => life.close(),
  };
}
