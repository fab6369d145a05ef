import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { blockHashes, chainRoot, hashBlock, hashBlocksInto } from '../../src/kv/block-hash.js';

/**
 * Blocks 0, 1 and 39 of a 40-block chain over tokens(40 × bs, bs), per block size and root: the
 * hashes a `hashBlock` call a block gives (a change to them changes every simulated figure).
 */
const PINNED: ReadonlyArray<[number, number, [number, number, number]]> = [
  [16, 4254569866227, [1463269526037109, 1515521766214942, 7217741457996305]],
  [16, 2 ** 53 - 1, [795447011392153, 8328750465084221, 1945852261485452]],
  [16, 12345, [8147145128114810, 2116233836395581, 8961976982521003]],
  [7, 4254569866227, [1074874606212588, 5060456188899455, 2802722192253078]],
  [7, 2 ** 53 - 1, [3513770974859370, 8159723094910355, 8758693010742241]],
  [7, 12345, [7222854526917161, 1276081000741404, 7367284528887683]],
];

function tokens(n: number, seed: number): Int32Array {
  const out = new Int32Array(n);
  let x = seed;
  for (let i = 0; i < n; i++) out[i] = (x = (Math.imul(x, 1103515245) + 12345) >>> 0) % 128_000;
  return out;
}

describe('block hashes', () => {
  it('hashes as they always have, by a call a block or one call a run', () => {
    assert.equal(chainRoot(0), 4254569866227);
    for (const [bs, root, [h0, h1, h39]] of PINNED) {
      const toks = tokens(40 * bs, bs);
      const run = new Float64Array(40);
      hashBlocksInto(run, 0, 40, root, toks, 0, bs);
      assert.deepEqual([run[0], run[1], run[39]], [h0, h1, h39], `block size ${bs}, root ${root}`);
      let p = root;
      for (let b = 0; b < 40; b++) assert.equal((p = hashBlock(p, toks, b * bs, bs)), run[b], `block ${b}`);
    }
  });

  it('a run resumed from a stored hash, over a plain array, into a later part of the array, continues the chain', () => {
    for (const bs of [16, 7]) {
      const toks = tokens(40 * bs, bs);
      for (const root of [chainRoot(99), 4294967297, 0]) {
        const whole = new Float64Array(40);
        hashBlocksInto(whole, 0, 40, root, toks, 0, bs);
        const resumed = new Float64Array(40);
        const plain = Array.from(toks);
        hashBlocksInto(resumed, 0, 13, root, plain, 0, bs);
        hashBlocksInto(resumed, 13, 40, resumed[12]!, plain, 13 * bs, bs);
        assert.deepEqual([...resumed], [...whole]);
        assert.deepEqual(blockHashes(toks, bs, 7), [...(() => {
          const out = new Float64Array(40);
          hashBlocksInto(out, 0, 40, chainRoot(7), toks, 0, bs);
          return out;
        })()]);
      }
    }
  });

  it('every hash is a 53-bit integer, and an empty run writes nothing', () => {
    const out = new Float64Array(64).fill(-1);
    hashBlocksInto(out, 0, 64, chainRoot(1), tokens(64 * 16, 3), 0, 16);
    for (const h of out) assert.ok(Number.isSafeInteger(h) && h >= 0, String(h));
    const untouched = new Float64Array(4).fill(-1);
    hashBlocksInto(untouched, 2, 2, chainRoot(1), tokens(64, 3), 0, 16);
    assert.deepEqual([...untouched], [-1, -1, -1, -1]);
  });
});
