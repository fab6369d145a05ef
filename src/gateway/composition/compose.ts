/**
 * The gateway's composition root: builds every member of a gateway from its config and lists them
 * (registry, fleet watch, router, relay, admission, cache, shared state, the pipeline of stages,
 * local routes, the request handler and the config reloader). Nothing here listens or starts:
 * the server is server/http-server.ts, start and stop are lifecycle.ts.
 */
import { TenantDirectory } from '../../admission/tenants.js';
import type { ResponseCache } from '../../cache/response-cache.js';
import type { CacheStore } from '../../cache/store.js';
import type { GatewayConfig } from '../../config/index.js';
import { registerKvEventMetrics } from '../../fleet/kv-events-metrics.js';
import type { HealthProber } from '../../fleet/health.js';
import type { WorkerRegistry } from '../../fleet/registry.js';
import type { MetricsScraper } from '../../fleet/scraper.js';
import { SpeedClasses } from '../../fleet/speed-classes.js';
import { Upstreams } from '../../fleet/upstreams.js';
import type { Router } from '../../scheduler/router.js';
import type { Policy } from '../../scheduler/types.js';
import type { GatewayStage } from '../../request/stage.js';
import { setupSharedState, type SharedState } from '../../shared/setup.js';
import { createLogger, type Logger } from '../../telemetry/logger.js';
import type { GatewayMetrics } from '../../telemetry/metrics.js';
import type { Tokenizer } from '../../tokenizer/types.js';
import { systemClock, type Clock } from '../../util/clock.js';
import { seededRng, type Rng } from '../../util/rng.js';
import { createAdapterAdmin } from '../admin/adapter-admin.js';
import { ConfigReloader } from '../admin/config-reload.js';
import { json, type LocalRoute } from '../admin/local-routes.js';
import { dashboardRoutes } from '../dashboard/routes.js';
import { createFleetWatch } from '../fleet-watch/fleet-watch.js';
import { kvEventsService as createKvEventsService, type KvEventsService } from '../fleet-watch/kv-events-service.js';
import { OutlierDetector } from '../fleet-watch/outliers.js';
import { setupAdmission, type AdmissionSetup } from '../pipeline/admission-stage.js';
import type { RequestContext } from '../../request/context.js';
import { createHandler, type Handler } from '../pipeline/handler.js';
import { prepareRouting } from '../pipeline/prepare.js';
import { PromptTokenizers } from '../pipeline/prompt-tokenizers.js';
import { Relay } from '../pipeline/relay.js';
import { DisaggMetrics } from '../pipeline/disagg-metrics.js';
import { disaggregationStage } from '../pipeline/disagg-stage.js';
import { Pipeline } from '../pipeline/stages.js';
import { TenantSlots } from '../pipeline/tenant-slots.js';
import { ResponseAffinity } from '../responses/response-affinity.js';
import { lookupResponse } from '../responses/response-lookup.js';
import type { GatewayService } from '../types.js';
import { createCacheSalter } from './cache-salt.js';
import { setupCache } from './cache-setup.js';
import { kubernetesDiscovery } from './discovery.js';
import { buildFleet, buildRouting, prefillRateOf, type Fleet } from './fleet.js';

/** How long a worker may take to load or unload a LoRA adapter for /admin/adapters (it may fetch it first). */
const ADAPTER_CALL_TIMEOUT_MS = 120_000;

/** Where the gateway is in its life; read by the handler (/ready, refusals) and set by lifecycle.ts. */
export interface LifeState {
  /** From close() on: new requests are refused. */
  closing: boolean;
  /** From shutdown() on: /ready answers 503. */
  draining: boolean;
  /** Between start() and close(). */
  started: boolean;
}

export interface CompositionOptions {
  clock: Clock;
  logger: Logger;
  rng: Rng;
  tokenizerFor?: (model: string) => Tokenizer;
  cacheStore?: CacheStore;
  configSource?: { path: string; hash: string };
}

