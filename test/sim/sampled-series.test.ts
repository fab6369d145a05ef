/** A sampled series in bounded memory: exact mean and maximum, the chart's points as the whole series would give them. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { downsample, SampledSeries } from '../../src/sim/sampled-series.js';

function series(values: readonly number[], cap?: number): SampledSeries {
  const s = new SampledSeries(cap);
  for (const v of values) s.push(v);
  return s;
}

test('under its cap it is the series as taken: points are downsample of the samples', () => {
  const values = Array.from({ length: 1000 }, (_, i) => ((i * 37) % 101) / 100);
  const s = series(values, 1024);
  assert.deepEqual(s.points(300), downsample(values, 300));
  assert.deepEqual(s.points(5000), { factor: 1, points: values.map((v) => Math.round(v * 10000) / 10000) });
  assert.equal(s.length, 1000);
  assert.equal(s.max, Math.max(...values));
  assert.equal(s.mean, values.reduce((a, b) => a + b, 0) / values.length);
});

test('past its cap it holds sums of a doubling width, and each point is the mean of its samples', () => {
  // 8 entries at most: 0..20 becomes sums of 4 samples (width doubles twice).
  const values = Array.from({ length: 21 }, (_, i) => i);
  const s = series(values, 8);
  assert.equal(s.length, 21);
  assert.equal(s.max, 20);
  assert.equal(s.mean, 10);
  // Width 4: entries [0..3] [4..7] [8..11] [12..15] [16..19] [20]; two entries a point.
  assert.deepEqual(s.points(3), { factor: 8, points: [3.5, 11.5, 18] });
  // One entry a point where it fits.
  assert.deepEqual(s.points(100), { factor: 4, points: [1.5, 5.5, 9.5, 13.5, 17.5, 20] });
});

test('a long series stays within its cap and its points match the exact means', () => {
  const cap = 64;
  const s = new SampledSeries(cap);
  const values: number[] = [];
  let x = 7;
  for (let i = 0; i < 100_003; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    const v = (x % 1000) / 1000;
    values.push(v);
    s.push(v);
  }
  const { factor, points } = s.points(300);
  assert.ok(points.length <= 300 && points.length > 0);
  assert.equal(points.length, Math.ceil(values.length / factor));
  for (let p = 0; p < points.length; p++) {
    const group = values.slice(p * factor, (p + 1) * factor);
    const mean = group.reduce((a, b) => a + b, 0) / group.length;
    assert.ok(Math.abs(points[p]! - mean) < 1e-4, `point ${p}: ${points[p]} against ${mean}`);
  }
  assert.ok(Math.abs(s.mean - values.reduce((a, b) => a + b, 0) / values.length) < 1e-12);
  assert.equal(s.max, Math.max(...values));
  assert.ok((s as unknown as { sums: number[] }).sums.length <= cap);
});

test('an empty series has mean and maximum 0 and no points', () => {
  const s = new SampledSeries();
  assert.equal(s.mean, 0);
  assert.equal(s.max, 0);
  assert.deepEqual(s.points(300), { factor: 1, points: [] });
  assert.throws(() => new SampledSeries(3), /even/);
});
