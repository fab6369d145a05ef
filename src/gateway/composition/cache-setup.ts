/**
 * Puts the response cache together from the configuration: the store (memory or Redis), its
 * metrics, the ResponseCache, the stage, the service that connects and closes the store, and the
 * /admin/cache route:
 *
 *   GET    /admin/cache               store, entries, bytes, results since start, hit ratio
 *   DELETE /admin/cache               drop every entry       → {"deleted": N, "tenant": null}
 *   DELETE /admin/cache?tenant=ID     drop one tenant's      → {"deleted": N, "tenant": "ID"}
 */
import type { TenantDirectory } from '../../admission/tenants.js';
import { ApiError, sendError } from '../../api/errors.js';
import { MemoryStore } from '../../cache/memory-store.js';
import { CacheMetrics } from '../../cache/metrics.js';
import { redactRedisUrl, RedisStore } from '../../cache/redis-store.js';
import { ResponseCache } from '../../cache/response-cache.js';
import type { CacheStore } from '../../cache/store.js';
import type { CacheConfig } from '../../config/index.js';
import type { Logger } from '../../telemetry/logger.js';
import type { GatewayMetrics } from '../../telemetry/metrics.js';
import type { Clock } from '../../util/clock.js';
import { cacheStage } from '../pipeline/cache-stage.js';
import type { RequestContext } from '../../request/context.js';
import { json, type LocalRoute } from '../admin/local-routes.js';
import type { GatewayStage } from '../../request/stage.js';
import type { GatewayService } from '../types.js';

export interface CacheSetup {
  cache: ResponseCache;
  stage: GatewayStage;
  service: GatewayService;
  route: LocalRoute;
}

export interface CacheSetupDeps {
  config: CacheConfig;
  tenants: TenantDirectory;
  metrics: GatewayMetrics;
  logger: Logger;
  clock: Clock;
  forward: (ctx: RequestContext) => Promise<void>;
  /** Tokenize and build ctx.routeRequest (the cache stage runs before that). */
  prepare: (ctx: RequestContext) => Promise<void> | undefined;
  /** A store to use instead of the configured one (tests). */
  store?: CacheStore;
}

export function createStore(c: CacheConfig, logger: Logger, clock: Clock): CacheStore {
  if (c.store === 'memory') return new MemoryStore({ maxBytes: c.memory.maxBytes, now: () => clock.now(), sweepEveryMs: 1000 });
  const url = c.redis.url!;
  const shown = redactRedisUrl(url);
  let lastWarn = 0;
  let down = false;
  return new RedisStore({
    url,
    keyPrefix: c.redis.keyPrefix,
    timeoutMs: c.redis.timeoutMs,
    connectTimeoutMs: c.redis.connectTimeoutMs,
    compressAboveBytes: c.redis.compressAboveBytes,
    onEvent: (e) => {
      if (e.type === 'ready') {
        if (down || lastWarn === 0) logger.info({ redis: shown }, 'response cache: redis connected');
        down = false;
        lastWarn = 1;
        return;
      }
      // One warning per 10 s while Redis is away: the counters tell the rest.
      const now = Date.now();
      if (now - lastWarn < 10_000) return;
      lastWarn = now;
      down = true;
      logger.warn({ redis: shown, err: e.message }, 'response cache: redis unavailable, serving without the cache');
    },
  });
}

export function setupCache(d: CacheSetupDeps): CacheSetup {
  const c = d.config;
  const store = d.store ?? createStore(c, d.logger, d.clock);
  let cache: ResponseCache | null = null;
  const metrics = new CacheMetrics(d.metrics.registry, store.kind, () => store.stats(), () => cache?.storeUp ?? true);
  cache = new ResponseCache({
    defaults: { enabled: c.enabled, ttlMs: c.ttlMs, maxEntryBytes: c.maxEntryBytes, sampled: c.sampled },
    singleFlight: c.singleFlight,
    keyPrefix: store.kind === 'redis' ? c.redis.keyPrefix : '',
    store,
    metrics,
    now: () => d.clock.now(),
    breaker: store.kind === 'redis' ? { failuresToOpen: c.redis.failuresToOpen, coolDownMs: c.redis.coolDownMs } : undefined,
  });
  const rc = cache;
  const stage = cacheStage({ cache: rc, forward: d.forward, prepare: d.prepare, clock: d.clock, logger: d.logger });
  const service: GatewayService = {
    name: 'response-cache',
    start: async () => {
      await store.start?.();
      d.logger.info({ store: store.kind, ttlMs: c.ttlMs, singleFlight: c.singleFlight }, 'response cache on');
    },
    close: () => rc.close(),
  };
  const route: LocalRoute = {
    methods: ['GET', 'HEAD', 'DELETE'],
    handle(req, res, url) {
      if (req.method !== 'DELETE') {
        const counts = metrics.counts;
        const served = counts.hit + counts.coalesced;
        const looked = served + counts.miss + counts.error;
        const st = store.stats();
        json(
          res,
          200,
          JSON.stringify({
            store: store.kind,
            store_up: rc.storeUp,
            entries: st.entries,
            bytes: st.bytes,
            in_flight: rc.flights.size,
            requests: counts,
            hit_ratio: looked === 0 ? 0 : Math.round((served / looked) * 10000) / 10000,
          }),
        );
        return;
      }
      const tenant = url.searchParams.get('tenant') ?? undefined;
      if (tenant !== undefined && d.tenants.byId(tenant) === undefined) {
        sendError(res, new ApiError(404, 'invalid_request_error', 'tenant_not_found', `no tenant '${tenant}' is configured`, 'tenant'));
        return;
      }
      rc.clear(tenant).then(
        (deleted) => {
          d.logger.info({ tenant: tenant ?? null, deleted }, 'response cache cleared');
          json(res, 200, JSON.stringify({ deleted, tenant: tenant ?? null }));
        },
        (e: Error) => sendError(res, new ApiError(503, 'server_error', 'cache_store_unavailable', `the cache store failed: ${e.message}`)),
      );
    },
  };
  return { cache: rc, stage, service, route };
}
