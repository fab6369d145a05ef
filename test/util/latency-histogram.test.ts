import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { distribution, histogramDistribution, histogramTail, weightedDistribution, weightedTail } from '../../src/bench/metrics.js';
import { HISTOGRAM_RELATIVE_ERROR, LatencyHistogram } from '../../src/util/latency-histogram.js';
import { seededRng } from '../../src/util/rng.js';

/** Relative distance of a from b (0 when both are 0). */
const rel = (a: number, b: number): number => (a === b ? 0 : Math.abs(a - b) / Math.abs(b));

describe('latency histogram', () => {
  it('gives percentiles within its stated resolution (and 1%) of the exact ones, over six decades', () => {
    const rng = seededRng(11);
    const values: number[] = [];
    const weights: number[] = [];
    const h = new LatencyHistogram();
    for (let i = 0; i < 50_000; i++) {
      // Log-uniform from 1 µs to 1,000 s, with a few zeros and weights 1–8 as a decode step has.
      const v = i % 997 === 0 ? 0 : 10 ** (rng() * 9 - 3);
      const w = 1 + Math.floor(rng() * 8);
      values.push(v);
      weights.push(w);
      h.add(v, w);
    }
    const ps = [0, 1, 10, 25, 50, 75, 90, 99, 99.9, 99.99, 100];
    const got = h.percentiles(ps);
    const exact = weightedDistribution(values, weights);
    const tail = weightedTail(values, weights);
    assert.ok(HISTOGRAM_RELATIVE_ERROR < 0.01);
    for (const [p, e] of [[50, exact.p50], [90, exact.p90], [99, exact.p99], [99.9, tail.p99_9], [100, tail.max]] as const) {
      const g = got[ps.indexOf(p)]!;
      // The exact figures are rounded to 0.001 ms; allow that beside the histogram's own error.
      assert.ok(Math.abs(g - e!) <= HISTOGRAM_RELATIVE_ERROR * e! + 0.0005, `p${p}: ${g} vs exact ${e}`);
    }
    assert.equal(got[0], 0);
    assert.equal(got.at(-1), Math.max(...values));
    assert.equal(h.total, weights.reduce((a, b) => a + b, 0));
    assert.ok(rel(h.mean()!, values.reduce((a, v, i) => a + v * weights[i]!, 0) / h.total) < 1e-12);
  });

  it('agrees with the exact distribution on the summary of a few samples', () => {
    const values = [12.5, 40, 7.25, 7.25, 300, 18];
    const h = new LatencyHistogram();
    for (const v of values) h.add(v);
    const exact = distribution(values);
    const got = histogramDistribution(h);
    assert.equal(got.mean, exact.mean);
    for (const k of ['p50', 'p90', 'p99'] as const) assert.ok(rel(got[k]!, exact[k]!) <= HISTOGRAM_RELATIVE_ERROR, `${k}: ${got[k]} vs ${exact[k]}`);
    assert.deepEqual(histogramTail(new LatencyHistogram()), { p99_9: null, max: null });
    assert.deepEqual(histogramDistribution(new LatencyHistogram()), { p50: null, p90: null, p99: null, mean: null });
    assert.equal(histogramTail(h).max, 300);
  });

  it('merges to the histogram of all the samples, and ignores zero weights', () => {
    const a = new LatencyHistogram();
    const b = new LatencyHistogram();
    const all = new LatencyHistogram();
    for (let i = 1; i <= 1000; i++) {
      (i % 2 ? a : b).add(i * 0.37, i % 3);
      all.add(i * 0.37, i % 3);
    }
    a.merge(b);
    assert.deepEqual(a.percentiles([5, 50, 95]), all.percentiles([5, 50, 95]));
    assert.equal(a.total, all.total);
    assert.equal(a.max, all.max);
  });
});
