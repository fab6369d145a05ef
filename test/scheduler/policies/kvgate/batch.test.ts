import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InflightBatches } from '../../../../src/scheduler/policies/kvgate/batch.js';
import { request, seq, worker } from '../../helpers.js';

test('the mean expected output in flight follows charges, releases and forgotten workers', () => {
  const batches = new InflightBatches();
  const a = worker('a');
  const b = worker('b');
  assert.equal(batches.meanOutput(), undefined);
  const r1 = request(seq(0, 100));
  const r2 = request(seq(0, 100));
  const r3 = request(seq(0, 100));
  batches.charge(r1, a, 100, 20, true);
  batches.charge(r2, a, 1000, 20, true);
  batches.charge(r3, b, 400, 20, true);
  assert.equal(batches.meanOutput(), 500);
  assert.deepEqual(batches.of(a).outputs, [100, 1000]);
  batches.release(r2);
  assert.equal(batches.meanOutput(), 250);
  batches.release(r2); // once only
  assert.equal(batches.meanOutput(), 250);
  // A worker taken out of the pool takes its requests' charges with it; their releases then find nothing.
  batches.forgetWorker(b);
  assert.equal(batches.meanOutput(), 100);
  batches.release(r3);
  assert.equal(batches.meanOutput(), 100);
  batches.release(r1);
  assert.equal(batches.meanOutput(), undefined);
});
