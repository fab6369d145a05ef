/**
 * The parity watch between the KV-event mapper and the prefix index: of the blocks a worker reports
 * at the start of a sequence, the share kvgate predicted for it.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KvEventsParity } from '../../src/fleet/kv-events-parity.js';
import { KvEventMapper } from '../../src/fleet/kv-events-mapper.js';
import { blockHashes } from '../../src/kv/block-hash.js';
import { KVGATE_HASH_SEED } from '../../src/kv/prompt-blocks.js';
import { PrefixIndex } from '../../src/scheduler/index/prefix-index.js';

const BS = 4;
let engineHash = 1;

/** A BlockStored for `tokens` (whole blocks), with fresh engine hashes. */
function stored(tokens: number[], parent: number | null = null) {
  const n = tokens.length / BS;
  return { type: 'BlockStored' as const, blockHashes: Array.from({ length: n }, () => engineHash++), parentBlockHash: parent, tokenIds: tokens, blockSize: BS };
}

function setup(opts: ConstructorParameters<typeof KvEventsParity>[1] = {}) {
  const index = new PrefixIndex({ predictedTtlMs: 60_000 });
  index.addWorker('w', 10_000);
  const changes: Array<[boolean, number]> = [];
  const parity = new KvEventsParity(index, { minBlocks: 8, windowBlocks: 16, ...opts, onChange: (_id, low, ratio) => changes.push([low, ratio]) });
  const mapper = new KvEventMapper(parity.sink(index), 'w', { blockSize: BS });
  /** kvgate routed `tokens` to the worker: its prompt blocks are predicted there. */
  const predict = (tokens: number[]): void => index.insert('w', blockHashes(tokens, BS, KVGATE_HASH_SEED), 'predicted', 0);
  return { index, parity, mapper, predict, changes };
}

const prompt = (i: number): number[] => Array.from({ length: 3 * BS }, (_, j) => 1000 * i + j);

test('blocks stored under the ids kvgate predicted count as matched; the index still gets them', () => {
  const { index, parity, mapper, predict } = setup();
  assert.equal(parity.ratio('w'), null);
  for (let i = 0; i < 4; i++) {
    predict(prompt(i));
    mapper.apply([stored(prompt(i))], 1);
  }
  assert.equal(parity.ratio('w'), 1);
  assert.deepEqual(parity.totals('w'), { blocks: 12, matched: 12 });
  assert.equal(index.blockCount('w'), 12);
});

test('blocks whose ids kvgate computed differently (another tokenizer) do not match, and the watch says so once', () => {
  const { parity, mapper, predict, changes } = setup();
  for (let i = 0; i < 4; i++) {
    predict(prompt(i));
    // The engine's tokenizer gave other ids for the same prompt.
    mapper.apply([stored(prompt(i).map((t) => t + 1))], 1);
  }
  assert.equal(parity.ratio('w'), 0);
  assert.equal(parity.isLow('w'), true);
  assert.deepEqual(changes, [[true, 0]]);
  // It recovers once the ids agree again: the low blocks leave the window.
  for (let i = 10; i < 20; i++) {
    predict(prompt(i));
    mapper.apply([stored(prompt(i))], 1);
  }
  assert.equal(parity.isLow('w'), false);
  assert.equal(changes.length, 2);
  assert.equal(changes[1]![0], false);
});

test('only sequence starts count: blocks that continue a sequence (generated tokens) are left out', () => {
  const { parity, mapper, predict } = setup();
  predict(prompt(1));
  const first = stored(prompt(1));
  mapper.apply([first], 1);
  // The next block holds generated tokens no prediction covers: its parent is the prompt's last block.
  mapper.apply([stored([7, 7, 7, 7], first.blockHashes[2]!)], 2);
  assert.deepEqual(parity.totals('w'), { blocks: 3, matched: 3 });
});

test('below minBlocks the ratio is shown but not judged', () => {
  const { parity, mapper, changes } = setup({ minBlocks: 100 });
  mapper.apply([stored(prompt(1))], 1);
  assert.equal(parity.ratio('w'), 0);
  assert.equal(parity.isLow('w'), false);
  assert.deepEqual(changes, []);
});
