import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RooflineTimeModel, DEFAULT_TIME_PARAMS } from '../../src/engine/time-model.js';
import { calibrationPoints, errorPct, prebleFitMs } from '../../src/engine/calibration.js';
import { resolveGpu, resolveModel } from '../../src/engine/profiles.js';

const h100 = resolveGpu('h100');
const a10g = resolveGpu('a10g');
const m8 = resolveModel('llama-3.1-8b');
const m70 = resolveModel('llama-3.1-70b');

test('decode step by hand: t0 + weights and KV over 70% of bandwidth, plus half the compute', () => {
  const tm = new RooflineTimeModel({ gpu: h100, model: m8 });
  const batch = 4;
  const ctx = 2000;
  const bytes = m8.params * 2 + batch * ctx * 131072;
  const memoryMs = (bytes / (3350e9 * 0.7)) * 1000;
  const flops = 2 * m8.layerParams * batch + 2 * 128256 * 4096 * batch + 4 * 32 * 32 * 128 * batch * ctx;
  const computeMs = (flops / (989e12 * 0.85)) * 1000;
  const expected = 0.5 + memoryMs + 0.5 * computeMs;
  const got = tm.stepMs({ prefill: [], decodeSeqs: batch, decodeContextTokens: batch * ctx });
  assert.ok(Math.abs(got - expected) < 1e-9, `${got} vs ${expected}`);
  // Ballpark the reader can check: 16.06 GB / 2.345 TB/s ≈ 6.85 ms, plus 2000·4 tokens of KV ≈ 0.45 ms.
  assert.ok(got > 7.7 && got < 7.9, String(got));
});

test('prefill step by hand on 2 GPUs: compute-bound, with all-reduce cost', () => {
  const tm = new RooflineTimeModel({ gpu: h100, model: m70, tp: 2 });
  const e = 1000;
  const s = 1000;
  const flops = 2 * m70.layerParams * e + 2 * 128256 * 8192 + 4 * 80 * 64 * 128 * e * (s - (e - 1) / 2);
  const computeMs = (flops / (2 * 989e12 * 0.85)) * 1000;
  const memoryMs = (((m70.params * 2) / 2 + (s * 327680) / 2) / (3350e9 * 0.7)) * 1000;
  const commMs = (160 * (5 + 4) + (160 * e * 8192 * 2 * 1) / (450e9 / 1e6)) / 1000;
  const expected = 0.5 + computeMs + 0.5 * memoryMs + commMs;
  const got = tm.stepMs({ prefill: [{ newTokens: e, contextLen: s }], decodeSeqs: 0, decodeContextTokens: 0 });
  assert.ok(Math.abs(got - expected) < 1e-9, `${got} vs ${expected}`);
});

test('Preble fit reproduces its own published values', () => {
  assert.ok(Math.abs(prebleFitMs(1000, 1000) - 102) < 1);
  assert.ok(Math.abs(prebleFitMs(4096, 4096) - 369) < 1);
});

test('every calibration target is within 20% and no roofline bound is violated', () => {
  const pts = calibrationPoints();
  assert.ok(pts.length >= 8);
  for (const p of pts) {
    if (p.kind === 'target') assert.ok(Math.abs(errorPct(p)) <= 20, `${p.name}: ${p.modelledMs} vs ${p.publishedMs}`);
    else assert.ok(p.modelledMs >= p.publishedMs, `${p.name}: ${p.modelledMs} < ${p.publishedMs}`);
  }
});

test('step time grows with batch, context and new tokens; decodes ride cheaply on a prefill', () => {
  const tm = new RooflineTimeModel({ gpu: h100, model: m8 });
  const dec = (b: number, c: number) => tm.stepMs({ prefill: [], decodeSeqs: b, decodeContextTokens: b * c });
  const pre = (e: number, s: number, b = 0) => tm.stepMs({ prefill: [{ newTokens: e, contextLen: s }], decodeSeqs: b, decodeContextTokens: b * 1000 });
  assert.ok(dec(64, 1000) > dec(1, 1000));
  assert.ok(dec(64, 4000) > dec(64, 1000));
  assert.ok(pre(4096, 4096) > pre(1024, 1024));
  assert.ok(pre(1024, 8192) > pre(1024, 1024), 'attention grows with context');
  const mixed = pre(2048, 2048, 32);
  assert.ok(mixed > pre(2048, 2048) && mixed < pre(2048, 2048) + dec(32, 1000));
  // Ideal 8B prefill ≈ 62k tok/s at 100% of peak; the model must stay below that.
  const tokPerS = 8192 / (pre(8192, 8192) / 1000);
  assert.ok(tokPerS < 62_000 && tokPerS > 30_000, String(tokPerS));
});

test('A10G decode respects its roofline; fp8 weights and more GPUs make decode faster', () => {
  const slow = new RooflineTimeModel({ gpu: a10g, model: m8 });
  const shape = { prefill: [], decodeSeqs: 1, decodeContextTokens: 100 };
  assert.ok(slow.stepMs(shape) >= (m8.params * 2) / 600e9 * 1000);
  const bf16 = new RooflineTimeModel({ gpu: h100, model: m70, tp: 4 });
  const fp8 = new RooflineTimeModel({ gpu: h100, model: m70, tp: 4, weightDtype: 'fp8' });
  const tp8 = new RooflineTimeModel({ gpu: h100, model: m70, tp: 8 });
  assert.ok(fp8.stepMs(shape) < bf16.stepMs(shape));
  assert.ok(tp8.stepMs(shape) < bf16.stepMs(shape));
  assert.equal(DEFAULT_TIME_PARAMS.memoryEfficiency, 0.7);
});
