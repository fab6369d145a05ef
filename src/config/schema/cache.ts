/** `cache`: the response cache (memory or Redis). */
import { z } from 'zod';
import { bytes, ms } from './fields.js';

export const cacheSection = z
  .strictObject({
    /** Answer repeated deterministic requests from the cache. */
    enabled: z.boolean().default(false),
    store: z.enum(['memory', 'redis']).default('memory'),
    /** Lifetime of an entry. */
    ttlMs: ms.default(300_000),
    /** Larger answers are served but not stored. */
    maxEntryBytes: bytes.default(1024 * 1024),
    /** Also cache sampled requests (temperature > 0 and no seed): the same answer every time. */
    sampled: z.boolean().default(false),
    /** Concurrent identical misses share one upstream request. */
    singleFlight: z.boolean().default(true),
    memory: z.strictObject({ maxBytes: bytes.default(256 * 1024 * 1024) }).prefault({}),
    redis: z
      .strictObject({
        url: z.string().regex(/^(rediss?):\/\/\S*$/, 'expected redis://[user:password@]host[:port][/db] or rediss://...').optional(),
        keyPrefix: z.string().regex(/^[^*?\[\]\s]*$/, 'must not contain spaces or glob characters (* ? [ ])').default('kvgate:cache:'),
        /** Per-operation timeout: a slower Redis is treated as down for that request. */
        timeoutMs: ms.default(50),
        connectTimeoutMs: ms.default(2_000),
        /** Values at least this large are stored brotli-compressed. */
        compressAboveBytes: z.int().min(0).default(2048),
        /** Consecutive failures after which Redis is skipped for coolDownMs (then one probe). */
        failuresToOpen: z.int().positive().default(3),
        coolDownMs: ms.default(1_000),
      })
      .prefault({}),
  })
  .prefault({});
