/** InsertionFront: the oldest entry of a Map or Set used as an LRU list, against a plain list. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { InsertionFront } from '../../src/util/insertion-front.js';
import { seededRng } from '../../src/util/rng.js';

test('takes off the oldest entry through refreshes, deletes from the middle, emptying and clearing', () => {
  for (const seed of [1, 2, 3]) {
    const rand = seededRng(seed);
    const m = new Map<number, string>();
    const front = new InsertionFront(m);
    const order: number[] = []; // the model: keys, oldest first
    let next = 0;
    for (let i = 0; i < 20_000; i++) {
      const r = rand();
      if (r < 0.4) {
        m.set(next, `v${next}`);
        order.push(next++);
      } else if (r < 0.6 && order.length > 0) {
        // Refreshed: deleted and set again, now the newest.
        const k = order.splice(Math.floor(rand() * order.length), 1)[0]!;
        m.delete(k);
        m.set(k, `v${k}`);
        order.push(k);
      } else if (r < 0.7 && order.length > 0) {
        const k = order.splice(Math.floor(rand() * order.length), 1)[0]!;
        m.delete(k);
      } else if (r < 0.9995) {
        const want = order.shift();
        assert.deepEqual(front.shift(), want === undefined ? undefined : [want, `v${want}`], `step ${i}`);
        assert.equal(m.size, order.length);
      } else {
        m.clear();
        order.length = 0;
      }
    }
    while (order.length > 0) assert.equal(front.shift()![0], order.shift());
    assert.equal(front.shift(), undefined);
    // Entries set after the front ran dry are met.
    m.set(-1, 'x');
    assert.deepEqual(front.shift(), [-1, 'x']);
  }
});

test('a Set gives its values, oldest first', () => {
  const s = new Set(['a', 'b', 'c']);
  const front = new InsertionFront(s);
  s.delete('a');
  s.add('a');
  assert.deepEqual([front.shift()?.[0], front.shift()?.[0], front.shift()?.[0], front.shift()], ['b', 'c', 'a', undefined]);
  assert.equal(s.size, 0);
});
