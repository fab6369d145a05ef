/** `admission`: KV-pressure admission, its queue, token counting, and vLLM priorities. */
import { z } from 'zod';
import { ADMISSION_DEFAULTS } from '../../admission/controller.js';
import { ms, unitInterval } from './fields.js';

export const admissionSection = z
  .strictObject({
    /** KV-pressure admission (thresholds, queue); rate limits and classes apply either way. */
    enabled: z.boolean().default(true),
    thresholds: z
      .strictObject({
        sheddable: unitInterval.default(ADMISSION_DEFAULTS.thresholds.sheddable),
        standard: unitInterval.default(ADMISSION_DEFAULTS.thresholds.standard),
        prefillBacklogTokens: z.int().min(0).default(ADMISSION_DEFAULTS.thresholds.prefillBacklogTokens),
        /** Recent TPOT at the picked worker, ms per token, above which sheddable requests are shed (0: off). */
        sheddableTpotMs: z.number().min(0).default(ADMISSION_DEFAULTS.thresholds.sheddableTpotMs),
      })
      .prefault({}),
    queue: z
      .strictObject({
        maxSize: z.int().min(0).default(ADMISSION_DEFAULTS.queue.maxSize),
        maxWaitMs: ms.default(ADMISSION_DEFAULTS.queue.maxWaitMs),
      })
      .prefault({}),
    /**
     * What a tenant's tokensPerMinute and tokensPerDay count. `used`: a request reserves its prompt
     * tokens plus max_tokens per answer when it starts, and the reservation is settled to the
     * tokens its answer used when it ends. `reserved`: the reservation stands (as OpenAI counts).
     */
    tokensCounted: z.enum(['used', 'reserved']).default('used'),
    vllmPriority: z
      .strictObject({
        /** Pools whose workers run vLLM with --scheduling-policy priority ('*': every pool). */
        pools: z.array(z.string().min(1)).default([]),
        values: z
          .strictObject({
            critical: z.int().default(0),
            standard: z.int().default(1),
            sheddable: z.int().default(2),
          })
          .prefault({}),
      })
      .prefault({}),
  })
  .prefault({});

