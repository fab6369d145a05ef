import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BlockManager, HashIndex, PackedHashIndex } from '../../src/engine/block-manager.js';
import { seededRng } from '../../src/util/rng.js';
import type { KvEvent } from '../../src/kv/events.js';

test('allocation takes free blocks until none are left, never more', () => {
  const bm = new BlockManager(4, 16, false);
  const got = [bm.allocate(), bm.allocate(), bm.allocate(), bm.allocate()];
  assert.deepEqual([...got].sort(), [0, 1, 2, 3]);
  assert.equal(bm.numFree, 0);
  assert.equal(bm.numUsed, 4);
  assert.equal(bm.allocate(), -1);
  bm.freeAll(got);
  assert.equal(bm.numFree, 4);
  assert.throws(() => bm.release(got[0]!), /freed twice/);
});

test('a freed cached block stays a hit until reused, and a hit takes it out of the free queue', () => {
  const bm = new BlockManager(3, 16, true);
  const b = bm.allocate();
  assert.ok(bm.cache(b, 111));
  bm.freeAll([b]);
  assert.equal(bm.numCachedFree, 1);
  assert.equal(bm.lookup(111), b);
  bm.touch(b);
  assert.equal(bm.numFree, 2);
  assert.equal(bm.numCachedFree, 0);
  assert.equal(bm.refs(b), 1);
  // Two more allocations use the other blocks; the cached one is in use and is not evicted.
  const x = bm.allocate();
  const y = bm.allocate();
  assert.notEqual(x, b);
  assert.notEqual(y, b);
  assert.equal(bm.lookup(111), b);
  assert.deepEqual(bm.takeEvents(), []);
});

test('freeing in reverse order evicts the tail of a prefix first, with BlockRemoved events in that order', () => {
  const bm = new BlockManager(4, 16, true);
  const blocks = [bm.allocate(), bm.allocate(), bm.allocate(), bm.allocate()];
  blocks.forEach((b, i) => assert.ok(bm.cache(b, 1000 + i)));
  bm.freeAll(blocks);
  const evicted: number[] = [];
  for (let i = 0; i < 4; i++) {
    bm.allocate();
    const ev = bm.takeEvents() as Array<Extract<KvEvent, { type: 'BlockRemoved' }>>;
    assert.equal(ev.length, 1);
    evicted.push(...ev[0]!.blockHashes);
    // The head of the prefix survives longest.
    assert.equal(bm.lookup(1000), i < 3 ? blocks[0] : -1);
  }
  assert.deepEqual(evicted, [1003, 1002, 1001, 1000]);
});

test('a hash cached twice keeps one entry; the duplicate block stays unhashed', () => {
  const bm = new BlockManager(4, 16, true);
  const a = bm.allocate();
  const b = bm.allocate();
  assert.equal(bm.cache(a, 7), true);
  assert.equal(bm.cache(b, 7), false);
  assert.equal(bm.hashOfBlock(b), null);
  bm.freeAll([a, b]);
  assert.equal(bm.numCachedFree, 1);
  assert.equal(bm.numCached, 1);
});

test('resetFreeCache drops only free cached blocks and reports what it dropped', () => {
  const bm = new BlockManager(4, 16, true);
  const a = bm.allocate();
  const b = bm.allocate();
  bm.cache(a, 1);
  bm.cache(b, 2);
  bm.freeAll([b]);
  bm.resetFreeCache();
  assert.deepEqual(bm.takeEvents(), [{ type: 'BlockRemoved', blockHashes: [2] }]);
  assert.equal(bm.lookup(1), a);
  bm.freeAll([a]);
  bm.resetFreeCache();
  assert.deepEqual(bm.takeEvents(), [{ type: 'AllBlocksCleared' }]);
  assert.equal(bm.numCached, 0);
});

test('the hash index agrees with a Map under random inserts and deletes (collisions included)', () => {
  const idx = new HashIndex(64); // 128 slots
  const ref = new Map<number, number>();
  const rng = seededRng(5);
  // Keys sharing their low bits collide on purpose; high parts make them distinct 53-bit values.
  const keyOf = () => Math.floor(rng() * 200) * 4294967296 + (Math.floor(rng() * 8) << 7);
  for (let i = 0; i < 20_000; i++) {
    const k = keyOf();
    if (rng() < 0.5 && ref.size < 64) {
      if (rng() < 0.5) {
        idx.set(k, i);
        ref.set(k, i);
      } else {
        // add keeps an existing mapping.
        assert.equal(idx.add(k, i), !ref.has(k));
        if (!ref.has(k)) ref.set(k, i);
      }
    } else {
      assert.equal(idx.delete(k), ref.delete(k));
    }
    assert.equal(idx.size, ref.size);
    const probe = keyOf();
    assert.equal(idx.get(probe), ref.get(probe) ?? -1);
  }
  for (const [k, v] of ref) assert.equal(idx.get(k), v);
  assert.deepEqual(new Set(idx.keysIter()), new Set(ref.keys()));
});

