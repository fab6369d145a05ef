/**
 * Gateway replicas sharing state through a real Redis, end to end: two gateways over the same
 * simulated workers hold a tenant's rate limit together, send a prefix one of them routed to the
 * worker that cached it, and lose no request when Redis is killed mid-test — then share again
 * when it returns.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { RateLimiter } from '../../src/admission/rate-limit.js';
import type { Gateway } from '../../src/gateway/gateway.js';
import { RedisLink } from '../../src/shared/redis-link.js';
import { RedisRateLimiter } from '../../src/shared/redis-rate-limit.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { redisSkip, startRedis, type RedisServer } from '../redis-server.js';
import { metricValue, MODEL, post, startGateway, startSims, waitFor } from '../gateway/helpers.js';

const skip = redisSkip();
const CHAT = '/v1/chat/completions';
const CALM = { health: { intervalMs: 2000, failuresToMarkDown: 10 } };
const ACME = { authorization: 'Bearer sk-acme-0001' };
const GLOBEX = { authorization: 'Bearer sk-globex-01' };
const INITECH = { authorization: 'Bearer sk-initech-1' };
const ADMIN = { authorization: 'Bearer sk-admin-001' };

/** A long prompt (~1,500 tokens) no other test sends. */
function longPrompt(tag: string): string {
  const words: string[] = [];
  for (let i = 0; i < 1500; i++) words.push(`${tag}${(i * 7919) % 1000}`);
  return words.join(' ');
}
const chat = (content: string) => ({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 4 });