/** Every member of one gateway. */
export interface GatewayMembers {
  readonly config: GatewayConfig;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly registry: WorkerRegistry;
  readonly metrics: GatewayMetrics;
  readonly policy: Policy;
  readonly router: Router;
  readonly upstreams: Upstreams;
  readonly scraper: MetricsScraper;
  readonly health: HealthProber;
  readonly outliers: OutlierDetector | null;
  readonly relay: Relay;
  readonly tokenizers: PromptTokenizers;
  readonly tenants: TenantDirectory;
  readonly tenantSlots: TenantSlots;
  readonly cache: ResponseCache | null;
  readonly shared: SharedState | null;
  readonly admission: AdmissionSetup;
  /** The stages in STAGE_ORDER (the speculative ones are placed at start). */
  readonly pipeline: Pipeline;
  /** Run with the gateway: started after it listens, closed after in-flight requests end. */
  readonly services: GatewayService[];
  /** Requests in progress. */
  readonly active: Set<RequestContext>;
  readonly handler: Handler;
  /** Tokenize a request's prompt and build its routeRequest (the handler's prepareRouting). */
  readonly prepare: (ctx: RequestContext) => Promise<void> | undefined;
  /** The tenant's cache salt for a pool, or null (the handler's cacheSaltFor). */
  readonly cacheSaltFor: (pool: string | undefined, tenant: string) => string | null;
  readonly reloader: ConfigReloader;
  readonly life: LifeState;
}

/**
 * composeGateway with what was not given filled in: the system clock, a logger as the config says,
 * an rng seeded from policy.seed (or at random). What `kvgate serve` and `kvgate epp` both build on.
 */
export function composeWithDefaults(config: GatewayConfig, o: Partial<CompositionOptions>): GatewayMembers {
  return composeGateway(config, {
    ...o,
    clock: o.clock ?? systemClock,
    logger: o.logger ?? createLogger({ level: config.log.level, pretty: config.log.pretty }),
    rng: o.rng ?? seededRng(config.policy.seed ?? (Math.random() * 2 ** 32) >>> 0),
  });
}

