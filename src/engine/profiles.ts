/**
 * GPU and model profiles, and the sizing of an engine from them: how many KV blocks fit next to
 * the weights (vLLM's gpu_memory_utilization arithmetic) and which time model prices its steps.
 */

import { randomInt } from 'node:crypto';
import { KV_BYTES, WEIGHT_BYTES, type GpuProfile, type KvCacheDtype, type ModelProfile, type WeightDtype } from './hardware.js';
import { RooflineTimeModel } from './time-model.js';
import { GPUS } from '../hardware/gpus.js';
import type { EngineConfig } from './types.js';

export type { GpuProfile, KvCacheDtype, ModelProfile, WeightDtype };

const GiB = 1024 ** 3;


function llama(name: string, maxModelLen: number, layers: number, d: number, qHeads: number, kvHeads: number, mlp: number): ModelProfile {
  const vocab = 128256;
  const headDim = d / qHeads;
  const attn = d * qHeads * headDim * 2 + d * kvHeads * headDim * 2; // q, o + k, v
  const perLayer = attn + 3 * d * mlp + 2 * d; // + two RMSNorm weights
  const layerParams = layers * perLayer + d; // + final norm
  return {
    name,
    maxModelLen,
    layers,
    dModel: d,
    qHeads,
    kvHeads,
    headDim,
    mlpDim: mlp,
    vocab,
    layerParams,
    params: layerParams + 2 * vocab * d,
  };
}

const MODELS: Record<string, ModelProfile> = {
  'llama-3.1-8b': llama('llama-3.1-8b', 131072, 32, 4096, 32, 8, 14336),
  'llama-3.1-70b': llama('llama-3.1-70b', 131072, 80, 8192, 64, 8, 28672),
  'llama-3-8b': llama('llama-3-8b', 8192, 32, 4096, 32, 8, 14336),
  'llama-3-70b': llama('llama-3-70b', 8192, 80, 8192, 64, 8, 28672),
};

export function listGpus(): GpuProfile[] {
  return Object.values(GPUS);
}

export function listModels(): ModelProfile[] {
  return Object.values(MODELS);
}

/** Lower-case, drop an organisation prefix and an -instruct suffix: "meta-llama/Llama-3.1-8B-Instruct" → "llama-3.1-8b". */
function normaliseModelName(name: string): string {
  let n = name.trim().toLowerCase();
  const slash = n.lastIndexOf('/');
  if (slash >= 0) n = n.slice(slash + 1);
  n = n.replace(/^meta-/, '').replace(/-instruct$/, '');
  return n;
}

export function resolveModel(name: string): ModelProfile {
  const m = MODELS[normaliseModelName(name)];
  if (!m) throw new Error(`unknown model "${name}"; known models: ${Object.keys(MODELS).join(', ')}`);
  return m;
}

export function resolveGpu(name: string): GpuProfile {
  const g = GPUS[name.trim().toLowerCase()];
  if (!g) throw new Error(`unknown GPU "${name}"; known GPUs: ${Object.keys(GPUS).join(', ')}`);
  return g;
}

/** KV bytes per token over the whole model (all layers, K and V, all KV heads). */
export function kvBytesPerToken(model: ModelProfile, kvDtype: KvCacheDtype = 'bf16'): number {
  return 2 * model.layers * model.kvHeads * model.headDim * KV_BYTES[kvDtype];
}

/**
 * Memory each GPU keeps outside weights and KV: CUDA context and graphs, plus the activations of
 * the largest batch (vLLM measures this with a profiling run; this is an estimate of the same
 * peak: MLP intermediates and hidden states per batched token, fp32 logits per sequence).
 */
export function activationReserveBytes(model: ModelProfile, tp: number, maxNumBatchedTokens: number, maxNumSeqs: number): number {
  const perToken = (2 * model.mlpDim / tp + 4 * model.dModel) * 2;
  return 1 * GiB + maxNumBatchedTokens * perToken + (maxNumSeqs * model.vocab * 4) / tp;
}

export interface BuildEngineOptions {
  gpu: string;
  model: string;
  /** Tensor-parallel degree: weights and KV split over tp GPUs. Default 1. */
  tp?: number;
  weightDtype?: WeightDtype;
  kvCacheDtype?: KvCacheDtype;
  gpuMemoryUtilization?: number;
  blockSize?: number;
  maxNumSeqs?: number;
  maxNumBatchedTokens?: number;
  enablePrefixCaching?: boolean;
  hashSeed?: number;
  kvEvents?: boolean;
  emitTokens?: boolean;
  maxModelLen?: number;
  /** Host memory for the KV offload tier, GiB (vLLM's --kv-offloading-size); 0 or absent: none. */
  cpuOffloadGib?: number;
}

/**
 * Host → GPU copy bandwidth for loading offloaded KV blocks, bytes/s: PCIe 4.0 ×16 moves about
 * 25 GB/s of pinned memory in practice (of 32 GB/s raw); a PCIe 5.0 host roughly doubles it.
 */
export const HOST_LOAD_BYTES_PER_S = 25e9;

