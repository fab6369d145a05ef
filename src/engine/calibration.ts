/**
 * Published measurements the time model is calibrated against, and the model's figure for each.
 * benchmarks/calibration.ts prints them as a table; test/engine/time-model.test.ts holds the model to
 * them (within 20%) and to the roofline lower bounds.
 */

import { resolveGpu, resolveModel } from './profiles.js';
import { RooflineTimeModel } from './time-model.js';
import type { StepShape } from './types.js';

export interface CalibrationPoint {
  name: string;
  source: string;
  /** Published figure, ms. */
  publishedMs: number;
  modelledMs: number;
  /** 'target': must be within 20%; 'lower-bound': modelled must not be below it. */
  kind: 'target' | 'lower-bound';
}

/** Preble's fitted prefill time for Llama-3-70B on 2×H100 (ms; e new tokens, s total length). */
export function prebleFitMs(e: number, s: number): number {
  return 18.667 + 0.0798791 * e + 0.00268532 * s + 7.44344923e-7 * e * s;
}

function model(gpu: string, name: string, tp = 1): RooflineTimeModel {
  return new RooflineTimeModel({ gpu: resolveGpu(gpu), model: resolveModel(name), tp });
}

function decode(batch: number, context: number): StepShape {
  return { prefill: [], decodeSeqs: batch, decodeContextTokens: batch * context };
}

function prefill(e: number, s: number): StepShape {
  return { prefill: [{ newTokens: e, contextLen: s }], decodeSeqs: 0, decodeContextTokens: 0 };
}

export function calibrationPoints(): CalibrationPoint[] {
  const h100_8b = model('h100', 'llama-3-8b');
  const a10g_8b = model('a10g', 'llama-3-8b');
  const h100_70b_tp4 = model('h100', 'llama-3-70b', 4);
  const h100_70b_tp2 = model('h100', 'llama-3-70b', 2);
  const pts: CalibrationPoint[] = [
    {
      name: 'Llama-3-8B 1×H100 decode step (batch 1, 1k context)',
      source: 'vLLM, median TPOT 7.56 ms at low load (≈7.2 ms/step)',
      publishedMs: 7.2,
      modelledMs: h100_8b.stepMs(decode(1, 1024)),
      kind: 'target',
    },
    {
      name: 'Llama-3-8B 1×H100 decode step (batch 8, 1k context)',
      source: 'vLLM, median TPOT 7.56 ms at low load',
      publishedMs: 7.56,
      modelledMs: h100_8b.stepMs(decode(8, 1024)),
      kind: 'target',
    },
    {
      name: 'Llama-3-70B TP4 H100 decode step (batch 1, 1k context)',
      source: 'vLLM, median TPOT 18.1 ms (≈17.5 ms/step)',
      publishedMs: 17.5,
      modelledMs: h100_70b_tp4.stepMs(decode(1, 1024)),
      kind: 'target',
    },
    {
      name: 'Llama-3-70B TP4 H100 decode step (batch 8, 1k context)',
      source: 'vLLM, median TPOT 18.1 ms',
      publishedMs: 18.1,
      modelledMs: h100_70b_tp4.stepMs(decode(8, 1024)),
      kind: 'target',
    },
  ];
  for (const [e, s] of [
    [1000, 1000],
    [4096, 4096],
    [512, 512],
    [2048, 2048],
    [1000, 4000],
  ] as const) {
    pts.push({
      name: `Llama-3-70B TP2 H100 prefill e=${e}, s=${s}`,
      source: "Preble's fitted prefill time",
      publishedMs: prebleFitMs(e, s),
      modelledMs: h100_70b_tp2.stepMs(prefill(e, s)),
      kind: 'target',
    });
  }
  pts.push(
    {
      name: 'Llama-3-8B 1×H100 decode roofline (weights only)',
      source: '16.06 GB / 3,350 GB/s',
      publishedMs: 4.8,
      modelledMs: h100_8b.stepMs(decode(1, 1)),
      kind: 'lower-bound',
    },
    {
      name: 'Llama-3-8B 1×A10G decode roofline (weights only)',
      source: '16.06 GB / 600 GB/s',
      publishedMs: 26.8,
      modelledMs: a10g_8b.stepMs(decode(1, 1)),
      kind: 'lower-bound',
    },
  );
  return pts;
}

export function errorPct(p: CalibrationPoint): number {
  return ((p.modelledMs - p.publishedMs) / p.publishedMs) * 100;
}

/** The calibration table in markdown. */
export function calibrationTable(points = calibrationPoints()): string {
  const rows = [
    '| point | published (ms) | modelled (ms) | error |',
    '|---|---:|---:|---:|',
  ];
  for (const p of points) {
    const err = p.kind === 'target' ? `${errorPct(p) >= 0 ? '+' : ''}${errorPct(p).toFixed(1)}%` : p.modelledMs >= p.publishedMs ? 'above bound ✓' : 'BELOW BOUND ✗';
    const pub = p.kind === 'lower-bound' ? `≥ ${p.publishedMs.toFixed(1)}` : p.publishedMs.toFixed(1);
    rows.push(`| ${p.name} — ${p.source} | ${pub} | ${p.modelledMs.toFixed(1)} | ${err} |`);
  }
  return rows.join('\n');
}