function composeGateway(config: GatewayConfig, o: CompositionOptions): GatewayMembers {
  const { clock, logger } = o;
  const now = (): number => clock.now();
  const fleet = buildFleet(config, now, logger);
  const { registry, metrics: m } = fleet;
  const { policy, router } = buildRouting(config, registry, clock, o.rng, logger);
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
    o.tokenizerFor,
    (spec, message) => logger.warn({ tokenizer: spec, err: message }, 'tokenizer thread died: long prompts are tokenized on the event loop until it is back'),
    (spec, message) => logger.warn({ tokenizer: spec }, `tokenizer: ${message}`),
  );
  m.counterFrom('kvgate_tokenizer_thread_prompts_total', 'Long prompts (1,024 characters or more) an hf: tokenizer encoded on a worker thread, off the event loop', () => tokenizers.stats().threadPrompts);
  m.counterFrom('kvgate_tokenizer_thread_fallbacks_total', 'Long prompts an hf: tokenizer encoded on the event loop because no tokenizer thread could take them', () => tokenizers.stats().threadFallbacks);
  const pipeline = new Pipeline();
  // A LoRA adapter shares its base model's tokenizer (`tokenizers` names base models).
  const prepare = (ctx: RequestContext): Promise<void> | undefined => prepareRouting(ctx, tokenizers.for(registry.adapterOf(ctx.model) ?? ctx.model), config.timeouts.assumedMaxTokens, policy.readsPromptTokens !== false, policy.prepare && ((rr, ws) => policy.prepare!(rr, ws)));
  const services: GatewayService[] = [];
  const tenants = new TenantDirectory(config.tenants, config.admin.digests);
  const routes = new Map<string, LocalRoute>([['/admin/adapters', adapterAdmin.route]]);
  let cache: ResponseCache | null = null;
  // On for every tenant (cache.enabled), or only for the tenants that turn it on for themselves.
  if (config.cache.enabled || config.tenants.some((t) => t.cache.enabled === true)) {
    const c = setupCache({ config: config.cache, tenants, metrics: m, logger, clock, prepare, forward: (ctx) => relay.forward(ctx), store: o.cacheStore });
    cache = c.cache;
    pipeline.place(c.stage);
    services.push(c.service);
    routes.set('/admin/cache', c.route);
  }
  // Replicas share rate limits and routing knowledge through Redis when a URL is configured.
  const shared = shareState(config, { fleet, router, policy, clock, logger, services, routes });
  // The live dashboard: /dashboard and /dashboard/state (admin key when keys are configured).
  for (const [path, route] of dashboardRoutes({ tenants, registry: m.registry, describeWorkers: () => registry.describeAll() })) routes.set(path, route);
  const admission = setupAdmission({
    config,
    fleet: registry,
    clock,
    registry: m.registry,
    staleAfterMs: router.staleAfterMs,
    rateLimiter: shared?.rateLimiter ?? undefined,
  });
  pipeline.place(admission.stage);
  services.push(admission.service);
  // After admission's narrowing: a Responses API continuation can only be served where its
  // previous response is stored. With tenant keys configured, a continuation whose owner is not
  // known is refused.
  const affinity = new ResponseAffinity(100_000, shared?.responses ?? null, undefined, () => !tenants.open);
  pipeline.place(affinity.stage());
  const disaggregation = disaggregationFor(config, { router, registry, upstreams, clock, logger, metrics: m, policy });
  if (disaggregation) pipeline.place(disaggregation);

  const life: LifeState = { closing: false, draining: false, started: false };
  const active = new Set<RequestContext>();
  // A tenant's pending bodies may hold this share of the connection budget (server is restart-only).
  const tenantSlots = new TenantSlots(() => Math.max(1, Math.floor(config.server.tenantPendingBodyShare * config.server.maxConnections)));
  const cacheSaltFor = createCacheSalter(config, logger);
  const handler = createHandler({
    config,
    tenantSlots,
    fleet: registry,
    relay,
    metrics: m,
    logger,
    clock,
    stages: pipeline.late,
    earlyStages: pipeline.early,
    prepareRouting: prepare,
    tenants,
    extraRoutes: routes,
    active,
    isClosing: () => life.closing,
    isDraining: () => life.draining || life.closing,
    cacheSaltFor,
    responseLookup: (path, query, req, res) =>
      lookupResponse({ affinity, fleet: registry, tenants, logger, firstByteMs: () => relay.firstByteMs }, path, query, req, res),
    onDrain: (w, on) => {
      logger.info({ worker: w.id, draining: on, inflight: w.inflightCount }, on ? 'worker draining: no new requests' : 'worker back in routing');
      shared?.drains?.set(w, on);
    },
  });

  const kvEvents = kvEventsFor(config, { policy, registry, scraper, metrics: m, tokenizers, services, life, clock, logger });
  const reloader = new ConfigReloader({
    config,
    registry,
    scraper,
    health,
    upstreams,
    relay,
    policy,
    index: policy.prefixIndex,
    admission,
    tenants,
    kvEvents,
    logger,
    metricsRegistry: m.registry,
    forgetWorker: (w) => {
      policy.forgetWorker?.(w);
      void m.forgetWorker(w.id);
    },
    source: o.configSource,
    cacheActive: cache !== null,
  });
  routes.set('/admin/config', reloader.route());
  const discovery = kubernetesDiscovery(config, reloader, logger);
  if (discovery) {
    services.push(discovery);
    routes.set('/admin/discovery', { methods: ['GET', 'HEAD'], handle: (_req, res) => json(res, 200, JSON.stringify(discovery.status())) });
  }

  return { config, clock, logger, registry, metrics: m, policy, router, upstreams, scraper, health, outliers, relay, tokenizers, tenants, tenantSlots, cache, shared, admission, pipeline, services, active, handler, prepare, cacheSaltFor, reloader, life };
}

