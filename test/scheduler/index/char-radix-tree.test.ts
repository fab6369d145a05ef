import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CharRadixTree } from '../../../src/scheduler/index/char-radix-tree.js';

test('char radix tree: longest match over all tenants, each tenant’s own match, splits', () => {
  const t = new CharRadixTree();
  t.insert('hello world', 'a');
  t.insert('hello there', 'b');
  assert.deepEqual(t.match('hello world!'), { matched: 11, tenant: 'a' });
  assert.equal(t.match('hello thx').matched, 8);
  assert.equal(t.match('bye').matched, 0);
  assert.equal(t.matchFor('hello world', 'a'), 11);
  assert.equal(t.matchFor('hello world', 'b'), 6);
  assert.equal(t.matchFor('hello there', 'a'), 6);
  assert.equal(t.sizeOf('a'), 'hello world'.length);
  assert.equal(t.sizeOf('b'), 'hello world'.length);
});

test('char radix tree: a shared prefix resolves to the tenant that sent it first, while it holds it', () => {
  const t = new CharRadixTree();
  t.insert('system prompt: question one', 'a');
  t.insert('system prompt: question two', 'b');
  t.insert('system prompt: question three', 'c');
  // The split node 'system prompt: question ' inherited the owner of the node it was cut from.
  for (let i = 0; i < 20; i++) assert.equal(t.match('system prompt: question four').tenant, 'a');
  // A match ending inside a tenant's own tail resolves to that tail's creator.
  assert.equal(t.match('system prompt: question tw').tenant, 'b');
  // b re-sending the shared prefix does not make it b's.
  t.insert('system prompt: question five', 'b');
  assert.equal(t.match('system prompt: question six').tenant, 'a');
});

test('char radix tree: eviction trims each tenant LRU-first to the budget; an evicted owner loses its prefix', () => {
  const t = new CharRadixTree();
  t.insert('shared prefix / a-tail', 'a'); // a creates the node
  t.insert('shared prefix / b', 'b'); // split: 'shared prefix / ' (16 chars) stays a's
  t.insert('other', 'a');
  assert.equal(t.sizeOf('a'), 22 + 5);
  assert.equal(t.sizeOf('b'), 17);
  assert.equal(t.match('shared prefix / c').tenant, 'a');
  // a is over the budget: its oldest leaf ('a-tail') goes, then the shared prefix it no longer
  // needs below it; 'other' is newer and a is within the budget by then. b is within it already.
  t.evict(17);
  assert.equal(t.sizeOf('a'), 5);
  assert.equal(t.matchFor('other', 'a'), 5);
  assert.equal(t.matchFor('shared prefix / a-tail', 'a'), 0);
  assert.equal(t.sizeOf('b'), 17);
  // The prefix now resolves to b, the tenant still holding it.
  assert.deepEqual(t.match('shared prefix / c'), { matched: 16, tenant: 'b' });
  // Everything over budget goes; nodes nobody holds leave the tree.
  t.evict(0);
  assert.equal(t.sizeOf('a') + t.sizeOf('b'), 0);
  assert.equal(t.match('shared prefix / c').matched, 0);
});
