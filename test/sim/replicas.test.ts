import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import type { WorkerState } from '../../src/fleet/worker-state.js';
import { PrefixIndex } from '../../src/scheduler/index/prefix-index.js';
import { createPolicy } from '../../src/scheduler/registry.js';
import type { Policy } from '../../src/scheduler/types.js';
import { simulateFleet } from '../../src/sim/fleet-sim.js';
import { connectReplicas, deliver, type SharedKnowledge } from '../../src/sim/replicas.js';
import { summarize } from '../../src/bench/metrics.js';
import { workloadSource } from '../../src/workload/workloads.js';
import { fillStream } from '../../src/workload/tokens.js';
import type { BenchRequest } from '../../src/workload/types.js';

const cfg = buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', hashSeed: 7, emitTokens: false });

function req(arrivalMs: number, promptLen: number, seed: number): BenchRequest {
  const p = new Int32Array(promptLen);
  fillStream(p, 0, seed, promptLen);
  return { arrivalMs, promptTokens: p, maxTokens: 4, outputSeed: seed };
}

/** Routes everything to the first worker and records what it was asked, and how loaded it looked. */
function recording(seen: Array<{ id: string; inflight: number }>): Policy {
  return {
    name: 'first',
    route: (r, ws: readonly WorkerState[]) => {
      seen.push({ id: r.id, inflight: ws[0]!.inflightCount });
      return { ok: true, decision: { worker: ws[0]!, policy: 'first', expectedPrefixHit: 0, reason: 'first' } };
    },
  };
}

async function hitRate(replicas: number, sharing: boolean, delayMs = 0, seed = 3): Promise<number> {
  const source = workloadSource('shared-prefix', { size: 1200, seed });
  const policies = Array.from({ length: replicas }, () => createPolicy('kvgate'));
  const sim = await simulateFleet(source.open(), {
    workers: 8,
    engineConfig: cfg,
    policy: policies[0]!,
    replicas: { policies, sharing, sharingDelayMs: delayMs },
    seed,
  });
  assert.equal(sim.completed.arrival.length, sim.requests, 'every request completes');
  return summarize(sim, { tp: 1, gpuHourCost: 0 }).prefix_hit_rate;
}

