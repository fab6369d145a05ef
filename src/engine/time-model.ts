/**
 * Roofline time model of one engine step on a GPU (or a tensor-parallel group of GPUs).
 *
 *   step = t0 + max(compute, memory) + β·min(compute, memory) + communication
 *
 * - memory: bytes each GPU must read — its share of the weights once per step, plus the KV of
 *   every token attended to (decode contexts and prefill contexts) — at `memoryEfficiency` of
 *   peak bandwidth. This is what a decode step costs.
 * - compute: 2·(layer params)·(tokens in the step) + 2·vocab·d per sampled sequence (logits) +
 *   attention (QKᵀ and AV: 4·layers·q_dim FLOPs per attended (query, key) pair, causal within a
 *   prefill chunk), at `computeEfficiency` of the group's peak. This is what a prefill costs.
 * - A mixed step (chunked prefill with decodes riding along) is one forward pass over all its
 *   tokens, so it is priced as one roofline: compute and memory of everything in the step are
 *   summed separately and the larger dominates. Decodes piggybacking on a big prefill cost little,
 *   which is how chunked prefill behaves on real GPUs.
 * - β (overlapPenalty): kernels never overlap weight streaming and math perfectly; half of the
 *   smaller term shows through. This is what makes a small prefill cost more than its FLOPs
 *   (Preble's fit has an 18.7 ms intercept) and a large decode batch more than its bytes.
 * - communication (tp > 1): two all-reduces per layer, each costing a latency that grows with
 *   log2(tp) plus the ring all-reduce volume 2·(tp−1)/tp of the step's activations over the link.
 * - t0: fixed per-step overhead (scheduling, sampling, kernel launches).
 *
 * Calibration (benchmarks/calibration.ts): memoryEfficiency 0.7, computeEfficiency 0.85, β 0.5,
 * t0 0.5 ms, all-reduce latency 5 + 4·log2(tp) µs.
 */

import { KV_BYTES, WEIGHT_BYTES, type GpuProfile, type KvCacheDtype, type ModelProfile, type WeightDtype } from './hardware.js';
import type { StepShape, TimeModel } from './types.js';


export interface TimeModelParams {
  /** Fraction of peak memory bandwidth a decode step achieves. */
  memoryEfficiency: number;
  /** Fraction of peak tensor throughput a prefill achieves. */
  computeEfficiency: number;
  /** Fixed per-step overhead, ms. */
  t0Ms: number;
  /**
   * How much of the smaller of compute and memory time is NOT hidden under the larger one
   * (0 = perfect overlap, the pure roofline; 1 = no overlap, the sum).
   */
  overlapPenalty: number;
  /** All-reduce latency = base + perLog2Tp·log2(tp), µs. */
  allReduceBaseUs: number;
  allReducePerLog2TpUs: number;
}

export const DEFAULT_TIME_PARAMS: TimeModelParams = {
  memoryEfficiency: 0.7,
  computeEfficiency: 0.85,
  t0Ms: 0.5,
  overlapPenalty: 0.5,
  allReduceBaseUs: 5,
  allReducePerLog2TpUs: 4,
};

export interface RooflineOptions {
  gpu: GpuProfile;
  model: ModelProfile;
  tp?: number;
  weightDtype?: WeightDtype;
  kvCacheDtype?: KvCacheDtype;
  params?: Partial<TimeModelParams>;
}

/** The parts of one step's time, ms. */
export interface StepBreakdown {
  computeMs: number;
  memoryMs: number;
  commMs: number;
  overheadMs: number;
  totalMs: number;
}

export class RooflineTimeModel implements TimeModel {
  readonly gpu: GpuProfile;
  readonly model: ModelProfile;
  readonly tp: number;
  readonly params: TimeModelParams;
  /** Weight bytes each GPU reads per step. */
  readonly weightBytesPerGpu: number;
  /** KV bytes per token held by each GPU. */
  readonly kvBytesPerTokenPerGpu: number;
  // Precomputed per-unit costs, so stepMs is a handful of multiply-adds.
  private readonly flopsPerToken: number;
  private readonly flopsPerSequence: number;
  private readonly attnFlopsPerPair: number;
  private readonly groupFlopsPerMs: number;
  private readonly bytesPerMs: number;
  private readonly allReduceMs: number;
  private readonly commMsPerToken: number;

  constructor(opts: RooflineOptions) {
    const { gpu, model } = opts;
    const tp = opts.tp ?? 1;
    const p = { ...DEFAULT_TIME_PARAMS, ...opts.params };
    this.gpu = gpu;
    this.model = model;
    this.tp = tp;
    this.params = p;
    this.weightBytesPerGpu = (model.params * WEIGHT_BYTES[opts.weightDtype ?? 'bf16']) / tp;
    this.kvBytesPerTokenPerGpu = (2 * model.layers * model.kvHeads * model.headDim * KV_BYTES[opts.kvCacheDtype ?? 'bf16']) / tp;
    this.flopsPerToken = 2 * model.layerParams;
    this.flopsPerSequence = 2 * model.vocab * model.dModel;
    this.attnFlopsPerPair = 4 * model.layers * model.qHeads * model.headDim;
    this.groupFlopsPerMs = (tp * gpu.peakFlops * p.computeEfficiency) / 1000;
    this.bytesPerMs = (gpu.bandwidth * p.memoryEfficiency) / 1000;
    if (tp > 1) {
      const allReduces = 2 * model.layers;
      this.allReduceMs = (allReduces * (p.allReduceBaseUs + p.allReducePerLog2TpUs * Math.log2(tp))) / 1000;
      const bytesPerToken = model.dModel * 2 * ((2 * (tp - 1)) / tp);
      this.commMsPerToken = (allReduces * bytesPerToken) / (gpu.linkBandwidth / 1000);
    } else {
      this.allReduceMs = 0;
      this.commMsPerToken = 0;
    }
  }

  stepMs(shape: StepShape): number {
    return this.breakdown(shape).totalMs;
  }

  breakdown(shape: StepShape): StepBreakdown {
    let tokens = shape.decodeSeqs;
    let attnPairs = shape.decodeContextTokens;
    let kvTokensRead = shape.decodeContextTokens;
    const prefill = shape.prefill;
    for (let i = 0; i < prefill.length; i++) {
      const e = prefill[i]!.newTokens;
      const s = prefill[i]!.contextLen;
      tokens += e;
      // Query j of the chunk (j = 0..e-1) attends to s - e + j + 1 keys.
      attnPairs += e * (s - (e - 1) / 2);
      kvTokensRead += s;
    }
    const sequences = shape.decodeSeqs + prefill.length;
    const flops = this.flopsPerToken * tokens + this.flopsPerSequence * sequences + this.attnFlopsPerPair * attnPairs;
    const computeMs = flops / this.groupFlopsPerMs;
    const memoryMs = (this.weightBytesPerGpu + this.kvBytesPerTokenPerGpu * kvTokensRead) / this.bytesPerMs;
    const commMs = tokens > 0 ? this.allReduceMs + this.commMsPerToken * tokens : 0;
    const overheadMs = this.params.t0Ms;
    const busyMs = Math.max(computeMs, memoryMs) + this.params.overlapPenalty * Math.min(computeMs, memoryMs);
    return { computeMs, memoryMs, commMs, overheadMs, totalMs: overheadMs + busyMs + commMs };
  }
}
