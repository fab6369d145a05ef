import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildEngineConfig, resolveModel } from '../../src/engine/profiles.js';
import { customKvLink, KV_LINKS, KvTransferModel } from '../../src/engine/kv-link.js';
import { createPolicy } from '../../src/scheduler/registry.js';
import { simulateFleet } from '../../src/sim/fleet-sim.js';
import type { BenchRequest } from '../../src/workload/types.js';
import { fillStream } from '../../src/workload/tokens.js';

const cfg = buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', hashSeed: 7, emitTokens: false });
const model = resolveModel('llama-3.1-8b');
const decider = { nonCachedTokens: 512, minPromptTokens: 0, saturatedQueueMs: 1000 };

function req(arrivalMs: number, promptLen: number, maxTokens: number, seed: number): BenchRequest {
  const p = new Int32Array(promptLen);
  fillStream(p, 0, seed, promptLen);
  return { arrivalMs, promptTokens: p, maxTokens, outputSeed: seed };
}

describe('fleet simulation: prefill/decode disaggregation', () => {
  it('completes every request exactly once, prefilled on the prefill pool and decoded on the decode pool', async () => {
    const reqs = Array.from({ length: 60 }, (_, i) => req(i * 40, i % 3 === 0 ? 200 : 3000 + (i % 7) * 500, 20 + (i % 5), i + 1));
    const transfer = new KvTransferModel(KV_LINKS['ib-400'], model);
    const r = await simulateFleet(reqs, { workers: 4, engineConfig: cfg, policy: createPolicy('kvgate'), seed: 1, disagg: { prefill: 1, transfer, decider } });
    assert.equal(r.requests, 60);
    assert.equal(r.completed.arrival.length, 60);
    assert.equal(r.rejected + r.shed, 0);
    // Every request id completed once (the prefill halves are not completions).
    assert.deepEqual([...r.completed.outputTokens].sort((a, b) => a - b), reqs.map((q) => q.maxTokens).sort((a, b) => a - b));
    // Answers come from decode workers only.
    assert.ok(r.completed.worker.every((w) => w >= 1));
    const d = r.disagg!;
    assert.equal(d.prefillWorkers, 1);
    assert.equal(d.decodeWorkers, 3);
    // The 200-token prompts stay local (below the 512-token threshold); the long ones go to the prefill worker.
    assert.equal(d.decisions.cached, 20);
    assert.equal(d.disaggregated + d.decisions['prefill-saturated'] + d.decisions['no-prefill-worker'], 40);
    assert.ok(d.disaggregated > 0);
    assert.equal(d.transfers, d.disaggregated);
    assert.ok(d.transferBytes > 0);
    // Every prefill worker's KV was released, every decode's KV arrived: nothing is left held.
    for (const w of r.workers) assert.equal(w.final.kvUsage, 0, `${w.id} holds blocks at the end`);
    assert.ok(r.workers[0]!.busyMs > 0);
    assert.equal(r.workers[0]!.final.generationTokens, d.disaggregated, 'the prefill worker made one token per prefill');
  });

  it('TTFT of a disaggregated request includes its prefill, the transfer and the decode\'s first step', async () => {
    const prompt = 8000;
    const one = [req(0, prompt, 4, 5)];
    const slow = customKvLink(8, 0); // 1 GB/s: 8,000 tokens × 128 KiB ≈ 1.05 GB ≈ 1,049 ms
    const transfer = new KvTransferModel(slow, model);
    const r = await simulateFleet(one, { workers: 2, engineConfig: cfg, policy: createPolicy('kvgate'), seed: 1, disagg: { prefill: 1, transfer, decider: { ...decider, saturatedQueueMs: 1e9 } } });
    const plain = await simulateFleet(one, { workers: 2, engineConfig: cfg, policy: createPolicy('kvgate'), seed: 1 });
    const ttft = r.completed.firstToken[0]! - r.completed.arrival[0]!;
    const ttftPlain = plain.completed.firstToken[0]! - plain.completed.arrival[0]!;
    const xfer = transfer.ms(prompt);
    assert.ok(xfer > 1000 && xfer < 1100, `transfer ${xfer} ms`);
    assert.equal(r.disagg!.disaggregated, 1);
    assert.equal(r.disagg!.transferBytes, prompt * 131072);
    // Prefill on the prefill worker (as long as the local one), then the transfer, then one small step.
    assert.ok(ttft >= ttftPlain + xfer, `TTFT ${ttft} < local ${ttftPlain} + transfer ${xfer}`);
    assert.ok(ttft < ttftPlain + xfer + 30, `TTFT ${ttft} far above local ${ttftPlain} + transfer ${xfer}`);
    assert.equal(r.completed.worker[0], 1);
    const handoff = r.disagg!.handoffMs.percentiles([50])[0]!;
    assert.ok(handoff >= xfer * 0.99, `handoff ${handoff}`);
  });

  it('the decider keeps short prompts local: nothing crosses the link', async () => {
    const reqs = Array.from({ length: 30 }, (_, i) => req(i * 20, 100 + (i % 4) * 50, 30, i + 1));
    const transfer = new KvTransferModel(KV_LINKS['ib-400'], model);
    const r = await simulateFleet(reqs, { workers: 3, engineConfig: cfg, policy: createPolicy('kvgate'), seed: 1, disagg: { prefill: 1, transfer, decider } });
    assert.equal(r.completed.arrival.length, 30);
    assert.equal(r.disagg!.disaggregated, 0);
    assert.equal(r.disagg!.transfers, 0);
    assert.equal(r.disagg!.decisions.cached, 30);
    assert.equal(r.workers[0]!.routed, 0);
  });

  it('prefill workers of role both also serve the requests kept local', async () => {
    const reqs = Array.from({ length: 40 }, (_, i) => req(i * 10, 100 + (i % 4) * 50, 30, i + 1));
    const transfer = new KvTransferModel(KV_LINKS['ib-400'], model);
    const r = await simulateFleet(reqs, { workers: 3, engineConfig: cfg, policy: createPolicy('kvgate'), seed: 1, disagg: { prefill: 1, transfer, decider, prefillRole: 'both' } });
    assert.equal(r.completed.arrival.length, 40);
    assert.equal(r.disagg!.disaggregated, 0);
    assert.ok(r.workers[0]!.routed > 0, 'the prefill worker served local requests');
    assert.ok(r.completed.worker.some((w) => w === 0));
  });

  it('refuses a split without a prefill or a decode worker', async () => {
    const transfer = new KvTransferModel(KV_LINKS.nvlink, model);
    await assert.rejects(simulateFleet([req(0, 10, 2, 1)], { workers: 2, engineConfig: cfg, policy: createPolicy('kvgate'), seed: 1, disagg: { prefill: 2, transfer, decider } }), /needs 1 to 1 prefill workers of 2, got 2/);
  });
});