describe('gateway replicas in the fleet simulation', () => {
  it('splits arrivals round-robin, and each replica counts only its own requests in flight', async () => {
    const seen: Array<Array<{ id: string; inflight: number }>> = [[], [], []];
    const policies = seen.map((s) => recording(s));
    // Six long requests arriving together: none has finished when the next is routed.
    const reqs = [0, 1, 2, 3, 4, 5].map((i) => req(0, 2000, i + 1));
    const sim = await simulateFleet(reqs, { workers: 2, engineConfig: cfg, policy: policies[0]!, replicas: { policies }, seed: 1 });
    assert.deepEqual(seen.map((s) => s.map((x) => x.id)), [['0', '3'], ['1', '4'], ['2', '5']]);
    // Replica 1 saw one request of its own in flight at its second pick, not four.
    assert.deepEqual(seen.map((s) => s.map((x) => x.inflight)), [[0, 1], [0, 1], [0, 1]]);
    assert.equal(sim.workers[0]!.routed, 6);
  });

  it("with load sharing, each replica counts every replica's requests in flight", async () => {
    const seen: Array<Array<{ id: string; inflight: number }>> = [[], [], []];
    const policies = seen.map((s) => recording(s));
    const reqs = [0, 1, 2, 3, 4, 5].map((i) => req(0, 2000, i + 1));
    const sim = await simulateFleet(reqs, { workers: 2, engineConfig: cfg, policy: policies[0]!, replicas: { policies, sharing: true, shareLoad: true }, seed: 1 });
    assert.deepEqual(seen.map((s) => s.map((x) => x.inflight)), [[0, 3], [1, 4], [2, 5]]);
    // Counted once, however many replicas mirror it.
    assert.equal(sim.workers[0]!.routed, 6);
    assert.equal(sim.completed.arrival.length, 6);
  });

  it('one replica given as a list routes exactly as a single gateway', async () => {
    const a = createPolicy('kvgate');
    const b = createPolicy('kvgate');
    const source = workloadSource('shared-prefix', { size: 300, seed: 5 });
    const one = await simulateFleet(source.open(), { workers: 4, engineConfig: cfg, policy: a, seed: 5 });
    const listed = await simulateFleet(source.open(), { workers: 4, engineConfig: cfg, policy: b, replicas: { policies: [b], sharing: true }, seed: 5 });
    assert.deepEqual(listed.completed.worker, one.completed.worker);
    assert.deepEqual(listed.completed.cachedTokens, one.completed.cachedTokens);
  });

  it('rejects a replica list that does not start with the run policy, and admission with replicas', async () => {
    const p = createPolicy('round-robin');
    await assert.rejects(simulateFleet([], { workers: 1, engineConfig: cfg, policy: p, replicas: { policies: [createPolicy('round-robin')] }, seed: 0 }), /policies\[0\]/);
    await assert.rejects(
      simulateFleet([], {
        workers: 1,
        engineConfig: cfg,
        policy: p,
        replicas: { policies: [p, createPolicy('round-robin')] },
        admission: { settings: { thresholds: { sheddable: 0.8, standard: 0.9, prefillBacklogTokens: 0, sheddableTpotMs: 0 }, queue: { maxSize: 1, maxWaitMs: 1 }, retryAfterSeconds: 1, reserveOutputCap: 1024 } },
        seed: 0,
      }),
      /several replicas/,
    );
  });

  it('four replicas lose prefix hits without sharing and keep ≥ 0.95× of one replica with it', async () => {
    const single = await hitRate(1, false);
    const isolated = await hitRate(4, false);
    const shared = await hitRate(4, true);
    const delayed = await hitRate(4, true, 50);
    assert.ok(isolated < single * 0.9, `without sharing ${isolated} vs one replica ${single}`);
    assert.ok(shared >= single * 0.95, `with sharing ${shared} vs one replica ${single}`);
    assert.ok(delayed >= single * 0.9, `with 50 ms sharing delay ${delayed} vs one replica ${single}`);
  });
});

describe('sharing routing knowledge between prefix indexes', () => {
  const policyWith = (index: PrefixIndex): Policy => ({ name: 'p', prefixIndex: index, route: () => ({ ok: false, status: 503, code: 'x', message: 'x' }) });

  it("passes one index's own predictions and confirmations to the others, never echoing what it learned", () => {
    const [a, b, c] = [new PrefixIndex(), new PrefixIndex(), new PrefixIndex()];
    for (const x of [a, b, c]) x.addWorker('w0', 1000);
    const sent: SharedKnowledge[] = [];
    assert.equal(connectReplicas([policyWith(a), policyWith(b), policyWith(c)], (k) => sent.push(k)), 3);
    const hashes = [11, 22, 33];
    a.insertLater('w0', hashes, 'predicted', 0);
    a.confirm('w0', hashes, 1);
    assert.deepEqual(sent.map((k) => [k.to === b ? 'b' : k.to === c ? 'c' : 'a', k.source]), [['b', 'predicted'], ['c', 'predicted'], ['b', 'routed'], ['c', 'routed']]);
    for (const k of sent.splice(0)) deliver(k, 2, 1000);
    // Learned knowledge is applied and not sent on.
    assert.equal(sent.length, 0);
    assert.equal(b.matchWorker(hashes, 'w0', 3), 3);
    assert.equal(c.matchWorker(hashes, 'w0', 3), 3);
    assert.equal(b.learnedRuns, 2);
    // KV events are every replica's own: not shared.
    a.insertLater('w0', [44], 'event', 4);
    assert.equal(sent.length, 0);
  });

  it('a learned block run for a worker the receiver has not met registers it at the given capacity', () => {
    const b = new PrefixIndex();
    b.learn('w9', [1, 2], 'routed', 0, 500);
    assert.equal(b.matchWorker([1, 2], 'w9', 1), 2);
    const full = new PrefixIndex({ maxWorkers: 1 });
    full.addWorker('w0', 10);
    full.learn('w1', [1], 'routed', 0, 10);
    assert.equal(full.hasWorker('w1'), false);
  });
});
