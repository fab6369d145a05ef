/** Rejection sampling over reported distributions, as plain functions. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { contentClass } from '../../src/speculative/plan.js';
import { OutputText } from '../../src/speculative/output.js';
import { processDist, residual, sample, verifyRound, type Dist } from '../../src/speculative/sampling.js';
import { seededRng } from '../../src/util/rng.js';

const raw = (pairs: Array<[number, number]>) => new Map(pairs.map(([t, p]) => [t, Math.log(p)]));

describe('distributions from raw logprobs', () => {
  it('applies temperature and renormalises over the candidates', () => {
    const d = processDist(raw([[1, 0.5], [2, 0.3], [3, 0.2]]), { temperature: 1, topP: 1 });
    assert.ok(Math.abs(d.get(1)! - 0.5) < 1e-12 && Math.abs(d.get(3)! - 0.2) < 1e-12);
    const hot = processDist(raw([[1, 0.5], [2, 0.3], [3, 0.2]]), { temperature: 0.5, topP: 1 });
    const z = 0.25 + 0.09 + 0.04;
    assert.ok(Math.abs(hot.get(1)! - 0.25 / z) < 1e-12);
  });

  it('keeps the smallest most-likely-first prefix reaching top_p, and the argmax at temperature 0', () => {
    const d = processDist(raw([[1, 0.5], [2, 0.3], [3, 0.2]]), { temperature: 1, topP: 0.7 });
    assert.deepEqual([...d.keys()], [1, 2]);
    assert.ok(Math.abs(d.get(1)! - 0.625) < 1e-12);
    assert.deepEqual([...processDist(raw([[5, 0.2], [4, 0.2], [9, 0.6]]), { temperature: 0, topP: 1 })], [[9, 1]]);
    // Ties go to the lower token id.
    assert.deepEqual([...processDist(raw([[5, 0.4], [4, 0.4], [9, 0.2]]), { temperature: 0, topP: 1 }).keys()], [4]);
  });
});

describe('one verified position emits exactly the target distribution', () => {
  const cases: Array<[Dist, Dist]> = [
    [new Map([[1, 0.5], [2, 0.3], [3, 0.2]]), new Map([[1, 0.2], [2, 0.2], [4, 0.6]])],
    [new Map([[1, 0.9], [2, 0.1]]), new Map([[1, 0.1], [2, 0.9]])],
    [new Map([[7, 1]]), new Map([[8, 1]])],
    [new Map([[1, 0.4], [2, 0.6]]), new Map([[1, 0.4], [2, 0.6]])],
  ];

  it('exactly: q(x)·min(1, p/q) + (1 − Σ min(p, q))·residual(x) = p(x)', () => {
    for (const [p, q] of cases) {
      let overlap = 0;
      for (const [t, pt] of p) overlap += Math.min(pt, q.get(t) ?? 0);
      const r = residual(p, q);
      for (const x of new Set([...p.keys(), ...q.keys()])) {
        const px = p.get(x) ?? 0;
        const qx = q.get(x) ?? 0;
        const got = (qx > 0 ? qx * Math.min(1, px / qx) : 0) + (1 - overlap) * (r.get(x) ?? 0);
        assert.ok(Math.abs(got - px) < 1e-12, `x=${x}: ${got} vs ${px}`);
      }
    }
  });

  it('by simulation through verifyRound (draft drawn from q, 200,000 seeded draws)', () => {
    for (const [p, q] of cases) {
      const rng = seededRng(9);
      const counts = new Map<number, number>();
      const N = 200_000;
      for (let i = 0; i < N; i++) {
        const x = sample(q, rng);
        const v = verifyRound([{ token: x, p, q, targetArgmax: -1 }], -1, { temperature: 1, topP: 1 }, rng);
        // The emitted token: the draft's if accepted (the bonus comes after it), else the correction.
        const out = v.accepted === 1 ? x : v.next!;
        counts.set(out, (counts.get(out) ?? 0) + 1);
      }
      for (const [t, pt] of p) assert.ok(Math.abs((counts.get(t) ?? 0) / N - pt) < 0.005, `token ${t}: ${(counts.get(t) ?? 0) / N} vs ${pt}`);
      for (const t of counts.keys()) assert.ok(p.has(t), `token ${t} outside the target's support`);
    }
  });

  it('greedy: accepts while the draft is the target’s argmax, then emits the argmax', () => {
    const pos = (token: number, targetArgmax: number) => ({ token, targetArgmax, p: new Map(), q: new Map() });
    assert.deepEqual(verifyRound([pos(1, 1), pos(2, 2), pos(3, 9), pos(4, 4)], 77, { temperature: 0, topP: 1 }, seededRng(1)), { accepted: 2, next: 9, nextKind: 'correction' });
    assert.deepEqual(verifyRound([pos(1, 1), pos(2, 2)], 77, { temperature: 0, topP: 1 }, seededRng(1)), { accepted: 2, next: 77, nextKind: 'bonus' });
  });
});

describe('output rules', () => {
  const rules = { maxTokens: 10, stop: ['ab'], stopTokenIds: new Set([99]), eosTokenIds: new Set([0]) };

  it('finds a stop string split across rounds and cuts it, holding back partial matches', () => {
    const o = new OutputText(rules);
    o.append([1, 2], ['x', 'a']);
    assert.equal(o.takeDelta(), 'x'); // 'a' may start the stop string
    o.append([3, 4], ['b', 'c']);
    assert.equal(o.finishReason, 'stop');
    assert.equal(o.stopReason, 'ab');
    assert.equal(o.text, 'x');
    assert.equal(o.tokens.length, 3, 'the token that completed the stop counts; the rest of the round does not');
  });

  it('ends on EOS (no text), on a stop token id, and at max_tokens', () => {
    const a = new OutputText(rules);
    assert.equal(a.append([5, 0, 6], ['q', '</s>', 'r']), 2);
    assert.deepEqual([a.text, a.finishReason, a.stopReason], ['q', 'stop', null]);
    const b = new OutputText(rules);
    b.append([5, 99], ['q', 'z']);
    assert.deepEqual([b.text, b.finishReason, b.stopReason], ['q', 'stop', 99]);
    const c = new OutputText({ ...rules, maxTokens: 3 });
    assert.equal(c.append([5, 6, 7, 8], ['1', '2', '3', '4']), 3);
    assert.deepEqual([c.text, c.finishReason], ['123', 'length']);
  });
});

describe('content classes', () => {
  it('tells code from prose by a cheap feature', () => {
    assert.equal(contentClass('Write a poem about the sea, with rhymes.'), 'prose');
    assert.equal(contentClass('fix this: function f(a) { return a[0] + g(b); }'), 'code');
    assert.equal(contentClass('```\nhello\n```'), 'code');
  });
});
