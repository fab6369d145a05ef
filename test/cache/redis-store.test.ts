/** The Redis store against a real redis-server (skipped, saying why, where none is installed). */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { decodeValue, encodeValue, redactRedisUrl, RedisStore } from '../../src/cache/redis-store.js';
import type { CacheEntry } from '../../src/cache/entry.js';
import { redisSkip, startRedis, type RedisServer } from '../redis-server.js';

const skip = redisSkip();

/** A test's own client: its connection errors while the server is stopped are expected. */
const quiet = (r: Redis): Redis => r.on('error', () => undefined);

const entry = (text: string): CacheEntry => ({
  v: 1,
  tenant: 't',
  route: 'completions',
  storedAt: 1,
  body: { id: 'x', choices: [{ index: 0, text, finish_reason: 'stop' }], usage: { prompt_tokens: 1 } },
});

describe('redis store', { skip }, () => {
  let server: RedisServer;
  let store: RedisStore;
  let raw: Redis;
  before(async () => {
    server = await startRedis();
    store = new RedisStore({ url: server.url, keyPrefix: 'kvg:', timeoutMs: 200, connectTimeoutMs: 1000, compressAboveBytes: 1024, statsEveryMs: 0 });
    await store.start();
    raw = quiet(new Redis(server.url));
  });
  after(async () => {
    await store?.close();
    raw?.disconnect();
    await server?.stop();
  });

  it('stores entries with a TTL per entry and reads them back', async () => {
    const e = entry('hello');
    await store.set('kvg:a:1', 'a', e, JSON.stringify(e), 60_000);
    assert.deepEqual(await store.get('kvg:a:1'), e);
    const pttl = await raw.pttl('kvg:a:1');
    assert.ok(pttl > 59_000 && pttl <= 60_000, String(pttl));
    assert.equal(await store.get('kvg:a:missing'), null);
    await store.set('kvg:a:short', 'a', e, JSON.stringify(e), 50);
    await new Promise((r) => setTimeout(r, 120));
    assert.equal(await store.get('kvg:a:short'), null, 'expired by Redis');
  });

  it('compresses large values (brotli) and leaves small ones as they are', async () => {
    const big = entry('lorem ipsum '.repeat(500));
    await store.set('kvg:a:big', 'a', big, JSON.stringify(big), 60_000);
    const v = (await raw.getBuffer('kvg:a:big'))!;
    assert.equal(v[0], 0x42);
    assert.ok(v.length < JSON.stringify(big).length / 5, `${v.length} bytes`);
    assert.deepEqual(await store.get('kvg:a:big'), big);
    const small = (await raw.getBuffer('kvg:a:1'))!;
    assert.equal(small[0], 0x4a);
    // A value that does not decode is a miss, not an error.
    await raw.set('kvg:a:junk', 'Bnot brotli');
    assert.equal(await store.get('kvg:a:junk'), null);
  });

  it('clears one tenant’s keys or the whole prefix, and nothing outside it', async () => {
    const e = entry('x');
    for (const k of ['kvg:a:2', 'kvg:b:1', 'kvg:b:2']) await store.set(k, 'x', e, JSON.stringify(e), 60_000);
    await raw.set('other:key', '1');
    assert.equal(await store.clear('b'), 2);
    assert.equal(await store.get('kvg:b:1'), null);
    assert.ok(await store.get('kvg:a:2'));
    await store.sample();
    assert.ok((store.stats().entries ?? 0) >= 3);
    assert.ok((store.stats().bytes ?? 0) > 0);
    assert.ok((await store.clear()) >= 3);
    assert.equal(await raw.get('other:key'), '1');
  });

  it('fails fast while Redis is down and recovers when it is back', async () => {
    const e = entry('again');
    await server.stop();
    const t0 = Date.now();
    await assert.rejects(store.get('kvg:a:1'));
    await assert.rejects(store.set('kvg:a:3', 'a', e, JSON.stringify(e), 1000));
    assert.ok(Date.now() - t0 < 1000, 'no waiting on a dead Redis');
    await server.start();
    const end = Date.now() + 10_000;
    while (!store.ready && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
    await store.set('kvg:a:3', 'a', e, JSON.stringify(e), 60_000);
    assert.deepEqual(await store.get('kvg:a:3'), e);
    raw.disconnect();
    raw = quiet(new Redis(server.url));
  });

  it('times out on a Redis that does not answer', async () => {
    server.pause();
    try {
      const t0 = Date.now();
      await assert.rejects(store.get('kvg:a:3'), /timed out/i);
      assert.ok(Date.now() - t0 < 1000);
    } finally {
      server.resume();
    }
  });
});

describe('redis values and URLs', () => {
  it('round-trip through the value codec', async () => {
    const e = entry('é'.repeat(2000));
    assert.deepEqual(await decodeValue(await encodeValue(JSON.stringify(e), 100)), e);
    assert.deepEqual(await decodeValue(await encodeValue(JSON.stringify(e), 1e9)), e);
    assert.equal(await decodeValue(Buffer.from('X{}')), null);
    // An embeddings entry holds a list of vectors, not choices; each kind is checked by its own shape.
    const emb = { v: 1, tenant: 't', route: 'embeddings', storedAt: 1, body: { object: 'list', data: [{ index: 0, object: 'embedding', embedding: [0.6, 0.8] }], usage: { prompt_tokens: 2, total_tokens: 2 } } };
    assert.deepEqual(await decodeValue(await encodeValue(JSON.stringify(emb), 1e9)), emb);
    assert.equal(await decodeValue(await encodeValue(JSON.stringify({ ...emb, route: 'chat' }), 1e9)), null);
    assert.equal(await decodeValue(await encodeValue(JSON.stringify({ ...emb, body: e.body }), 1e9)), null);
  });

  it('never show a password in logs', () => {
    assert.equal(redactRedisUrl('redis://user:s3cret@host:6379/0'), 'redis://user:***@host:6379/0');
    assert.equal(redactRedisUrl('redis://host:6379'), 'redis://host:6379');
  });
});
