import assert from 'node:assert/strict';
import { test } from 'node:test';
import { gpuMixLabel, meanHourCost, parseGpuMix, workerGpus } from '../../src/bench/gpu-mix.js';
import { runBench } from '../../src/bench/run.js';
import { gpuLines } from '../../src/bench/table.js';
import { workloadSource } from '../../src/workload/workloads.js';

test('a GPU mix: one kind takes the worker count, a mix gives its own; the workers interleave by kind', () => {
  assert.deepEqual(parseGpuMix('H100', 8), [{ gpu: 'h100', count: 8 }]);
  assert.deepEqual(parseGpuMix('h100:3, a10g:1'), [{ gpu: 'h100', count: 3 }, { gpu: 'a10g', count: 1 }]);
  assert.deepEqual(parseGpuMix('h100:3,a10g:1', 4), [{ gpu: 'h100', count: 3 }, { gpu: 'a10g', count: 1 }]);
  assert.throws(() => parseGpuMix('h100:3,a10g:1', 5), /has 4 workers, but --workers is 5/);
  assert.throws(() => parseGpuMix('h100:x'), /NAME:COUNT/);
  assert.throws(() => parseGpuMix('v100:2,h100:2'), /unknown GPU 'v100'/);
  assert.deepEqual(workerGpus(parseGpuMix('h100:3,a10g:1')), ['h100', 'a10g', 'h100', 'h100']);
  assert.equal(gpuMixLabel(parseGpuMix('h100:3,a10g:1')), 'h100:3,a10g:1');
  assert.equal(gpuMixLabel(parseGpuMix('h100', 8)), 'h100');
  assert.equal(meanHourCost(parseGpuMix('h100:1,a10g:3'), (g) => (g === 'h100' ? 4 : 1)), 1.75);
});

/** shared-prefix on 2 H100s and 2 A10Gs, at a rate the H100s alone serve within the SLO. */
async function mixed(gpuLabels: boolean) {
  const { results } = await runBench({
    source: workloadSource('shared-prefix', { size: 1500, seed: 3 }),
    policies: ['kvgate'],
    workers: 4,
    gpu: 'h100:2,a10g:2',
    gpuLabels,
    model: 'llama-3.1-8b',
    seed: 3,
    rateScale: 0.12,
    sloTtftMs: 1000,
    sloTtftPer1kMs: 100,
    sloTpotMs: 50,
    omitWallTime: true,
  });
  return results;
}

test('on a mixed fleet each worker runs its own GPU, and kvgate learns each kind’s speed, declared or told apart by KV capacity', async () => {
  const labelled = await mixed(true);
  const unlabelled = await mixed(false);
  assert.equal(labelled.gpu, 'h100:2,a10g:2');
  assert.equal(labelled.gpu_labels, true);
  assert.equal(unlabelled.gpu_labels, false);
  assert.equal(labelled.work_bound, null, 'no work bound for a mixed fleet');
  const kv = labelled.policies[0]!;
  assert.deepEqual(kv.workers.map((w) => w.gpu), ['h100', 'a10g', 'h100', 'a10g']);
  // An A10G decodes 8B several times slower than an H100: whatever it is sent shows in its TPOT.
  const a10gShare = (r: typeof labelled): number => {
    const ws = r.policies[0]!.workers;
    const total = ws.reduce((a, w) => a + w.routed, 0);
    return ws.filter((w) => w.gpu === 'a10g').reduce((a, w) => a + w.routed, 0) / total;
  };
  // Labelled, kvgate knows the A10Gs' speed from the start. Unlabelled, their KV capacity (a
  // third of an H100's) puts them in a speed class of their own, whose speed is learned from its
  // answers. (As one class with the H100s, the A10Gs were sent 14% of the requests, and 87% met
  // the SLO.)
  assert.ok(a10gShare(labelled) < 0.05, String(a10gShare(labelled)));
  assert.ok(a10gShare(unlabelled) < 0.07, String(a10gShare(unlabelled)));
  assert.ok(kv.attainment! >= 0.99, String(kv.attainment));
  assert.ok(unlabelled.policies[0]!.attainment! >= 0.99, String(unlabelled.policies[0]!.attainment));
});

test('unlabelled and under load, a slow kind is found slow from answers decoded beside prefills (the decode floor)', async () => {
  // Agentic sessions on 2 A100s and 2 A10Gs: hardly an answer is decoded with no prefill beside
  // it, so the A10Gs' class (told apart by capacity) learns little from clean answers. Taken for
  // as fast as the configured figures, the A10Gs were sent 27% of the requests and 78% met the
  // SLO; the floor from every answer finds them slow.
  const run = async (gpuLabels: boolean) =>
    (
      await runBench({
        source: workloadSource('agentic', { size: 800, seed: 7 }),
        policies: ['kvgate'],
        workers: 4,
        gpu: 'a100:2,a10g:2',
        gpuLabels,
        model: 'llama-3.1-8b',
        seed: 7,
        rateScale: 1,
        sloTtftMs: 1000,
        sloTtftPer1kMs: 100,
        sloTpotMs: 50,
        omitWallTime: true,
      })
    ).results.policies[0]!;
  const share = (p: Awaited<ReturnType<typeof run>>): number =>
    p.workers.filter((w) => w.gpu === 'a10g').reduce((a, w) => a + w.routed, 0) / p.workers.reduce((a, w) => a + w.routed, 0);
  const unlabelled = await run(false);
  assert.ok(share(unlabelled) < 0.2, String(share(unlabelled)));
  assert.ok(unlabelled.attainment! >= 0.9, String(unlabelled.attainment));
});

test('the summary says where each policy sent its requests on a mixed fleet, and nothing on a fleet of one kind', async () => {
  const r = await mixed(true);
  const lines = gpuLines(r.policies);
  const m = /^kvgate: h100 ([\d.]+)% · a10g ([\d.]+)%$/m.exec(lines);
  assert.ok(m, lines);
  assert.ok(Math.abs(Number(m[1]) + Number(m[2]) - 100) < 0.11, lines);
  const one = r.policies.map((p) => ({ ...p, workers: p.workers.map((w) => ({ ...w, gpu: 'h100' })) }));
  assert.equal(gpuLines(one), '');
});
