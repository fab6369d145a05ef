/**
 * Per-tenant rate limits: requests and tokens per minute (OpenAI's RPM and TPM) and per day (RPD,
 * TPD), and concurrent requests.
 *
 * A request's tokens are reserved when it starts, as OpenAI counts them: its prompt tokens plus
 * max_tokens for every answer it may write. When it ends, the reservation can be settled to what
 * it used (release(usedTokens)): the difference goes back into the bucket, or, if it used more,
 * is taken too. Without settling, a client that leaves max_tokens unset (reserved at the gateway's
 * assumption, 8,192 by default) would spend a tokens-per-minute limit tens of times faster than
 * its answers do.
 *
 * Each is a token bucket holding at most its window's allowance (a minute's, a day's) and refilled
 * continuously (limit / window), so a tenant may burst its whole window and then proceeds at the
 * steady rate. A request is charged to every bucket only if all can take it. Headers follow
 * OpenAI's: `x-ratelimit-limit-requests`, `x-ratelimit-remaining-requests`,
 * `x-ratelimit-reset-requests` (time until the bucket is full again, as "1s", "6m0s", "20ms") and
 * the same for `-tokens`; they go on every answer to a limited tenant (for the per-minute buckets:
 * OpenAI sends none for its daily limits). A refusal is 429, code `rate_limit_exceeded`, type
 * `requests` or `tokens` (as OpenAI sends), with Retry-After in seconds. The concurrency limit
 * refuses the same way (type `requests`).
 *
 * Plain code with the time passed in. Several gateway replicas share their tenants' limits through
 * Redis (src/shared/redis-rate-limit.ts), behind the same RateLimitStore contract.
 */

export interface TenantLimits {
  requestsPerMinute?: number;
  tokensPerMinute?: number;
  requestsPerDay?: number;
  tokensPerDay?: number;
  concurrentRequests?: number;
}

export const MINUTE_MS = 60_000;
export const DAY_MS = 86_400_000;

/** True if `l` sets any limit. */
export function hasLimits(l: TenantLimits): boolean {
  return (
    l.requestsPerMinute !== undefined ||
    l.tokensPerMinute !== undefined ||
    l.requestsPerDay !== undefined ||
    l.tokensPerDay !== undefined ||
    l.concurrentRequests !== undefined
  );
}

class Bucket {
  private level: number;
  private at: number;
  constructor(
    readonly limit: number,
    now: number,
    readonly windowMs: number,
  ) {
    this.level = limit;
    this.at = now;
  }
  private refill(now: number): void {
    if (now > this.at) {
      this.level = Math.min(this.limit, this.level + ((now - this.at) * this.limit) / this.windowMs);
      this.at = now;
    }
  }
  /** Level after refilling to `now`. */
  available(now: number): number {
    this.refill(now);
    return this.level;
  }
  take(n: number): void {
    this.level -= n;
  }
  /** Gives `n` back (never past the limit), or takes −n: a reservation settled to what was used. */
  settle(n: number, now: number): void {
    this.refill(now);
    this.level = Math.min(this.limit, this.level + n);
  }
  /** ms until `n` are available (0 if they are). */
  waitFor(n: number, now: number): number {
    this.refill(now);
    return n <= this.level ? 0 : Math.ceil(((n - this.level) * this.windowMs) / this.limit);
  }
}

interface TenantState {
  limits: TenantLimits;
  requests: Bucket | null;
  tokens: Bucket | null;
  requestsDay: Bucket | null;
  tokensDay: Bucket | null;
  active: number;
}

/** What the admission stage asks of a rate limiter: this in-process one, or a shared one. */
export interface RateLimitStore {
  /** True if `tenant` has any limit. */
  limits(tenant: string): boolean;
  /**
   * Charge one request of `tokens` tokens to `tenant`, or refuse it; on ok, call release() when it
   * ends, with the tokens it used to settle the reservation.
   */
  take(tenant: string, tokens: number, now: number): RateCheck | Promise<RateCheck>;
  /** New limits (config reload), in effect for the next request. */
  setLimits?(limits: ReadonlyMap<string, TenantLimits>, now: number): void;
}

