/**
 * createGateway: assembles the worker registry, the fleet watchers (metrics scraper, health
 * prober, circuit breakers), the router with the configured policy, the relay, telemetry and the
 * HTTP server. Embedded by `kvgate serve`, `kvgate demo` and the tests.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { TenantDirectory } from '../admission/tenants.js';
import type { ResponseCache } from '../cache/response-cache.js';
import type { CacheStore } from '../cache/store.js';
import { ConfigError, type GatewayConfig } from '../config.js';
import type { BreakerState } from '../fleet/circuit-breaker.js';
import type { HealthProber } from '../fleet/health.js';
import { WorkerRegistry, type WorkerDescriber } from '../fleet/registry.js';
import type { MetricsScraper } from '../fleet/scraper.js';
import { Upstreams } from '../fleet/upstreams.js';
import type { WorkerState } from '../fleet/worker-state.js';
import { createPolicy } from '../scheduler/registry.js';
import { Router } from '../scheduler/router.js';
import type { Policy } from '../scheduler/types.js';
import { createLogger, flushLogger, type Logger } from '../telemetry/logger.js';
import { GatewayMetrics } from '../telemetry/metrics.js';
import type { Tokenizer } from '../tokenizer/types.js';
import { systemClock, type Clock } from '../util/clock.js';
import { seededRng, type Rng } from '../util/rng.js';
import type { RequestContext } from './context.js';
import { createFleetWatch } from './fleet-watch.js';
import { createHandler } from './handler.js';
import { prepareRouting } from './prepare.js';
import { PromptTokenizers } from './prompt-tokenizers.js';
import { kvEventsService } from './kv-events-service.js';
import { registerKvEventMetrics } from '../fleet/kv-events-metrics.js';
import { setupCache } from './cache-setup.js';
import { dashboardRoutes } from './dashboard/routes.js';
import type { LocalRoute } from './local-routes.js';
import { Relay } from './relay.js';
import type { GatewayStage } from './stages.js';
import type { GatewayService } from './types.js';
import { setupAdmission } from './admission-stage.js';
import type { AdmissionController } from '../admission/controller.js';

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
  /** Add a pipeline stage between validation and routing (admission, cache, speculation). */
  use(stage: GatewayStage): void;
  /** Run a service with the gateway's lifecycle (started by start(), closed by close()). */
  addService(s: GatewayService): void;
  /** Add fields to each worker's /admin/workers entry. */
  addWorkerDescriber(d: WorkerDescriber): void;
  /** Requests being handled right now. */
  readonly inflight: number;
  start(): Promise<{ url: string; port: number }>;
  /**
   * Stop accepting, let in-flight requests finish within `shutdown.graceMs`, end the rest with a
   * clean error, stop watching the fleet, release all sockets.
   */
  close(): Promise<void>;
}

