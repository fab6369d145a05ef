import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ClassQueue } from '../../src/admission/queue.js';

test('the queue is ordered by class, then arrival; bounded; cancellation and expiry remove entries at once', () => {
  const q = new ClassQueue<string>(4);
  const s1 = q.push('s1', 'standard', 0, 100)!;
  q.push('c1', 'critical', 1, 50);
  q.push('s2', 'standard', 2, 30);
  q.push('c2', 'critical', 3, 500);
  assert.equal(q.push('x', 'critical', 4, 100), null, 'full');
  assert.deepEqual(q.entries().map((e) => e.value), ['c1', 'c2', 's1', 's2']);
  assert.equal(q.depthAtOrAbove('critical'), 2);
  assert.equal(q.depthAtOrAbove('sheddable'), 4);
  assert.equal(q.nextDeadline(), 30);
  assert.ok(q.remove(s1));
  assert.equal(q.remove(s1), false, 'idempotent');
  assert.equal(q.size, 3);
  assert.deepEqual(q.expire(50).map((e) => e.value), ['c1', 's2']);
  assert.equal(q.peek()!.value, 'c2');
  assert.equal(q.depth('standard'), 0);
  assert.equal(q.size, 1);
});

test('many pushes and removals keep the counts exact (compaction)', () => {
  const q = new ClassQueue<number>(10_000);
  const es = [];
  for (let i = 0; i < 5000; i++) es.push(q.push(i, i % 2 === 0 ? 'standard' : 'critical', i, 1e9)!);
  for (let i = 0; i < 4000; i++) q.remove(q.peek()!);
  assert.equal(q.size, 1000);
  assert.equal(q.peek()!.value, 3000, 'the 2,500 critical entries (odd) went first, then standard ones in order');
  for (const e of es) q.remove(e);
  assert.equal(q.size, 0);
  assert.equal(q.peek(), null);
});

test('evictFor takes the newest entry of the least important class below the arrival, only from a full queue', () => {
  const q = new ClassQueue<string>(4);
  q.push('s1', 'standard', 0, 100);
  q.push('c1', 'critical', 1, 100);
  assert.equal(q.evictFor('critical'), null, 'not full');
  q.push('s2', 'standard', 2, 100);
  q.push('x1', 'sheddable', 3, 100);
  assert.equal(q.evictFor('sheddable'), null, 'nothing less important than sheddable');
  assert.equal(q.evictFor('standard')!.value, 'x1');
  assert.equal(q.size, 3);
  q.push('s3', 'standard', 4, 100);
  assert.equal(q.evictFor('standard'), null, 'equal class: none');
  assert.equal(q.evictFor('critical')!.value, 's3');
  q.push('c2', 'critical', 5, 100);
  assert.equal(q.evictFor('critical')!.value, 's2');
  q.push('c3', 'critical', 6, 100);
  assert.deepEqual(q.entries().map((e) => e.value), ['c1', 'c2', 'c3', 's1']);
  assert.equal(q.evictFor('critical')!.value, 's1');
  assert.equal(q.depth('standard'), 0);
  assert.equal(q.peek()!.value, 'c1');
  // A queue over its (lowered) size evicts nobody.
  q.push('s4', 'standard', 7, 100);
  q.maxSize = 2;
  assert.equal(q.evictFor('critical'), null);
});
