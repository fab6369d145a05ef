import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Engine } from '../../src/engine/engine.js';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import { answerToken } from '../../src/workload/tokens.js';
import { seededRng } from '../../src/util/rng.js';
import type { EngineConfig, EngineRequest } from '../../src/engine/types.js';

/** Small enough that blocks run out (preemptions) and batches fill (maxNumSeqs). */
function config(over: Partial<EngineConfig> = {}): EngineConfig {
  return {
    ...buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', hashSeed: 3 }),
    blockSize: 4,
    numGpuBlocks: 96,
    maxNumSeqs: 6,
    maxNumBatchedTokens: 48,
    emitTokens: false,
    kvEvents: false,
    ...over,
  };
}

interface Extras {
  /** Requests name one of this many LoRA adapters. */
  adapters?: number;
  /** Every third request holds its blocks after a length finish, for a decode worker. */
  remoteDecode?: boolean;
}

function request(id: number, rng: () => number, x: Extras = {}): EngineRequest {
  // Prompts drawn from a few shared prefixes, so the prefix cache hits and evicts.
  const shared = Math.floor(rng() * 3);
  const len = 3 + Math.floor(rng() * 40);
  const prompt = Array.from({ length: len }, (_, i) => (i < 12 ? shared * 1000 + i : id * 7919 + i) % 32000);
  const seed = id;
  return {
    id: String(id),
    prompt,
    maxTokens: 1 + Math.floor(rng() * 30),
    sampler: (ctx) => answerToken(seed, ctx.output.length),
    ignoreEos: true,
    ...(x.adapters ? { lora: `a${id % x.adapters}` } : {}),
    ...(x.remoteDecode && id % 3 === 0 ? { remoteDecode: true } : {}),
  };
}

/**
 * Drives two engines with the same requests at the same step boundaries: one by step() alone,
 * the other by decodeRun()/decodeStep() wherever a run is announced (cut short when a request
 * arrives, as the fleet simulation does), step() elsewhere. Every step must agree.
 */
function compare(cfg: EngineConfig, seed: number, requests: number, x: Extras = {}): { runSteps: number; steps: number; preemptions: number } {
  const plain = new Engine(cfg);
  const runs = new Engine(cfg);
  const rng = seededRng(seed);
  const durations = new Float64Array(64);
  let next = 0;
  let steps = 0;
  let runSteps = 0;
  let run = 0; // steps left in the run in progress
  let taken = 0;
  for (let guard = 0; guard < 200_000 && (next < requests || plain.hasWork()); guard++) {
    // Arrivals between steps: the run in progress is cut.
    if (next < requests && rng() < 0.15) {
      const a = request(next, seededRng(seed * 1000 + next), x);
      const b = request(next, seededRng(seed * 1000 + next), x);
      plain.add(a);
      runs.add(b);
      next++;
      run = 0;
      continue;
    }
    if (!plain.hasWork()) {
      assert.equal(runs.hasWork(), false);
      continue;
    }
    if (run === 0) {
      run = runs.decodeRun(durations);
      taken = 0;
    }
    const res = plain.step();
    assert.ok(res, 'the plain engine stepped');
    steps++;
    if (run > 0) {
      const finished = runs.decodeStep();
      runSteps++;
      assert.equal(res.durationMs, durations[taken], `step ${steps}: duration`);
      assert.equal(res.prefillTokens, 0);
      assert.deepEqual(res.firstTokens, []);
      assert.deepEqual(res.preempted, []);
      assert.deepEqual(res.started, []);
      assert.deepEqual(finished, res.finished, `step ${steps}: finished`);
      // Only a run's last step finishes anything.
      if (finished.length > 0) assert.equal(taken, run - 1);
      taken++;
      if (taken === run) run = 0;
    } else {
      const other = runs.step();
      assert.deepEqual(other, res, `step ${steps}`);
    }
    assert.deepEqual(runs.stats(), plain.stats(), `step ${steps}: stats`);
    // The decode worker pulls a held request's blocks a step later.
    for (const f of res.finished) {
      if (f.kvHeld) {
        assert.equal(plain.releaseKv(f.id), true);
        assert.equal(runs.releaseKv(f.id), true);
      }
    }
  }
  assert.equal(plain.hasWork(), false, 'drained');
  assert.deepEqual([...runs.cachedBlockHashes()].sort(), [...plain.cachedBlockHashes()].sort());
  assert.equal(runs.heldRequests(), plain.heldRequests());
  return { runSteps, steps, preemptions: plain.stats().preemptions };
}

