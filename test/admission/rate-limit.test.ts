import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatReset, RateLimiter } from '../../src/admission/rate-limit.js';

test('requests per minute: a minute’s allowance at once, then the steady rate; OpenAI headers on every answer', () => {
  const rl = new RateLimiter(new Map([['acme', { requestsPerMinute: 3 }]]), 0);
  const a = rl.take('acme', 10, 0);
  assert.ok(a.ok);
  assert.deepEqual(a.headers, { 'x-ratelimit-limit-requests': '3', 'x-ratelimit-remaining-requests': '2', 'x-ratelimit-reset-requests': '20s' });
  assert.ok(rl.take('acme', 10, 0).ok);
  assert.ok(rl.take('acme', 10, 0).ok);
  const r = rl.take('acme', 10, 1000);
  assert.equal(r.ok, false);
  if (r.ok) return;
  assert.equal(r.kind, 'requests');
  assert.equal(r.headers['x-ratelimit-remaining-requests'], '0');
  assert.equal(r.retryAfterSeconds, 19); // one request back after 20 s
  assert.match(r.message, /Rate limit reached for requests per min \(RPM\): Limit 3/);
  assert.ok(rl.take('acme', 10, 20_000).ok, 'refilled at limit / 60 s');
  // Other tenants are not limited.
  const other = rl.take('globex', 1e9, 0);
  assert.ok(other.ok);
  assert.deepEqual(other.headers, {});
});

test('tokens per minute count prompt + max_tokens; a request larger than the minute is refused outright', () => {
  const rl = new RateLimiter(new Map([['acme', { tokensPerMinute: 1000 }]]), 0);
  assert.ok(rl.take('acme', 600, 0).ok);
  const r = rl.take('acme', 600, 0);
  assert.ok(!r.ok && r.kind === 'tokens');
  assert.equal(!r.ok && r.headers['x-ratelimit-remaining-tokens'], '400');
  assert.equal(!r.ok && r.headers['x-ratelimit-reset-tokens'], '36s');
  const big = rl.take('acme', 5000, 0);
  assert.ok(!big.ok && /Request too large/.test(big.message));
});

test('concurrent requests: refused while the limit is in use, free again on release (once)', () => {
  const rl = new RateLimiter(new Map([['acme', { concurrentRequests: 2 }]]), 0);
  const a = rl.take('acme', 1, 0);
  const b = rl.take('acme', 1, 0);
  assert.ok(a.ok && b.ok);
  assert.equal(rl.take('acme', 1, 0).ok, false);
  if (a.ok) {
    a.release();
    a.release();
  }
  assert.equal(rl.active('acme'), 1);
  assert.ok(rl.take('acme', 1, 0).ok);
});

test('reset durations are formatted as OpenAI sends them', () => {
  assert.equal(formatReset(0), '0s');
  assert.equal(formatReset(17), '17ms');
  assert.equal(formatReset(1500), '1.5s');
  assert.equal(formatReset(360_000), '6m0s');
  assert.equal(formatReset(61_000), '1m1s');
  assert.equal(formatReset(9_000_000), '2h30m0s');
  assert.equal(formatReset(86_400_000), '24h0m0s');
});

test('new limits (a config reload): unchanged ones keep their counters, changed ones start at the new limit, requests in flight still count', () => {
  const rl = new RateLimiter(new Map([['acme', { requestsPerMinute: 2, concurrentRequests: 1 }], ['globex', { requestsPerMinute: 1 }]]), 0);
  const a = rl.take('acme', 1, 0);
  assert.ok(a.ok);
  assert.ok(rl.take('globex', 1, 0).ok);
  rl.setLimits(new Map([['acme', { requestsPerMinute: 2, concurrentRequests: 2 }], ['globex', { requestsPerMinute: 5 }], ['initech', { requestsPerMinute: 1 }]]), 0);
  // acme's RPM bucket is the same (one left), its in-flight request still counts against 2.
  assert.equal(rl.active('acme'), 1);
  const b = rl.take('acme', 1, 0);
  assert.ok(b.ok);
  const c = rl.take('acme', 1, 0);
  assert.ok(!c.ok && c.kind === 'requests', 'the unchanged RPM bucket kept its count');
  // globex's RPM changed: a full bucket at the new limit.
  for (let i = 0; i < 5; i++) assert.ok(rl.take('globex', 1, 0).ok);
  assert.ok(!rl.take('globex', 1, 0).ok);
  assert.ok(rl.limits('initech'));
  // The release of a request started before the reload frees a slot of the new state.
  a.release();
  assert.equal(rl.active('acme'), 1);
  rl.setLimits(new Map(), 0);
  assert.ok(!rl.limits('acme'), 'limits removed');
  assert.ok(rl.take('acme', 1e9, 0).ok);
});