/** Sizing details behind an EngineConfig, for logs and the docs. */
export interface EngineSizing {
  gpu: GpuProfile;
  model: ModelProfile;
  tp: number;
  weightDtype: WeightDtype;
  kvCacheDtype: KvCacheDtype;
  weightBytesPerGpu: number;
  reserveBytesPerGpu: number;
  kvBytesPerToken: number;
  kvCacheBytes: number;
  numGpuBlocks: number;
}

/** vLLM's block-hash seed is random per process unless PYTHONHASHSEED pins it. */
const PROCESS_HASH_SEED = randomInt(2 ** 31);

export function sizeEngine(opts: BuildEngineOptions): EngineSizing {
  const gpu = resolveGpu(opts.gpu);
  const model = resolveModel(opts.model);
  const tp = opts.tp ?? 1;
  if (!Number.isInteger(tp) || tp < 1 || tp > 8) throw new Error(`tp must be an integer from 1 to 8, got ${opts.tp}`);
  const weightDtype = opts.weightDtype ?? 'bf16';
  const kvCacheDtype = opts.kvCacheDtype ?? 'bf16';
  if (!(weightDtype in WEIGHT_BYTES)) throw new Error(`unknown weight dtype "${weightDtype}"; known: bf16, fp8, int4`);
  if (!(kvCacheDtype in KV_BYTES)) throw new Error(`unknown KV cache dtype "${kvCacheDtype}"; known: bf16, fp8`);
  const util = opts.gpuMemoryUtilization ?? 0.9;
  if (!(util > 0 && util <= 1)) throw new Error(`gpuMemoryUtilization must be in (0, 1], got ${util}`);
  const blockSize = opts.blockSize ?? 16;
  const maxNumSeqs = opts.maxNumSeqs ?? 256;
  const maxNumBatchedTokens = opts.maxNumBatchedTokens ?? 8192;

  const weightBytesPerGpu = (model.params * WEIGHT_BYTES[weightDtype]) / tp;
  const reserveBytesPerGpu = activationReserveBytes(model, tp, maxNumBatchedTokens, maxNumSeqs);
  const perToken = kvBytesPerToken(model, kvCacheDtype);
  const kvCacheBytes = tp * (gpu.memoryBytes * util - weightBytesPerGpu - reserveBytesPerGpu);
  const numGpuBlocks = Math.floor(kvCacheBytes / (perToken * blockSize));
  if (numGpuBlocks < 1) {
    const gib = (x: number) => (x / GiB).toFixed(1);
    throw new Error(
      `${model.name} does not fit on ${tp}×${gpu.name}: ${gib(weightBytesPerGpu)} GiB of ${weightDtype} weights ` +
        `and ${gib(reserveBytesPerGpu)} GiB of activations per GPU exceed ${gib(gpu.memoryBytes * util)} GiB ` +
        `(gpu_memory_utilization ${util}); use more GPUs (tp), a smaller weight dtype (fp8, int4) or a larger GPU`,
    );
  }
  return { gpu, model, tp, weightDtype, kvCacheDtype, weightBytesPerGpu, reserveBytesPerGpu, kvBytesPerToken: perToken, kvCacheBytes, numGpuBlocks };
}

export function buildEngineConfig(opts: BuildEngineOptions): EngineConfig {
  const sizing = sizeEngine(opts);
  const { model } = sizing;
  const maxModelLen = opts.maxModelLen ?? model.maxModelLen;
  if (!Number.isInteger(maxModelLen) || maxModelLen < 1 || maxModelLen > model.maxModelLen) {
    throw new Error(`maxModelLen must be an integer from 1 to ${model.maxModelLen} for ${model.name}, got ${opts.maxModelLen}`);
  }
  return {
    blockSize: opts.blockSize ?? 16,
    numGpuBlocks: sizing.numGpuBlocks,
    maxModelLen,
    maxNumSeqs: opts.maxNumSeqs ?? 256,
    maxNumBatchedTokens: opts.maxNumBatchedTokens ?? 8192,
    enablePrefixCaching: opts.enablePrefixCaching ?? true,
    hashSeed: opts.hashSeed ?? PROCESS_HASH_SEED,
    kvEvents: opts.kvEvents ?? false,
    emitTokens: opts.emitTokens ?? true,
    ...cpuOffloadOf(opts.cpuOffloadGib, sizing.kvBytesPerToken * (opts.blockSize ?? 16)),
    timeModel: new RooflineTimeModel({
      gpu: sizing.gpu,
      model,
      tp: sizing.tp,
      weightDtype: sizing.weightDtype,
      kvCacheDtype: sizing.kvCacheDtype,
    }),
  };
}

/** The host offload tier of `gib` GiB for blocks of `blockBytes` bytes, as EngineConfig.cpuOffload. */
function cpuOffloadOf(gib: number | undefined, blockBytes: number): { cpuOffload?: { numBlocks: number; loadMsPerBlock: number } } {
  if (gib === undefined || gib === 0) return {};
  if (!(gib > 0) || !Number.isFinite(gib)) throw new Error(`cpuOffloadGib must be a positive number, got ${gib}`);
  return { cpuOffload: { numBlocks: Math.floor((gib * GiB) / blockBytes), loadMsPerBlock: (blockBytes / HOST_LOAD_BYTES_PER_S) * 1000 } };
}
