/**
 * Per-tenant rate limits shared by every gateway replica through Redis: the same RPM and TPM token
 * buckets and concurrency limit as src/admission/rate-limit.ts, kept in Redis and checked and
 * charged by one Lua script, so two replicas can never both spend a tenant's last request.
 *
 * Keys (under `keyPrefix`, per tenant): `rl:{tenant}:req` and `rl:{tenant}:tok` hashes (level, at),
 * refilled continuously at limit/60 s, expiring two minutes after last use (a full bucket needs no
 * key); `rl:{tenant}:active`, a sorted set of the requests in flight scored by when their lease
 * runs out, so a replica that dies mid-request cannot hold a tenant's concurrency for longer than
 * `leaseMs`. The script reads Redis's own clock (TIME), so replicas' clocks need not agree. A
request's token reservation is settled to what it used by a second script at its end.
 *
 * When Redis is down or slow (the command fails or times out) the request is checked against the
 * replica's own in-process limiter instead — each replica then enforces the whole limit alone, the
 * documented degradation — and the fallback is counted. A release that cannot reach Redis is left
 * to the lease, and its reservation stands.
 */
import { bucketHeaders, describeRefusal, type RateCheck, type RateLimitStore, type RefusalReason, type TenantLimits } from '../admission/rate-limit.js';
import type { RedisLink } from './redis-link.js';

/** KEYS: requests bucket, tokens bucket, active set. ARGV: rpm, tpm, concurrent (0 = none), tokens, request id, lease ms. */
const SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rpm = tonumber(ARGV[1])
local tpm = tonumber(ARGV[2])
local conc = tonumber(ARGV[3])
local tokens = tonumber(ARGV[4])
local lease = tonumber(ARGV[6])
local function level(key, limit)
  local v = redis.call('HMGET', key, 'l', 'a')
  local l = tonumber(v[1])
  local a = tonumber(v[2])
  if not l then return limit end
  if now > a then l = math.min(limit, l + (now - a) * limit / 60000) end
  return l
end
local active = 0
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  active = redis.call('ZCARD', KEYS[3])
end
local rl = 0
local tl = 0
if rpm > 0 then rl = level(KEYS[1], rpm) end
if tpm > 0 then tl = level(KEYS[2], tpm) end
local refusal = 0
if conc > 0 and active >= conc then refusal = 1
elseif rpm > 0 and rl < 1 then refusal = 2
elseif tpm > 0 and tl < tokens then refusal = 3 end
if refusal == 0 then
  if rpm > 0 then rl = rl - 1 end
  if tpm > 0 then tl = tl - tokens end
  if conc > 0 then
    redis.call('ZADD', KEYS[3], now + lease, ARGV[5])
    redis.call('PEXPIRE', KEYS[3], lease)
  end
end
if rpm > 0 then
  redis.call('HSET', KEYS[1], 'l', tostring(rl), 'a', tostring(now))
  redis.call('PEXPIRE', KEYS[1], 120000)
end
if tpm > 0 then
  redis.call('HSET', KEYS[2], 'l', tostring(tl), 'a', tostring(now))
  redis.call('PEXPIRE', KEYS[2], 120000)
end
return {refusal, tostring(rl), tostring(tl)}
`;

/**
 * KEYS: tokens bucket. ARGV: tpm, tokens to give back (negative: to take). A reservation settled to
 * what the request used, on the bucket refilled to now and never past the limit; a bucket whose key
 * has expired is full, so giving back to it changes nothing.
 */
const SETTLE_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[1])
local delta = tonumber(ARGV[2])
local v = redis.call('HMGET', KEYS[1], 'l', 'a')
local l = tonumber(v[1])
local a = tonumber(v[2])
if not l then
  if delta >= 0 then return 0 end
  l = limit
elseif now > a then
  l = math.min(limit, l + (now - a) * limit / 60000)
end
l = math.min(limit, l + delta)
redis.call('HSET', KEYS[1], 'l', tostring(l), 'a', tostring(now))
redis.call('PEXPIRE', KEYS[1], 120000)
return 1
`;

