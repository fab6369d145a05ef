/**
 * In-engine speculative decoding: lossless (the same tokens as plain decoding), fewer and longer
 * steps, vLLM's spec-decode counters with the configured acceptance, a step priced as k draft
 * decode steps plus one target pass over k + 1 tokens per sequence.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Engine } from '../../src/engine/engine.js';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import { createSampler, createSyntheticLm } from '../../src/engine/synthetic-lm.js';
import type { EngineConfig, StepResult } from '../../src/engine/types.js';
import { seededRng } from '../../src/util/rng.js';

const target = buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-70b', tp: 4, hashSeed: 1 });
const draftTime = buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', tp: 4 }).timeModel;

function run(cfg: EngineConfig, n = 6, maxTokens = 200): { steps: StepResult[]; outputs: Map<string, number[]>; engine: Engine } {
  const e = new Engine(cfg);
  const lm = createSyntheticLm('llama-3.1-70b');
  const outputs = new Map<string, number[]>();
  for (let i = 0; i < n; i++) {
    const id = `r${i}`;
    outputs.set(id, []);
    e.add({ id, prompt: Array.from({ length: 64 + i }, (_, j) => (j * 13 + i) % 3000), maxTokens, sampler: createSampler(lm, { seed: i, temperature: 1 }).sampler, ignoreEos: true });
  }
  const steps: StepResult[] = [];
  while (e.hasWork()) {
    const s = e.step()!;
    steps.push(s);
    for (const t of s.tokens) outputs.get(t.id)!.push(t.token);
  }
  return { steps, outputs, engine: e };
}

const spec = (alpha: number, k = 4): EngineConfig => ({ ...target, speculative: { k, acceptance: () => alpha, draftTimeModel: draftTime, rng: seededRng(5) } });

test('speculation is lossless: the same tokens as plain decoding, in fewer steps', () => {
  const plain = run(target);
  const fast = run(spec(0.8));
  assert.deepEqual(fast.outputs, plain.outputs);
  for (const out of fast.outputs.values()) assert.equal(out.length, 200);
  assert.ok(fast.steps.length < plain.steps.length / 2, `${fast.steps.length} vs ${plain.steps.length}`);
  // Indices stay consecutive per request.
  const idx = new Map<string, number>();
  for (const s of fast.steps) for (const t of s.tokens) {
    assert.equal(t.index, idx.get(t.id) ?? 0);
    idx.set(t.id, t.index + 1);
  }
});

test('the counters reproduce the configured acceptance, position by position', () => {
  for (const alpha of [0.3, 0.7]) {
    const { engine } = run(spec(alpha), 8, 400);
    const sd = engine.stats().specDecode!;
    // k per draft, fewer only near max_tokens (at most k steps of each of the 8 requests).
    assert.ok(sd.numDraftTokens <= 4 * sd.numDrafts && sd.numDraftTokens >= 4 * sd.numDrafts - 8 * 4 * 4, JSON.stringify(sd));
    // Position j is reached with probability α^j and accepted with α: per-pos rate ≈ α^(j+1).
    for (let j = 0; j < 4; j++) {
      const rate = sd.acceptedPerPos[j]! / sd.numDrafts;
      assert.ok(Math.abs(rate - Math.pow(alpha, j + 1)) < 0.04, `α ${alpha} position ${j}: ${rate}`);
    }
    // vLLM's "acceptance rate" (accepted / draft tokens) is (E − 1)/k, not α.
    const e = (1 - Math.pow(alpha, 5)) / (1 - alpha);
    assert.ok(Math.abs(sd.numAcceptedTokens / sd.numDraftTokens - (e - 1) / 4) < 0.03);
    assert.equal(engine.stats().generationTokens, 8 * 400);
  }
});

test('a speculative step costs k draft steps plus a target pass over k + 1 tokens per sequence', () => {
  const plain = run(target, 1, 50);
  const fast = run(spec(0.0), 1, 50);
  // With nothing accepted, every step still yields one token but costs more than a plain decode.
  const decodeMs = plain.steps[5]!.durationMs;
  const specMs = fast.steps[5]!.durationMs;
  const draftStep = draftTime.stepMs({ prefill: [], decodeSeqs: 1, decodeContextTokens: 70 });
  assert.ok(specMs > decodeMs + 3.5 * draftStep, `${specMs} vs ${decodeMs} + 4 × ${draftStep}`);
  assert.equal(fast.steps.length, plain.steps.length);
  // At high acceptance the time per token drops below plain decoding at batch 1.
  const hi = run(spec(0.9), 1, 200);
  const lo = run(target, 1, 200);
  const t = (r: { steps: StepResult[] }) => r.steps.reduce((a, s) => a + s.durationMs, 0);
  assert.ok(t(hi) < 0.7 * t(lo), `${t(hi)} vs ${t(lo)}`);
});
