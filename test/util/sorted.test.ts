import { test } from 'node:test';
import assert from 'node:assert/strict';
import { countInRange, insertSorted, lowerBound, RecentWindow, removeSorted, upperBound } from '../../src/util/sorted.js';

test('sorted arrays: lower bound, counts in a range, insert and remove keep the order', () => {
  const a: number[] = [];
  for (const x of [5, 1, 300, 3, 5, 1]) insertSorted(a, x);
  assert.deepEqual(a, [1, 1, 3, 5, 5, 300]);
  assert.equal(lowerBound(a, 0), 0);
  assert.equal(lowerBound(a, 3), 2);
  assert.equal(lowerBound(a, 4), 3);
  assert.equal(lowerBound(a, 301), 6);
  assert.equal(upperBound(a, 1), 2);
  assert.equal(upperBound(a, 5), 5);
  assert.equal(upperBound(a, 0), 0);
  // [2, 6): the 3 and the two 5s.
  assert.equal(countInRange(a, 2, 6), 3);
  assert.equal(countInRange(a, 6, 2), 0);
  assert.equal(removeSorted(a, 5), true);
  assert.equal(removeSorted(a, 4), false, 'a value not there removes nothing');
  assert.deepEqual(a, [1, 1, 3, 5, 300]);
});

test('a recent window keeps the last values, ascending, and reads quantiles from them', () => {
  const w = new RecentWindow(4);
  assert.ok(Number.isNaN(w.quantile(0.5)));
  for (const x of [9, 1, 5, 7]) w.push(x);
  assert.deepEqual(w.sorted, [1, 5, 7, 9]);
  assert.equal(w.quantile(0), 1);
  assert.equal(w.quantile(0.25), 1);
  assert.equal(w.quantile(0.5), 5);
  assert.equal(w.quantile(1), 9);
  // The oldest goes first: 9, then 1.
  w.push(3);
  assert.deepEqual(w.sorted, [1, 3, 5, 7]);
  w.push(8);
  assert.deepEqual(w.sorted, [3, 5, 7, 8]);
  assert.equal(w.size, 4);
});