test('a decode run takes the steps step() takes: same durations, finishes, blocks, prefix cache and counters', () => {
  let runSteps = 0;
  let steps = 0;
  for (const seed of [1, 2, 3, 4, 5, 6]) {
    const r = compare(config(), seed, 60);
    runSteps += r.runSteps;
    steps += r.steps;
  }
  assert.ok(runSteps > steps / 4, `${runSteps} of ${steps} steps in runs`);
  // Tighter KV: runs end where a block would be missing, and preemptions happen between them.
  let preemptions = 0;
  for (const seed of [7, 8, 9]) preemptions += compare(config({ numGpuBlocks: 40 }), seed, 60).preemptions;
  assert.ok(preemptions > 0, 'the tight engine preempted');
});

test('with a host-memory tier, remote-decode holds and LoRA adapters, runs still match step()', () => {
  assert.ok(compare(config({ cpuOffload: { numBlocks: 64, loadMsPerBlock: 0.01 } }), 11, 50).runSteps > 0);
  assert.ok(compare(config({ maxLoras: 1 }), 12, 50, { adapters: 3 }).runSteps > 0);
  assert.ok(compare(config(), 13, 50, { remoteDecode: true }).runSteps > 0);
});

test('no run where the next step is not a pure decode step of the batch', () => {
  const durations = new Float64Array(16);
  const sampler = (seed: number) => (ctx: { output: { length: number } }) => answerToken(seed, ctx.output.length);
  const e = new Engine(config());
  assert.equal(e.decodeRun(durations), 0, 'idle');
  e.add({ id: 'a', prompt: [1, 2, 3, 4, 5, 6, 7, 8, 9], maxTokens: 10, sampler: sampler(1), ignoreEos: true });
  assert.equal(e.decodeRun(durations), 0, 'a request waits');
  e.step(); // prefill and first token
  assert.equal(e.decodeRun(durations), 9, 'decoding: up to its last token');
  e.add({ id: 'b', prompt: [5, 6, 7], maxTokens: 4, sampler: sampler(2), ignoreEos: true });
  assert.equal(e.decodeRun(durations), 0, 'another waits');
  e.step();
  assert.equal(e.decodeRun(durations), 3, 'both decoding: until b finishes');
  assert.equal(new Engine(config()).decodeRun(new Float64Array(0)), 0);

  // A sequence that can stop on a token, token output, KV events, speculation: no run.
  for (const over of [{ emitTokens: true }, { kvEvents: true }] as Array<Partial<EngineConfig>>) {
    const x = new Engine(config(over));
    x.add({ id: 'a', prompt: [1, 2, 3], maxTokens: 10, sampler: sampler(1), ignoreEos: true });
    x.step();
    assert.equal(x.decodeRun(durations), 0, JSON.stringify(over));
  }
  const eos = new Engine(config());
  eos.add({ id: 'a', prompt: [1, 2, 3], maxTokens: 10, sampler: sampler(1), eosTokenId: 2 });
  eos.step();
  assert.equal(eos.decodeRun(durations), 0, 'may stop on EOS');
});

test('a run stops before the step that would find no free block', () => {
  // 12 blocks of 4 tokens: one request of 8 prompt tokens holds 2 (+1 for its first token);
  // three of them leave 3 free: the run reaches the step where a fourth block is wanted.
  const durations = new Float64Array(64);
  const e = new Engine(config({ numGpuBlocks: 12 }));
  for (let i = 0; i < 3; i++) {
    e.add({ id: `r${i}`, prompt: Array.from({ length: 8 }, (_, t) => 100 * i + t), maxTokens: 40, sampler: (ctx) => answerToken(i, ctx.output.length), ignoreEos: true });
  }
  e.step();
  const free = e.freeBlocks();
  const k = e.decodeRun(durations);
  assert.ok(k > 0 && k < 39, `run of ${k}`);
  for (let j = 0; j < k; j++) e.decodeStep();
  assert.ok(e.freeBlocks() < free);
  // The next step needs more blocks than are free: step() preempts there.
  assert.equal(e.decodeRun(durations), 0);
  const res = e.step()!;
  assert.ok(res.preempted.length > 0, 'the step after the run preempts');
});
