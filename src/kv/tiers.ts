/**
 * Storage tiers of cached KV blocks and how much a hit in each is worth.
 *
 * vLLM reports where a block lives in its KV events' `medium` (vllm/distributed/kv_events.py:
 * MEDIUM_GPU = "GPU"; the offloading connector reports "CPU", vllm/v1/kv_offload). A block in
 * host memory or on disk is still a hit — the engine loads it instead of recomputing it — but the
 * load takes time, so routers credit it less than a GPU hit:
 * - NVIDIA Dynamo (ai-dynamo/dynamo lib/kv-router/src/scheduling/config.rs, KvRouterConfig
 *   defaults): host_cache_hit_weight 0.75, disk_cache_hit_weight 0.25; media mapped by
 *   StorageTier::from_kv_medium (lib/kv-router/src/protocols.rs): GPU/DEVICE → device;
 *   CPU/CPU_PINNED/CPU_TIER1 → host pinned; CPU_TIER2/DISK/NVME/STORAGE → disk.
 * - llm-d (llm-d-kv-cache pkg/kvcache, DefaultKVCacheBackendConfig): gpu 1.0, cpu 0.8,
 *   storage 0.3, by the lowercased medium.
 */

export type KvTier = 'gpu' | 'host' | 'disk';

/** Credit of a cached block per tier, a GPU block being 1. */
export interface TierWeights {
  host: number;
  disk: number;
}

/** kvgate's defaults: Dynamo's. */
export const DEFAULT_TIER_WEIGHTS: Readonly<TierWeights> = Object.freeze({ host: 0.75, disk: 0.25 });

const BY_MEDIUM: Record<string, KvTier> = {
  GPU: 'gpu',
  DEVICE: 'gpu',
  CPU: 'host',
  CPU_PINNED: 'host',
  CPU_TIER1: 'host',
  HOST: 'host',
  CPU_TIER2: 'disk',
  DISK: 'disk',
  NVME: 'disk',
  SSD: 'disk',
  STORAGE: 'disk',
};

/**
 * The tier of a vLLM `medium` (case-insensitive); absent means the GPU. Null for media that are
 * not this worker's own (EXTERNAL, REMOTE, SHARED: a cache shared by the fleet favours no worker)
 * or unknown.
 */
export function tierOfMedium(medium: string | null | undefined): KvTier | null {
  if (medium === null || medium === undefined || medium === '') return 'gpu';
  return BY_MEDIUM[medium.toUpperCase()] ?? null;
}

/** Credit of a match of [gpu, host, disk] blocks, in GPU-block units. */
export function tierCredit(counts: readonly [number, number, number], w: TierWeights): number {
  return counts[0] + w.host * counts[1] + w.disk * counts[2];
}
