/**
 * Per-tenant rate limits shared by every gateway replica through Redis: the same RPM, TPM, RPD and
 * TPD token buckets and concurrency limit as src/admission/rate-limit.ts, kept in Redis and
 * checked and charged by one Lua script, so two replicas can never both spend a tenant's last
 * request.
 *
 * Keys (under `keyPrefix`, per tenant): `rl:{tenant}:req` and `rl:{tenant}:tok` hashes (level, at),
 * refilled continuously at limit/60 s, expiring two minutes after last use (a full bucket needs no
 * key); `rl:{tenant}:req-day` and `rl:{tenant}:tok-day`, the same per day, expiring after two days;
 * `rl:{tenant}:active`, a sorted set of the requests in flight scored by when their lease runs
 * out. Each replica renews the leases of its own requests still in flight every `leaseMs / 3`
 * (the heartbeat, RENEW_SCRIPT), so a request lasting longer than the lease keeps its slot, and a
 * replica that dies (or loses Redis) mid-request holds a tenant's concurrency for at most
 * `leaseMs` after its last heartbeat — seconds, not the length of the longest request. The
 * scripts read Redis's own clock (TIME), so replicas' clocks need not agree. A request's token
 * reservations are settled to what it used by a third script at its end.
 *
 * When Redis is down or slow (the command fails or times out) the request is checked against the
 * replica's own in-process limiter instead — each replica then enforces the whole limit alone, the
 * documented degradation — and the fallback is counted. A release that cannot reach Redis is left
 * to the lease (no longer renewed), and its reservation stands.
 */
import {
  bucketHeaders,
  DAY_MS,
  hasLimits,
  MINUTE_MS,
  refuse,
  type RateCheck,
  type RateLimitStore,
  type RefusalReason,
  type TenantLimits,
} from '../admission/rate-limit.js';
import type { RedisLink } from './redis-link.js';

/**
 * KEYS: requests and tokens buckets per minute, active set, requests and tokens buckets per day.
 * ARGV: rpm, tpm, concurrent, tokens, request id, lease ms, rpd, tpd (a limit of 0: none).
 * Returns the refusal (0 none, then REASONS' order) and the four buckets' levels.
 */
const SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tokens = tonumber(ARGV[4])
local conc = tonumber(ARGV[3])
local lease = tonumber(ARGV[6])
-- key, limit, window ms, what one request takes
local buckets = {
  {KEYS[1], tonumber(ARGV[1]), 60000, 1, 2},
  {KEYS[4], tonumber(ARGV[7]), 86400000, 1, 4},
  {KEYS[2], tonumber(ARGV[2]), 60000, tokens, 3},
  {KEYS[5], tonumber(ARGV[8]), 86400000, tokens, 5},
}
local function level(key, limit, window)
  local v = redis.call('HMGET', key, 'l', 'a')
  local l = tonumber(v[1])
  local a = tonumber(v[2])
  if not l then return limit end
  if now > a then l = math.min(limit, l + (now - a) * limit / window) end
  return l
end
local active = 0
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  active = redis.call('ZCARD', KEYS[3])
end
local levels = {0, 0, 0, 0}
local refusal = 0
if conc > 0 and active >= conc then refusal = 1 end
for i, b in ipairs(buckets) do
  if b[2] > 0 then
    levels[i] = level(b[1], b[2], b[3])
    if refusal == 0 and levels[i] < b[4] then refusal = b[5] end
  end
end
for i, b in ipairs(buckets) do
  if b[2] > 0 then
    if refusal == 0 then levels[i] = levels[i] - b[4] end
    redis.call('HSET', b[1], 'l', tostring(levels[i]), 'a', tostring(now))
    redis.call('PEXPIRE', b[1], 2 * b[3])
  end
end
if refusal == 0 and conc > 0 then
  redis.call('ZADD', KEYS[3], now + lease, ARGV[5])
  redis.call('PEXPIRE', KEYS[3], lease)
