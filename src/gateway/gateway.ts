/**
 * createGateway: assembles the worker registry, the fleet watchers (metrics scraper, health
 * prober, circuit breakers), the router with the configured policy, the relay, telemetry and the
 * HTTP server. Embedded by `kvgate serve`, `kvgate demo` and the tests.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { TenantDirectory } from '../admission/tenants.js';
import type { ResponseCache } from '../cache/response-cache.js';
import type { CacheStore } from '../cache/store.js';
import { ConfigError, type GatewayConfig } from '../config/index.js';
import type { BreakerState, TransitionCause } from '../fleet/circuit-breaker.js';
import type { HealthProber } from '../fleet/health.js';
import { WorkerRegistry, type WorkerDescriber } from '../fleet/registry.js';
import type { MetricsScraper } from '../fleet/scraper.js';
import { Upstreams } from '../fleet/upstreams.js';
import { readTls } from '../http/tls-files.js';
import { SpeedClasses } from '../fleet/speed-classes.js';
import type { WorkerState } from '../fleet/worker-state.js';
import { createPolicy } from '../scheduler/registry.js';
import { Router } from '../scheduler/router.js';
import type { Policy } from '../scheduler/types.js';
import { createLogger, droppedLogBytes, flushLogger, type Logger } from '../telemetry/logger.js';
import { GatewayMetrics } from '../telemetry/metrics.js';
import type { Tokenizer } from '../tokenizer/types.js';
import { systemClock, type Clock } from '../util/clock.js';
import { seededRng, type Rng } from '../util/rng.js';
import type { RequestContext } from './context.js';
import { createAdapterAdmin } from './adapter-admin.js';
import { createFleetWatch } from './fleet-watch.js';
import { createHandler } from './handler.js';
import { keepMessageIds, keptMessageCounts, prepareRouting } from './prepare.js';
import { PromptTokenizers } from './prompt-tokenizers.js';
import { registerKvEventMetrics } from '../fleet/kv-events-metrics.js';
import { setupCache } from './cache-setup.js';
import { dashboardRoutes } from './dashboard/routes.js';
import type { LocalRoute } from './local-routes.js';
import { ConnectionGuard } from './connections.js';
import { DEFAULT_PREFILL_TOKENS_PER_SEC, OutlierDetector } from './outliers.js';
import { Relay } from './relay.js';
import type { GatewayStage } from './stages.js';
import type { GatewayService } from './types.js';
import { setupAdmission } from './admission-stage.js';
import { TenantSlots } from './tenant-slots.js';
import type { AdmissionController } from '../admission/controller.js';
import { setupSharedState } from '../shared/setup.js';
import { json } from './local-routes.js';
import { ConfigReloader, type ReloadOutcome } from './config-reload.js';
import { kvEventsService as createKvEventsService, type KvEventsService } from './kv-events-service.js';
import { ResponseAffinity } from './response-affinity.js';
import { lookupResponse } from './response-lookup.js';

export type { GatewayService };

/** How long a worker may take to load or unload a LoRA adapter for /admin/adapters (it may fetch it first). */
const ADAPTER_CALL_TIMEOUT_MS = 120_000;

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
  const clock = opts.clock ?? systemClock;
  const logger = opts.logger ?? createLogger({ level: config.log.level, pretty: config.log.pretty });
  const rng = opts.rng ?? seededRng(config.policy.seed ?? (Math.random() * 2 ** 32) >>> 0);
  const now = (): number => clock.now();

  let metrics: GatewayMetrics | null = null;
  // Set below when replicas share breakers through Redis: publishes this replica's transitions.
  let shareBreaker: ((w: WorkerState, to: BreakerState, cause: TransitionCause, from: BreakerState) => void) | null = null;
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
      onTransition: (w: WorkerState, to: BreakerState, cause: TransitionCause, from: BreakerState) => {
        metrics?.breakerTransitions.labels(w.id, to).inc();
        if (cause === 'local') logger[to === 'open' ? 'warn' : 'info']({ worker: w.id, state: to }, 'circuit breaker');
        shareBreaker?.(w, to, cause, from);
      },
    },
  });
  metrics = new GatewayMetrics(registry, config.scrape.staleAfterMs, now);
  const m = metrics;
  m.counterFrom('kvgate_log_dropped_bytes_total', 'Log bytes dropped because the log output could not keep up (64 MiB waiting) or failed', () => droppedLogBytes(logger));
  // Process-wide, as the kept ids are (src/tokenizer/chat-tokens.ts): the estimate tokenizer only.
  m.counterFrom('kvgate_tokenizer_kept_message_hits_total', 'Long chat messages (256 characters or more) whose token ids were kept from an earlier request', () => keptMessageCounts().hits);
  m.counterFrom('kvgate_tokenizer_kept_message_misses_total', 'Long chat messages (256 characters or more) tokenized because their ids were not kept', () => keptMessageCounts().misses);
  m.gaugeFrom('kvgate_tokenizer_kept_ids', 'Token ids of long chat messages kept now (at most tokenizers.keptIds; 8 bytes each, plus the text)', () => keptMessageCounts().ids);
  keepMessageIds(config.tokenizers.keptIds);

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
    relayClient: config.upstream.client,
    batchWrites: config.server.batchWrites,
  });
  m.gaugePerWorker('kvgate_worker_upstream_connections', 'Open connections relaying requests to the worker (idle and busy)', (w) => upstreams.relayConnections(w.id));
  const outliers: OutlierDetector | null = config.outlier.enabled
    ? new OutlierDetector(registry.workers, {
        minSilenceMs: config.outlier.minSilenceMs,
        ttftFactor: config.outlier.ttftFactor,
        checkIntervalMs: config.outlier.checkIntervalMs,
        clock,
        attemptsOn: (id) => relay.attemptsOn(id),
        prefillRate: (w) => prefillRateOf(policy, w),
        onSuspect: (w, reason) => {
          m.outlierSuspicions.labels(w.id).inc();
          registry.breaker(w.id).onFailure();
          logger.warn({ worker: w.id, reason }, 'worker suspected hung: routed around');
        },
        onClear: (w) => logger.info({ worker: w.id }, 'worker responding again'),
      })
    : null;

  // LoRA adapters a worker lists or an operator loads at run time (/admin/adapters).
  const adapterAdmin = createAdapterAdmin({
    registry,
    upstreams,
    logger,
    aliases: () => config.aliases,
    cascadePools: () => new Set(config.speculative.cascades.flatMap((c) => [c.targetPool, c.draftPool])),
    timeoutMs: ADAPTER_CALL_TIMEOUT_MS,
  });
  const checkFailed = new Set<string>();
  const speedClasses = new SpeedClasses((fields, msg) => logger.warn(fields, msg));
  const { scraper, health } = createFleetWatch({
    config,
    workers: registry.workers,
    upstreams,
    clock,
    logger,
    metrics: m,
    policyScrapeIntervalMs: policy.scrapeIntervalMs,
    onWorkerDown: (id) => relay.workerDown(id),
    onModelList: adapterAdmin.onModelList,
    onCheck: (w, error) => {
      if (w.retired) return; // a check still running when a reload removed the worker
      outliers?.onWatchResult(w, error);
      // A worker unreachable to its checks that answers again was restarted or reconnected: its
      // breaker (opened by the failures meanwhile) need not sit out the whole cool-down.
      if (error !== null) checkFailed.add(w.id);
      else {
        if (checkFailed.delete(w.id)) registry.breaker(w.id).onRecovered();
        speedClasses.update(w, registry.workers);
      }
    },
  });

  const relay: Relay = new Relay({
    router,
    fleet: registry,
    upstreams,
    metrics: m,
    clock,
    firstByteMs: config.timeouts.firstByteMs,
    // A long prompt's first token comes after its prefill: the first-byte timeout stretches to the
    // same allowance outlier detection gives it (outlier.ttftFactor × its prefill at the worker's rate).
    prefillAllowanceMs: (w, tokens) => (config.outlier.ttftFactor * 1000 * tokens) / prefillRateOf(policy, w),
    batchWrites: config.server.batchWrites,
    retries: config.retry.attempts,
    retryAfterSeconds: config.limits.retryAfterSeconds,
    logger,
    watch: outliers ?? undefined,
  });

  // Loaded in start(): `hf:` tokenizers read their files asynchronously.
  const tokenizers = new PromptTokenizers(
    config.tokenizers,
    opts.tokenizerFor,
    (spec, message) => logger.warn({ tokenizer: spec, err: message }, 'tokenizer thread died: long prompts are tokenized on the event loop until it is back'),
    (spec, message) => logger.warn({ tokenizer: spec }, `tokenizer: ${message}`),
  );
  m.counterFrom('kvgate_tokenizer_thread_prompts_total', 'Long prompts (1,024 characters or more) an hf: tokenizer encoded on a worker thread, off the event loop', () => tokenizers.stats().threadPrompts);
  m.counterFrom('kvgate_tokenizer_thread_fallbacks_total', 'Long prompts an hf: tokenizer encoded on the event loop because no tokenizer thread could take them', () => tokenizers.stats().threadFallbacks);
  const stages: GatewayStage[] = [];
  const earlyStages: GatewayStage[] = [];
  // A LoRA adapter shares its base model's tokenizer (`tokenizers` names base models).
  const prepare = (ctx: RequestContext): Promise<void> | undefined => prepareRouting(ctx, tokenizers.for(registry.adapterOf(ctx.model) ?? ctx.model), config.timeouts.assumedMaxTokens, policy.readsPromptTokens !== false, policy.prepare && ((rr, ws) => policy.prepare!(rr, ws)));
  const services: GatewayService[] = [];
  const active = new Set<RequestContext>();
  const tenants = new TenantDirectory(config.tenants, config.admin.digests);
  const extraRoutes = new Map<string, LocalRoute>([['/admin/adapters', adapterAdmin.route]]);
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
  // Replicas share rate limits and routing knowledge through Redis when a URL is configured.
  const shared = setupSharedState({
    config: config.shared,
    limits: new Map(config.tenants.map((t) => [t.id, t.limits])),
    index,
    capacityOf: (id) => registry.get(id)?.numGpuBlocks,
    breakerOf: (id) => {
      const w = registry.get(id);
      const breaker = registry.breakers.get(id);
      return w && breaker ? { breaker, url: w.url } : undefined;
    },
    workerIds: () => registry.workers.map((w) => w.id),
    router,
    workerOf: (id) => registry.get(id),
    workers: () => registry.workers,
    maxRequestMs: config.caps.maxRequestMs,
    clock,
    logger,
    registry: m.registry,
  });
  if (shared) {
    shareBreaker = shared.onBreakerTransition;
    services.push({ name: 'shared-state', start: () => shared.start(), close: () => shared.close() });
    extraRoutes.set('/admin/shared', { methods: ['GET', 'HEAD'], handle: (_req, res) => json(res, 200, JSON.stringify(shared.status())) });
  }
  // The live dashboard: /dashboard and /dashboard/state (admin key when keys are configured).
  for (const [path, route] of dashboardRoutes({ tenants, registry: m.registry, describeWorkers: () => registry.describeAll() })) extraRoutes.set(path, route);
  // Admission runs first among the stages added with use() (after the response cache).
  const admission = setupAdmission({
    config,
    fleet: registry,
    clock,
    registry: m.registry,
    staleAfterMs: router.staleAfterMs,
    rateLimiter: shared?.rateLimiter ?? undefined,
  });
  stages.push(admission.stage);
  services.push(admission.service);
  // After admission's narrowing: a Responses API continuation can only be served where its
  // previous response is stored.
  // With tenant keys configured, a continuation whose owner is not known is refused.
  const affinity = new ResponseAffinity(100_000, shared?.responses ?? null, undefined, () => !tenants.open);
  stages.push(affinity.stage());
  let closing = false;
  let draining = false;
  const cacheSaltFor = createCacheSalter(config, logger);
  // A tenant's pending bodies may hold this share of the connection budget (server is restart-only).
  const tenantSlots = new TenantSlots(() => Math.max(1, Math.floor(config.server.tenantPendingBodyShare * config.server.maxConnections)));
  const handler = createHandler({
    config,
    tenantSlots,
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
    isDraining: () => draining || closing,
    cacheSaltFor,
    responseLookup: (path, query, req, res) =>
      lookupResponse({ affinity, fleet: registry, tenants, logger, firstByteMs: () => relay.firstByteMs }, path, query, req, res),
    onDrain: (w, on) => {
      logger.info({ worker: w.id, draining: on, inflight: w.inflightCount }, on ? 'worker draining: no new requests' : 'worker back in routing');
      shared?.drains?.set(w, on);
    },
  });

  const sc = config.server;
  const connections = new ConnectionGuard(sc);
  const serverOptions = {
    keepAliveTimeout: sc.keepAliveTimeoutMs,
    headersTimeout: sc.headersTimeoutMs,
    // Node's own whole-request timer is off: the body has its own (server.bodyTimeoutMs, answered
    // 408 in OpenAI's shape by the handler) and responses are bounded by the request deadline.
    requestTimeout: 0,
    // How often Node checks headersTimeout (default 30 s): a stalled client is closed within
    // headersTimeoutMs plus this.
    connectionsCheckingInterval: Math.min(1_000, sc.headersTimeoutMs),
  };
  const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    if (connections.admit(req, res)) handler(req, res);
  };
  // HTTPS with listen.tls: the certificate is read again at every config reload (refreshTls).
  const tlsFiles = config.listen.tls;
  let server: Server;
  let refreshTls = (): void => undefined;
  if (tlsFiles) {
    const tls = readTls(tlsFiles);
    if (!tls.ok) throw new ConfigError([tls.problem]);
    // A TLS handshake must finish as fast as the headers must arrive.
    const https = createTlsServer({ ...serverOptions, ...tls.options, handshakeTimeout: sc.headersTimeoutMs }, onRequest);
    server = https;
    refreshTls = () => {
      const next = readTls(tlsFiles);
      if (!next.ok) {
        logger.warn({ err: next.problem }, 'TLS certificate not reloaded: the one in use stays');
        return;
      }
      https.setSecureContext(next.options);
    };
  } else {
    server = createServer(serverOptions, onRequest);
  }
  // Over TLS a connection is counted once its handshake is done (its TLS socket is the request's).
  connections.attach(server, tlsFiles ? 'secureConnection' : 'connection');

  // KV-event subscribers feed the policy's prefix index; created on first use by a reload when no
  // worker had kvEvents at start.
  let kvEvents: KvEventsService | null = null;
  let gatewayStarted = false;
  const ensureKvEvents = (endpoints: GatewayConfig['kvEvents']): KvEventsService | null => {
    if (!index) return null;
    if (!kvEvents) {
      kvEvents = createKvEventsService({ endpoints, index, fleet: registry, scraper, clock, logger, tokenizers, strictParity: config.tokenizers.strictParity, registry: m.registry });
      registerKvEventMetrics(m.registry, kvEvents.subscribers);
      services.push(kvEvents);
    }
    return kvEvents;
  };
  if (config.kvEvents.length > 0) {
    if (index) ensureKvEvents(config.kvEvents);
    else logger.warn({ policy: policy.name }, 'kvEvents are configured but the policy keeps no prefix index: ignored');
  } else if (policy.usesKvEvents) {
    logger.warn({ policy: policy.name }, 'the policy routes on KV events but no worker has kvEvents configured: it will see no cached prefixes');
  }

  const reloader = new ConfigReloader({
    config,
    registry,
    scraper,
    health,
    upstreams,
    relay,
    policy,
    index,
    admission,
    tenants,
    kvEvents: () => {
      const had = kvEvents !== null;
      const svc = ensureKvEvents([]);
      // Created by this reload in a running gateway: start it (it subscribes to nothing yet).
      if (svc && !had && gatewayStarted) void svc.start?.();
      return svc;
    },
    logger,
    metricsRegistry: m.registry,
    forgetWorker: (w) => {
      policy.forgetWorker?.(w);
      void m.forgetWorker(w.id);
    },
    source: opts.configSource,
    cacheActive: cache !== null,
  });
  extraRoutes.set('/admin/config', reloader.route());

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
    connections,
    tenantSlots,
    outliers,
    get draining() {
      return draining;
    },
    use: (stage) => void (stage.early ? earlyStages : stages).push(stage),
    addWorkerDescriber: (d) => registry.addDescriber(d),
    addService: (svc) => {
      services.push(svc);
      if (started) void Promise.resolve(svc.start?.()).catch((e: Error) => logger.error({ err: e, service: svc.name }, 'service failed to start'));
    },
    get inflight() {
      return active.size;
    },
    reloadConfig: (next, fileHash = null) => {
      const outcome = reloader.apply(next, fileHash);
      refreshTls();
      return outcome;
    },
    rejectConfig: (errors, fileHash = null) => reloader.reject(errors, fileHash),
    configStatus: () => reloader.status(),
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
        outliers?.start();
      }
      for (const svc of services) await svc.start?.();
      gatewayStarted = true;
      const addr = server.address() as AddressInfo;
      const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
      started = { url: `${tlsFiles ? 'https' : 'http'}://${host}:${addr.port}`, port: addr.port };
      logger.info({ url: started.url, workers: registry.workers.length, policy: policy.name }, 'kvgate listening');
      if (tenants.open && !isLoopback(addr.address)) {
        logger.warn(
          { listen: started.url },
          'kvgate listens on a non-loopback address with no client API keys configured: anyone who can reach it can use the workers (configure tenants[].keys)',
        );
      }
      const sharedCache = [...config.pools].filter(([, p]) => p.cacheIsolation === 'none').map(([name]) => name);
      if (sharedCache.length > 0 && config.tenants.length > 1) {
        logger.warn(
          { pools: sharedCache, tenants: config.tenants.length },
          "cacheIsolation: none on pools several tenants use: a tenant can tell from usage.prompt_tokens_details.cached_tokens (and from timing) whether another tenant sent the same prompt (set cacheIsolation: tenant)",
        );
      }
      return started;
    },
    shutdown() {
      if (!draining) {
        draining = true;
        logger.info({ drainDelayMs: config.shutdown.drainDelayMs }, 'draining: /ready answers 503');
      }
      return (async () => {
        if (!closed) await sleep(config.shutdown.drainDelayMs);
        await this.close();
      })();
    },
    close() {
      closed ??= (async () => {
        closing = true;
        reloader.close();
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
        outliers?.stop();
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
        await tokenizers.close();
        flushLogger(logger);
      })();
      return closed;
    },
  };
}

