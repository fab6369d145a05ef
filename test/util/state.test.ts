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

test('a stored undefined is there; a deleted value is not', () => {
  const MAYBE = stateKey<number | undefined>('test.maybe');
  const s = new RequestState();
  s.set(MAYBE, undefined);
  assert.equal(s.has(MAYBE), true);
  assert.equal(s.get(MAYBE), undefined);
  assert.equal(s.getOrInit(MAYBE, () => 5), undefined);
  s.delete(MAYBE);
  assert.equal(s.has(MAYBE), false);
  assert.equal(s.getOrInit(MAYBE, () => 5), 5);
});

test('keys beyond the numbered slots work the same, each apart from every other', () => {
  // A long benchmark makes a policy (and its keys) per probe: far more keys than slots.
  const keys = Array.from({ length: 200 }, (_, i) => stateKey<number>(`test.many.${i}`));
  assert.ok(keys.some((k) => k.slot === -1) && keys.some((k) => k.slot >= 0) || keys.every((k) => k.slot === -1));
  const s = new RequestState();
  keys.forEach((k, i) => s.set(k, i));
  keys.forEach((k, i) => assert.equal(s.get(k), i));
  s.delete(keys[199]!);
  assert.equal(s.has(keys[199]!), false);
  assert.equal(s.get(keys[198]!), 198);
  assert.equal(new RequestState().has(keys[0]!), false);
});