test('the packed hash index agrees with a Map, blocks keyed by the hash they hold (fingerprint and home collisions included)', () => {
  const numBlocks = 64;
  assert.ok(PackedHashIndex.fits(numBlocks));
  assert.ok(!PackedHashIndex.fits(1 << 16), 'a pool whose ids and homes need more than 32 bits takes the wide table');
  const held = new Float64Array(numBlocks).fill(-1);
  const idx = new PackedHashIndex(numBlocks, held, 1); // 128 slots, 7 id bits
  const ref = new Map<number, number>();
  const free = Array.from({ length: numBlocks }, (_, b) => b);
  const rng = seededRng(9);
  // Few distinct top bits of the low word (home and fingerprint) and of the high word: keys that
  // share a home, keys that share a fingerprint and differ only in their high word.
  const keyOf = () => Math.floor(rng() * 4) * 4294967296 + ((Math.floor(rng() * 6) << 27) >>> 0) + Math.floor(rng() * 3);
  for (let i = 0; i < 20_000; i++) {
    const k = keyOf();
    if (rng() < 0.5 && free.length > 0) {
      const b = free[free.length - 1]!;
      const added = idx.add(k, b);
      assert.equal(added, !ref.has(k));
      if (added) {
        free.pop();
        held[b] = k;
        ref.set(k, b);
      }
    } else if (rng() < 0.5) {
      const had = ref.get(k);
      assert.equal(idx.delete(k), had !== undefined);
      if (had !== undefined) {
        ref.delete(k);
        held[had] = -1;
        free.push(had);
      }
    } else if (ref.has(k)) {
      // An eviction, as BlockManager makes one: the block's hash cleared, its slot left stale.
      // The block goes back on top of the free list, so it is often the next one given a key,
      // and at times the same key again (a stale slot and a fresh one naming the same block).
      const b = ref.get(k)!;
      idx.evict(k);
      ref.delete(k);
      held[b] = -1;
      free.push(b);
    }
    assert.equal(idx.size, ref.size);
    // Every taken slot counted towards the rebuild, or the table could fill and a probe never end.
    assert.equal(idx.occupied, idx.countOccupiedSlots());
    const probe = keyOf();
    assert.equal(idx.get(probe), ref.get(probe) ?? -1);
  }
  for (const [k, v] of ref) assert.equal(idx.get(k), v);
  assert.deepEqual(new Set(idx.keysIter()), new Set(ref.keys()));
});

test('the free queue keeps least-recently-freed order through hits on free blocks and the ring filling up', () => {
  const numBlocks = 8; // a ring of 32 entries; few allocations and many hits on free blocks leave holes, so it fills up again and again
  const bm = new BlockManager(numBlocks, 16, true);
  // The queue as a list: free blocks, least recently freed first.
  const queue = Array.from({ length: numBlocks }, (_, b) => b);
  const held: number[] = []; // one entry per reference
  const rng = seededRng(11);
  let nextHash = 1;
  const pick = <T>(xs: T[]): T => xs[Math.floor(rng() * xs.length)]!;
  for (let i = 0; i < 30_000; i++) {
    const r = rng();
    if (r < 0.05 && queue.length > 0) {
      const b = bm.allocate();
      assert.equal(b, queue.shift());
      held.push(b);
      if (rng() < 0.8) bm.cache(b, nextHash++);
    } else if (r < 0.35) {
      const cached = Array.from({ length: numBlocks }, (_, b) => b).filter((b) => bm.hashOfBlock(b) !== null);
      if (cached.length === 0) continue;
      const b = pick(cached);
      if (bm.isFree(b)) queue.splice(queue.indexOf(b), 1);
      bm.touch(b);
      held.push(b);
    } else if (held.length > 0) {
      const k = Math.floor(rng() * held.length);
      const b = held[k]!;
      held[k] = held[held.length - 1]!;
      held.pop();
      bm.release(b);
      if (bm.refs(b) === 0) queue.push(b);
    }
    assert.equal(bm.numFree, queue.length);
    if (i % 997 === 0) {
      // resetFreeCache drops the free blocks' hashes walking the queue from its head.
      const expected = queue.map((b) => bm.hashOfBlock(b)).filter((h) => h !== null);
      bm.takeEvents();
      bm.resetFreeCache();
      const ev = bm.takeEvents();
      const dropped = ev.flatMap((e) => (e.type === 'BlockRemoved' ? e.blockHashes : []));
      if (ev.some((e) => e.type === 'AllBlocksCleared')) assert.equal(bm.numCached, 0);
      else assert.deepEqual(dropped, expected);
    }
  }
});
