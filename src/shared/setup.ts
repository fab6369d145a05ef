/**
 * Shared state of gateway replicas through Redis, put together from `shared` in the config (on
 * when `shared.redis.url` or REDIS_URL is set):
 *
 * - rate limits (`shared.rateLimits`): the admission stage charges tenants through
 *   RedisRateLimiter, falling back to this replica's own limiter while Redis is away;
 * - routing knowledge (`shared.routing`): the policy's prefix index publishes its predictions and
 *   learns the other replicas' (RoutingChannel);
 * - circuit breakers (`shared.breakers`): a breaker opened (or closed after a good probe) by one
 *   replica is applied by the others (BreakerChannel);
 * - in-flight load (`shared.load`): each replica's dispatches, first tokens and ends per worker are
 *   mirrored into the others' accounting (LoadChannel);
 * - Responses API continuations (`shared.responses`): which worker holds each stored response
 *   (RedisResponseDirectory), so `previous_response_id` finds it from any replica;
 * - workers drained for maintenance (`shared.drains`): a drain sent to one replica applies to
 *   every replica within a second (DrainSync).
 *
 * Visible in /metrics (`kvgate_shared_*`) and at GET /admin/shared:
 *   {"redis": "redis://host:port", "up": true, "replica": "...", "reconnects": 0,
 *    "rate_limits": {"shared": N, "fallback": N, "renewed": N, "renewFailed": N, "leases": N} | null,
 *    "routing": {"published": N, "received": N, "dropped": N, ...} | null,
 *    "breakers": {"published": N, "opened": N, "closed": N, "stale": N, ..., "open": {worker: ms left}} | null,
 *    "load": {"published": N, "received": N, "dropped": N, "expired": N, "badMessages": N, "mirrored": N} | null,
 *    "responses": {"stored": N, "found": N, "notFound": N, "failed": N} | null,
 *    "drains": {"written": N, "applied": N, "failed": N, "draining": [worker, ...]} | null}
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { RateLimiter, RateLimitStore, TenantLimits } from '../admission/rate-limit.js';
import type { BreakerState, CircuitBreaker, TransitionCause } from '../fleet/circuit-breaker.js';
import type { PrefixIndex } from '../scheduler/index/prefix-index.js';
import type { Logger } from '../telemetry/logger.js';
import type { Clock } from '../util/clock.js';
import type { WorkerState } from '../fleet/worker-state.js';
import type { Router } from '../scheduler/router.js';
import { BreakerChannel } from './breaker-channel.js';
import { DrainSync } from './drain-sync.js';
import { LoadChannel } from './load-channel.js';
import { RedisLink } from './redis-link.js';
import { RedisRateLimiter } from './redis-rate-limit.js';
import { RedisResponseDirectory, type ResponseDirectory } from './response-directory.js';
import { RoutingChannel } from './routing-channel.js';

export interface SharedConfig {
  redis: { url?: string; keyPrefix: string; timeoutMs: number; connectTimeoutMs: number };
  rateLimits: boolean;
  routing: boolean;
  breakers: boolean;
  load: boolean;
  responses: boolean;
  drains: boolean;
  publishIntervalMs: number;
  leaseMs: number;
}

export interface SharedStateDeps {
  config: SharedConfig;
  limits: ReadonlyMap<string, TenantLimits>;
  /** The policy's prefix index (none: nothing to share for routing). */
  index: PrefixIndex | undefined;
  capacityOf: (worker: string) => number | undefined;
  /** This replica's breaker and URL for a worker id (read on every message: workers may change). */
  breakerOf: (worker: string) => { breaker: CircuitBreaker; url: string } | undefined;
  /** This replica's worker ids (for /admin/shared). */
  workerIds: () => readonly string[];
  /** This replica's router (its charges are published) and WorkerState by id (others' are mirrored). */
  router?: Pick<Router, 'loadObserver'>;
  workerOf?: (id: string) => WorkerState | undefined;
  /** This replica's workers (drains are applied to them). */
  workers?: () => readonly WorkerState[];
  /** The longest a request may last: a mirrored request older than this is dropped. */
  maxRequestMs?: number;
  clock: Clock;
  logger: Logger;
  registry: Registry;
}

export interface SharedState {
  /** For the admission stage: wraps this replica's own limiter (null: rate limits stay local). */
  rateLimiter: ((local: RateLimiter) => RateLimitStore) | null;
  /**
   * For the breakers' transition callback: publishes this replica's own openings and closings
   * (null: breakers stay local).
   */
  onBreakerTransition: ((worker: { id: string; url: string }, to: BreakerState, cause: TransitionCause, from: BreakerState) => void) | null;
  /** Which worker holds each Responses API response, for every replica (null: kept per replica). */
  responses: ResponseDirectory | null;
  /** Workers drained through any replica (null: a drain applies to the replica it was sent to). */
  drains: DrainSync | null;
  readonly up: boolean;
  start(): Promise<void>;
  close(): Promise<void>;
  /** The /admin/shared body. */
  status(): Record<string, unknown>;
}

