/**
 * The hardware vocabulary the engine model is sized and timed from: GPU and model profiles and
 * the byte widths of their data types (the GPUs themselves are in src/hardware/gpus.ts, which the
 * routing policy reads too). Kept apart from profiles.ts (the catalogue and the sizing
 * arithmetic) and time-model.ts (the roofline), which both read it.
 */
import type { GpuProfile } from '../hardware/gpus.js';

export type { GpuProfile };

export interface ModelProfile {
  name: string;
  /** Longest context the model accepts (max_model_len). */
  maxModelLen: number;
  layers: number;
  dModel: number;
  qHeads: number;
  kvHeads: number;
  headDim: number;
  mlpDim: number;
  vocab: number;
  /** Parameter count, derived from the architecture (untied input and output embeddings). */
  params: number;
  /** Parameters outside the embedding table (the ones every token multiplies through). */
  layerParams: number;
}

export type WeightDtype = 'bf16' | 'fp8' | 'int4';
export type KvCacheDtype = 'bf16' | 'fp8';


/** Bytes per parameter / per KV element of each dtype. */
export const WEIGHT_BYTES: Record<WeightDtype, number> = { bf16: 2, fp8: 1, int4: 0.5 };
export const KV_BYTES: Record<KvCacheDtype, number> = { bf16: 2, fp8: 1 };