/**
 * Why a request is refused: too many in flight, no request left this minute or day, or not enough
 * tokens this minute or day.
 */
export type RefusalReason = 'concurrent' | 'requests' | 'tokens' | 'requestsPerDay' | 'tokensPerDay';

/** The refusal a tenant gets, in OpenAI's words: its type, message and wait before a retry. */
export function describeRefusal(
  reason: RefusalReason,
  limits: TenantLimits,
  tokens: number,
  waitMs: number,
): { kind: 'requests' | 'tokens'; message: string; waitMs: number } {
  if (reason === 'concurrent') {
    return { kind: 'requests', message: `Rate limit reached: at most ${limits.concurrentRequests} concurrent requests. Please try again when one has finished.`, waitMs: 1000 };
  }
  if (reason === 'requests' || reason === 'requestsPerDay') {
    const [limit, name] = reason === 'requests' ? [limits.requestsPerMinute!, 'requests per min (RPM)'] : [limits.requestsPerDay!, 'requests per day (RPD)'];
    return { kind: 'requests', message: `Rate limit reached for ${name}: Limit ${limit}. Please try again in ${formatReset(waitMs)}.`, waitMs };
  }
  const [limit, name, windowMs] =
    reason === 'tokens' ? [limits.tokensPerMinute!, 'tokens per min (TPM)', MINUTE_MS] : [limits.tokensPerDay!, 'tokens per day (TPD)', DAY_MS];
  if (tokens > limit) return { kind: 'tokens', message: `Request too large: it needs ${tokens} tokens, the limit is ${limit} ${name}.`, waitMs: windowMs };
  return { kind: 'tokens', message: `Rate limit reached for ${name}: Limit ${limit}, Requested ${tokens}. Please try again in ${formatReset(waitMs)}.`, waitMs };
}

/** The refusal of one request, for `reason`, with the headers to send. */
export function refuse(reason: RefusalReason, limits: TenantLimits, tokens: number, waitMs: number, headers: Record<string, string>): RateCheck {
  const r = describeRefusal(reason, limits, tokens, waitMs);
  return { ok: false, headers, kind: r.kind, reason, message: r.message, retryAfterSeconds: Math.max(1, Math.ceil(r.waitMs / 1000)) };
}

/** OpenAI's x-ratelimit-* headers of one bucket (`requests` or `tokens`) at `level` of `limit`. */
export function bucketHeaders(h: Record<string, string>, kind: 'requests' | 'tokens', limit: number, level: number): void {
  h[`x-ratelimit-limit-${kind}`] = String(limit);
  h[`x-ratelimit-remaining-${kind}`] = String(Math.max(0, Math.floor(level)));
  h[`x-ratelimit-reset-${kind}`] = formatReset(Math.ceil(((limit - level) * 60_000) / limit));
}

/**
 * A request's end, for its rate limits: frees its concurrency slot and, given the tokens it used,
 * settles its token reservations (per minute and per day) to them (without: they stand).
 */
export type RateRelease = (usedTokens?: number, now?: number) => void;

export type RateCheck =
  | { ok: true; headers: Record<string, string>; release: RateRelease }
  | { ok: false; headers: Record<string, string>; kind: 'requests' | 'tokens'; reason: RefusalReason; message: string; retryAfterSeconds: number };

/** OpenAI's duration format for the reset headers: "20ms", "1s", "1.5s", "6m0s", "2h30m0s". */
export function formatReset(ms: number): string {
  if (ms <= 0) return '0s';
  if (ms < 1000) return `${Math.ceil(ms)}ms`;
  const s = ms / 1000;
  if (s < 60) return `${Math.round(s * 1000) / 1000}s`;
  const whole = Math.round(s);
  const h = Math.floor(whole / 3600);
  const m = Math.floor((whole % 3600) / 60);
  return h > 0 ? `${h}h${m}m${whole % 60}s` : `${m}m${whole % 60}s`;
}

export class RateLimiter implements RateLimitStore {
  private readonly tenants = new Map<string, TenantState>();

