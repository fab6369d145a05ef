export * from './types.js';
export { Engine } from './engine.js';
export { BlockManager } from './block-manager.js';
export { blockHashes, hashBlock, chainRoot } from './block-hash.js';
export {
  buildEngineConfig,
  sizeEngine,
  listGpus,
  listModels,
  resolveGpu,
  resolveModel,
  kvBytesPerToken,
  type BuildEngineOptions,
  type EngineSizing,
  type GpuProfile,
  type ModelProfile,
  type WeightDtype,
  type KvCacheDtype,
} from './profiles.js';
export { RooflineTimeModel, DEFAULT_TIME_PARAMS, type TimeModelParams, type StepBreakdown } from './time-model.js';
export {
  createSyntheticLm,
  createSampler,
  fixedSampler,
  hashSampler,
  type SyntheticLm,
  type Distribution,
  type SamplerOptions,
  type SampledLogprob,
  type RecordingSampler,
} from './synthetic-lm.js';
