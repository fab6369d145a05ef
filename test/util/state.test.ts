/** Typed per-request state: values come back under the key they were stored with, and only that key. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RequestState, stateKey } from '../../src/util/state.js';

test('a value is read back under its key, with its type', () => {
  const COUNT = stateKey<number>('test.count');
  const s = new RequestState();
  assert.equal(s.get(COUNT), undefined);
  assert.equal(s.has(COUNT), false);
  s.set(COUNT, 3);
  assert.equal(s.has(COUNT), true);
  const n: number | undefined = s.get(COUNT);
  assert.equal(n, 3);
  s.delete(COUNT);
  assert.equal(s.has(COUNT), false);
});

test('keys compare by identity, not by name', () => {
  const a = stateKey<string>('same');
  const b = stateKey<string>('same');
  const s = new RequestState();
  s.set(a, 'x');
  assert.equal(s.get(b), undefined);
  assert.equal(s.has(b), false);
});

test('getOrInit creates once and returns the stored value afterwards, even a falsy one', () => {
  const LIST = stateKey<number[]>('test.list');
  const ZERO = stateKey<number>('test.zero');
  const s = new RequestState();
  let calls = 0;
  const l1 = s.getOrInit(LIST, () => (calls++, []));
  l1.push(1);
  const l2 = s.getOrInit(LIST, () => (calls++, []));
  assert.equal(l2, l1);
  assert.equal(calls, 1);
  s.set(ZERO, 0);
  assert.equal(s.getOrInit(ZERO, () => 7), 0);
});