end
return {refusal, tostring(levels[1]), tostring(levels[3]), tostring(levels[2]), tostring(levels[4])}
`;

/**
 * KEYS: tokens buckets per minute and per day. ARGV: tpm, tpd (0: none), tokens to give back
 * (negative: to take). A reservation settled to what the request used, on each bucket refilled to
 * now and never past its limit; a bucket whose key has expired is full, so giving back to it
 * changes nothing.
 */
const SETTLE_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local delta = tonumber(ARGV[3])
local function settle(key, limit, window)
  local v = redis.call('HMGET', key, 'l', 'a')
  local l = tonumber(v[1])
  local a = tonumber(v[2])
  if not l then
    if delta >= 0 then return end
    l = limit
  elseif now > a then
    l = math.min(limit, l + (now - a) * limit / window)
  end
  l = math.min(limit, l + delta)
  redis.call('HSET', key, 'l', tostring(l), 'a', tostring(now))
  redis.call('PEXPIRE', key, 2 * window)
end
if tonumber(ARGV[1]) > 0 then settle(KEYS[1], tonumber(ARGV[1]), 60000) end
if tonumber(ARGV[2]) > 0 then settle(KEYS[2], tonumber(ARGV[2]), 86400000) end
return 1
`;

/**
 * KEYS: one tenant's active set. ARGV: lease ms, then the request ids this replica still has in
 * flight there. Each id still in the set gets a lease running `lease` ms from now (XX: one that
 * already lapsed and was pruned is not put back — its slot may have gone to another request).
 * Returns how many were renewed.
 */
const RENEW_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local renewed = 0
for i = 2, #ARGV do
  renewed = renewed + redis.call('ZADD', KEYS[1], 'XX', 'CH', now + lease, ARGV[i])
