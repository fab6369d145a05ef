/** `speculative`: cascades (draft pool and target pool), the k controller, routing, per-request speculation. */
import { z } from 'zod';
import { ms } from './fields.js';

/**
 * One model served by a speculative cascade (src/speculative/): a draft pool proposes tokens, the
 * target pool verifies them. Clients ask for `model`, which the target pool serves.
 */
const cascade = z.strictObject({
  model: z.string().min(1),
  targetPool: z.string().min(1),
  draftPool: z.string().min(1),
  /** Draft tokens proposed per round. */
  k: z.int().min(1).max(16).default(4),
  /** Alternatives asked per position (logprobs / prompt_logprobs); vLLM allows 20 by default. */
  topLogprobs: z.int().min(1).max(20).default(20),
  /** Token ids that end a sequence (vLLM's API does not report them); default: the tokenizer's. */
  eosTokenIds: z.array(z.int().nonnegative()).min(1).optional(),
});

/** How each round's k is chosen (src/speculative/controller.ts). */
const specController = z
  .strictObject({
    mode: z.enum(['fixed', 'adaptive']).default('fixed'),
    /** Prompt classes acceptance is tracked by: the tenant, or code vs prose by a cheap feature. */
    classBy: z.enum(['tenant', 'content']).default('tenant'),
    kMax: z.int().min(1).max(16).default(8),
    priorAcceptance: z.number().gt(0).lt(1).default(0.6),
    minEvidence: z.number().positive().default(50),
    /** Tested draft tokens after which an old acceptance observation counts half. */
    halfLifeTokens: z.number().positive().default(500),
    minGain: z.number().positive().default(1.1),
    /** Share of a switched-off class's requests sent probeK (per-request speculation, llama.cpp). */
    probeRate: z.number().min(0).max(1).default(0.05),
    /** Share of the target pool's GPU time a cascade's probe rounds may spend. */
    probeShare: z.number().min(0).max(1).default(0.01),
    probeK: z.int().min(1).max(16).default(2),
    busyRunning: z.int().positive().default(64),
    busyWaiting: z.int().positive().default(2),
    draftPrice: z.number().positive().default(1),
    targetPrice: z.number().positive().default(1),
    targetTokenMs: ms.optional(),
    tpotBudgetMs: ms.optional(),
  })
  .prefault({});

export const speculativeSection = z
  .strictObject({
    cascades: z.array(cascade).default([]),
    controller: specController,
    /** Between workers that speculate inside the engine and plain ones of the same model. */
    routing: z
      .strictObject({
        enabled: z.boolean().default(false),
        /** Mean running sequences per worker at which every request goes to the plain workers. */
        busyRunning: z.number().positive().default(32),
        /** Speculating workers get requests while their mean acceptance length is at least this. */
        minAcceptanceLength: z.number().min(1).default(1.8),
      })
      .prefault({}),
    /**
     * Models whose workers take speculation settings per request (llama.cpp server:
     * `speculative.n_max`): the controller sets n_max per request (src/speculative/per-request.ts).
     */
    perRequest: z
      .array(
        z.strictObject({
          model: z.string().min(1),
          /** Largest n_max sent. */
          kMax: z.int().min(1).max(64).default(16),
          /** Cost of one draft token relative to one target decode step (draft ÷ target step time). */
          draftCost: z.number().min(0).max(1).default(0.1),
        }),
      )
      .default([]),
    /** Timeout of one verification or tokenize call, and the longest a draft call may take. */
    callTimeoutMs: ms.default(10_000),
    /**
     * Deadline of one draft call (src/speculative/draft-deadline.ts): factor × k × the draft pool's
     * measured time per token, at least floorMs, at most k × controller.tpotBudgetMs and
     * callTimeoutMs. A draft that misses it is dropped for the request (the target finishes it
     * alone at once) and its worker is suspected hung (routed around until it answers again).
     */
    draftDeadline: z
      .strictObject({
        floorMs: ms.default(250),
        factor: z.number().min(1).default(4),
      })
      .prefault({}),
    /** Timeout of each start-up capability probe. */
    probeTimeoutMs: ms.default(5_000),
  })
  .prefault({});
