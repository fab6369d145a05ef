import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GPUS, knownGpu } from '../../src/hardware/gpus.js';

test('a hardware label names a known GPU by one of its words, whatever its case and decoration', () => {
  for (const [label, name] of [
    ['h100', 'h100'],
    ['H100', 'h100'],
    ['nvidia-h100-80gb-hbm3', 'h100'],
    ['NVIDIA-A100-SXM4-80GB', 'a100'],
    ['a100-tp2', 'a100'],
    ['a10g-spot', 'a10g'],
    ['g5 A10G', 'a10g'],
    ['h100sxm', 'h100'],
  ] as const) {
    assert.equal(knownGpu(label)?.name, name, label);
  }
  for (const label of ['', 'l40s', 'tpu-v5e', 'a10', 'xh100', 'mi300x']) assert.equal(knownGpu(label), undefined, label);
  // No word can name two GPUs: no name begins with another.
  const names = Object.keys(GPUS);
  for (const a of names) for (const b of names) if (a !== b) assert.ok(!a.startsWith(b), `${a} begins with ${b}`);
});
