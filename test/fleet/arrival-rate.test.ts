/** A worker's recent arrival rate (fleet/arrival-rate.ts). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ArrivalRate } from '../../src/fleet/arrival-rate.js';

test('a steady stream holds the rate at its own; it decays once the stream stops', () => {
  const r = new ArrivalRate();
  assert.equal(r.perMs(0), 0);
  for (let t = 0; t <= 120_000; t += 250) r.add(t);
  // Four a second for two minutes (twelve time constants): 0.004 per ms, less what the last
  // quarter second has not yet added on average.
  assert.ok(Math.abs(r.perMs(120_000) - 0.004) < 0.0002, `${r.perMs(120_000)}`);
  // Ten seconds of silence: e⁻¹ of it.
  assert.ok(Math.abs(r.perMs(130_000) / r.perMs(120_000) - Math.exp(-1)) < 1e-9);
});

test('a burst shows at once; an arrival stamped before the last one does not decay it', () => {
  const r = new ArrivalRate();
  for (let t = 0; t < 20; t++) r.add(1000);
  assert.ok(Math.abs(r.perMs(1000) - 20 / 10_000) < 1e-12);
  r.add(900);
  assert.ok(Math.abs(r.perMs(1000) - 21 / 10_000) < 1e-12);
});