test('a token reservation settled to what was used: the difference back, never past the limit; more than reserved is taken', () => {
  const rl = new RateLimiter(new Map([['acme', { tokensPerMinute: 1000, concurrentRequests: 5 }]]), 0);
  const a = rl.take('acme', 900, 0);
  assert.ok(a.ok);
  assert.equal(a.headers['x-ratelimit-remaining-tokens'], '100');
  assert.equal(rl.take('acme', 200, 0).ok, false, 'the reservation holds while the request runs');
  if (a.ok) a.release(150, 0);
  assert.equal(rl.active('acme'), 0);
  const b = rl.take('acme', 800, 0);
  assert.ok(b.ok, '750 given back');
  assert.equal(b.headers['x-ratelimit-remaining-tokens'], '50');
  // Used more than reserved (an answer longer than the assumed max_tokens): the rest is taken too.
  if (b.ok) b.release(1000, 0);
  const c = rl.take('acme', 1, 0);
  assert.ok(!c.ok && c.kind === 'tokens');
  assert.equal(!c.ok && c.headers['x-ratelimit-remaining-tokens'], '0');
  assert.equal(!c.ok && c.retryAfterSeconds, 10, '150 in debt + 1: 151 tokens at 1000 a minute');
  // Never past the limit: released once the bucket has refilled, its token does not overflow it;
  // and a second release settles nothing.
  const d = rl.take('acme', 1, 60_000);
  assert.ok(d.ok);
  if (d.ok) {
    d.release(0, 120_000);
    d.release(-5000, 120_000);
  }
  const e = rl.take('acme', 1, 120_000);
  assert.ok(e.ok && e.headers['x-ratelimit-remaining-tokens'] === '999');
  if (e.ok) e.release(undefined, 120_000);
  const f = rl.take('acme', 0, 120_000);
  assert.ok(f.ok && f.headers['x-ratelimit-remaining-tokens'] === '999', 'no count: the reservation stands');
});

test("requests and tokens per day: refused past the day's allowance, refilled over the day, settled like the minute", () => {
  const rl = new RateLimiter(new Map([['acme', { requestsPerMinute: 100, requestsPerDay: 3, tokensPerDay: 10_000 }]]), 0);
  for (let i = 0; i < 3; i++) assert.ok(rl.take('acme', 10, i).ok);
  const r = rl.take('acme', 10, 10);
  assert.ok(!r.ok && r.kind === 'requests');
  assert.equal(!r.ok && r.message, 'Rate limit reached for requests per day (RPD): Limit 3. Please try again in 8h0m0s.');
  assert.equal(!r.ok && r.retryAfterSeconds, 28_800, 'one request back after a third of a day');
  // No x-ratelimit headers for daily limits (OpenAI sends none); the minute's are there.
  assert.equal(!r.ok && r.headers['x-ratelimit-limit-requests'], '100');
  assert.ok(rl.take('acme', 10, 28_800_000).ok);

  const t = new RateLimiter(new Map([['acme', { tokensPerDay: 10_000 }]]), 0);
  const a = t.take('acme', 9_000, 0);
  assert.ok(a.ok);
  const b = t.take('acme', 2_000, 0);
  assert.ok(!b.ok && b.kind === 'tokens' && /tokens per day \(TPD\): Limit 10000, Requested 2000/.test(b.message));
  if (a.ok) a.release(500, 0);
  assert.ok(t.take('acme', 2_000, 0).ok, 'the day bucket was settled too');
  const big = t.take('acme', 20_000, 0);
  assert.ok(!big.ok && /Request too large: it needs 20000 tokens, the limit is 10000 tokens per day \(TPD\)/.test(big.message));
  assert.equal(!big.ok && big.retryAfterSeconds, 86_400);
});
