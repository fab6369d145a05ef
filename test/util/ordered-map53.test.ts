import { test } from 'node:test';
import assert from 'node:assert/strict';
import { OrderedMap53 } from '../../src/util/ordered-map53.js';
import { seededRng } from '../../src/util/rng.js';

test('OrderedMap53 agrees with a Map under random sets, moves to the end, tag changes, deletes and clears', () => {
  const rng = seededRng(5);
  const m = new OrderedMap53(16); // small: grows many times
  const ref = new Map<number, { val: number; tag: number }>();
  // Keys over the whole 53-bit range, many sharing their low 32 bits (probe runs collide).
  const pool = Array.from({ length: 2000 }, (_, i) => (i % 3 === 0 ? Math.floor(rng() * 64) * 4294967296 + 7 : Math.floor(rng() * 2 ** 53)));
  pool.push(0);
  for (let step = 0; step < 60_000; step++) {
    const k = pool[Math.floor(rng() * pool.length)]!;
    const r = rng();
    if (r < 0.5) {
      const val = Math.floor(rng() * 2 ** 53);
      const tag = 1 + Math.floor(rng() * 7);
      m.setLast(k, val, tag);
      ref.delete(k);
      ref.set(k, { val, tag });
    } else if (r < 0.55) {
      // A Map's set: a present key keeps its place and its tag, a new one comes last with tag 0.
      const val = Math.floor(rng() * 2 ** 53);
      m.set(k, val);
      const x = ref.get(k);
      if (x) x.val = val;
      else ref.set(k, { val, tag: 0 });
    } else if (r < 0.6) {
      const tag = 1 + Math.floor(rng() * 7);
      assert.equal(m.setTag(k, tag), ref.has(k));
      const x = ref.get(k);
      if (x) x.tag = tag;
    } else if (r < 0.95) {
      assert.equal(m.delete(k), ref.delete(k));
    } else if (r < 0.951) {
      m.clear();
      ref.clear();
    }
    assert.equal(m.size, ref.size);
    assert.equal(m.get(k), ref.get(k)?.val);
    assert.equal(m.tag(k), ref.get(k)?.tag ?? 0);
    assert.equal(m.has(k), ref.has(k));
    assert.equal(m.oldestKey(), ref.size > 0 ? ref.keys().next().value : undefined);
  }
  for (const k of pool) assert.equal(m.get(k), ref.get(k)?.val);
  assert.deepEqual([...m.keysInOrder()], [...ref.keys()]);
  // Draining by age gives the keys in the reference's insertion order.
  const order: number[] = [];
  while (m.size > 0) {
    const k = m.oldestKey()!;
    order.push(k);
    m.delete(k);
  }
  assert.deepEqual(order, [...ref.keys()]);
});
