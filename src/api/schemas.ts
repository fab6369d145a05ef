/**
 * Request schemas for the OpenAI surface. Validation checks what kvgate itself reads and what a
 * worker would reject anyway (so a bad request fails fast, with the field named, without costing
 * a worker round trip). Objects are loose: fields kvgate does not know pass through to the worker
 * untouched — the forwarded body is the client's original bytes.
 */
import { formatPath } from '../util/field-path.js';
import { z } from 'zod';

const nonNegInt = z.int().nonnegative();
const posInt = z.int().positive();

const stop = z.union([z.string(), z.array(z.string()).max(16)], {
  error: 'expected a string or an array of strings',
});

const streamOptions = z.looseObject({ include_usage: z.boolean().optional() }).nullable().optional();

/** Sampling fields shared by both endpoints. */
const sampling = {
  model: z.string({ error: 'model is required and must be a string' }).min(1, 'model must not be empty'),
  stream: z.boolean().nullable().optional(),
  stream_options: streamOptions,
  max_tokens: posInt.nullable().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().min(0).max(1).nullable().optional(),
  n: posInt.max(128).nullable().optional(),
  stop: stop.nullable().optional(),
  presence_penalty: z.number().min(-2).max(2).nullable().optional(),
  frequency_penalty: z.number().min(-2).max(2).nullable().optional(),
  seed: z.int().nullable().optional(),
  user: z.string().optional(),
  priority: z.int().optional(),
};

const messageContent = z.union([z.string(), z.array(z.looseObject({ type: z.string() })), z.null()], {
  error: 'expected a string, an array of content parts or null',
});

/** OpenAI's message roles (`developer` is the newer name of `system`; `function` is legacy). */
const CHAT_ROLES = ['system', 'developer', 'user', 'assistant', 'tool', 'function'] as const;

const chatMessageSchema = z.looseObject({
  role: z.enum(CHAT_ROLES, { error: `role is required and must be one of ${CHAT_ROLES.join(', ')}` }),
  content: messageContent.optional(),
  name: z.string().optional(),
});

export const chatCompletionRequestSchema = z.looseObject({
  ...sampling,
  messages: z.array(chatMessageSchema, { error: 'messages is required and must be an array' }).min(1, 'messages must not be empty'),
  max_completion_tokens: posInt.nullable().optional(),
  // vLLM's parameters that change how the prompt is rendered (and so its tokens): read for routing.
  add_generation_prompt: z.boolean().optional(),
  continue_final_message: z.boolean().optional(),
  add_special_tokens: z.boolean().optional(),
  documents: z.array(z.record(z.string(), z.string()), { error: 'expected an array of objects of strings' }).nullable().optional(),
  chat_template: z.string().nullable().optional(),
  chat_template_kwargs: z.record(z.string(), z.unknown(), { error: 'expected an object' }).nullable().optional(),
}).refine((b) => !(b.continue_final_message === true && b.add_generation_prompt === true), {
  path: ['continue_final_message'],
  message: 'cannot be true together with add_generation_prompt: the last message is either continued or answered',
});

const tokenIds = z.array(nonNegInt);

export const completionRequestSchema = z.looseObject({
  ...sampling,
  prompt: z.union([z.string(), z.array(z.string()).min(1), tokenIds.min(1), z.array(tokenIds.min(1)).min(1)], {
    error: 'prompt is required: a string, an array of strings, an array of token ids or an array of such arrays',
  }),
  echo: z.boolean().nullable().optional(),
  logprobs: z.int().min(0).max(20).nullable().optional(),
});

/**
 * OpenAI's embeddings request, as vLLM takes it for an embedding model (`--runner pooling`):
 * `input` is text, texts, token ids or arrays of token ids (vLLM's own fields, such as
 * `truncate_prompt_tokens`, pass through).
 */
export const embeddingsRequestSchema = z.looseObject({
  model: sampling.model,
  input: z.union([z.string(), z.array(z.string()).min(1), tokenIds.min(1), z.array(tokenIds.min(1)).min(1)], {
    error: 'input is required: a string, an array of strings, an array of token ids or an array of such arrays',
  }),
  encoding_format: z.enum(['float', 'base64'], { error: "expected 'float' or 'base64'" }).nullable().optional(),
  dimensions: posInt.nullable().optional(),
  user: z.string().optional(),
  priority: z.int().optional(),
  add_special_tokens: z.boolean().optional(),
});

/**
 * vLLM's other model-addressed endpoints (tokenize, detokenize, score, rerank, pooling, classify):
 * their bodies differ by endpoint and by vLLM version, so kvgate checks only what it routes on —
 * the model — and the worker checks the rest (its 4xx is relayed in OpenAI's shape).
 */
export const passthroughRequestSchema = z.looseObject({
  model: z.string({ error: 'model is required and must be a string: kvgate routes by model' }).min(1, 'model must not be empty'),
  user: z.string().optional(),
  priority: z.int().optional(),
});

export type ChatCompletionRequest = z.infer<typeof chatCompletionRequestSchema>;
export type PassthroughRequest = z.infer<typeof passthroughRequestSchema>;
export type EmbeddingsRequest = z.infer<typeof embeddingsRequestSchema>;
export type CompletionRequest = z.infer<typeof completionRequestSchema>;

/**
 * The prompts of a completions `prompt` or an embeddings `input`, each as text or token ids: a
 * string, an array of strings, one array of ids, or an array of such arrays (OpenAI's four forms).
 */
export function promptList(p: string | string[] | number[] | number[][]): Array<string | number[]> {
  if (typeof p === 'string') return [p];
  if (p.length > 0 && typeof p[0] === 'number') return [p as number[]];
  return p as Array<string | number[]>;
}

export interface FieldProblem {
  param: string;
  message: string;
}

/** Validate; on failure name the first offending field and say what was wrong. */
export function validate<T>(schema: z.ZodType<T>, body: unknown): { ok: true; value: T } | ({ ok: false } & FieldProblem) {
  const r = schema.safeParse(body);
  if (r.success) return { ok: true, value: r.data };
  const issue = r.error.issues[0]!;
  const param = formatPath(issue.path);
  const message = param ? `Invalid value for '${param}': ${issue.message}` : issue.message;
  return { ok: false, param, message };
}