/** redis://user:secret@host:6379/0 → redis://host:6379/0 (no credentials in logs or /admin). */
function redact(url: string): string {
  return url.replace(/\/\/[^@/]*@/, '//');
}

/** How often each replica reads the shared set of drained workers, ms. */
const DRAIN_POLL_MS = 1_000;

export function setupSharedState(d: SharedStateDeps): SharedState | null {
  const c = d.config;
  const url = c.redis.url;
  if (url === undefined) return null;
  const shown = redact(url);
  const replicaId = `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
  const link = new RedisLink({
    url,
    timeoutMs: c.redis.timeoutMs,
    connectTimeoutMs: c.redis.connectTimeoutMs,
    onChange: (up, err) => {
      if (up) d.logger.info({ redis: shown, replica: replicaId }, 'shared state: redis connected');
      else d.logger.warn({ redis: shown, err }, 'shared state: redis unavailable, this replica uses its own state');
    },
  });
  let limiter: RedisRateLimiter | null = null;
  let lastFallbackLog = 0;
  const rateLimiter =
    c.rateLimits
      ? (local: RateLimiter): RateLimitStore =>
          (limiter = new RedisRateLimiter({
            link,
            limits: d.limits,
            local,
            keyPrefix: c.redis.keyPrefix,
            leaseMs: c.leaseMs,
            onFallback: (err) => {
              const now = Date.now();
              if (now - lastFallbackLog < 10_000) return;
              lastFallbackLog = now;
              d.logger.warn({ err: err.message }, 'shared rate limits: redis unavailable, counting in this replica');
            },
          }))
      : null;
  const channel =
    c.routing && d.index
      ? new RoutingChannel({
          link,
          index: d.index,
          clock: d.clock,
          channel: `${c.redis.keyPrefix}routing`,
          replicaId,
          publishIntervalMs: c.publishIntervalMs,
          capacityOf: d.capacityOf,
        })
      : null;
  const breakers = c.breakers
    ? new BreakerChannel({
        link,
        breakerOf: d.breakerOf,
        keyPrefix: c.redis.keyPrefix,
        replicaId,
        onApplied: (worker, to, from, ms) =>
          d.logger[to === 'open' ? 'warn' : 'info']({ worker, state: to, replica: from, ...(to === 'open' ? { forMs: ms } : {}) }, 'circuit breaker: applied from another replica'),
      })
    : null;

  const load =
    c.load && d.router && d.workerOf
      ? new LoadChannel({
          link,
          workerOf: d.workerOf,
          clock: d.clock,
          channel: `${c.redis.keyPrefix}load`,
          replicaId,
          publishIntervalMs: c.publishIntervalMs,
          maxAgeMs: d.maxRequestMs ?? 1_800_000,
        })
      : null;
  if (load) d.router!.loadObserver = load.observe;
  const drains =
    c.drains && d.workers
      ? new DrainSync({
          link,
          key: `${c.redis.keyPrefix}drained`,
          workers: d.workers,
          pollMs: DRAIN_POLL_MS,
          onApplied: (w, draining) =>
            d.logger.info({ worker: w.id, draining }, draining ? 'worker draining (from another replica): no new requests' : 'worker back in routing (from another replica)'),
        })
      : null;
  // A day: a conversation continued after that starts again from its input.
  const responses = c.responses ? new RedisResponseDirectory({ link, keyPrefix: c.redis.keyPrefix, ttlS: 86_400 }) : null;

  registerSharedMetrics(d.registry, { link, limiter: () => limiter, channel, breakers, load, responses });

  return {
    rateLimiter,
    responses,
    drains,
    onBreakerTransition: breakers ? (w, to, cause, from) => breakers.onTransition(w, to, cause, from) : null,
    get up() {
      return link.up;
    },
    async start() {
      await link.start();
      await channel?.start();
      await breakers?.start();
      await load?.start();
      drains?.start();
      d.logger.info({ redis: shown, replica: replicaId, rateLimits: rateLimiter !== null, routing: channel !== null, breakers: breakers !== null, load: load !== null, responses: responses !== null, drains: drains !== null }, 'shared state on');
    },
    async close() {
      limiter?.close();
      channel?.close();
      breakers?.close();
      load?.close();
      drains?.close();
      await link.close();
    },
    status() {
      return {
        redis: shown,
        up: link.up,
        replica: replicaId,
        reconnects: link.reconnects,
        rate_limits: limiter ? { ...limiter.counts, leases: limiter.leasesHeld } : null,
        routing: channel ? { ...channel.counts, learned_runs: d.index?.learnedRuns ?? 0 } : null,
        breakers: breakers ? { ...breakers.counts, open: breakers.openHere(d.workerIds()) } : null,
        load: load ? { ...load.counts, mirrored: load.mirrored } : null,
        responses: responses ? { ...responses.counts } : null,
        drains: drains ? { ...drains.counts, draining: (d.workers?.() ?? []).filter((w) => w.draining).map((w) => w.id) } : null,
      };
    },
  };
}

/** The kvgate_shared_* metrics, read from the pieces at each scrape. */
function registerSharedMetrics(
  registry: Registry,
  p: {
    link: RedisLink;
    /** Made when the admission stage wraps its limiter (after this). */
    limiter: () => RedisRateLimiter | null;
    channel: RoutingChannel | null;
    breakers: BreakerChannel | null;
    load: LoadChannel | null;
    responses: RedisResponseDirectory | null;
  },
): void {
  new Gauge({
    name: 'kvgate_shared_redis_up',
    help: '1 while the Redis that gateway replicas share state through is reachable; 0 while this replica uses its own state',
    registers: [registry],
    collect() {
      this.set(p.link.up ? 1 : 0);
    },
  });
  new Counter({
    name: 'kvgate_shared_redis_reconnects_total',
    help: 'Times the shared Redis came back after being unreachable',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(p.link.reconnects);
    },
  });
  new Counter({
    name: 'kvgate_shared_rate_limit_checks_total',
    help: 'Rate-limit checks of limited tenants, by where they were counted: redis (shared) or local (Redis unavailable)',
    labelNames: ['store'],
    registers: [registry],
    collect() {
      this.reset();
      const limiter = p.limiter();
      if (!limiter) return;
      this.inc({ store: 'redis' }, limiter.counts.shared);
      this.inc({ store: 'local' }, limiter.counts.fallback);
    },
  });
  new Counter({
    name: 'kvgate_shared_routing_blocks_total',
    help: 'Routing knowledge (block-hash runs) published to and received from other replicas, and dropped while Redis was unavailable',
    labelNames: ['direction'],
    registers: [registry],
    collect() {
      this.reset();
      if (!p.channel) return;
      this.inc({ direction: 'published' }, p.channel.counts.published);
      this.inc({ direction: 'received' }, p.channel.counts.received);
      this.inc({ direction: 'dropped' }, p.channel.counts.dropped);
    },
  });

  new Counter({
    name: 'kvgate_shared_breaker_transitions_total',
    help: 'Circuit-breaker openings and closings shared with other replicas: published by this replica, dropped (Redis unavailable), applied here (opened, closed), or ignored (stale, unchanged, unknown_worker, bad); reasserted: own transitions put back after an older one of another replica overtook them',
    labelNames: ['outcome'],
    registers: [registry],
    collect() {
      this.reset();
      if (!p.breakers) return;
      const k = p.breakers.counts;
      this.inc({ outcome: 'published' }, k.published);
      this.inc({ outcome: 'dropped' }, k.dropped);
      this.inc({ outcome: 'opened' }, k.opened);
      this.inc({ outcome: 'closed' }, k.closed);
      this.inc({ outcome: 'stale' }, k.stale);
      this.inc({ outcome: 'unchanged' }, k.unchanged);
      this.inc({ outcome: 'unknown_worker' }, k.unknownWorker);
      this.inc({ outcome: 'bad' }, k.badMessages);
      this.inc({ outcome: 'reasserted' }, k.reasserted);
    },
  });

  new Counter({
    name: 'kvgate_shared_load_events_total',
    help: "In-flight load events (dispatch, first token, end) shared with other replicas: published, received, dropped (Redis unavailable), expired (mirrored requests ended because their replica went silent or they outlived the longest request)",
    labelNames: ['direction'],
    registers: [registry],
    collect() {
      this.reset();
      if (!p.load) return;
      for (const k of ['published', 'received', 'dropped', 'expired'] as const) this.inc({ direction: k }, p.load.counts[k]);
    },
  });
  new Gauge({
    name: 'kvgate_shared_load_mirrored_requests',
    help: "Other replicas' in-flight requests counted in this replica's worker accounting",
    registers: [registry],
    collect() {
      this.set(p.load?.mirrored ?? 0);
    },
  });

  new Counter({
    name: 'kvgate_shared_response_lookups_total',
    help: 'Responses API continuations and answers shared with other replicas: stored (this replica wrote which worker holds a response), found and not_found (lookups of ids this replica had not seen), failed (Redis unavailable)',
    labelNames: ['result'],
    registers: [registry],
    collect() {
      this.reset();
      if (!p.responses) return;
      const k = p.responses.counts;
      this.inc({ result: 'stored' }, k.stored);
      this.inc({ result: 'found' }, k.found);
      this.inc({ result: 'not_found' }, k.notFound);
      this.inc({ result: 'failed' }, k.failed);
    },
  });
}