  constructor(limits: ReadonlyMap<string, TenantLimits>, now: number) {
    this.setLimits(limits, now);
  }

  /**
   * New limits (config reload). A tenant whose limits did not change keeps its counters; one whose
   * per-minute limit changed starts that bucket full at the new limit; its count of requests in
   * flight carries over (their releases still count down the same state).
   */
  setLimits(limits: ReadonlyMap<string, TenantLimits>, now: number): void {
    const seen = new Set<string>();
    for (const [id, l] of limits) {
      if (!hasLimits(l)) continue;
      seen.add(id);
      const t = this.tenants.get(id);
      const bucket = (limit: number | undefined, old: Bucket | null | undefined, windowMs: number): Bucket | null =>
        limit === undefined ? null : old && old.limit === limit ? old : new Bucket(limit, now, windowMs);
      const next = {
        requests: bucket(l.requestsPerMinute, t?.requests, MINUTE_MS),
        tokens: bucket(l.tokensPerMinute, t?.tokens, MINUTE_MS),
        requestsDay: bucket(l.requestsPerDay, t?.requestsDay, DAY_MS),
        tokensDay: bucket(l.tokensPerDay, t?.tokensDay, DAY_MS),
      };
      if (t) Object.assign(t, { limits: l }, next);
      else this.tenants.set(id, { limits: l, ...next, active: 0 });
    }
    for (const id of [...this.tenants.keys()]) if (!seen.has(id)) this.tenants.delete(id);
  }

  /** True if `tenant` has any limit. */
  limits(tenant: string): boolean {
    return this.tenants.has(tenant);
  }

  /** Charge one request of `tokens` tokens to `tenant`, or refuse it. On ok, call release() when it ends. */
  take(tenant: string, tokens: number, now: number): RateCheck {
    const t = this.tenants.get(tenant);
    if (!t) return { ok: true, headers: {}, release: noop };
    const r = t.requests;
    const k = t.tokens;
    const rd = t.requestsDay;
    const kd = t.tokensDay;
    let reason: RefusalReason | null = null;
    let waitMs = 0;
    if (t.limits.concurrentRequests !== undefined && t.active >= t.limits.concurrentRequests) {
      [reason, waitMs] = ['concurrent', 1000];
    } else if (r && r.available(now) < 1) {
      [reason, waitMs] = ['requests', r.waitFor(1, now)];
    } else if (rd && rd.available(now) < 1) {
      [reason, waitMs] = ['requestsPerDay', rd.waitFor(1, now)];
    } else if (k && k.available(now) < tokens) {
      [reason, waitMs] = ['tokens', tokens > k.limit ? MINUTE_MS : k.waitFor(tokens, now)];
    } else if (kd && kd.available(now) < tokens) {
      [reason, waitMs] = ['tokensPerDay', tokens > kd.limit ? DAY_MS : kd.waitFor(tokens, now)];
    }
    if (reason !== null) return refuse(reason, t.limits, tokens, waitMs, this.headers(t, now));
    r?.take(1);
    rd?.take(1);
    k?.take(tokens);
    kd?.take(tokens);
    t.active++;
    let released = false;
    return {
      ok: true,
      headers: this.headers(t, now),
      release: (usedTokens, at = now) => {
        if (released) return;
        released = true;
        t.active--;
        // The buckets taken from, even if a reload has replaced them since (then this changes nothing).
        if (usedTokens === undefined || usedTokens === tokens) return;
        k?.settle(tokens - usedTokens, at);
        kd?.settle(tokens - usedTokens, at);
      },
    };
  }

  /** Concurrent requests of `tenant` being served. */
  active(tenant: string): number {
    return this.tenants.get(tenant)?.active ?? 0;
  }

  private headers(t: TenantState, now: number): Record<string, string> {
    const h: Record<string, string> = {};
    if (t.requests) bucketHeaders(h, 'requests', t.requests.limit, t.requests.available(now));
    if (t.tokens) bucketHeaders(h, 'tokens', t.tokens.limit, t.tokens.available(now));
    return h;
  }
}

function noop(): void {}
