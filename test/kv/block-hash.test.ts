import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { blockHashes, chainRoot, hashBlock, hashBlocksInto } from '../../src/kv/block-hash.js';

/** The chained hash as the module documents it, one block at a time, its parent split anew. */
function reference(parent: number, tokens: ArrayLike<number>, start: number, bs: number): number {
  const fmix = (h: number): number => {
    h ^= h >>> 16;
    h = Math.imul(h, 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 16;
    return h >>> 0;
  };
  let a = (parent % 4294967296) ^ 0x9e3779b9;
  let b = Math.floor(parent / 4294967296) ^ 0x7f4a7c15;
  for (let i = start; i < start + bs; i++) {
    const t = tokens[i]! >>> 0;
    a = Math.imul(a ^ t, 0x01000193);
    a = (a << 13) | (a >>> 19);
    b = Math.imul(b + t, 0x5bd1e995);
    b ^= b >>> 15;
  }
  a = fmix(a ^ bs);
  b = fmix(b ^ Math.imul(a, 0x27d4eb2f));
  return (b & 0x1fffff) * 4294967296 + a;
}

function tokens(n: number, seed: number): Int32Array {
  const out = new Int32Array(n);
  let x = seed;
  for (let i = 0; i < n; i++) out[i] = (x = (Math.imul(x, 1103515245) + 12345) >>> 0) % 128_000;
  return out;
}

describe('block hashes', () => {
  it('hashBlocksInto writes the chain hashBlock gives, from any block and parent, for typed and plain token arrays', () => {
    for (const bs of [16, 1, 7]) {
      const toks = tokens(40 * bs, bs);
      const plain = Array.from(toks);
      // Roots above 2^32 (every real one) and below it, and 0.
      for (const root of [chainRoot(0), chainRoot(99), 2 ** 53 - 1, 4294967297, 12345, 0]) {
        const expected: number[] = [];
        let p = root;
        for (let blk = 0; blk < 40; blk++) expected.push((p = reference(p, toks, blk * bs, bs)));
        const whole = new Float64Array(40);
        hashBlocksInto(whole, 0, 40, root, toks, 0, bs);
        assert.deepEqual([...whole], expected);
        // Resumed mid-chain from a stored hash, into a later part of the array, over a plain array.
        const resumed = new Float64Array(40);
        hashBlocksInto(resumed, 0, 13, root, plain, 0, bs);
        hashBlocksInto(resumed, 13, 40, resumed[12]!, plain, 13 * bs, bs);
        assert.deepEqual([...resumed], expected);
        assert.equal(hashBlock(expected[20]!, toks, 21 * bs, bs), expected[21]);
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
