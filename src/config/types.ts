/** The parts of a validated config the gateway reads beside the sections themselves. */
import type { PriorityClass } from '../admission/classes.js';
import type { TenantLimits } from '../admission/rate-limit.js';
import type { TenantCacheOverrides } from '../admission/tenants.js';

/** A worker that publishes KV-cache events, and where (its `kvEvents`). */
export interface WorkerKvEvents {
  workerId: string;
  endpoint: string;
  replayEndpoint?: string;
  topic?: string;
  /** Data-parallel ranks publishing at endpoint + rank (default 1). */
  dataParallelSize?: number;
}

/** A tenant with its keys read and hashed. */
export interface TenantConfig {
  id: string;
  /** SHA-256 digests of its keys. */
  digests: Buffer[];
  cache: TenantCacheOverrides;
  priority: PriorityClass;
  limits: TenantLimits;
  caps: RequestCapsOverride;
  /** The models it may use; absent: every model. */
  models?: string[];
}

/** Request caps; a narrower scope (pool, tenant) may only lower them. */
export interface RequestCaps {
  maxN: number;
  maxTokens: number;
  maxTotalTokens: number;
  maxRequestMs: number;
  maxEmbeddingInputs: number;
  maxEmbeddingTokens: number;
}
export type RequestCapsOverride = Partial<RequestCaps>;

/** What the gateway needs of a pool beyond its workers. */
export interface PoolSettings {
  cacheIsolation: 'none' | 'tenant';
  caps: RequestCapsOverride;
}
