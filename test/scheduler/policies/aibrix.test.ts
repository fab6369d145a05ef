/**
 * `aibrix`: AIBrix's prefix-cache routing on hand-worked examples. Four workers; a 400-byte prompt
 * is 100 blocks of 4 bytes, so a worker's match percentage is the number of leading blocks it holds.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { WorkerState } from '../../../src/fleet/worker-state.js';
import { BlockLruTable } from '../../../src/scheduler/index/block-lru-table.js';
import { meanAndSampleStdDev } from '../../../src/scheduler/policies/aibrix.js';
import { createPolicy } from '../../../src/scheduler/registry.js';
import type { Router } from '../../../src/scheduler/router.js';
import { request, router, worker } from '../helpers.js';

let loadSeq = 0;
/** Charge `n` in-flight requests to `w`. */
const load = (w: WorkerState, n: number): void => {
  for (let i = 0; i < n; i++) {
    w.begin({ id: `${w.id}-load-${loadSeq++}`, promptTokens: 10, uncachedTokens: 10, maxTokens: 1, blocks: 1, dispatchedAt: 0 });
  }
};

const PROMPT = 'abcdefghijklmnopqrstuvwxyz0123456789ABCD'.repeat(10); // 400 bytes: 100 blocks

/** Route `text` to `w` alone (so the table learns it there) and finish it. */
function teach(r: Router, w: WorkerState, text: string): void {
  const q = request([1], { promptText: text });
  const out = r.route(q, [w]);
  assert.ok(out.ok && out.decision.worker === w);
  r.complete(q.id, true);
}

/**
 * a holds all 100 blocks of PROMPT, b the first 50, c the first 25, d none; then each worker gets
 * `running` requests in flight.
 */
function scene(options: Record<string, unknown>, running: [number, number, number, number]) {
  const { router: r } = router(createPolicy('aibrix', options));
  const ws = ['a', 'b', 'c', 'd'].map((id) => worker(id));
  const [a, b, c] = ws as [WorkerState, WorkerState, WorkerState, WorkerState];
  teach(r, a, PROMPT);
  teach(r, b, PROMPT.slice(0, 200) + '#'.repeat(200));
  teach(r, c, PROMPT.slice(0, 100) + '%'.repeat(300));
  ws.forEach((w, i) => load(w, running[i]!));
  const out = r.route(request([1], { promptText: PROMPT }), ws);
  assert.ok(out.ok);
  return { id: out.decision.worker.id, reason: out.decision.reason, hit: out.decision.expectedPrefixHit };
}

test('aibrix: the best match whose running count is within mean + 1·σ (sample σ over every worker)', () => {
  // Running 6, 3, 0, 3: mean 3, σ = √((9 + 0 + 9 + 0) / 3) = √6 ≈ 2.449, bound ≈ 5.449.
  // a (100%) is over it at 6; b (50%) is the next by match and within → b.
  assert.deepEqual(meanAndSampleStdDev([6, 3, 0, 3]), { mean: 3, sd: Math.sqrt(6) });
  assert.deepEqual(scene({}, [6, 3, 0, 3]), { id: 'b', reason: 'prefix', hit: 0.5 });
  // Running 5, 3, 0, 3 (mean 2.75, σ ≈ 2.06, bound ≈ 4.81): a still over → b.
  assert.equal(scene({}, [5, 3, 0, 3]).id, 'b');
  // Running 4, 3, 0, 3 (mean 2.5, σ ≈ 1.73, bound ≈ 4.23): a within → a, its whole prompt cached.
  assert.deepEqual(scene({}, [4, 3, 0, 3]), { id: 'a', reason: 'prefix', hit: 1 });
  // A factor of 2 widens the bound to 3 + 2·2.449 ≈ 7.9: a at 6 is within → a.
  assert.equal(scene({ standardDeviationFactor: 2 }, [6, 3, 0, 3]).id, 'a');
});

test('aibrix: no matched worker within the bound → the least running of all, not the best match', () => {
  // Running 6, 6, 6, 0: mean 4.5, σ = 3, bound 7.5 — all within: a by match.
  assert.equal(scene({}, [6, 6, 6, 0]).id, 'a');
  // Running 7, 7, 7, 0: mean 5.25, σ = 3.5, bound 8.75 — still a.
  assert.equal(scene({}, [7, 7, 7, 0]).id, 'a');
  // With the factor at 0 the bound is the mean (5.25): every matched worker is over it → d,
  // which holds nothing.
  assert.deepEqual(scene({ standardDeviationFactor: 0 }, [7, 7, 7, 0]), { id: 'd', reason: 'prefix-skipped', hit: 0 });
});

test('aibrix: past the imbalance count (max − min running > 8) only the least running are matched', () => {
  // Running 9, 1, 0, 3: max − min = 9 > 8 → only c (0 running) is matched: c with its 25%.
  assert.deepEqual(scene({}, [9, 1, 0, 3]), { id: 'c', reason: 'prefix', hit: 0.25 });
  // Without the imbalance rule the same loads go by the bound (mean 3.25, σ ≈ 4.03, ≈ 7.28):
  // a is over it, b (50%) is within → b.
  assert.equal(scene({ imbalanceAbsCount: Infinity }, [9, 1, 0, 3]).id, 'b');
  // max − min = 8 is not past it: a at 8 is over the bound (mean 2.75, σ ≈ 3.59, ≈ 6.34) → b.
  assert.equal(scene({}, [8, 1, 0, 2]).id, 'b');
  // Imbalanced and the least running (d) holds nothing: least request → d.
  assert.deepEqual(scene({}, [9, 1, 2, 0]), { id: 'd', reason: 'least-request', hit: 0 });
});

