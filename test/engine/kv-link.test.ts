import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Engine } from '../../src/engine/engine.js';
import { customKvLink, KV_LINKS, KvTransferModel, resolveKvLink, transferMs } from '../../src/engine/kv-link.js';
import { buildEngineConfig, resolveModel } from '../../src/engine/profiles.js';
import { hashSampler } from '../../src/engine/synthetic-lm.js';
import type { EngineConfig, EngineRequest, StepResult } from '../../src/engine/types.js';

function config(over: Partial<EngineConfig> = {}): EngineConfig {
  return {
    ...buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', hashSeed: 42 }),
    blockSize: 4,
    numGpuBlocks: 64,
    maxNumSeqs: 8,
    maxNumBatchedTokens: 64,
    kvEvents: false,
    ...over,
  };
}

function tokens(n: number, salt: number): number[] {
  return Array.from({ length: n }, (_, i) => (i * 31 + salt * 977) % 4000);
}

function req(id: string, prompt: number[], maxTokens: number, over: Partial<EngineRequest> = {}): EngineRequest {
  return { id, prompt, maxTokens, sampler: hashSampler(id), ignoreEos: true, ...over };
}

function stepAll(e: Engine, max = 1000): StepResult[] {
  const out: StepResult[] = [];
  for (let i = 0; i < max; i++) {
    const r = e.step();
    if (!r) break;
    out.push(r);
  }
  return out;
}

test('transfer time is latency plus bytes over bandwidth', () => {
  const link = customKvLink(400, 10); // 400 Gb/s = 50 GB/s, 10 µs
  assert.equal(link.bytesPerSecond, 50e9);
  assert.equal(transferMs(link, 0), 0);
  // 1 GB over 50 GB/s = 20 ms, plus 0.01 ms.
  assert.ok(Math.abs(transferMs(link, 1e9) - 20.01) < 1e-9);
  assert.deepEqual(resolveKvLink('ib-400'), KV_LINKS['ib-400']);
  assert.ok(Math.abs(transferMs(KV_LINKS['ib-400'], 1e9) - transferMs(link, 1e9)) < 1e-9);
  assert.ok(transferMs(KV_LINKS.nvlink, 1e9) < transferMs(KV_LINKS['ib-400'], 1e9));
  assert.ok(transferMs(KV_LINKS['ib-400'], 1e9) < transferMs(KV_LINKS['tcp-100'], 1e9));
});

test('a model\'s transfer: 128 KiB per token for Llama-3.1-8B, split over TP ranks', () => {
  const model = resolveModel('llama-3.1-8b');
  const m = new KvTransferModel(KV_LINKS['ib-400'], model);
  assert.equal(m.bytesPerToken, 128 * 1024); // 2 × 32 layers × 8 KV heads × 128 × 2 bytes
  // 8,000 tokens = 1.048 GB at 50 GB/s ≈ 21 ms.
  assert.ok(Math.abs(m.ms(8000) - (0.01 + (8000 * 131072) / 50e9 * 1000)) < 1e-9);
  const m70 = new KvTransferModel(KV_LINKS['ib-400'], resolveModel('llama-3.1-70b'), 4);
  assert.equal(m70.bytesPerToken, 320 * 1024);
  // Four ranks move a quarter each, in parallel.
  assert.ok(Math.abs(m70.ms(1000) - transferMs(KV_LINKS['ib-400'], (1000 * 320 * 1024) / 4)) < 1e-9);
  const fp8 = new KvTransferModel(KV_LINKS.nvlink, model, 1, 'fp8');
  assert.equal(fp8.bytesPerToken, 64 * 1024);
});

test('bad links are refused with the reason', () => {
  assert.throws(() => resolveKvLink('pcie'), /unknown KV link "pcie"; known: nvlink, ib-400, tcp-100/);
  assert.throws(() => customKvLink(0, 1), /bandwidth must be a positive/);
  assert.throws(() => customKvLink(100, -1), /latency must be ≥ 0/);
  assert.throws(() => transferMs(KV_LINKS.nvlink, -1), /≥ 0 bytes/);
});