export function createGateway(config: GatewayConfig, opts: GatewayOptions = {}): Gateway {
  const clock = opts.clock ?? systemClock;
  const logger = opts.logger ?? createLogger({ level: config.log.level, pretty: config.log.pretty });
  const rng = opts.rng ?? seededRng(config.policy.seed ?? (Math.random() * 2 ** 32) >>> 0);
  const now = (): number => clock.now();

  let metrics: GatewayMetrics | null = null;
  const registry = new WorkerRegistry(config.workers, {
    staleAfterMs: config.scrape.staleAfterMs,
    now,
    breaker: {
      failuresToOpen: config.circuitBreaker.failuresToOpen,
      coolDownMs: config.circuitBreaker.coolDownMs,
      failureRate: config.circuitBreaker.failureRate,
      overloadBackoffMs: config.circuitBreaker.overloadBackoffMs,
      maxBackoffMs: config.circuitBreaker.maxBackoffMs,
      now,
      onBackoff: (w: WorkerState, ms: number) => logger.info({ worker: w.id, backoffMs: ms }, 'worker overloaded (503/429): backed off'),
      onTransition: (w: WorkerState, to: BreakerState) => {
        metrics?.breakerTransitions.labels(w.id, to).inc();
        logger[to === 'open' ? 'warn' : 'info']({ worker: w.id, state: to }, 'circuit breaker');
      },
    },
  });
  metrics = new GatewayMetrics(registry, config.scrape.staleAfterMs, now);
  const m = metrics;

  let policy: Policy;
  try {
    policy = createPolicy(config.policy.name, config.policy.options);
  } catch (e) {
    // An unknown name or bad options is a configuration mistake, reported like one.
    throw new ConfigError([`policy: ${(e as Error).message}`]);
  }
  const router = new Router({ policy, clock, rng, staleAfterMs: config.scrape.staleAfterMs });
  const index = policy.prefixIndex;
  if (index) {
    registry.addDescriber((w) => {
      const st = index.workerStatus(w.id);
      return st ? { prefixIndex: { source: st.source, reason: st.reason, blocks: st.blocks, capacity: st.capacity } } : {};
    });
  }
  if (policy.describeWorker) registry.addDescriber((w) => policy.describeWorker?.(w) ?? {});

  const upstreams = new Upstreams({
    connections: config.upstream.connections,
    keepAliveTimeoutMs: config.upstream.keepAliveTimeoutMs,
    connectTimeoutMs: config.timeouts.connectMs,
  });
  const { scraper, health } = createFleetWatch({
    config,
    workers: registry.workers,
    upstreams,
    clock,
    logger,
    metrics: m,
    policyScrapeIntervalMs: policy.scrapeIntervalMs,
    onWorkerDown: (id) => relay.workerDown(id),
  });

  const relay: Relay = new Relay({
    router,
    fleet: registry,
    upstreams,
    metrics: m,
    clock,
    firstByteMs: config.timeouts.firstByteMs,
    retries: config.retry.attempts,
    retryAfterSeconds: config.limits.retryAfterSeconds,
  });

  // Loaded in start(): `hf:` tokenizers read their files asynchronously.
  const tokenizers = new PromptTokenizers(config.tokenizers, opts.tokenizerFor);
  const stages: GatewayStage[] = [];
  const earlyStages: GatewayStage[] = [];
  const prepare = (ctx: RequestContext): Promise<void> => prepareRouting(ctx, tokenizers.for(ctx.model), config.timeouts.assumedMaxTokens);
  const services: GatewayService[] = [];
  const active = new Set<RequestContext>();
  const tenants = new TenantDirectory(config.tenants, config.admin.digests);
  const extraRoutes = new Map<string, LocalRoute>();
  let cache: ResponseCache | null = null;
  // On for every tenant (cache.enabled), or only for the tenants that turn it on for themselves.
  if (config.cache.enabled || config.tenants.some((t) => t.cache.enabled === true)) {
    // An early stage: it runs before tokenization and before the stages added with use().
    const c = setupCache({
      config: config.cache,
      tenants,
      metrics: m,
      logger,
      clock,
      prepare,
      forward: (ctx) => relay.forward(ctx),
      store: opts.cacheStore,
    });
    cache = c.cache;
    earlyStages.push(c.stage);
    services.push(c.service);
    extraRoutes.set('/admin/cache', c.route);
  }
  // The live dashboard: /dashboard and /dashboard/state (admin key when keys are configured).
  for (const [path, route] of dashboardRoutes({ tenants, registry: m.registry, describeWorkers: () => registry.describeAll() })) extraRoutes.set(path, route);
  // Admission runs first among the stages added with use() (after the response cache).
  const admission = setupAdmission({ config, fleet: registry, clock, registry: m.registry, staleAfterMs: router.staleAfterMs });
  stages.push(admission.stage);
  services.push(admission.service);
  let closing = false;
  const handler = createHandler({
    config,
    fleet: registry,
    relay,
    metrics: m,
    logger,
    clock,
    stages,
    earlyStages,
    prepareRouting: prepare,
    tenants,
    extraRoutes,
    active,
    isClosing: () => closing,
  });

  const server = createServer({ keepAliveTimeout: 65_000 }, handler);
  // Long generations are bounded by the request deadline, not by Node's default request timeout.
  server.requestTimeout = 0;
  server.headersTimeout = 60_000;

  if (config.kvEvents.length > 0) {
    if (index) {
      const kvEvents = kvEventsService({ endpoints: config.kvEvents, index, fleet: registry, scraper, clock, logger });
      registerKvEventMetrics(m.registry, kvEvents.subscribers);
      services.push(kvEvents);
    } else {
      logger.warn({ policy: policy.name }, 'kvEvents are configured but the policy keeps no prefix index: ignored');
    }
  } else if (policy.usesKvEvents) {
    logger.warn({ policy: policy.name }, 'the policy routes on KV events but no worker has kvEvents configured: it will see no cached prefixes');
  }

  let started: { url: string; port: number } | null = null;
  let closed: Promise<void> | null = null;

  return {
    config,
    registry,
    router,
    metrics: m,
    scraper,
    health,
    logger,
    server,
    tenants,
    cache,
    admission: admission.controller,
    use: (stage) => void (stage.early ? earlyStages : stages).push(stage),
    addWorkerDescriber: (d) => registry.addDescriber(d),
    addService: (svc) => {
      services.push(svc);
      if (started) void Promise.resolve(svc.start?.()).catch((e: Error) => logger.error({ err: e, service: svc.name }, 'service failed to start'));
    },
    get inflight() {
      return active.size;
    },
    async start() {
      if (started) return started;
      await tokenizers.load();
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(config.listen.port, config.listen.host, () => {
          server.off('error', reject);
          resolve();
        });
      });
      if (opts.watchFleet !== false) {
        scraper.start();
        health.start();
      }
      for (const svc of services) await svc.start?.();
      const addr = server.address() as AddressInfo;
      const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
      started = { url: `http://${host}:${addr.port}`, port: addr.port };
      logger.info({ url: started.url, workers: registry.workers.length, policy: policy.name }, 'kvgate listening');
      return started;
    },
    close() {
      closed ??= (async () => {
        closing = true;
        const serverClosed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        const graceEnd = Date.now() + config.shutdown.graceMs;
        while (active.size > 0 && Date.now() < graceEnd) await sleep(20);
        for (const ctx of active) {
          ctx.aborted = true;
          ctx.abortReason = 'shutdown';
          ctx.abortUpstream?.('shutdown');
        }
        while (active.size > 0 && Date.now() < graceEnd + 2_000) await sleep(10);
        scraper.stop();
        health.stop();
        for (const svc of services) {
          try {
            await svc.close?.();
          } catch (e) {
            logger.warn({ err: e, service: svc.name }, 'service failed to close');
          }
        }
        registry.close();
        server.closeAllConnections();
        if (started) await serverClosed;
        await upstreams.close();
        flushLogger(logger);
      })();
      return closed;
    },
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
