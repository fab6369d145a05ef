/** The peak of in-flight requests' KV as they decode to their ends, against a step-by-step count. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { peakHeldTokens } from '../../src/fleet/peak-usage.js';

function growing(reqs: { held: number; left: number; sequences?: number }[]) {
  const n = reqs.length;
  return {
    held: Float64Array.from(reqs, (r) => r.held),
    left: Float64Array.from(reqs, (r) => r.left),
    sequences: Float64Array.from(reqs, (r) => r.sequences ?? 1),
    n,
  };
}

/** U(t) stepped through every t: the definition, slowly. */
function stepped(reqs: { held: number; left: number; sequences?: number }[]): number {
  let peak = 0;
  const end = Math.max(0, ...reqs.map((r) => r.left));
  for (let t = 0; t <= end; t++) {
    let u = 0;
    for (const r of reqs) if (r.left >= t) u += r.held + (r.sequences ?? 1) * t;
    peak = Math.max(peak, u);
  }
  return peak;
}

describe('peakHeldTokens', () => {
  it('is 0 for nothing in flight, and a lone request at its end', () => {
    assert.equal(peakHeldTokens(growing([]), new Uint32Array(0)), 0);
    assert.equal(peakHeldTokens(growing([{ held: 500, left: 200 }]), new Uint32Array(1)), 700);
  });

  it('is the sum of final sizes when every request ends at the same step', () => {
    const r = [
      { held: 100, left: 50 },
      { held: 300, left: 50 },
      { held: 10, left: 50, sequences: 4 },
    ];
    assert.equal(peakHeldTokens(growing(r), new Uint32Array(3)), 100 + 300 + 10 + 6 * 50);
  });

  it('counts requests that end early only until they end', () => {
    // A long prompt about to end and a short one with much to write: the first is gone before the
    // second is large. At t = 10: 1010 + 110 = 1120; at t = 500: 600. Sum of finals: 1610.
    const r = [
      { held: 1000, left: 10 },
      { held: 100, left: 500 },
    ];
    assert.equal(peakHeldTokens(growing(r), new Uint32Array(2)), 1120);
  });

  it('agrees with the step-by-step count on random sets', () => {
    let seed = 7;
    const rnd = (k: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % k;
    };
    for (let trial = 0; trial < 300; trial++) {
      const n = rnd(12);
      const r = Array.from({ length: n }, () => ({ held: rnd(2000), left: rnd(300), sequences: 1 + rnd(3) }));
      assert.equal(peakHeldTokens(growing(r), new Uint32Array(n)), stepped(r), JSON.stringify(r));
    }
  });
});