describe('gateway replicas sharing state through Redis', { skip }, () => {
  let redis: RedisServer;
  let sims: SimWorker[];
  let a: { gw: Gateway; url: string };
  let b: { gw: Gateway; url: string };
  const metric = async (url: string, name: string, labels: Record<string, string> = {}) =>
    metricValue(await (await fetch(url + '/metrics')).text(), name, labels);
  const shared = async (url: string) => (await fetch(url + '/admin/shared', { headers: ADMIN })).json() as Promise<any>;

  before(async () => {
    redis = await startRedis();
    sims = await startSims(4);
    const tenants = [
      { id: 'acme', keys: [{ value: 'sk-acme-0001' }], limits: { requestsPerMinute: 4 } },
      { id: 'globex', keys: [{ value: 'sk-globex-01' }] },
      { id: 'initech', keys: [{ value: 'sk-initech-1' }], limits: { requestsPerMinute: 2 } },
    ];
    const extra = { ...CALM, tenants, admin: { keys: [{ value: 'sk-admin-001' }] }, shared: { redis: { url: redis.url, keyPrefix: 'kvs:' }, publishIntervalMs: 10 } };
    a = await startGateway(sims.map((s) => s.url), extra as never);
    b = await startGateway(sims.map((s) => s.url), extra as never);
    await waitFor(async () => (await metric(a.url, 'kvgate_shared_redis_up')) === 1 && (await metric(b.url, 'kvgate_shared_redis_up')) === 1);
  });
  after(async () => {
    await a?.gw.close();
    await b?.gw.close();
    await Promise.all((sims ?? []).map((s) => s.close()));
    await redis?.stop();
  });

  /** Send `prompt` through A, then through B: the worker each chose and B's cached prompt tokens. */
  async function aThenB(prompt: string): Promise<{ wa: string; wb: string; cachedB: number; promptTokens: number }> {
    const before = (await shared(b.url)).routing.received;
    const ra = await post(a.url + CHAT, chat(prompt), GLOBEX);
    assert.equal(ra.status, 200, ra.text);
    // A's prediction and confirmation reach B's index (published every 10 ms).
    await waitFor(async () => (await shared(b.url)).routing.received >= before + 2);
    const rb = await post(b.url + CHAT, chat(prompt), GLOBEX);
    assert.equal(rb.status, 200, rb.text);
    return {
      wa: ra.headers.get('x-kvgate-worker')!,
      wb: rb.headers.get('x-kvgate-worker')!,
      cachedB: rb.json.usage.prompt_tokens_details.cached_tokens,
      promptTokens: rb.json.usage.prompt_tokens,
    };
  }

  it("holds a tenant's rate limit across replicas", async () => {
    const statuses: number[] = [];
    for (const g of [a, b, a, b, a, b]) statuses.push((await post(g.url + CHAT, chat('hi'), ACME)).status);
    // 4 requests a minute for the tenant, whichever replica takes them.
    assert.deepEqual(statuses, [200, 200, 200, 200, 429, 429]);
    const refused = await post(b.url + CHAT, chat('hi'), ACME);
    assert.equal(refused.json.error.code, 'rate_limit_exceeded');
    assert.equal(refused.headers.get('x-ratelimit-remaining-requests'), '0');
    assert.ok(Number(refused.headers.get('retry-after')) >= 1);
    assert.equal(await metric(a.url, 'kvgate_shared_rate_limit_checks_total', { store: 'local' }), 0);
  });

  it('sends a prompt routed through replica A to the same worker through replica B, which hits its prefix cache', async () => {
    for (const tag of ['alpha', 'bravo', 'charlie']) {
      const r = await aThenB(longPrompt(tag));
      assert.equal(r.wb, r.wa, `${tag}: B routed to ${r.wb}, A to ${r.wa}`);
      // By the worker's own count: all but the last partial block served from its cache.
      assert.ok(r.cachedB >= r.promptTokens - 32, `${tag}: ${r.cachedB} of ${r.promptTokens} prompt tokens cached`);
    }
    assert.ok((await metric(a.url, 'kvgate_shared_routing_blocks_total', { direction: 'published' }))! > 0);
  });

  it('loses no request while Redis is down, shows it, and shares again when it returns', async () => {
    await redis.stop();
    await waitFor(async () => (await metric(a.url, 'kvgate_shared_redis_up')) === 0 && (await metric(b.url, 'kvgate_shared_redis_up')) === 0);
    assert.equal((await shared(a.url)).up, false);
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      const g = i % 2 === 0 ? a : b;
      statuses.push((await post(g.url + CHAT, chat(`while down ${i}`), GLOBEX)).status);
      // A limited tenant is counted by the replica alone meanwhile (2 a minute each).
      statuses.push((await post(g.url + CHAT, chat(`limited while down ${i}`), INITECH)).status);
    }
    assert.deepEqual(statuses.filter((s) => s !== 200 && s !== 429), [], `statuses ${statuses}`);
    assert.equal(statuses.filter((s) => s === 200).length, 6 + 4, `statuses ${statuses}`);
    assert.ok((await metric(a.url, 'kvgate_shared_rate_limit_checks_total', { store: 'local' }))! >= 2);

    await redis.start();
    await waitFor(async () => (await metric(a.url, 'kvgate_shared_redis_up')) === 1 && (await metric(b.url, 'kvgate_shared_redis_up')) === 1);
    assert.ok((await metric(a.url, 'kvgate_shared_redis_reconnects_total'))! >= 1);
    // The subscriber re-subscribes on its own: wait until A's knowledge reaches B again.
    let probe = 0;
    await waitFor(async () => {
      const seen = (await shared(b.url)).routing.messagesReceived as number;
      await post(a.url + CHAT, chat(`probe ${probe++}`), GLOBEX);
      await new Promise((r) => setTimeout(r, 100));
      return (await shared(b.url)).routing.messagesReceived > seen;
    });
    const r = await aThenB(longPrompt('delta'));
    assert.equal(r.wb, r.wa);
    assert.ok(r.cachedB >= r.promptTokens - 32);
    // Rate limits are shared again (Redis came back empty: a fresh minute).
    const again: number[] = [];
    for (const g of [a, b, a]) again.push((await post(g.url + CHAT, chat('again'), INITECH)).status);
    assert.deepEqual(again, [200, 200, 429]);
  });
});

describe('Redis rate limiter', { skip }, () => {
  let redis: RedisServer;
  const links: RedisLink[] = [];
  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    for (const l of links) await l.close();
    await redis?.stop();
  });

  it('charges a tenant atomically: concurrent takes from two replicas never exceed the limit', async () => {
    const limits = new Map([['t', { requestsPerMinute: 10, concurrentRequests: 7 }]]);
    const make = async () => {
      const link = new RedisLink({ url: redis.url, timeoutMs: 1000, connectTimeoutMs: 1000 });
      links.push(link);
      await link.start();
      return new RedisRateLimiter({ link, limits, local: new RateLimiter(limits, 0), keyPrefix: 'rl-test:', leaseMs: 60_000 });
    };
    const [x, y] = [await make(), await make()];
    const checks = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? x : y).take('t', 1, 0)));
    // 7 at once at most; releasing them frees concurrency but not the minute's requests.
    assert.equal(checks.filter((c) => c.ok).length, 7);
    for (const c of checks) if (c.ok) c.release();
    await waitFor(async () => (await links[0]!.client.zcard('rl-test:rl:{t}:active')) === 0);
    const more = await Promise.all(Array.from({ length: 6 }, (_, i) => (i % 2 === 0 ? x : y).take('t', 1, 0)));
    assert.equal(more.filter((c) => c.ok).length, 3, '10 a minute in all');
    assert.equal(x.counts.fallback + y.counts.fallback, 0);
  });
});
