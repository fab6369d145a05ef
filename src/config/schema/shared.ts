/** `shared`: state gateway replicas share through Redis. */
import { z } from 'zod';
import { ms } from './fields.js';

/**
 * State shared by gateway replicas through Redis (src/shared/): on when `shared.redis.url` or
 * REDIS_URL is set; without it every replica keeps its own (the single-process behaviour).
 */
export const sharedSection = z
  .strictObject({
    redis: z
      .strictObject({
        url: z.string().regex(/^(rediss?):\/\/\S*$/, 'expected redis://[user:password@]host[:port][/db] or rediss://...').optional(),
        keyPrefix: z.string().regex(/^[^*?\[\]\s]*$/, 'must not contain spaces or glob characters (* ? [ ])').default('kvgate:shared:'),
        /** Per-command timeout: a slower Redis counts as down for that request (local state used). */
        timeoutMs: ms.default(100),
        connectTimeoutMs: ms.default(2_000),
      })
      .prefault({}),
    /** Tenants' rate limits counted in Redis, across replicas. */
    rateLimits: z.boolean().default(true),
    /** Publish this replica's routing predictions and learn the other replicas'. */
    routing: z.boolean().default(true),
    /** Publish this replica's circuit-breaker openings and closings and apply the other replicas'. */
    breakers: z.boolean().default(true),
    /** Publish this replica's in-flight requests per worker and mirror the other replicas'. */
    load: z.boolean().default(true),
    /** Share which worker holds each Responses API response (continuations by previous_response_id). */
    responses: z.boolean().default(true),
    /** Share the workers drained for maintenance (/admin/workers/{id}/drain) with every replica. */
    drains: z.boolean().default(true),
    /** How often queued routing knowledge and load are published, one message per batch. */
    publishIntervalMs: ms.default(25),
    /**
     * A shared concurrency slot's lease: renewed every leaseMs / 3 while its request is in flight,
     * so a replica killed (or cut off from Redis) mid-request frees its tenants' slots within this.
     */
    leaseMs: ms.min(1_000, 'must be at least 1000 ms: the lease is renewed every leaseMs / 3, and a shorter one lapses on one slow heartbeat').default(15_000),
  })
  .prefault({});
