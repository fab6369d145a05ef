import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { idealHitRate } from '../../src/bench/ideal-hit.js';
import { runBench } from '../../src/bench/run.js';
import { workBound } from '../../src/bench/work-bound.js';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import type { RooflineTimeModel } from '../../src/engine/time-model.js';
import type { BenchRequest } from '../../src/workload/types.js';
import { workloadSource } from '../../src/workload/workloads.js';

const range = (a: number, n: number) => Array.from({ length: n }, (_, i) => a + i);
const req = (promptTokens: number[], maxTokens: number, outputSeed = 0): BenchRequest => ({ arrivalMs: 0, promptTokens, maxTokens, outputSeed });

describe('work_bound', () => {
  const cfg = buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', emitTokens: false });
  const model = cfg.timeModel as RooflineTimeModel;
  const none = { prefill: [], decodeSeqs: 0, decodeContextTokens: 0 };
  const weights = model.breakdown(none).memoryMs;

  it('prices each request’s uncached prefill and its decodes, without the weights, and sums by the overlap rule', () => {
    const a = req(range(1, 1000), 5);
    const b = req([...range(1, 992), ...range(5000, 40)], 1); // its first 992 tokens (62 blocks) are a's
    const w = workBound([a, b], model, 4, 16);
    const preA = model.breakdown({ prefill: [{ newTokens: 1000, contextLen: 1000 }], decodeSeqs: 0, decodeContextTokens: 0 });
    // a's 4 decode steps attend to 1000, 1001, 1002 and 1003 tokens.
    const decA = model.breakdown({ prefill: [], decodeSeqs: 4, decodeContextTokens: 4006 });
    const preB = model.breakdown({ prefill: [{ newTokens: 1032 - 992, contextLen: 1032 }], decodeSeqs: 0, decodeContextTokens: 0 });
    const c = preA.computeMs + decA.computeMs + preB.computeMs;
    const m = preA.memoryMs + decA.memoryMs + preB.memoryMs - 3 * weights;
    assert.ok(Math.abs(w.computeMs - c) < 1e-9 && Math.abs(w.memoryMs - m) < 1e-9);
    assert.ok(Math.abs(w.busyMs - (Math.max(c, m) + 0.5 * Math.min(c, m))) < 1e-9);
    assert.equal(w.requests, 2);
    assert.deepEqual(w.ideal, idealHitRate([a, b], 16));
    assert.ok(Math.abs(w.requestsPerS - (4 * 2 * 1000) / w.busyMs) < 1e-9);
    assert.equal(workBound([], model, 4).requestsPerS, Infinity);
  });

  it('is below the GPU time every policy spends, on every kind of workload, at light and heavy load', async () => {
    for (const [name, rate] of [['rag', 3], ['shared-prefix', 40], ['multi-turn', 30], ['bursty', 8], ['agentic', 20]] as const) {
      const { results } = await runBench({
        source: workloadSource(name, { size: 150, rate, seed: 6 }),
        policies: ['round-robin', 'kvgate'],
        workers: 2,
        gpu: 'h100',
        model: 'llama-3.1-8b',
        seed: 2,
        omitWallTime: true,
      });
      const bound = results.work_bound!;
      for (const p of results.policies) {
        assert.ok(p.busy_gpu_seconds >= bound.busy_gpu_seconds, `${name} ${p.name}: busy ${p.busy_gpu_seconds} s < bound ${bound.busy_gpu_seconds} s`);
      }
      assert.ok(Math.abs(bound.requests_per_s - (2 * 150) / bound.busy_gpu_seconds) / bound.requests_per_s < 0.01, name);
    }
  });

  it('is near what a saturated engine spends: the weights it leaves out are shared by large batches', async () => {
    // Light load is far above it (a decode step of one request reads all the weights); a fleet
    // sent more than it can do batches widely and comes close.
    for (const [name, rate] of [['shared-prefix', 400], ['bursty', 100]] as const) {
      const { results } = await runBench({
        source: workloadSource(name, { size: 300, rate, seed: 6 }),
        policies: ['round-robin'],
        workers: 1,
        gpu: 'h100',
        model: 'llama-3.1-8b',
        seed: 2,
        omitWallTime: true,
      });
      const ratio = results.policies[0]!.busy_gpu_seconds / results.work_bound!.busy_gpu_seconds;
      assert.ok(ratio >= 1 && ratio < 1.6, `${name}: busy ÷ bound ${ratio}`);
    }
  });
});
