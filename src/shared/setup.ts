/**
 * Shared state of gateway replicas through Redis, put together from `shared` in the config (on
 * when `shared.redis.url` or REDIS_URL is set):
 *
 * - rate limits (`shared.rateLimits`): the admission stage charges tenants through
 *   RedisRateLimiter, falling back to this replica's own limiter while Redis is away;
 * - routing knowledge (`shared.routing`): the policy's prefix index publishes its predictions and
 *   learns the other replicas' (RoutingChannel).
 *
 * Visible in /metrics (`kvgate_shared_*`) and at GET /admin/shared:
 *   {"redis": "redis://host:port", "up": true, "replica": "...", "reconnects": 0,
 *    "rate_limits": {"shared": N, "fallback": N} | null,
 *    "routing": {"published": N, "received": N, "dropped": N, ...} | null}
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { RateLimiter, RateLimitStore, TenantLimits } from '../admission/rate-limit.js';
import type { PrefixIndex } from '../scheduler/index/prefix-index.js';
import type { Logger } from '../telemetry/logger.js';
import type { Clock } from '../util/clock.js';
import { RedisLink } from './redis-link.js';
import { RedisRateLimiter } from './redis-rate-limit.js';
import { RoutingChannel } from './routing-channel.js';

export interface SharedConfig {
  redis: { url?: string; keyPrefix: string; timeoutMs: number; connectTimeoutMs: number };
  rateLimits: boolean;
  routing: boolean;
  publishIntervalMs: number;
  leaseMs: number;
}

export interface SharedStateDeps {
  config: SharedConfig;
  limits: ReadonlyMap<string, TenantLimits>;
  /** The policy's prefix index (none: nothing to share for routing). */
  index: PrefixIndex | undefined;
  capacityOf: (worker: string) => number | undefined;
  clock: Clock;
  logger: Logger;
  registry: Registry;
}

export interface SharedState {
  /** For the admission stage: wraps this replica's own limiter (null: rate limits stay local). */
  rateLimiter: ((local: RateLimiter) => RateLimitStore) | null;
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

  new Gauge({
    name: 'kvgate_shared_redis_up',
    help: '1 while the Redis that gateway replicas share state through is reachable; 0 while this replica uses its own state',
    registers: [d.registry],
    collect() {
      this.set(link.up ? 1 : 0);
    },
  });
  new Counter({
    name: 'kvgate_shared_redis_reconnects_total',
    help: 'Times the shared Redis came back after being unreachable',
    registers: [d.registry],
    collect() {
      this.reset();
      this.inc(link.reconnects);
    },
  });
  new Counter({
    name: 'kvgate_shared_rate_limit_checks_total',
    help: 'Rate-limit checks of limited tenants, by where they were counted: redis (shared) or local (Redis unavailable)',
    labelNames: ['store'],
    registers: [d.registry],
    collect() {
      this.reset();
      if (!limiter) return;
      this.inc({ store: 'redis' }, limiter.counts.shared);
      this.inc({ store: 'local' }, limiter.counts.fallback);
    },
  });
  new Counter({
    name: 'kvgate_shared_routing_blocks_total',
    help: 'Routing knowledge (block-hash runs) published to and received from other replicas, and dropped while Redis was unavailable',
    labelNames: ['direction'],
    registers: [d.registry],
    collect() {
      this.reset();
      if (!channel) return;
      this.inc({ direction: 'published' }, channel.counts.published);
      this.inc({ direction: 'received' }, channel.counts.received);
      this.inc({ direction: 'dropped' }, channel.counts.dropped);
    },
  });

  return {
    rateLimiter,
    get up() {
      return link.up;
    },
    async start() {
      await link.start();
      await channel?.start();
      d.logger.info({ redis: shown, replica: replicaId, rateLimits: rateLimiter !== null, routing: channel !== null }, 'shared state on');
    },
    async close() {
      channel?.close();
      await link.close();
    },
    status() {
      return {
        redis: shown,
        up: link.up,
        replica: replicaId,
        reconnects: link.reconnects,
        rate_limits: limiter ? { ...limiter.counts } : null,
        routing: channel ? { ...channel.counts, learned_runs: d.index?.learnedRuns ?? 0 } : null,
      };
    },
  };
}
