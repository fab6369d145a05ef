/** `tokenizers`: how prompts are counted per model. */
import { z } from 'zod';
import { DEFAULT_KEPT_IDS } from '../../tokenizer/chat-tokens.js';
import { parseTokenizerSpec } from '../../tokenizer/registry.js';
import { ms } from './fields.js';

const tokenizerSpec = z.string().superRefine((spec, ctx) => {
  try {
    parseTokenizerSpec(spec);
  } catch (e) {
    ctx.addIssue({ code: 'custom', message: (e as Error).message });
  }
});

export const tokenizersSection = z
  .strictObject({
    /** Spec for models not listed: 'estimate', 'hf:<path to tokenizer.json>' or 'remote'. */
    default: tokenizerSpec.default('estimate'),
    models: z.record(z.string(), tokenizerSpec).default({}),
    /** Timeout of a worker's /tokenize for 'remote' (then the estimate is used). */
    remoteTimeoutMs: ms.default(250),
    /**
     * Worker threads per `hf:` tokenizer: prompts of 1,024 characters or more are tokenized
     * there, off the event loop, so a long prompt does not hold up every other request.
     * 0 tokenizes everything on the event loop. Each thread holds its own copy of the
     * tokenizer (~60 MB of memory for a Llama tokenizer).
     */
    threads: z.int().min(0).max(64).default(1),
    /**
     * Token ids of long chat messages (256 characters or more) kept for the next request that
     * sends them again (the `estimate` tokenizer; 8 bytes each, plus the text). 0 keeps none.
     */
    keptIds: z.int().min(0).default(DEFAULT_KEPT_IDS),
    /**
     * Refuse to start when a worker with kvEvents tokenizes the probe prompts differently from
     * kvgate's tokenizer for its model. Off: that worker's events are not used (its prefix
     * index stays approximate), an error is logged and /admin/workers shows tokenParity.
     */
    strictParity: z.boolean().default(false),
  })
  .prefault({});