test('aibrix: equal matches go to the fewer running; nothing matched → the least running', () => {
  const { router: r } = router(createPolicy('aibrix'));
  const [a, b, c] = ['a', 'b', 'c'].map((id) => worker(id)) as [WorkerState, WorkerState, WorkerState];
  teach(r, a, PROMPT);
  teach(r, b, PROMPT);
  load(a, 2);
  load(b, 1);
  const same = r.route(request([1], { promptText: PROMPT }), [a, b, c]);
  assert.ok(same.ok && same.decision.worker === b && same.decision.reason === 'prefix');
  load(c, 3); // a 2, b 2 (with the request above), c 3
  const cold = r.route(request([1], { promptText: 'zz'.repeat(200) }), [a, b, c]);
  assert.ok(cold.ok && cold.decision.reason === 'least-request' && cold.decision.worker !== c);
});

test('block table: leading run in ⌊(i+1)·100/n⌋ percent, one shared LRU of blocks, expiry by last stamp', () => {
  const t = new BlockLruTable(5, 1000);
  t.add([1, 2, 3], 'a', 0);
  t.add([1, 2], 'b', 0);
  t.add([1, 9, 3], 'c', 0);
  // c holds blocks 1 and 3 but not 2: its run stops at 1 → ⌊100/3⌋ = 33.
  assert.deepEqual(Object.fromEntries(t.match([1, 2, 3], ['a', 'b', 'c', 'd'])), { a: 100, b: 66, c: 33 });
  // Five blocks at most, for all workers together: 1, 2, 3, 9 plus 4 and 5 → the oldest stamp (2) goes.
  t.add([4, 5], 'd', 10);
  assert.equal(t.size, 5);
  assert.deepEqual(Object.fromEntries(t.match([1, 2, 3], ['a', 'b', 'c'])), { a: 33, b: 33, c: 33 });
  // Stamped at 0, 0, 0, 10, 10: at 1005 the first three are older than 1000 ms.
  t.expire(1005);
  assert.equal(t.size, 2);
  assert.deepEqual(Object.fromEntries(t.match([4, 5], ['d'])), { d: 100 });
});

test('block table: the LRU order survives many re-stamps (the stamp queue compacts)', () => {
  const t = new BlockLruTable(4, Infinity);
  t.add([7], 'x', 0);
  for (let i = 0; i < 3000; i++) t.add([1, 2, 3], 'a', i);
  // 7 is the least recently stamped, then 1, 2, 3.
  t.add([4], 'b', 3000);
  assert.deepEqual(Object.fromEntries(t.match([7], ['x'])), {});
  assert.deepEqual(Object.fromEntries(t.match([1, 2, 3], ['a'])), { a: 100 });
  t.add([5], 'b', 3001);
  assert.deepEqual(Object.fromEntries(t.match([1, 2, 3], ['a'])), {});
  assert.deepEqual(Object.fromEntries(t.match([2, 3], ['a'])), { a: 100 });
});

/** The table's rules written the plain way: a Map in stamp order, a Set of workers per block. */
class ReferenceTable {
  readonly blocks = new Map<number, { workers: Set<string>; at: number }>();
  constructor(
    private readonly capacity: number,
    private readonly ttlMs: number,
  ) {}
  add(hashes: number[], worker: string, now: number): void {
    for (const h of hashes) {
      const e = this.blocks.get(h) ?? { workers: new Set<string>(), at: now };
      this.blocks.delete(h);
      e.workers.add(worker);
      e.at = now;
      this.blocks.set(h, e);
      while (this.blocks.size > this.capacity) this.blocks.delete(this.blocks.keys().next().value!);
    }
  }
  match(hashes: number[], workers: string[]): Record<string, number> {
    const out: Record<string, number> = {};
    let live = workers;
    for (let i = 0; i < hashes.length && live.length > 0; i++) {
      const e = this.blocks.get(hashes[i]!);
      if (!e) break;
      live = live.filter((w) => e.workers.has(w));
      for (const w of live) out[w] = Math.floor(((i + 1) * 100) / hashes.length);
    }
    return out;
  }
  expire(now: number): void {
    for (const [h, e] of this.blocks) {
      if (now - e.at <= this.ttlMs) break;
      this.blocks.delete(h);
    }
  }
}

test('block table: the same answers as the plain rules over random adds, matches and expiries (40 workers, collisions in the index)', () => {
  let s = 7;
  const rnd = (n: number) => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return s % n;
  };
  const t = new BlockLruTable(300, 50);
  const ref = new ReferenceTable(300, 50);
  const workers = Array.from({ length: 40 }, (_, i) => `w${i}`);
  // Hashes from a small space, many sharing their low bits (the index's home slot), as chains do.
  const prompt = () => {
    const base = rnd(8);
    return Array.from({ length: 1 + rnd(60) }, (_, i) => (i < 20 ? base * 1000 + i : rnd(2000)) * 4294967296 + (i % 5));
  };
  for (let now = 0; now < 2000; now++) {
    const p = prompt();
    const w = workers[rnd(workers.length)]!;
    if (rnd(3) > 0) {
      t.add(p, w, now);
      ref.add(p, w, now);
    }
    const asked = workers.filter(() => rnd(2) === 0);
    assert.deepEqual(Object.fromEntries(t.match(p, asked)), ref.match(p, asked));
    if (rnd(10) === 0) {
      t.expire(now);
      ref.expire(now);
    }
    assert.equal(t.size, ref.blocks.size);
  }
});
