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
    ['l4', 'l4'],
    ['nvidia-l4', 'l4'],
    ['L40S', 'l40s'],
    ['l40s-48gb', 'l40s'],
  ] as const) {
    assert.equal(knownGpu(label)?.name, name, label);
  }
  for (const label of ['', 'l40', 'tpu-v5e', 'a10', 'xh100', 'mi300x']) assert.equal(knownGpu(label), undefined, label);
  // Every GPU is named by its own name, even where another's begins it (l4, l40s).
  for (const name of Object.keys(GPUS)) assert.equal(knownGpu(name)?.name, name);
});