/** A model whose workers have roles is served disaggregated (prefill, then decode elsewhere); null: no roles. */
function disaggregationFor(
  config: GatewayConfig,
  d: { router: Router; registry: WorkerRegistry; upstreams: Upstreams; clock: Clock; logger: Logger; metrics: GatewayMetrics; policy: Policy },
): GatewayStage | null {
  if (!config.workers.some((w) => (w.role ?? 'both') !== 'both')) return null;
  const { policy } = d;
  return disaggregationStage({
    router: d.router,
    fleet: d.registry,
    upstreams: d.upstreams,
    clock: d.clock,
    logger: d.logger,
    metrics: new DisaggMetrics(d.metrics.registry),
    firstByteMs: config.timeouts.firstByteMs,
    prefillAllowanceMs: (w, tokens) => (config.outlier.ttftFactor * 1000 * tokens) / prefillRateOf(policy, w),
    prefillRate: (w) => prefillRateOf(policy, w),
    options: () => config.disaggregation,
  });
}

/** Shared state through Redis (shared.url): its service, /admin/shared and the breakers it publishes. */
function shareState(
  config: GatewayConfig,
  d: { fleet: Fleet; router: Router; policy: Policy; clock: Clock; logger: Logger; services: GatewayService[]; routes: Map<string, LocalRoute> },
): SharedState | null {
  const { registry } = d.fleet;
  const shared = setupSharedState({
    config: config.shared,
    limits: new Map(config.tenants.map((t) => [t.id, t.limits])),
    index: d.policy.prefixIndex,
    capacityOf: (id) => registry.get(id)?.numGpuBlocks,
    breakerOf: (id) => {
      const w = registry.get(id);
      const breaker = registry.breakers.get(id);
      return w && breaker ? { breaker, url: w.url } : undefined;
    },
    workerIds: () => registry.workers.map((w) => w.id),
    router: d.router,
    workerOf: (id) => registry.get(id),
    workers: () => registry.workers,
    maxRequestMs: config.caps.maxRequestMs,
    clock: d.clock,
    logger: d.logger,
    registry: d.fleet.metrics.registry,
  });
  if (shared) {
    if (shared.onBreakerTransition) d.fleet.shareBreakers(shared.onBreakerTransition);
    d.services.push({ name: 'shared-state', start: () => shared.start(), close: () => shared.close() });
    d.routes.set('/admin/shared', { methods: ['GET', 'HEAD'], handle: (_req, res) => json(res, 200, JSON.stringify(shared.status())) });
  }
  return shared;
}

/**
 * KV-event subscribers feed the policy's prefix index. Made at once for the workers configured
 * with kvEvents; else on first use by a reload that adds one (and started then if the gateway
 * runs). The returned function gives the service, or null when the policy keeps no index.
 */
function kvEventsFor(
  config: GatewayConfig,
  d: { policy: Policy; registry: WorkerRegistry; scraper: MetricsScraper; metrics: GatewayMetrics; tokenizers: PromptTokenizers; services: GatewayService[]; life: LifeState; clock: Clock; logger: Logger },
): () => KvEventsService | null {
  const index = d.policy.prefixIndex;
  let kvEvents: KvEventsService | null = null;
  const ensure = (endpoints: GatewayConfig['kvEvents']): KvEventsService | null => {
    if (!index) return null;
    if (!kvEvents) {
      kvEvents = createKvEventsService({
        endpoints,
        index,
        fleet: d.registry,
        scraper: d.scraper,
        clock: d.clock,
        logger: d.logger,
        tokenizers: d.tokenizers,
        strictParity: config.tokenizers.strictParity,
        registry: d.metrics.registry,
      });
      registerKvEventMetrics(d.metrics.registry, kvEvents.subscribers);
      d.services.push(kvEvents);
    }
    return kvEvents;
  };
  if (config.kvEvents.length > 0) {
    if (index) ensure(config.kvEvents);
    else d.logger.warn({ policy: d.policy.name }, 'kvEvents are configured but the policy keeps no prefix index: ignored');
  } else if (d.policy.usesKvEvents) {
    d.logger.warn({ policy: d.policy.name }, 'the policy routes on KV events but no worker has kvEvents configured: it will see no cached prefixes');
  }
  return () => {
    const had = kvEvents !== null;
    const svc = ensure([]);
    // Created by this reload in a running gateway: start it (it subscribes to nothing yet).
    if (svc && !had && d.life.started) void svc.start?.();
    return svc;
  };
}