/**
 * Per-tenant cache salts for pools with `cacheIsolation: tenant`: HMAC-SHA256(secret, tenant id),
 * never anything a client sent. Without `cacheSalt.secret` a random secret is drawn per process,
 * which isolates as well but means gateway replicas (and restarts) do not share salts, so their
 * tenants miss each other's cached prefixes on the workers.
 */
function createCacheSalter(config: GatewayConfig, logger: Logger): (pool: string | undefined, tenant: string) => string | null {
  // Read per request: a reload may add pools or change their isolation.
  const isolated = (pool: string): boolean => config.pools.get(pool)?.cacheIsolation === 'tenant';
  let secret: string | null = null;
  const salts = new Map<string, string>();
  return (pool, tenant) => {
    if (pool === undefined || !isolated(pool)) return null;
    if (secret === null) {
      secret = config.cacheSaltSecret;
      if (secret === null) {
        secret = randomBytes(32).toString('hex');
        const pools = [...config.pools].filter(([, p]) => p.cacheIsolation === 'tenant').map(([name]) => name);
        logger.warn({ pools }, 'cacheIsolation without cacheSalt.secret: a random secret per process (replicas will not share salts)');
      }
    }
    let s = salts.get(tenant);
    if (s === undefined) salts.set(tenant, (s = createHmac('sha256', secret).update(`kvgate-cache-salt:${tenant}`).digest('base64url').slice(0, 32)));
    return s;
  };
}

function isLoopback(address: string): boolean {
  return address === '::1' || address.startsWith('127.') || address === '::ffff:127.0.0.1';
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** The prefill rate the policy measures or assumes for the worker, tokens/s (outliers.ts's default if it has none). */
function prefillRateOf(policy: Policy, w: WorkerState): number {
  const r = policy.prefillRate?.(w);
  return r !== undefined && r > 0 && Number.isFinite(r) ? r : DEFAULT_PREFILL_TOKENS_PER_SEC;
}
