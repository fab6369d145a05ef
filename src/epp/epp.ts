/**
 * kvgate as an Endpoint Picker: the gateway's members, composed exactly as `kvgate serve` composes
 * them (gateway/composition/compose.ts: fleet watch, router and policy, admission, tenants, rate
 * limits, response cache, Redis-shared state, metrics, config reloads), behind Envoy's ext_proc
 * protocol instead of kvgate's own HTTP data path (server.ts), started and stopped by the
 * gateway's lifecycle (gateway/lifecycle.ts).
 */
import type { GatewayConfig } from '../config/index.js';
import type { WorkerRegistry } from '../fleet/registry.js';
import type { ReloadOutcome } from '../gateway/admin/config-reload.js';
import { composeWithDefaults, type CompositionOptions } from '../gateway/composition/compose.js';
import { createLifecycle } from '../gateway/lifecycle.js';
import { RequestLogSampler } from '../gateway/pipeline/handler.js';
import type { Router } from '../scheduler/router.js';
import { flatLineWriter, type Logger } from '../telemetry/logger.js';
import type { GatewayMetrics } from '../telemetry/metrics.js';
import { createEppMetrics } from './metrics.js';
import { PickResponses } from './pick-response.js';
import { Picker } from './picker.js';
import { createEppListeners } from './server.js';

/** As createGateway takes them (composition/compose.ts): clock, logger, rng, tokenizers, cache store, config source. */
export type EppOptions = Partial<CompositionOptions> & {
  /** Start the scraper and health prober with start() (default true). */
  watchFleet?: boolean;
};

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
  const g = composeWithDefaults(config, opts);
  const logger = g.logger;
  const listeners = createEppListeners(g, {
    g,
    // The epp section is read at start (a change needs a restart, like listen).
    picker: new Picker(g, config.epp.fallbacks),
    metrics: createEppMetrics(g.metrics.registry),
    finishDeps: { active: g.active, metrics: g.metrics, fleet: g.registry, logger, config: g.config, clock: g.clock },
    sampler: new RequestLogSampler(),
    line: flatLineWriter(logger),
    picks: new PickResponses(),
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