const REASONS: readonly (RefusalReason | null)[] = [null, 'concurrent', 'requests', 'tokens'];

export interface RedisRateLimiterOptions {
  link: RedisLink;
  limits: ReadonlyMap<string, TenantLimits>;
  /** This replica's own limiter, used while Redis is unreachable. */
  local: RateLimitStore;
  keyPrefix: string;
  /** Longest a request holds a concurrency slot if its release never reaches Redis, ms. */
  leaseMs: number;
  /** Called when a check fell back to the local limiter. */
  onFallback?: (err: Error) => void;
}

let nextId = 0;

export class RedisRateLimiter implements RateLimitStore {
  private readonly limited = new Map<string, TenantLimits>();
  /** Distinguishes this process's request ids from other replicas' in the active sets. */
  private readonly instance = `${process.pid}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
  /** Checks answered by Redis and by the local fallback. */
  readonly counts = { shared: 0, fallback: 0 };

  constructor(private readonly o: RedisRateLimiterOptions) {
    this.setLimits(o.limits);
  }

  /** New limits (config reload), in effect for the next request (the local fallback is told apart). */
  setLimits(limits: ReadonlyMap<string, TenantLimits>): void {
    this.limited.clear();
    for (const [id, l] of limits) {
      if (l.requestsPerMinute !== undefined || l.tokensPerMinute !== undefined || l.concurrentRequests !== undefined) this.limited.set(id, l);
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
    let reply: [number, string, string];
    try {
      reply = (await this.o.link.client.eval(
        SCRIPT,
        3,
        `${key}req`,
        `${key}tok`,
        `${key}active`,
        l.requestsPerMinute ?? 0,
        l.tokensPerMinute ?? 0,
        l.concurrentRequests ?? 0,
        tokens,
        id,
        this.o.leaseMs,
      )) as [number, string, string];
    } catch (e) {
      return this.fallback(tenant, tokens, now, e as Error);
    }
    this.counts.shared++;
    const [code, rl, tl] = [Number(reply[0]), Number(reply[1]), Number(reply[2])];
    const headers: Record<string, string> = {};
    if (l.requestsPerMinute !== undefined) bucketHeaders(headers, 'requests', l.requestsPerMinute, rl);
    if (l.tokensPerMinute !== undefined) bucketHeaders(headers, 'tokens', l.tokensPerMinute, tl);
    const reason = REASONS[code] ?? null;
    if (reason === null) {
      let released = false;
      const tpm = l.tokensPerMinute;
      return {
        ok: true,
        headers,
        release: (usedTokens) => {
          if (released) return;
          released = true;
          if (!this.o.link.up) return;
          // Best effort: a release that fails is left to the lease, a settlement that fails leaves
          // the reservation standing.
          if (l.concurrentRequests !== undefined) this.o.link.client.zrem(`${key}active`, id).catch(() => undefined);
          if (tpm !== undefined && usedTokens !== undefined && usedTokens !== tokens) {
            this.o.link.client.eval(SETTLE_SCRIPT, 1, `${key}tok`, tpm, tokens - usedTokens).catch(() => undefined);
          }
        },
      };
    }
    const wait =
      reason === 'requests'
        ? Math.ceil(((1 - rl) * 60_000) / l.requestsPerMinute!)
        : reason === 'tokens'
          ? tokens > l.tokensPerMinute!
            ? 60_000
            : Math.ceil(((tokens - tl) * 60_000) / l.tokensPerMinute!)
          : 1000;
    const r = describeRefusal(reason, l, tokens, wait);
    return { ok: false, headers, kind: r.kind, message: r.message, retryAfterSeconds: Math.max(1, Math.ceil(r.waitMs / 1000)) };
  }

  private async fallback(tenant: string, tokens: number, now: number, err: Error): Promise<RateCheck> {
    this.counts.fallback++;
    this.o.onFallback?.(err);
    return this.o.local.take(tenant, tokens, now);
  }
}
