import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import { createPolicy } from '../../src/scheduler/registry.js';
import { simulateFleet, type FleetSimOptions, type SimResult } from '../../src/sim/fleet-sim.js';
import { workloadSource } from '../../src/workload/workloads.js';
import type { BenchRequest } from '../../src/workload/types.js';

const cfg = buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', hashSeed: 7, emitTokens: false });

/** Everything a run reports but its wall time, its event count (fewer with runs: the point) and ITL. */
function figures(r: SimResult): Omit<SimResult, 'wallMs' | 'events' | 'itl'> {
  const { wallMs: _w, events: _e, itl: _i, ...rest } = r;
  return rest;
}

/**
 * The ITL histogram. Its sum adds each step's duration when the step's end is reached: with runs,
 * a run's steps are added together at its end, so the sum's rounding may differ in its last bits.
 */
function itl(r: SimResult): string {
  return JSON.stringify({ ...r.itl, sum: Math.round(r.itl.sum * 1e6) });
}

function same(a: SimResult, b: SimResult): void {
  assert.deepEqual(figures(a), figures(b), a.policy);
  assert.ok(itl(a) === itl(b), `${a.policy}: the ITL histograms differ (sums ${a.itl.sum}, ${b.itl.sum})`);
}

/** The same run with decode runs and without (`options` makes fresh policies for each). */
async function both(source: () => Iterable<BenchRequest>, options: () => FleetSimOptions): Promise<void> {
  const on = await simulateFleet(source(), options());
  const off = await simulateFleet(source(), { ...options(), decodeRuns: false });
  same(on, off);
  assert.ok(on.events < off.events, `${on.policy}: ${on.events} events with runs, ${off.events} without`);
}

describe('decode runs in the fleet simulation', () => {
  it('give the figures an event per step gives, with fewer events', async () => {
    const mixed = () => workloadSource('mixed', { size: 400, rate: 12, seed: 5 }).open();
    for (const policy of ['round-robin', 'kvgate', 'llm-d', 'sglang-cache-aware']) {
      await both(mixed, () => ({ workers: 4, engineConfig: cfg, policy: createPolicy(policy), seed: 5 }));
    }
  });

  it('with sessions, n sampled answers, replicas and a dispatch delay, and a capacity-style stop', async () => {
    const agentic = () => workloadSource('agentic', { size: 200, rate: 30, seed: 6 }).open();
    await both(agentic, () => ({ workers: 3, engineConfig: cfg, policy: createPolicy('kvgate'), seed: 6, overheadMs: 1.5 }));
    const rollouts = () => workloadSource('rollouts', { size: 30, rate: 2, seed: 7 }).open();
    await both(rollouts, () => ({ workers: 2, engineConfig: cfg, policy: createPolicy('least-load'), seed: 7 }));
    const multi = () => workloadSource('multi-turn', { size: 200, rate: 40, seed: 8 }).open();
    await both(multi, () => {
      const policies = [createPolicy('kvgate'), createPolicy('kvgate')];
      return { workers: 4, engineConfig: cfg, policy: policies[0]!, seed: 8, replicas: { policies, sharing: true, sharingDelayMs: 3 } };
    });
    // Stopped early: the engines are read as they are at the stop.
    let checks = 0;
    const stopAt = (): FleetSimOptions['stopWhen'] => () => ++checks === 13; // 6.5 s: between two scrapes
    const long = () => workloadSource('rollouts', { size: 40, rate: 4, seed: 9 }).open();
    const a = await simulateFleet(long(), { workers: 2, engineConfig: cfg, policy: createPolicy('round-robin'), seed: 9, stopWhen: stopAt() });
    checks = 0;
    const b = await simulateFleet(long(), { workers: 2, engineConfig: cfg, policy: createPolicy('round-robin'), seed: 9, stopWhen: stopAt(), decodeRuns: false });
    assert.equal(a.stoppedEarly, true);
    same(a, b);
  });
});
