import assert from 'node:assert/strict';
import test from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { blockHashes } from '../../src/kv/block-hash.js';
import { KVGATE_HASH_SEED, PromptBlocks } from '../../src/kv/prompt-blocks.js';

// gc() for this test: whether a PromptBlocks still holds its prompt is seen by the prompt being
// collectable or not.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

function prompt(n: number): Int32Array {
  return Int32Array.from({ length: n }, (_, i) => (i * 2654435761) % 32000);
}

test('the block hashes are the chain of the whole prompt, hashed as far as they are read', () => {
  const tokens = prompt(1000);
  const want = blockHashes(tokens, 16, KVGATE_HASH_SEED);
  const b = new PromptBlocks(tokens, 16, KVGATE_HASH_SEED);
  assert.equal(b.length, 62);
  assert.equal(b.at(3), want[3]);
  assert.equal(b.at(61), want[61]);
  assert.equal(b.at(62), undefined);
  assert.deepEqual(b.all(), want);
});

test('once every block is hashed, the prompt is no longer held: whoever keeps the hashes does not keep the tokens', async () => {
  let tokens: Int32Array | null = prompt(4000);
  const ref = new WeakRef(tokens);
  const want = blockHashes(tokens, 16, KVGATE_HASH_SEED);
  const b = new PromptBlocks(tokens, 16, KVGATE_HASH_SEED);
  b.at(10);
  tokens = null;
  await new Promise((r) => setImmediate(r));
  gc();
  assert.ok(ref.deref() !== undefined, 'still needed: most blocks are not hashed yet');
  assert.equal(b.all().length, 250);
  await new Promise((r) => setImmediate(r));
  gc();
  assert.equal(ref.deref(), undefined, 'the prompt is still reachable through its blocks');
  // The hashes stay, the same as before.
  assert.deepEqual(b.all(), want);
  assert.equal(b.at(249), want[249]);
});
