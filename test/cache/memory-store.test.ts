import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MemoryLru, MemoryStore } from '../../src/cache/memory-store.js';
import type { CacheEntry } from '../../src/cache/entry.js';

function lru(maxBytes: number) {
  let now = 0;
  const m = new MemoryLru<string>({ maxBytes, now: () => now });
  return { m, advance: (ms: number) => (now += ms) };
}

describe('in-memory store', () => {
  it('is bounded by bytes and evicts the least recently used first', () => {
    const { m } = lru(300);
    m.set('a', 't', 'A', 100, 1000);
    m.set('b', 't', 'B', 100, 1000);
    m.set('c', 't', 'C', 100, 1000);
    assert.equal(m.get('a'), 'A'); // a is now the most recent
    m.set('d', 't', 'D', 100, 1000);
    assert.equal(m.get('b'), null, 'b was the least recently used');
    assert.deepEqual([m.get('a'), m.get('c'), m.get('d')], ['A', 'C', 'D']);
    assert.equal(m.bytes, 300);
    assert.equal(m.evictions, 1);
    assert.equal(m.set('big', 't', 'X', 301, 1000), false, 'an entry larger than the store is refused');
    assert.equal(m.bytes, 300);
  });

  it('expires entries after their TTL, on read and by sweeping', () => {
    const { m, advance } = lru(10_000);
    m.set('a', 't', 'A', 10, 100);
    m.set('b', 't', 'B', 10, 500);
    advance(99);
    assert.equal(m.get('a'), 'A');
    advance(1);
    assert.equal(m.get('a'), null);
    advance(400);
    assert.equal(m.size, 1);
    assert.equal(m.sweep(10), 1);
    assert.equal(m.size, 0);
    assert.equal(m.bytes, 0);
  });

  it('keeps a tenant within its byte budget without touching other tenants', () => {
    const { m } = lru(10_000);
    m.set('x1', 'other', 'X', 100, 1000);
    m.set('a1', 'a', 'A1', 100, 1000, 250);
    m.set('a2', 'a', 'A2', 100, 1000, 250);
    m.set('a3', 'a', 'A3', 100, 1000, 250);
    assert.equal(m.get('a1'), null);
    assert.equal(m.tenantBytes('a'), 200);
    assert.equal(m.get('x1'), 'X');
    assert.equal(m.set('a4', 'a', 'A4', 300, 1000, 250), false);
  });

  it('replaces an entry under the same key and drops one tenant or all', () => {
    const { m } = lru(10_000);
    m.set('a1', 'a', 'old', 100, 1000);
    m.set('a1', 'a', 'new', 50, 1000);
    assert.equal(m.get('a1'), 'new');
    assert.equal(m.bytes, 50);
    m.set('a2', 'a', 'A', 10, 1000);
    m.set('b1', 'b', 'B', 10, 1000);
    assert.equal(m.clear('a'), 2);
    assert.equal(m.get('b1'), 'B');
    assert.equal(m.clear('nobody'), 0);
    assert.equal(m.clear(), 1);
    assert.equal(m.bytes, 0);
  });

  it('MemoryStore charges the JSON in UTF-8 plus the key and overhead', async () => {
    const s = new MemoryStore({ maxBytes: 1 << 20, now: () => 0 });
    const e: CacheEntry = { v: 1, tenant: 't', route: 'chat', storedAt: 0, body: { choices: [] } };
    await s.set('k', 't', e, 'é', 1000);
    assert.equal(s.stats().bytes, 2 + 1 + 128);
    assert.equal(await s.get('k'), e);
    assert.equal(await s.clear(), 1);
    await s.close();
  });
});
