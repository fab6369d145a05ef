/**
 * The response cache on a real Redis, end to end: shared by two gateways, and Redis stopped,
 * restarted and frozen mid-test — requests never fail because of it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import type { Gateway } from '../../src/gateway/gateway.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { redisSkip, startRedis, type RedisServer } from '../redis-server.js';
import { metricValue, MODEL, parseSse, post, startGateway, startSims, streamText, waitFor } from './helpers.js';

const skip = redisSkip();
const CHAT = '/v1/chat/completions';
const CALM = { health: { intervalMs: 2000, failuresToMarkDown: 10 } };
const chat = (content: string, extra: Record<string, unknown> = {}) => ({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 12, temperature: 0, ...extra });

describe('response cache on Redis', { skip }, () => {
  let redis: RedisServer;
  let raw: Redis;
  let sims: SimWorker[];
  let a: { gw: Gateway; url: string };
  let b: { gw: Gateway; url: string };
  const upstream = () => sims.reduce((n, s) => n + s.stats().requests, 0);
  const metric = async (url: string, name: string, labels: Record<string, string> = {}) =>
    metricValue(await (await fetch(url + '/metrics')).text(), name, labels) ?? 0;

  before(async () => {
    redis = await startRedis();
    raw = new Redis(redis.url).on('error', () => undefined);
    sims = await startSims(2);
    const cache = { enabled: true, store: 'redis', redis: { url: redis.url, keyPrefix: 'kvt:', timeoutMs: 100, failuresToOpen: 2, coolDownMs: 300 } };
    const tenants = [
      { id: 'acme', keys: [{ value: 'sk-acme-0001' }] },
      { id: 'globex', keys: [{ value: 'sk-globex-01' }] },
    ];
    const admin = { keys: [{ value: 'sk-admin-001' }] };
    a = await startGateway(sims.map((s) => s.url), { ...CALM, cache, tenants, admin } as never);
    b = await startGateway(sims.map((s) => s.url), { ...CALM, cache, tenants, admin } as never);
  });
  after(async () => {
    await a?.gw.close();
    await b?.gw.close();
    await Promise.all((sims ?? []).map((s) => s.close()));
    raw?.disconnect();
    await redis?.stop();
  });

  const ACME = { authorization: 'Bearer sk-acme-0001' };
  const GLOBEX = { authorization: 'Bearer sk-globex-01' };

  it('stores answers in Redis under the tenant’s namespace, shared by every gateway', async () => {
    const body = chat('shared by replicas');
    const first = await post(a.url + CHAT, body, ACME);
    assert.equal(first.status, 200);
    assert.equal(first.headers.get('x-kvgate-cache'), 'miss');
    // Stored once the response is on its way.
    await waitFor(async () => (await raw.keys('kvt:*')).length > 0);
    const keys = await raw.keys('kvt:*');
    assert.equal(keys.length, 1);
    assert.match(keys[0]!, /^kvt:acme:[0-9a-f]{64}$/);
    const n = upstream();
    const other = await post(b.url + CHAT, { ...body, stream: true }, ACME);
    assert.equal(other.headers.get('x-kvgate-cache'), 'hit', 'the second gateway hits what the first stored');
    assert.equal(streamText(parseSse(other.text)), first.json.choices[0].message.content);
    assert.equal(upstream(), n);
    assert.equal((await post(b.url + CHAT, body, GLOBEX)).headers.get('x-kvgate-cache'), 'miss', 'never across tenants');
    const ttl = await raw.pttl(keys[0]!);
    assert.ok(ttl > 290_000 && ttl <= 300_000, `TTL ${ttl}`);
  });

  it('shares embeddings between gateways too', async () => {
    // Another tenant's namespace: the next test looks through acme's entries for a compressed one.
    const body = { model: MODEL, input: ['an embedding stored in Redis', 'and its neighbour'] };
    const stored = async () => (await raw.keys('kvt:globex:*')).length;
    const before = await stored();
    const first = await post(a.url + '/v1/embeddings', body, GLOBEX);
    assert.equal(first.status, 200);
    assert.equal(first.headers.get('x-kvgate-cache'), 'miss');
    // Stored once the response is on its way.
    await waitFor(async () => (await stored()) > before);
    const n = upstream();
    const hit = await post(b.url + '/v1/embeddings', body, GLOBEX);
    assert.equal(hit.headers.get('x-kvgate-cache'), 'hit', 'the second gateway hits what the first stored');
    assert.equal(hit.text, first.text, 'the same vectors, byte for byte');
    assert.equal(upstream(), n, 'no worker asked again');
  });

  it('compresses large answers', async () => {
    const r = await post(a.url + CHAT, chat('a long one', { max_tokens: 600, ignore_eos: true }), ACME);
    assert.equal(r.status, 200);
    // Stored after the response is on its way: wait for it.
    let big: Buffer | null | undefined;
    await waitFor(async () => {
      const values = await Promise.all((await raw.keys('kvt:acme:*')).map((k) => raw.getBuffer(k)));
      big = values.find((v) => v !== null && v[0] === 0x42);
      return big !== undefined;
    });
    assert.ok(big!.length < Buffer.byteLength(r.text));
  });

  it('serves every request while Redis is down, counts the failures, and recovers when it is back', async () => {
    const before = await metric(a.url, 'kvgate_cache_requests_total', { result: 'error' });
    await redis.stop();
    const t0 = Date.now();
    for (let i = 0; i < 6; i++) {
      const r = await post(a.url + CHAT, chat(`while down ${i}`), ACME);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers.get('x-kvgate-cache'), 'bypass');
      const s = await post(a.url + CHAT, chat(`while down ${i}`, { stream: true }), ACME);
      assert.equal(s.status, 200);
      assert.ok(s.text.endsWith('data: [DONE]\n\n'));
    }
    assert.ok(Date.now() - t0 < 10_000);
    assert.equal(await metric(a.url, 'kvgate_cache_requests_total', { result: 'error' }), before + 12);
    assert.ok((await metric(a.url, 'kvgate_cache_store_errors_total', { op: 'get' })) >= 1);
    assert.equal(await metric(a.url, 'kvgate_cache_store_up', { store: 'redis' }), 0);
    await redis.start();
    const body = chat('after the restart');
    await waitFor(async () => (await post(a.url + CHAT, body, ACME)).headers.get('x-kvgate-cache') === 'hit', 15_000);
    assert.equal(await metric(a.url, 'kvgate_cache_store_up', { store: 'redis' }), 1);
    raw.disconnect();
    raw = new Redis(redis.url).on('error', () => undefined);
  });

  it('treats a Redis that stops answering as down (per-operation timeout), not as a reason to wait', async () => {
    const body = chat('frozen redis');
    redis.pause();
    try {
      for (let i = 0; i < 4; i++) {
        const t0 = Date.now();
        const r = await post(b.url + CHAT, body, ACME);
        assert.equal(r.status, 200);
        assert.ok(Date.now() - t0 < 2000, `${Date.now() - t0} ms`);
        assert.equal(r.headers.get('x-kvgate-cache'), 'bypass');
      }
    } finally {
      redis.resume();
    }
    await waitFor(async () => (await post(b.url + CHAT, body, ACME)).headers.get('x-kvgate-cache') === 'hit', 15_000);
  });

  it('DELETE /admin/cache?tenant= drops that tenant’s keys in Redis only', async () => {
    await post(a.url + CHAT, chat('globex keeps this'), GLOBEX);
    const before = await raw.keys('kvt:globex:*');
    assert.ok(before.length >= 1);
    assert.equal((await fetch(a.url + '/admin/cache?tenant=acme', { method: 'DELETE', headers: ACME })).status, 403);
    const r = await fetch(a.url + '/admin/cache?tenant=acme', { method: 'DELETE', headers: { authorization: 'Bearer sk-admin-001' } });
    assert.equal(r.status, 200);
    const d = (await r.json()) as { deleted: number };
    assert.ok(d.deleted >= 1);
    assert.deepEqual(await raw.keys('kvt:acme:*'), []);
    assert.deepEqual((await raw.keys('kvt:globex:*')).sort(), before.sort());
  });
});
