/**
 * `caps`: request caps, and the override a pool or a tenant may give (a narrower scope may only
 * lower them).
 */
import { z } from 'zod';

/** Request caps (item: oversized asks). Unset fields inherit from the wider scope. */
const capsFields = {
  /** Most choices per request (`n`). */
  maxN: z.int().positive().optional(),
  /** Most output tokens per choice (`max_tokens` / `max_completion_tokens`). */
  maxTokens: z.int().positive().optional(),
  /** Most output tokens per request: n × prompts × max_tokens. */
  maxTotalTokens: z.int().positive().optional(),
  /** Longest request deadline (the derived deadline is clamped to it). */
  maxRequestMs: z.number().positive().optional(),
  /** Most inputs in one embeddings request (`input` as an array of texts or of token-id arrays). */
  maxEmbeddingInputs: z.int().positive().optional(),
  /** Most prompt tokens in one embeddings request, every input's together. */
  maxEmbeddingTokens: z.int().positive().optional(),
};
export const capsOverride = z.strictObject(capsFields);

export const capsSection = z
  .strictObject({
    maxN: capsFields.maxN.default(16),
    maxTokens: capsFields.maxTokens.default(32_768),
    maxTotalTokens: capsFields.maxTotalTokens.default(65_536),
    maxRequestMs: capsFields.maxRequestMs.default(1_800_000),
    // OpenAI's own limits for /v1/embeddings: at most 2,048 inputs, 300,000 tokens summed
    // over them (platform.openai.com/docs/api-reference/embeddings/create).
    maxEmbeddingInputs: capsFields.maxEmbeddingInputs.default(2_048),
    maxEmbeddingTokens: capsFields.maxEmbeddingTokens.default(300_000),
  })
  .prefault({});