end
if renewed > 0 then redis.call('PEXPIRE', KEYS[1], lease) end
return renewed
`;

/** Most request ids renewed by one script call. */
const RENEW_BATCH = 500;

const REASONS: readonly (RefusalReason | null)[] = [null, 'concurrent', 'requests', 'tokens', 'requestsPerDay', 'tokensPerDay'];

export interface RedisRateLimiterOptions {
  link: RedisLink;
  limits: ReadonlyMap<string, TenantLimits>;
  /** This replica's own limiter, used while Redis is unreachable. */
  local: RateLimitStore;
  keyPrefix: string;
  /**
   * A concurrency slot's lease, ms: renewed every leaseMs / 3 while its request is in flight here,
   * so the longest a slot outlives its replica (killed, or cut off from Redis).
   */
  leaseMs: number;
  /** Called when a check fell back to the local limiter. */
  onFallback?: (err: Error) => void;
}

let nextId = 0;

export class RedisRateLimiter implements RateLimitStore {
  private readonly limited = new Map<string, TenantLimits>();
  /** Distinguishes this process's request ids from other replicas' in the active sets. */
  private readonly instance = `${process.pid}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
  /**
   * Checks answered by Redis and by the local fallback; leases renewed by the heartbeat, and
   * heartbeat calls that failed (Redis away: the leases run out unless a later one lands in time).
   */
  readonly counts = { shared: 0, fallback: 0, renewed: 0, renewFailed: 0 };
  /** This replica's requests holding a concurrency slot, by active-set key. */
  private readonly leases = new Map<string, Set<string>>();
  private readonly heartbeat: NodeJS.Timeout;
  private renewing = false;

  constructor(private readonly o: RedisRateLimiterOptions) {
    this.setLimits(o.limits);
    this.heartbeat = setInterval(() => void this.renew(), Math.max(10, Math.floor(o.leaseMs / 3)));
    this.heartbeat.unref();
  }

  /** Concurrency slots this replica holds now (its requests in flight with a lease). */
  get leasesHeld(): number {
    let n = 0;
    for (const ids of this.leases.values()) n += ids.size;
    return n;
  }

  /** Stop the heartbeat (the leases still held then run out after leaseMs). */
  close(): void {
    clearInterval(this.heartbeat);
  }

  /** The heartbeat: every lease this replica holds runs leaseMs from now again. */
  private async renew(): Promise<void> {
    if (this.renewing || this.leases.size === 0 || !this.o.link.up) return;
    this.renewing = true;
    try {
      for (const [key, ids] of [...this.leases]) {
        const all = [...ids];
        for (let i = 0; i < all.length; i += RENEW_BATCH) {
          try {
            this.counts.renewed += Number(await this.o.link.client.eval(RENEW_SCRIPT, 1, key, this.o.leaseMs, ...all.slice(i, i + RENEW_BATCH)));
          } catch {
            this.counts.renewFailed++;
          }
        }
      }
    } finally {
      this.renewing = false;
    }
  }

  private hold(key: string, id: string): void {
    let ids = this.leases.get(key);
    if (!ids) this.leases.set(key, (ids = new Set()));
    ids.add(id);
  }

  private drop(key: string, id: string): void {
    const ids = this.leases.get(key);
    if (!ids) return;
    ids.delete(id);
    if (ids.size === 0) this.leases.delete(key);
  }

  /** New limits (config reload), in effect for the next request (the local fallback is told apart). */
  setLimits(limits: ReadonlyMap<string, TenantLimits>): void {
    this.limited.clear();
    for (const [id, l] of limits) {
      if (hasLimits(l)) this.limited.set(id, l);
    }
  }

  limits(tenant: string): boolean {
    return this.limited.has(tenant);
  }

  async take(tenant: string, tokens: number, now: number): Promise<RateCheck> {
    const l = this.limited.get(tenant);
    if (!l) return { ok: true, headers: {}, release: () => undefined };
    if (!this.o.link.up) return this.fallback(tenant, tokens, now, new Error('redis is not connected'));
    const key = `${this.o.keyPrefix}rl:{${tenant}}:`;
    const id = `${this.instance}-${nextId++}`;
    let reply: string[];
    try {
      reply = (await this.o.link.client.eval(
        SCRIPT,
        5,
        `${key}req`,
        `${key}tok`,
        `${key}active`,
        `${key}req-day`,
        `${key}tok-day`,
        l.requestsPerMinute ?? 0,
        l.tokensPerMinute ?? 0,
        l.concurrentRequests ?? 0,
        tokens,
        id,
        this.o.leaseMs,
        l.requestsPerDay ?? 0,
        l.tokensPerDay ?? 0,
      )) as string[];
    } catch (e) {
      return this.fallback(tenant, tokens, now, e as Error);
    }
    this.counts.shared++;
    const [code, rl, tl, rdl, tdl] = reply.map(Number) as [number, number, number, number, number];
    const headers: Record<string, string> = {};
    if (l.requestsPerMinute !== undefined) bucketHeaders(headers, 'requests', l.requestsPerMinute, rl);
    if (l.tokensPerMinute !== undefined) bucketHeaders(headers, 'tokens', l.tokensPerMinute, tl);
    const reason = REASONS[code] ?? null;
    if (reason === null) {
      let released = false;
      const settles = l.tokensPerMinute !== undefined || l.tokensPerDay !== undefined;
      const leased = l.concurrentRequests !== undefined && l.concurrentRequests > 0;
      if (leased) this.hold(`${key}active`, id);
      return {
        ok: true,
        headers,
        release: (usedTokens) => {
          if (released) return;
          released = true;
          // No longer renewed, whether or not the release below reaches Redis.
          if (leased) this.drop(`${key}active`, id);
          if (!this.o.link.up) return;
          // Best effort: a release that fails is left to the lease, a settlement that fails leaves
          // the reservation standing.
          if (leased) this.o.link.client.zrem(`${key}active`, id).catch(() => undefined);
          if (settles && usedTokens !== undefined && usedTokens !== tokens) {
            this.o.link.client
              .eval(SETTLE_SCRIPT, 2, `${key}tok`, `${key}tok-day`, l.tokensPerMinute ?? 0, l.tokensPerDay ?? 0, tokens - usedTokens)
              .catch(() => undefined);
          }
        },
      };
    }
    // The wait until the bucket that refused holds what the request needs.
    const waitFor = (need: number, level: number, limit: number, windowMs: number): number =>
      need > limit ? windowMs : Math.ceil(((need - level) * windowMs) / limit);
    const wait =
      reason === 'requests'
        ? waitFor(1, rl, l.requestsPerMinute!, MINUTE_MS)
        : reason === 'requestsPerDay'
          ? waitFor(1, rdl, l.requestsPerDay!, DAY_MS)
          : reason === 'tokens'
            ? waitFor(tokens, tl, l.tokensPerMinute!, MINUTE_MS)
            : reason === 'tokensPerDay'
              ? waitFor(tokens, tdl, l.tokensPerDay!, DAY_MS)
              : 1000;
    return refuse(reason, l, tokens, wait, headers);
  }

  private async fallback(tenant: string, tokens: number, now: number, err: Error): Promise<RateCheck> {
    this.counts.fallback++;
    this.o.onFallback?.(err);
    return this.o.local.take(tenant, tokens, now);
  }
}
