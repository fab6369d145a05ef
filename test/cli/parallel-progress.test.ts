import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CapacitySettings } from '../../src/bench/capacity.js';
import { ParallelProgress } from '../../src/cli/parallel-progress.js';

const CAPACITY: CapacitySettings = { target: 0.9, precision: 0.02, maxProbes: 14, minBandAttainment: undefined };

/** A progress line on a clock the test moves, writing to an array. */
function progress(runs: number, jobs: number, capacity: CapacitySettings | null) {
  let t = 0;
  const lines: string[] = [];
  const p = new ParallelProgress(runs, 1000, jobs, capacity, { write: (s: string) => (lines.push(s), true) }, () => t);
  return { p, lines, at: (ms: number) => (t = ms) };
}

describe('the --jobs status line', () => {
  it('plain runs: the runs left at the mean run time, shared by the lanes', () => {
    const { p, at } = progress(4, 2, null);
    p.start('a', 'a');
    p.start('b', 'b');
    assert.equal(p.etaSeconds(), null, 'nothing to time a run by yet');
    at(1000);
    p.update('a', 500);
    p.update('b', 250);
    // Projected run times 2 s and 4 s (mean 3 s); left: half of a, three quarters of b, c and d whole.
    assert.equal(p.etaSeconds(), ((0.5 + 0.75 + 2) / 2) * 3);
    at(2000);
    p.end('a');
    // One run finished in 2 s: that is the mean now. Left: b's 0.75, c, d over 2 lanes.
    assert.equal(p.etaSeconds(), ((0.75 + 2) / 2) * 2);
  });

  it('capacity: a policy waiting counts its whole search; a bracketed one its bisections left; one search cannot share lanes', () => {
    const { p, at } = progress(2, 2, CAPACITY);
    p.start('a', 'a ×1');
    at(1000);
    p.start('a', 'a ×2'); // the first run took 1 s
    p.probe('a', { rate_scale: 1, attainment: 0.95 });
    // a: its run in flight (just begun, 1) and 7 − 1 = 6 after it; b waits with its 8, one after
    // another: 15 runs on 2 lanes, but b's 8 in a row take longer.
    assert.equal(p.etaSeconds(), 8);
    p.start('b', 'b ×1');
    at(2000);
    p.start('a', 'a ×1.4142');
    p.probe('a', { rate_scale: 2, attainment: 0.5 });
    // a is bracketed at [1, 2]: 6 bisections, the one in flight among them; b has run 1 s of its
    // first run with nothing done (counted whole) and 7 probes after it: b's 8 in a row again.
    assert.equal(p.etaSeconds(), 8);
    p.end('b');
    // b done: a alone, on one lane however many there are.
    assert.equal(p.etaSeconds(), 6);
  });

  it('a probe that misses its band floor counts as a miss', () => {
    const { p, at } = progress(1, 1, { ...CAPACITY, minBandAttainment: 0.8 });
    p.start('a', 'a');
    at(1000);
    p.start('a', 'a');
    p.probe('a', { rate_scale: 1, attainment: 0.95, worst_band_attainment: 0.5 });
    p.start('a', 'a');
    p.probe('a', { rate_scale: 0.5, attainment: 0.95, worst_band_attainment: 0.9 });
    // Bracketed at [0.5, 1] (the first probe missed on its band): 6 bisections.
    assert.equal(p.etaSeconds(), 6 * (1000 / 2) / 1000);
  });

  it('draws the ETA on the status line', () => {
    const { p, lines, at } = progress(2, 1, null);
    p.start('a', 'a');
    at(1000);
    p.update('a', 1000);
    p.end('a');
    assert.match(lines.at(-1)!, /1\/2 policies done; .*ETA 1 s/);
  });
});
