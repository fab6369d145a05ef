/**
 * The request schemas and error bodies of vLLM's OpenAI-compatible server, as the simulated worker
 * accepts and answers them (vllm/entrypoints/openai/protocol.py), and how its JSON and SSE answers
 * are written. Unknown fields are accepted and ignored, as vLLM does; the fields the simulation
 * acts on are validated with vLLM's limits.
 */
import { formatPath } from '../../util/field-path.js';
import type { ServerResponse } from 'node:http';
import { z } from 'zod';

/** vLLM's default --max-logprobs. */
export const MAX_LOGPROBS = 20;

const stop = z.union([z.string(), z.array(z.string())], { error: 'expected a string or an array of strings' });

const streamOptions = z
  .looseObject({
    include_usage: z.boolean().nullable().optional(),
    continuous_usage_stats: z.boolean().nullable().optional(),
  })
  .nullable()
  .optional();

/**
 * vLLM's `AnyResponseFormat`: `ResponseFormat` (type text, json_object or json_schema) or a
 * structural tag (vllm/entrypoints/openai/protocol.py). The simulation generates no structured
 * output; it checks the type, so an unknown one is refused as vLLM refuses it.
 */
const responseFormat = z
  .looseObject({
    type: z.enum(['text', 'json_object', 'json_schema', 'structural_tag'], {
      error: "response_format.type must be one of 'text', 'json_object', 'json_schema', 'structural_tag'",
    }),
  })
  .nullable()
  .optional();

/** Sampling parameters both endpoints share. */
const sampling = {
  model: z.string().nullable().optional(),
  stream: z.boolean().nullable().optional(),
  stream_options: streamOptions,
  max_tokens: z.int().nullable().optional(),
  temperature: z.number().min(0).nullable().optional(),
  top_p: z.number().gt(0).max(1).nullable().optional(),
  n: z.int().min(1).nullable().optional(),
  seed: z.int().nullable().optional(),
  stop: stop.nullable().optional(),
  stop_token_ids: z.array(z.int().nonnegative()).nullable().optional(),
  ignore_eos: z.boolean().optional(),
  min_tokens: z.int().nonnegative().optional(),
  include_stop_str_in_output: z.boolean().optional(),
  skip_special_tokens: z.boolean().optional(),
  presence_penalty: z.number().nullable().optional(),
  frequency_penalty: z.number().nullable().optional(),
  repetition_penalty: z.number().nullable().optional(),
  user: z.string().nullable().optional(),
  priority: z.int().optional(),
  request_id: z.string().optional(),
  response_format: responseFormat,
  /** vLLM's prefix-cache salt (vLLM ≥ 0.9): requests share cached blocks only with the same salt. */
  cache_salt: z.string().min(1, 'cache_salt must be a non-empty string').nullable().optional(),
};

const tokenIds = z.array(z.int().nonnegative());

export const completionSchema = z.looseObject({
  ...sampling,
  prompt: z.union([z.string(), z.array(z.string()).min(1), tokenIds.min(1), z.array(tokenIds.min(1)).min(1)], {
    error: 'prompt must be a string, an array of strings, an array of token ids or an array of such arrays',
  }),
  echo: z.boolean().nullable().optional(),
  logprobs: z.int().min(0).nullable().optional(),
  suffix: z.string().nullable().optional(),
  /** Log-probabilities of each prompt token and its top alternatives; -1 = all (vLLM extra parameter). */
  prompt_logprobs: z.int().min(-1).nullable().optional(),
  /** Logprob tokens written as 'token_id:{id}' instead of their text (vLLM extra parameter). */
  return_tokens_as_token_ids: z.boolean().nullable().optional(),
  /** Add `token_ids` (and `prompt_token_ids`) to each choice (vLLM extra parameter). */
  return_token_ids: z.boolean().nullable().optional(),
});

const chatMessageSchema = z.looseObject({
  role: z.string(),
  content: z.union([z.string(), z.array(z.looseObject({ type: z.string() })), z.null()]).optional(),
  name: z.string().optional(),
});

/**
 * vLLM's ChatCompletionToolsParam and ChatCompletionNamedToolChoiceParam
 * (vllm/entrypoints/openai/chat_completion/protocol.py): a tool is a function with a name; a named
 * tool choice names one.
 */
