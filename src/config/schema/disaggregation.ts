/**
 * `disaggregation`: how a model whose pools have roles (`role: prefill | decode`) is served — the
 * decider's thresholds (src/scheduler/disagg/decider.ts), the prefill leg's retries, and the link
 * the decider assumes between prefill and decode workers.
 */
import { z } from 'zod';
import { ms } from './fields.js';

/** What a worker does in a disaggregated fleet (`pools[].role`, `workers[].role`). */
export const workerRole = z.enum(['prefill', 'decode', 'both']).default('both');

export const disaggregationSection = z
  .strictObject({
    /**
     * Prompt tokens not cached on the chosen decode worker from which a request is prefilled on a
     * prefill worker (llm-d's `nonCachedTokens`); 0: never disaggregate.
     */
    nonCachedTokens: z.int().min(0).default(512),
    /** Prompts shorter than this are always prefilled on their decode worker (llm-d's `promptTokens`); 0: no gate. */
    minPromptTokens: z.int().min(0).default(0),
    /**
     * Prefill queued ahead on the best prefill worker, ms, from which the prefill pool counts as
     * saturated: a prompt the decode worker would prefill sooner then stays on the decode worker.
     */
    saturatedQueueMs: ms.default(1000),
    /** Prefill workers tried for one request before it is prefilled on its decode worker instead. */
    prefillAttempts: z.int().min(1).max(5).default(2),
    /** The KV transfer the decider assumes: the model's KV bytes per token (Llama-3.1-8B in bf16: 131072) over a link of `linkGbps`. */
    kvBytesPerToken: z.int().positive().default(131_072),
    linkGbps: z.number().positive().default(100),
    /** Fixed cost of one transfer (connection, handshake, notification), ms. */
    linkLatencyMs: z.number().min(0).default(1),
  })
  .prefault({});
