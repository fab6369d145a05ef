import { test } from 'node:test';
import assert from 'node:assert/strict';
import { argminRandom } from '../../../src/scheduler/pickers/argmin-random.js';
import { maxScorePicker } from '../../../src/scheduler/pickers/max-score.js';
import { randomPicker } from '../../../src/scheduler/pickers/random.js';
import { roundRobinPicker } from '../../../src/scheduler/pickers/round-robin.js';
import type { RoutingContext, ScoredWorker } from '../../../src/scheduler/types.js';
import { seededRng } from '../../../src/util/rng.js';
import { request, worker } from '../helpers.js';

/** An rng that returns `values` in turn and counts its calls. */
function scripted(values: number[]): { ctx: RoutingContext; calls: () => number } {
  let i = 0;
  const rng = () => {
    if (i >= values.length) throw new Error('rng called more often than scripted');
    return values[i++]!;
  };
  return { ctx: { now: 0, rng, staleAfterMs: 5000 }, calls: () => i };
}

const scored = (scores: number[]): ScoredWorker[] =>
  scores.map((score, i) => ({ worker: worker(String.fromCharCode(97 + i)), score, parts: {} }));

test('max-score: the highest score wins wherever it stands, without touching the rng', () => {
  for (const scores of [[0.1, 0.9, 0.5], [0.9, 0.1, 0.5], [0.1, 0.5, 0.9]]) {
    const { ctx, calls } = scripted([]);
    const p = maxScorePicker.pick(request([1]), scored(scores), ctx);
    assert.equal(p?.worker.score, 0.9);
    assert.equal(p?.reason, 'max-score');
    assert.equal(calls(), 0);
  }
  assert.equal(maxScorePicker.pick(request([1]), [], scripted([]).ctx), null);
});

test('max-score: ties within 1e-9 are broken by reservoir sampling, one rng call per tie met in order', () => {
  // Three tied candidates a, b, c: at b the draw keeps b if rng·2 < 1, at c if rng·3 < 1.
  const cases: Array<{ rng: number[]; winner: string }> = [
    { rng: [0.9, 0.9], winner: 'a' },
    { rng: [0.4, 0.9], winner: 'b' },
    { rng: [0.4, 0.2], winner: 'c' },
    { rng: [0.9, 0.3], winner: 'c' },
  ];
  for (const c of cases) {
    const { ctx, calls } = scripted(c.rng);
    const p = maxScorePicker.pick(request([1]), scored([0.5, 0.5 + 4e-10, 0.5 - 4e-10]), ctx);
    assert.equal(p?.worker.worker.id, c.winner, JSON.stringify(c.rng));
    assert.equal(calls(), 2);
  }
  // A clearly higher score resets the count: d ties with c as the second of two (rng · 2 < 1).
  const { ctx, calls } = scripted([0.1, 0.4]);
  const p = maxScorePicker.pick(request([1]), scored([0.5, 0.5, 0.8, 0.8]), ctx);
  assert.equal(p?.worker.worker.id, 'd');
  assert.equal(calls(), 2);
});

test('max-score: each of n tied candidates is picked about 1/n of the time', () => {
  const ctx: RoutingContext = { now: 0, rng: seededRng(3), staleAfterMs: 5000 };
  const counts = new Map<string, number>();
  const candidates = scored([0.7, 0.7, 0.7, 0.7]);
  for (let i = 0; i < 4000; i++) {
    const id = maxScorePicker.pick(request([1]), candidates, ctx)!.worker.worker.id;
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  assert.equal(counts.size, 4);
  for (const n of counts.values()) assert.ok(n > 850 && n < 1150, JSON.stringify([...counts]));
});

test('round-robin: candidate n mod count on the n-th decision, in candidate order, one counter per picker', () => {
  const p = roundRobinPicker();
  const ctx = scripted([]).ctx;
  const three = scored([0, 0, 0]);
  const picks = Array.from({ length: 7 }, () => p.pick(request([1]), three, ctx)!);
  assert.deepEqual(picks.map((x) => x.worker.worker.id), ['a', 'b', 'c', 'a', 'b', 'c', 'a']);
  assert.ok(picks.every((x) => x.reason === 'round-robin'));
  // The counter does not care that the candidate set changed: decision 8 of 2 candidates → index 1.
  assert.equal(p.pick(request([1]), scored([0, 0]), ctx)!.worker.worker.id, 'b');
  // A new picker starts at the first candidate.
  assert.equal(roundRobinPicker().pick(request([1]), three, ctx)!.worker.worker.id, 'a');
  assert.equal(p.pick(request([1]), [], ctx), null);
});

test('random: candidate ⌊rng · count⌋, one rng call, scores ignored', () => {
  const cases: Array<{ rng: number; winner: string }> = [
    { rng: 0, winner: 'a' },
    { rng: 0.34, winner: 'b' },
    { rng: 0.999, winner: 'c' },
  ];
  for (const c of cases) {
    const { ctx, calls } = scripted([c.rng]);
    const p = randomPicker.pick(request([1]), scored([0.9, 0.1, 0]), ctx);
    assert.equal(p?.worker.worker.id, c.winner);
    assert.equal(p?.reason, 'random');
    assert.equal(calls(), 1);
  }
  assert.equal(randomPicker.pick(request([1]), [], scripted([]).ctx), null);
});

test('argminRandom: the lowest key, ties within 1e-9 drawn in order', () => {
  const items = [5, 3, 3 + 1e-10, 4];
  assert.equal(argminRandom(items, (x) => x, scripted([0.9]).ctx.rng), 3);
  assert.equal(argminRandom(items, (x) => x, scripted([0.1]).ctx.rng), 3 + 1e-10);
  assert.equal(argminRandom([], (x: number) => x, scripted([]).ctx.rng), null);
});
