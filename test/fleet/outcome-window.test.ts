import assert from 'node:assert/strict';
import { test } from 'node:test';
import { OutcomeWindow } from '../../src/fleet/outcome-window.js';

test('counts the outcomes of the last window, a bucket at a time', () => {
  const w = new OutcomeWindow(1000, 10); // 100 ms buckets
  w.record(0, true);
  w.record(50, false);
  w.record(450, true);
  assert.deepEqual(w.counts(450), { total: 3, failed: 2 });
  // At 999 ms the bucket [0, 100) is still the oldest of the ten.
  assert.deepEqual(w.counts(999), { total: 3, failed: 2 });
  // From 1000 ms it has left: only the 450 ms failure is left.
  assert.deepEqual(w.counts(1000), { total: 1, failed: 1 });
  assert.deepEqual(w.counts(1450), { total: 0, failed: 0 });
});

test('a slot reused by a later bucket starts from zero', () => {
  const w = new OutcomeWindow(1000, 10);
  for (let i = 0; i < 5; i++) w.record(10, true);
  w.record(1010, false); // same slot as 10 ms, one window later
  assert.deepEqual(w.counts(1010), { total: 1, failed: 0 });
});

test('a million outcomes cost ten buckets, and clear() forgets them', () => {
  const w = new OutcomeWindow(30_000, 10);
  for (let i = 0; i < 1_000_000; i++) w.record(i * 0.02, i % 4 === 0);
  const c = w.counts(20_000);
  assert.equal(c.total, 1_000_000);
  assert.equal(c.failed, 250_000);
  w.clear();
  assert.deepEqual(w.counts(20_000), { total: 0, failed: 0 });
});
