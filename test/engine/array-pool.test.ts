import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ArrayPool, IdList } from '../../src/engine/array-pool.js';

describe('ArrayPool and IdList', () => {
  it('an IdList keeps every id in order as it grows through the pool, and its arrays are reused once released', () => {
    const made: number[] = [];
    const pool = new ArrayPool<Int32Array>((n) => {
      made.push(n);
      return new Int32Array(n);
    });
    const a = new IdList(pool);
    for (let i = 0; i < 1000; i++) a.push(i * 3);
    a.reserve(500);
    for (let i = 1000; i < 1500; i++) a.ids[a.length++] = i * 3;
    assert.equal(a.length, 1500);
    assert.ok(a.ids.length >= 1500);
    assert.deepEqual(a.toArray(), Array.from({ length: 1500 }, (_, i) => i * 3));
    // Growing gave each smaller array back: a second list of the same size allocates nothing new.
    const before = made.length;
    a.release();
    assert.equal(a.length, 0);
    assert.deepEqual(a.toArray(), []);
    const b = new IdList(pool);
    for (let i = 0; i < 1500; i++) b.push(7);
    assert.equal(made.length, before);
    assert.deepEqual(b.toArray(), new Array(1500).fill(7));
  });

  it('a list released keeping its length still says how many ids it had, and never hands an array out twice', () => {
    const pool = new ArrayPool<Int32Array>((n) => new Int32Array(n));
    const a = new IdList(pool);
    for (let i = 0; i < 20; i++) a.push(i);
    const held = a.ids;
    a.release(true);
    assert.equal(a.length, 20);
    // The released array goes to exactly one taker.
    const first = pool.take(20);
    const second = pool.take(20);
    assert.equal(first, held);
    assert.notEqual(second, held);
  });

  it('take rounds up to a power of two of at least 16; grow keeps the first `used` entries', () => {
    const pool = new ArrayPool<Float64Array>((n) => new Float64Array(n));
    assert.equal(pool.take(0).length, 16);
    assert.equal(pool.take(17).length, 32);
    const a = pool.take(16);
    a.set([1, 2, 3]);
    const b = pool.grow(a, 3, 40);
    assert.equal(b.length, 64);
    assert.deepEqual([...b.subarray(0, 3)], [1, 2, 3]);
    assert.equal(pool.take(16), a);
  });
});
