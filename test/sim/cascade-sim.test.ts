import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import { createPolicy } from '../../src/scheduler/registry.js';
import { simulateFleet } from '../../src/sim/fleet-sim.js';
import type { SimSpeculation } from '../../src/sim/cascade-sim.js';
import { AcceptanceTracker } from '../../src/speculative/acceptance.js';
import { AdaptiveK, FixedK, type KChooser } from '../../src/speculative/controller.js';
import { seededRng } from '../../src/util/rng.js';
import { answerTokens, fillStream } from '../../src/workload/tokens.js';
import type { BenchRequest } from '../../src/workload/types.js';

const target = buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-70b', tp: 4, hashSeed: 7, emitTokens: false });
const draft = buildEngineConfig({ gpu: 'a10g', model: 'llama-3.1-8b', weightDtype: 'int4', hashSeed: 7, emitTokens: false });

/** `n` requests, Poisson at `rate` req/s, prompts of 100–299 tokens, `maxTokens` out. */
function requests(n: number, rate: number, maxTokens: number, seed = 1): BenchRequest[] {
  const rng = seededRng(seed);
  const out: BenchRequest[] = [];
  let t = 0;
  for (let i = 0; i < n; i++) {
    t += (-Math.log(1 - rng()) * 1000) / rate;
    const len = 100 + Math.floor(rng() * 200);
    const p = new Int32Array(len);
    fillStream(p, 0, seed * 7919 + i, len);
    out.push({ arrivalMs: t, promptTokens: p, maxTokens, outputSeed: seed * 7919 + i });
  }
  return out;
}

function spec(controller: KChooser | null, tracker: AcceptanceTracker, alpha: number | ((t: number) => number), extra: Partial<SimSpeculation> = {}): SimSpeculation {
  return { draftEngineConfig: draft, draftWorkers: 1, controller, tracker, acceptance: typeof alpha === 'number' ? () => alpha : alpha, ...extra };
}

/** The cascade over round-robin target workers, model 'm'. */
const cascade = (reqs: BenchRequest[], workers: number, seed: number, speculative: SimSpeculation) =>
  simulateFleet(reqs, { workers, engineConfig: target, policy: createPolicy('round-robin'), seed, model: 'm', speculative });

