/** `kvgate bench` with admission: the gateway's controller in the simulation, per-class results. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ADMISSION_DEFAULTS } from '../../src/admission/controller.js';
import { runBench, withPriorityMix } from '../../src/bench/run.js';
import { RESERVE_OUTPUT_TOKENS_CAP } from '../../src/scheduler/router.js';
import { workloadSource } from '../../src/workload/workloads.js';

const MIX = { critical: 0.2, standard: 0, sheddable: 0.8 };

const bench = (admission: boolean) =>
  runBench({
    source: workloadSource('bursty', { size: 1500, seed: 0 }),
    policies: ['round-robin', 'kvgate'],
    workers: 8,
    gpu: 'h100',
    model: 'llama-3.1-8b',
    seed: 0,
    rateScale: 1.5,
    priorityMix: MIX,
    kvAdmission: admission ? { ...ADMISSION_DEFAULTS, reserveOutputCap: RESERVE_OUTPUT_TOKENS_CAP } : undefined,
    sloTtftMs: 1000,
    sloTtftPer1kMs: 100,
    sloTpotMs: 50,
    omitWallTime: true,
  });

describe('kvgate bench --admission', () => {
  it('on a burst that makes plain routing preempt, admission sheds sheddable work at arrival and nothing is preempted', async () => {
    const off = (await bench(false)).results;
    const on = (await bench(true)).results;
    assert.equal(off.admission, null);
    assert.deepEqual(on.admission?.thresholds, { sheddable: 0.85, standard: 0.92, prefillBacklogTokens: 8192, sheddableTpotMs: 50 });
    assert.deepEqual(on.priority_mix, MIX);
    const rrOff = off.policies.find((p) => p.name === 'round-robin')!;
    assert.ok(rrOff.preemptions > 0, 'the load preempts without admission');
    assert.equal(rrOff.shed, 0);
    for (const p of on.policies) {
      const bp = p.by_priority!;
      assert.equal(p.preemptions, 0, `${p.name}: no preemption with admission`);
      assert.equal(bp.critical.shed, 0);
      assert.equal(bp.critical.completed, bp.critical.requests);
      assert.ok(bp.sheddable.shed > 0, `${p.name}: sheddable requests are shed`);
      assert.equal(bp.sheddable.shed_latency_ms.p99, 0, 'shed at arrival (virtual time, no overhead)');
      assert.equal(bp.sheddable.shed + bp.sheddable.completed, bp.sheddable.requests);
      assert.equal(bp.standard.requests, 0);
      // The same requests get the same classes in every run.
      const same = off.policies.find((q) => q.name === p.name)!.by_priority!;
      assert.equal(same.critical.requests, bp.critical.requests);
      assert.ok(bp.critical.requests > 200 && bp.critical.requests < 400, `${bp.critical.requests} critical of 1500`);
    }
    const rrOn = on.policies.find((p) => p.name === 'round-robin')!;
    assert.ok(rrOn.by_priority!.critical.goodput_fraction >= rrOff.by_priority!.critical.goodput_fraction);
  });

  it('queues standard requests when a mix has them, and is deterministic', async () => {
    const run = () =>
      runBench({
        source: workloadSource('bursty', { size: 800, seed: 3 }),
        policies: ['kvgate'],
        workers: 4,
        gpu: 'h100',
        model: 'llama-3.1-8b',
        seed: 3,
        rateScale: 1.2,
        priorityMix: { critical: 0.2, standard: 0.3, sheddable: 0.5 },
        kvAdmission: { ...ADMISSION_DEFAULTS, thresholds: { sheddable: 0.5, standard: 0.6, prefillBacklogTokens: 0, sheddableTpotMs: 0 }, reserveOutputCap: RESERVE_OUTPUT_TOKENS_CAP },
        omitWallTime: true,
      });
    const a = (await run()).results;
    const b = (await run()).results;
    assert.deepEqual(a, b);
    const bp = a.policies[0]!.by_priority!;
    assert.ok(bp.standard.queued > 0, 'standard requests waited');
    assert.equal(bp.standard.shed + bp.standard.completed, bp.standard.requests);
    assert.equal(a.policies[0]!.preemptions, 0);
  });

  it('sheds sheddable requests where the worker decodes slower than sheddableTpotMs, so that more of the other classes meet the SLO', async () => {
    // rag at 1.5× its rate: compute-bound, long prompts, answers that decode for a while.
    const run = (sheddableTpotMs: number) =>
      runBench({
        source: workloadSource('rag', { size: 1500, seed: 5 }),
        policies: ['kvgate'],
        workers: 4,
        gpu: 'h100',
        model: 'llama-3.1-8b',
        seed: 5,
        rateScale: 1.5,
        priorityMix: { critical: 0.2, standard: 0.3, sheddable: 0.5 },
        kvAdmission: { ...ADMISSION_DEFAULTS, thresholds: { ...ADMISSION_DEFAULTS.thresholds, sheddableTpotMs }, reserveOutputCap: RESERVE_OUTPUT_TOKENS_CAP },
        sloTtftMs: 1000,
        sloTtftPer1kMs: 100,
        sloTpotMs: 50,
        omitWallTime: true,
      });
    const off = (await run(0)).results.policies[0]!.by_priority!;
    const on = (await run(30)).results.policies[0]!.by_priority!;
    assert.ok(on.sheddable.shed > off.sheddable.shed, `sheddable shed ${off.sheddable.shed} → ${on.sheddable.shed}`);
    assert.equal(on.critical.shed, 0);
    assert.equal(on.standard.shed, 0);
    assert.ok(on.critical.goodput_fraction > off.critical.goodput_fraction, `critical goodput ${off.critical.goodput_fraction} → ${on.critical.goodput_fraction}`);
  });

  it('a priority mix tags a session’s later turns with its first turn’s class', () => {
    const turn2 = { arrivalMs: 5, promptTokens: [1], maxTokens: 1, outputSeed: 2 };
    const src = [{ arrivalMs: 0, promptTokens: [1], maxTokens: 1, outputSeed: 1, next: () => turn2 }];
    const [first] = [...withPriorityMix(src, { critical: 0, standard: 0, sheddable: 1 }, 0)];
    assert.equal(first!.priority, 2);
    assert.equal(first!.next!(0)!.priority, 2);
  });
});
