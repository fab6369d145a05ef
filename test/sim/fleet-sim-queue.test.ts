import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EventQueue } from '../../src/sim/des-queue.js';
import { seededRng } from '../../src/util/rng.js';

describe('DES event queue', () => {
  it('pops by time, ties in insertion order', () => {
    const q = new EventQueue<string>();
    assert.equal(q.peekTime(), Infinity);
    assert.equal(q.pop(), undefined);
    q.push(5, 'a');
    q.push(1, 'b');
    q.push(5, 'c');
    q.push(0, 'd');
    q.push(1, 'e');
    assert.equal(q.size, 5);
    assert.equal(q.peekTime(), 0);
    const out: string[] = [];
    for (let e = q.pop(); e; e = q.pop()) out.push(`${e.t}${e.ev}`);
    assert.deepEqual(out, ['0d', '1b', '1e', '5a', '5c']);
  });

  it('matches a stable sort on random interleaved pushes and pops', () => {
    const rng = seededRng(3);
    const q = new EventQueue<number>();
    const ref: Array<{ t: number; id: number }> = [];
    let id = 0;
    for (let round = 0; round < 2000; round++) {
      if (rng() < 0.6 || ref.length === 0) {
        const t = Math.floor(rng() * 50);
        q.push(t, id);
        ref.push({ t, id: id++ });
      } else {
        let best = 0;
        for (let i = 1; i < ref.length; i++) if (ref[i]!.t < ref[best]!.t || (ref[i]!.t === ref[best]!.t && ref[i]!.id < ref[best]!.id)) best = i;
        const want = ref.splice(best, 1)[0]!;
        const got = q.pop()!;
        assert.deepEqual([got.t, got.ev], [want.t, want.id]);
      }
    }
    assert.equal(q.size, ref.length);
  });
});
