import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { HashSet53 } from '../../src/util/hash-set53.js';
import { seededRng } from '../../src/util/rng.js';

describe('HashSet53', () => {
  it('answers as a Set of the same 53-bit hashes, through its growth, 0 included', () => {
    const rng = seededRng(5);
    const ref = new Set<number>();
    const set = new HashSet53(4);
    for (let i = 0; i < 200_000; i++) {
      // Draw from a small range half the time, so many hashes repeat.
      const h = i % 2 ? Math.floor(rng() * 2 ** 21) * 4294967296 + Math.floor(rng() * 4294967296) : Math.floor(rng() * 5000);
      assert.equal(set.add(h), !ref.has(h));
      ref.add(h);
    }
    assert.equal(set.size, ref.size);
    for (let i = 0; i < 20_000; i++) {
      const h = Math.floor(rng() * 2 ** 53);
      assert.equal(set.has(h), ref.has(h));
    }
    assert.ok(ref.has(0) && set.has(0));
    // Doubling at half full: at most four slots of 8 bytes per hash.
    assert.ok(set.bytes <= ref.size * 32, `${set.bytes} bytes for ${ref.size} hashes`);
  });
});