describe('the cascade in the fleet simulation', () => {
  it('at temperature 0 produces exactly the target’s tokens, at every acceptance rate and with a controller that stops mid-request', async () => {
    for (const alpha of [0, 0.3, 0.7, 1]) {
      const reqs = requests(40, 2, 37, 3);
      const tracker = new AcceptanceTracker();
      const r = await cascade(reqs, 2, 5, spec(new FixedK(new Map([['m', 3]])), tracker, alpha, { recordOutputs: true }));
      const s = r.speculative!;
      assert.equal(s.cascadeRequests, 40);
      assert.equal(s.outputs!.size, 40);
      for (const [idx, toks] of s.outputs!) assert.deepEqual(toks, Array.from(answerTokens(reqs[idx]!.outputSeed, 37)), `α ${alpha}, request ${idx}`);
      assert.equal(r.completed.arrival.length, 40);
      assert.ok(r.completed.outputTokens.every((n) => n === 37));
      // α̂ tracks the configured α (all-or-nothing at 0 and 1).
      if (alpha === 0) assert.equal(s.accepted, 0);
      if (alpha === 1) assert.equal(s.accepted, s.tested);
      if (alpha === 0.7) assert.ok(Math.abs(s.accepted / s.tested - 0.7) < 0.05, `α̂ ${s.accepted / s.tested}`);
      assert.equal(s.fromDraft, s.accepted === 0 ? 0 : s.fromDraft);
      assert.equal(s.fromDraft + s.fromTarget, 40 * 37);
    }
    // A controller that stops speculating after a few rounds: the rest comes from the target alone.
    let calls = 0;
    const stopping: KChooser = { chooseK: () => ({ k: calls++ % 4 === 3 ? 0 : 2, reason: 'test' }) };
    const reqs = requests(20, 2, 50, 4);
    const r = await cascade(reqs, 1, 5, spec(stopping, new AcceptanceTracker(), 0.6, { recordOutputs: true }));
    const s = r.speculative!;
    assert.ok(s.decisions.k.includes(0));
    for (const [idx, toks] of s.outputs!) assert.deepEqual(toks, Array.from(answerTokens(reqs[idx]!.outputSeed, 50)));
  });

  it('charges the rounds to the engines: draft time to the draft pool, verification to the target, none to the draft without a cascade', async () => {
    const reqs = requests(30, 1, 64);
    const run = (controller: KChooser | null) =>
      cascade(reqs, 1, 1, spec(controller, new AcceptanceTracker(), 0.9));
    const base = await run(null);
    const fixed = await run(new FixedK(new Map([['m', 4]])));
    assert.equal(base.speculative!.draftBusyMs[0], 0);
    assert.equal(base.speculative!.rounds, 0);
    assert.ok(fixed.speculative!.draftBusyMs[0]! > 0);
    // At α 0.9 with k 4 a round yields ~4 tokens for one target pass: the target works far less.
    assert.ok(fixed.workers[0]!.busyMs < 0.6 * base.workers[0]!.busyMs, `${fixed.workers[0]!.busyMs} vs ${base.workers[0]!.busyMs}`);
  });

  it('the adaptive controller switches speculation off at a low acceptance rate, and back on after it recovers', async () => {
    const tracker = new AcceptanceTracker();
    let clock = () => 0;
    // Probes may spend 5% of the two workers' time here, to re-measure α within the run.
    const controller = new AdaptiveK(tracker, { draftPrice: 1, targetPrice: 14, targetTokenMs: 17.7, probeShare: 0.05, targetWorkers: 2, now: () => clock() });
    const reqs = requests(400, 2, 64, 2);
    // α 0.05 for the first 60 s, 0.9 after.
    const r = await cascade(reqs, 2, 2, spec(controller, tracker, (t) => (t < 60_000 ? 0.05 : 0.9), { bindClock: (now) => (clock = now) }));
    const d = r.speculative!.decisions;
    const share = (from: number, to: number, pred: (k: number, reason: string) => boolean) => {
      let n = 0;
      let hit = 0;
      for (let i = 0; i < d.t.length; i++) {
        if (d.t[i]! < from || d.t[i]! >= to) continue;
        n++;
        if (pred(d.k[i]!, d.reason[i]!)) hit++;
      }
      return n > 0 ? hit / n : NaN;
    };
    // After the first requests measured α, every decision but a probe's is 'off'.
    assert.ok(share(20_000, 60_000, (_k, reason) => reason === 'no_gain' || reason === 'probe') === 1);
    assert.ok(share(20_000, 60_000, (k, reason) => k === 0 && reason === 'no_gain') > 0.2);
    // The probes (single rounds of k 2, paid from 5% of the GPU time) re-measure α after it
    // recovers and switch speculation back on (slowly: a few tested tokens per second against a
    // 500-token half-life).
    assert.ok(share(150_000, Infinity, (k, reason) => k > 0 && reason === 'speculate') > 0.9);
    assert.equal(r.completed.arrival.length, 400);
  });

  it('gives a cascade request its first token when target-only generation would: the target’s own, from the prompt’s prefill', async () => {
    // One at a time: each arrives 5 s after the last (~1 s of work).
    const reqs = requests(12, 1, 40, 6).map((q, i) => ({ ...q, arrivalMs: 1000 + 5000 * i }));
    const base = await cascade(reqs, 1, 1, spec(null, new AcceptanceTracker(), 0.9));
    const fixed = await cascade(reqs, 1, 1, spec(new FixedK(new Map([['m', 4]])), new AcceptanceTracker(), 0.9));
    assert.equal(fixed.speculative!.cascadeRequests, 12);
    const ttft = (r: typeof base) =>
      r.completed.arrival
        .map((a, i) => [a, r.completed.firstToken[i]! - a] as const)
        .sort((x, y) => x[0] - y[0])
        .map((x) => x[1]);
    // The same prefill on the same idle target, to the microsecond.
    for (const [i, t] of ttft(fixed).entries()) assert.ok(Math.abs(t - ttft(base)[i]!) < 1e-3, `request ${i}: ${t} vs ${ttft(base)[i]}`);
  });

  it('a verifier that reads the prefix cache computes only the uncached tail: far less target time per round', async () => {
    const reqs = requests(30, 1, 64, 7);
    const run = (verifyUsesPrefixCache: boolean) => cascade(reqs, 1, 1, spec(new FixedK(new Map([['m', 4]])), new AcceptanceTracker(), 0.7, { verifyUsesPrefixCache }));
    const recompute = await run(false);
    const cached = await run(true);
    assert.equal(recompute.speculative!.rounds, cached.speculative!.rounds);
    assert.ok(cached.workers[0]!.busyMs < 0.8 * recompute.workers[0]!.busyMs, `${cached.workers[0]!.busyMs} vs ${recompute.workers[0]!.busyMs}`);
  });

  it('the modelled controller leaves a saturated target alone: probe rounds only, the cost of target-only', async () => {
    // 4 req/s of 300-token prompts and 200-token answers on one 70B worker: a queue that grows.
    const reqs = requests(240, 6, 200, 8);
    const base = await cascade(reqs, 1, 3, spec(null, new AcceptanceTracker(), 0.9));
    assert.ok(base.workers[0]!.busyMs > 0.95 * (base.completed.finish.at(-1)! - base.completed.arrival[0]!), 'the target is saturated');
    let clock = () => 0;
    const tracker = new AcceptanceTracker();
    const controller = new AdaptiveK(tracker, { targetStep: target.timeModel, verifyReuse: 'prefix', verifyReuseBlock: target.blockSize, draftPrice: 1, targetPrice: 14, now: () => clock() });
    const r = await cascade(reqs, 1, 3, spec(controller, tracker, 0.9, { verifyUsesPrefixCache: true, bindClock: (now) => (clock = now) }));
    const s = r.speculative!;
    // Once the queue has formed (after the first seconds, when the idle target did pay), every
    // decision but a probe's is off.
    const d = s.decisions;
    const late = d.t.map((t, i) => i).filter((i) => d.t[i]! > 10_000 && d.reason[i] !== 'probe');
    assert.ok(late.length > 100 && late.every((i) => d.k[i] === 0), JSON.stringify({ cascade: s.cascadeRequests, probes: s.probeRequests }));
    assert.ok(controller.probeSpentMs <= 0.01 * (r.completed.finish.at(-1)! - r.completed.arrival[0]!));
    assert.ok(r.workers[0]!.busyMs < 1.01 * base.workers[0]!.busyMs, `${r.workers[0]!.busyMs} vs ${base.workers[0]!.busyMs}`);
  });
});
