/**
 * kvgate as an Endpoint Picker: the gateway's members, composed exactly as `kvgate serve` composes
 * them (gateway/composition/compose.ts: fleet watch, router and policy, admission, tenants, rate
 * limits, response cache, Redis-shared state, metrics, config reloads), behind Envoy's ext_proc
 * protocol instead of kvgate's own HTTP data path (server.ts), started and stopped by the
 * gateway's lifecycle (gateway/lifecycle.ts).
 */
import type { CacheStore } from '../cache/store.js';
import type { GatewayConfig } from '../config/index.js';
import type { WorkerRegistry } from '../fleet/registry.js';
import type { ReloadOutcome } from '../gateway/admin/config-reload.js';
import { composeGateway } from '../gateway/composition/compose.js';
import { createLifecycle } from '../gateway/lifecycle.js';
import { RequestLogSampler } from '../gateway/pipeline/handler.js';
import type { Router } from '../scheduler/router.js';
import { createLogger, flatLineWriter, type Logger } from '../telemetry/logger.js';
import type { GatewayMetrics } from '../telemetry/metrics.js';
import type { Tokenizer } from '../tokenizer/types.js';
import { systemClock, type Clock } from '../util/clock.js';
import { seededRng, type Rng } from '../util/rng.js';
import { createEppMetrics } from './metrics.js';
import { Picker } from './picker.js';
import { createEppListeners } from './server.js';

export interface EppOptions {
  clock?: Clock;
  logger?: Logger;
  rng?: Rng;
  tokenizerFor?: (model: string) => Tokenizer;
  /** Start the scraper and health prober with start() (default true). */
  watchFleet?: boolean;
  cacheStore?: CacheStore;
  configSource?: { path: string; hash: string };
}

export interface Epp {
  readonly config: GatewayConfig;
  readonly registry: WorkerRegistry;
  readonly router: Router;
  readonly metrics: GatewayMetrics;
  readonly logger: Logger;
  /** The bound ports, once started. */
  readonly ports: { extProc: number; health: number; metrics: number };
  /** Requests in progress (their streams open). */
  readonly inflight: number;
  start(): Promise<{ url: string; port: number }>;
  /** Stop accepting streams, let open ones finish within shutdown.graceMs, release the rest. */
  close(): Promise<void>;
  /** Readiness NOT_SERVING for shutdown.drainDelayMs while streams are still served, then close(). */
  shutdown(): Promise<void>;
  reloadConfig(next: GatewayConfig, fileHash?: string | null): ReloadOutcome;
  rejectConfig(errors: string[], fileHash?: string | null): ReloadOutcome;
}

export function createEpp(config: GatewayConfig, opts: EppOptions = {}): Epp {
  const logger = opts.logger ?? createLogger({ level: config.log.level, pretty: config.log.pretty });
  const g = composeGateway(config, {
    clock: opts.clock ?? systemClock,
    logger,
    rng: opts.rng ?? seededRng(config.policy.seed ?? (Math.random() * 2 ** 32) >>> 0),
    tokenizerFor: opts.tokenizerFor,
    cacheStore: opts.cacheStore,
    configSource: opts.configSource,
  });
  const listeners = createEppListeners(g, {
    g,
    // The epp section is read at start (a change needs a restart, like listen).
    picker: new Picker(g, config.epp.fallbacks),
    metrics: createEppMetrics(g.metrics.registry),
    finishDeps: { active: g.active, metrics: g.metrics, fleet: g.registry, logger, config: g.config, clock: g.clock },
    sampler: new RequestLogSampler(),
    line: flatLineWriter(logger),
  });
  const life = createLifecycle(g, listeners, { watchFleet: opts.watchFleet });
  return {
    config,
    registry: g.registry,
    router: g.router,
    metrics: g.metrics,
    logger,
    ports: listeners.ports,
    get inflight() {
      return g.active.size;
    },
    start: () => life.start(),
    close: () => life.close(),
    shutdown: () => life.shutdown(),
    reloadConfig: (next, fileHash = null) => g.reloader.apply(next, fileHash),
    rejectConfig: (errors, fileHash = null) => g.reloader.reject(errors, fileHash),
  };
}