const toolSchema = z.looseObject({
  type: z.literal('function').optional(),
  function: z.looseObject({
    name: z.string(),
    description: z.string().nullable().optional(),
    parameters: z.record(z.string(), z.unknown()).nullable().optional(),
  }),
});

const toolChoiceSchema = z.union([z.literal('none'), z.literal('auto'), z.literal('required'), z.looseObject({ type: z.literal('function').optional(), function: z.unknown() })], {
  error: 'Only named tools, "none", "auto" or "required" are supported.',
});

export const chatSchema = z.looseObject({
  ...sampling,
  messages: z.array(chatMessageSchema).min(1),
  tools: z.array(toolSchema).nullable().optional(),
  tool_choice: toolChoiceSchema.nullable().optional(),
  max_completion_tokens: z.int().nullable().optional(),
  logprobs: z.boolean().nullable().optional(),
  top_logprobs: z.int().min(0).nullable().optional(),
  add_generation_prompt: z.boolean().optional(),
  echo: z.boolean().optional(),
});

export const tokenizeSchema = z.union([
  z.looseObject({
    model: z.string().nullable().optional(),
    prompt: z.string(),
    add_special_tokens: z.boolean().optional(),
  }),
  z.looseObject({
    model: z.string().nullable().optional(),
    messages: z.array(chatMessageSchema).min(1),
    add_generation_prompt: z.boolean().optional(),
  }),
]);

export const detokenizeSchema = z.looseObject({
  model: z.string().nullable().optional(),
  tokens: tokenIds,
});

export type CompletionBody = z.infer<typeof completionSchema>;
export type ChatBody = z.infer<typeof chatSchema>;

/** vLLM's error body: OpenAI's shape, with the exception class as type and the status as code. */
export interface SimErrorBody {
  error: { message: string; type: string; param: string | null; code: number };
}

export class SimError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
    readonly param: string | null = null,
  ) {
    super(message);
  }

  body(): SimErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.status } };
  }
}

export const badRequest = (message: string, param: string | null = null) =>
  new SimError(400, 'BadRequestError', message, param);
const notFound = (message: string) => new SimError(404, 'NotFoundError', message);
export const unavailable = (message: string) => new SimError(503, 'ServiceUnavailableError', message);

/**
 * A request naming a model other than the served one or one of its LoRA adapters is a 404 (no
 * `model` at all is fine). Returns the adapter named, if one is.
 */
export function checkModel(model: string | null | undefined, served: string, adapters?: { has(name: string): boolean }): string | undefined {
  if (model === undefined || model === null || model === served) return undefined;
  if (adapters?.has(model) === true) return model;
  throw notFound(`The model \`${model}\` does not exist.`);
}

/** Parse a body with a schema; the first problem becomes a 400 naming the field. */
export function parseBody<T>(schema: z.ZodType<T>, body: unknown): T {
  const r = schema.safeParse(body);
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  const param = formatPath(issue.path);
  throw badRequest(param ? `${param}: ${issue.message}` : issue.message, param || null);
}

/** Stop strings as a list (vLLM accepts a string or a list). */
export function stopList(stop: string | string[] | null | undefined): string[] {
  if (stop === null || stop === undefined) return [];
  return (typeof stop === 'string' ? [stop] : stop).filter((s) => s.length > 0);
}

export interface Usage {
  prompt_tokens: number;
  total_tokens: number;
  completion_tokens: number;
  prompt_tokens_details: { cached_tokens: number } | null;
}

export function usage(promptTokens: number, completionTokens: number, cachedTokens: number | null): Usage {
  return {
    prompt_tokens: promptTokens,
    total_tokens: promptTokens + completionTokens,
    completion_tokens: completionTokens,
    prompt_tokens_details: cachedTokens === null ? null : { cached_tokens: cachedTokens },
  };
}

/** SSE framing of one JSON event. */
export function sseData(obj: unknown): string {
  return `data: ${JSON.stringify(obj)}\n\n`;
}

export const SSE_DONE = 'data: [DONE]\n\n';

/** A JSON answer; once a response has started (a stream), it can only be ended. */
export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  const payload = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), ...headers });
  res.end(payload);
}

/** A plain-text answer (vLLM's LoRA load and unload answer so on success). */
export function sendText(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

export function sendJsonError(res: ServerResponse, err: SimError): void {
  sendJson(res, err.status, err.body());
}
