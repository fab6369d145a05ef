import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildEngineConfig, kvBytesPerToken, listGpus, listModels, resolveModel, sizeEngine, activationReserveBytes } from '../../src/engine/profiles.js';
import { Engine } from '../../src/engine/engine.js';

test('model architectures give the published sizes', () => {
  const m8 = resolveModel('llama-3.1-8b');
  const m70 = resolveModel('llama-3.1-70b');
  assert.equal(kvBytesPerToken(m8), 128 * 1024);
  assert.equal(kvBytesPerToken(m70), 320 * 1024);
  assert.equal(kvBytesPerToken(m8, 'fp8'), 64 * 1024);
  assert.ok(Math.abs(m8.params / 1e9 - 8.03) < 0.01, String(m8.params));
  assert.ok(Math.abs(m70.params / 1e9 - 70.55) < 0.1, String(m70.params));
  assert.equal(m8.maxModelLen, 131072);
  assert.equal(resolveModel('llama-3-8b').maxModelLen, 8192);
  assert.equal(resolveModel('llama-3-70b').maxModelLen, 8192);
  assert.equal(resolveModel('meta-llama/Llama-3.1-8B-Instruct').name, 'llama-3.1-8b');
  assert.deepEqual(listGpus().map((g) => g.name), ['h100', 'a100', 'a10g', 'l4', 'l40s']);
  assert.ok(listModels().length >= 4);
});

test('unknown names and models that do not fit fail with clear messages', () => {
  assert.throws(() => resolveModel('gpt-5'), /unknown model "gpt-5"; known models: llama-3\.1-8b/);
  assert.throws(() => buildEngineConfig({ gpu: 'tpu', model: 'llama-3.1-8b' }), /unknown GPU "tpu"; known GPUs: h100, a100, a10g/);
  assert.throws(() => buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-70b' }), /does not fit on 1×h100.*tp/);
  assert.throws(() => buildEngineConfig({ gpu: 'a10g', model: 'llama-3.1-70b', tp: 4 }), /does not fit/);
  // fp8 weights make 70B fit on one H100.
  assert.ok(buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-70b', weightDtype: 'fp8' }).numGpuBlocks > 0);
});

test('KV blocks: memory × utilisation − weights − activations, over bytes per block', () => {
  const GiB = 1024 ** 3;
  const m8 = resolveModel('llama-3.1-8b');
  const reserve = activationReserveBytes(m8, 1, 8192, 256);
  const expected = Math.floor((80 * GiB * 0.9 - m8.params * 2 - reserve) / (131072 * 16));
  const cfg = buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b' });
  assert.equal(cfg.numGpuBlocks, expected);
  // ≈ 450k tokens of KV for 8B on an 80 GB card, as vLLM reports.
  assert.ok(cfg.numGpuBlocks * 16 > 400_000 && cfg.numGpuBlocks * 16 < 500_000);
  assert.equal(cfg.blockSize, 16);
  assert.equal(cfg.maxNumSeqs, 256);
  assert.equal(cfg.maxNumBatchedTokens, 8192);
  assert.equal(cfg.enablePrefixCaching, true);
  assert.equal(cfg.kvEvents, false);
  // More GPUs, fp8 KV cache, or higher utilisation → more blocks.
  const tp2 = sizeEngine({ gpu: 'h100', model: 'llama-3.1-8b', tp: 2 }).numGpuBlocks;
  assert.ok(tp2 > 2 * cfg.numGpuBlocks);
  assert.ok(sizeEngine({ gpu: 'h100', model: 'llama-3.1-8b', kvCacheDtype: 'fp8' }).numGpuBlocks >= 2 * cfg.numGpuBlocks - 1);
  // A10G holds far less: long prompts are refused as exceeding KV capacity.
  const a10g = new Engine(buildEngineConfig({ gpu: 'a10g', model: 'llama-3.1-8b' }));
  assert.equal(a10g.check(100_000, 10)?.code, 'exceeds_kv_capacity');
  assert.equal(a10g.check(1000, 10), null);
});

test('hash seed is fixed per process unless given; maxModelLen is bounded by the model', () => {
  const a = buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b' });
  const b = buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b' });
  assert.equal(a.hashSeed, b.hashSeed);
  assert.equal(buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', hashSeed: 5 }).hashSeed, 5);
  assert.equal(buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', maxModelLen: 4096 }).maxModelLen, 4096);
  assert.throws(() => buildEngineConfig({ gpu: 'h100', model: 'llama-3-8b', maxModelLen: 16384 }), /maxModelLen/);
});