test('prefill worker: a remote-decode request holds its blocks after max_tokens 1 until the KV is released', () => {
  const e = new Engine(config());
  const free0 = e.stats().freeBlocks;
  e.add(req('p', tokens(18, 1), 1, { remoteDecode: true }));
  const steps = stepAll(e);
  const fin = steps.flatMap((s) => s.finished);
  assert.deepEqual(fin, [{ id: 'p', reason: 'length', promptTokens: 18, outputTokens: 1, cachedPromptTokens: 0, kvHeld: true }]);
  assert.equal(e.hasWork(), false);
  // 18 prompt tokens: 5 blocks of 4, still in use.
  assert.equal(e.blocksOf('p')!.length, 5);
  assert.equal(e.stats().freeBlocks, free0 - 5);
  assert.ok(e.stats().kvUsage > 0);
  assert.equal(e.heldRequests(), 1);
  assert.equal(e.releaseKv('p'), true);
  assert.equal(e.releaseKv('p'), false);
  assert.equal(e.stats().freeBlocks, free0);
  assert.equal(e.stats().kvUsage, 0);
  // Freed, the prompt stays in the prefix cache.
  assert.equal(e.cachedPrefixTokens(tokens(18, 1)), 16);
});

test('prefill worker: held blocks keep a later request waiting until they are released; abort releases too', () => {
  const e = new Engine(config({ numGpuBlocks: 8 }));
  e.add(req('p', tokens(20, 1), 1, { remoteDecode: true }));
  stepAll(e);
  assert.equal(e.blocksOf('p')!.length, 5);
  e.add(req('q', tokens(20, 2), 4));
  assert.equal(e.step(), null, 'nothing can run while the KV is held');
  assert.equal(e.hasWork(), true);
  assert.equal(e.abort('p'), true);
  const steps = stepAll(e);
  assert.deepEqual(steps.flatMap((s) => s.finished.map((f) => f.id)), ['q']);
  // A plain request frees its blocks at once.
  assert.equal(e.blocksOf('q'), undefined);
});

test('decode worker: blocks allocated on admission, no prefill, the first token only after the KV arrives', () => {
  const e = new Engine(config());
  const free0 = e.stats().freeBlocks;
  e.add(req('d', tokens(18, 3), 3, { remotePrefill: true }));
  const first = e.step()!;
  assert.deepEqual(first.kvPulls, [{ id: 'd', tokens: 18 }]);
  assert.equal(first.durationMs, 0);
  assert.equal(first.prefillTokens, 0);
  assert.deepEqual(first.firstTokens, []);
  // Blocks for the whole prompt, allocated now.
  assert.equal(e.blocksOf('d')!.length, 5);
  assert.equal(e.stats().freeBlocks, free0 - 5);
  assert.equal(e.stats().waiting, 1);
  assert.equal(e.step(), null, 'nothing to compute while the KV is in flight');
  assert.equal(e.pendingPrefillTokens(), 0);
  assert.equal(e.kvArrived('nope'), false);
  assert.equal(e.kvArrived('d'), true);
  assert.equal(e.kvArrived('d'), false);
  const steps = stepAll(e);
  // Only the last prompt token is recomputed; then one decode per step.
  assert.equal(steps[0]!.prefillTokens, 1);
  assert.deepEqual(steps[0]!.firstTokens, ['d']);
  assert.equal(steps.length, 3);
  assert.deepEqual(steps.at(-1)!.finished, [{ id: 'd', reason: 'length', promptTokens: 18, outputTokens: 3, cachedPromptTokens: 0 }]);
  assert.equal(steps.reduce((a, s) => a + s.prefillTokens, 0), 1);
  // The pulled prompt is now in the decode worker's prefix cache.
  assert.equal(e.cachedPrefixTokens(tokens(18, 3)), 16);
  assert.equal(e.stats().freeBlocks, free0);
});

test('decode worker: a local prefix hit shortens the pull; a pull waits for free blocks in queue order', () => {
  const e = new Engine(config({ numGpuBlocks: 12 }));
  e.add(req('warm', tokens(18, 4), 1));
  stepAll(e);
  e.add(req('d', tokens(18, 4).concat(tokens(6, 5)), 2, { remotePrefill: true }));
  const s = e.step()!;
  assert.deepEqual(s.kvPulls, [{ id: 'd', tokens: 24 - 16 }]);
  assert.deepEqual(s.started, [{ id: 'd', cachedPromptTokens: 16 }]);
  // 6 blocks held by d; a second pull of 28 tokens (7 blocks) does not fit in the 6 left.
  e.add(req('d2', tokens(28, 6), 2, { remotePrefill: true }));
  assert.equal(e.step(), null);
  e.kvArrived('d');
  const after = stepAll(e);
  assert.ok(after.some((r) => r.kvPulls.some((p) => p.id === 'd2')), 'd2 is admitted once d is done');
  assert.equal(e.abort('d2'), true);
  assert.equal(e.stats().waiting, 0);
  assert.equal(e.stats().freeBlocks, 12);
});
