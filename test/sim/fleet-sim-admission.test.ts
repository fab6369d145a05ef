/** The fleet simulation with the gateway's admission controller, in virtual time. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ADMISSION_DEFAULTS } from '../../src/admission/controller.js';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import { createPolicy } from '../../src/scheduler/registry.js';
import { simulateFleet } from '../../src/sim/fleet-sim.js';
import type { BenchRequest } from '../../src/workload/types.js';

const cfg = { ...buildEngineConfig({ gpu: 'h100', model: 'llama-3-8b', hashSeed: 7, emitTokens: false }), numGpuBlocks: 100 };
const tokens = (n: number, salt: number) => Array.from({ length: n }, (_, i) => 1000 + ((i * 7919 + salt * 104_729) % 30_000));
const req = (t: number, prompt: number, out: number, priority: number, salt: number): BenchRequest => ({ arrivalMs: t, promptTokens: tokens(prompt, salt), maxTokens: out, outputSeed: salt, priority });

describe('fleet simulation with admission', () => {
  it('a request queued for KV room starts when a finished request frees it, and its TTFT counts the wait', async () => {
    // One worker of 100 blocks: a critical request of 60 + 30 blocks fills it past 0.92 for a
    // standard one of 10 + 4 blocks, which waits until the first finishes; a sheddable one is shed.
    const r = await simulateFleet(
      [req(0, 960, 480, 0, 1), req(1, 160, 480, 1, 2), req(2, 160, 480, 2, 3)],
      { workers: 1, engineConfig: cfg, policy: createPolicy('round-robin'), seed: 1, admission: { settings: ADMISSION_DEFAULTS } },
    );
    assert.equal(r.workers[0]!.preemptions, 0);
    assert.deepEqual(r.byClass!.queued, [0, 1, 0]);
    assert.deepEqual(r.byClass!.refused.cls, [2]);
    assert.deepEqual(r.byClass!.refused.latencyMs, [0], 'shed at its arrival');
    assert.equal(r.refusals.overloaded, 1);
    const c = r.completed;
    assert.deepEqual(c.cls, [0, 1]);
    const [first, second] = [0, 1];
    assert.equal(c.arrival[second], 1, 'its own arrival, not the time it left the queue');
    assert.ok(c.firstToken[second]! >= c.finish[first]!, 'it started after the critical request ended');
  });

  it('without admission the same requests all run, and the engine preempts', async () => {
    const r = await simulateFleet(
      [req(0, 960, 480, 0, 1), req(1, 160, 480, 1, 2), req(2, 160, 480, 2, 3)],
      { workers: 1, engineConfig: cfg, policy: createPolicy('round-robin'), seed: 1 },
    );
    assert.equal(r.completed.arrival.length, 3);
    assert.deepEqual(r.byClass!.queued, [0, 0, 0]);
    assert.ok(r.workers[0]!.preemptions > 0);
  });
});
