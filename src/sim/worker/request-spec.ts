/**
 * What a validated generation body asks of the engine: one SeqSpec per prompt and sample (vLLM's
 * parallel sampling runs the n samples of each prompt of a batch as separate engine requests) and
 * the GenParams all of the request's sequences share. What vLLM refuses is refused here, with its
 * messages; the engine's own limits (context length) are checked by the server.
 */
import { responsesMessages, type ResponsesRequest } from '../../api/responses.js';
import { promptList } from '../../api/schemas.js';
import { estimateTokenizer, renderChat } from '../../tokenizer/index.js';
import { seedFromString } from '../../util/rng.js';
import { MAX_LOGPROBS, badRequest, chatSchema, checkModel, parseBody, stopList, type ChatBody, type CompletionBody } from './openai-protocol.js';

/** What one generation request asks of the engine, after validation. */
export interface SeqSpec {
  /** Which of the request's n samples of this prompt this is (0 = the first). */
  sample: number;
  promptIds: number[];
  /** Prompt text, for echo. */
  promptText: string;
  maxTokens: number;
}

export interface GenParams {
  kind: 'completion' | 'chat' | 'responses';
  /** A Responses API request's own fields, echoed in its answer. */
  responses?: { instructions: string | null; maxOutputTokens: number | null };
  stream: boolean;
  includeUsage: boolean;
  continuousUsage: boolean;
  echo: boolean;
  /** Top alternatives per token, or null when logprobs were not requested. */
  logprobs: number | null;
  /** Top alternatives per prompt token (completions' prompt_logprobs), or null. */
  promptLogprobs: number | null;
  /** Name logprob tokens 'token_id:{id}' (return_tokens_as_token_ids). */
  tokensAsIds: boolean;
  /** Add token_ids / prompt_token_ids to choices (return_token_ids). */
  returnTokenIds: boolean;
  seed: number | undefined;
  temperature: number;
  topP: number;
  stop: string[];
  stopTokenIds: number[];
  ignoreEos: boolean;
  includeStopStrInOutput: boolean;
  priority: number;
  cacheSalt: string | undefined;
  /** The LoRA adapter the request named, if any: its engine request runs with it. */
  lora: string | undefined;
}

export interface RequestSpec {
  params: GenParams;
  seqs: SeqSpec[];
}

/** What the worker serves, as far as validating a request goes. */
export interface ServedModel {
  /** Served model name: a request naming another one (or none of `adapters`) is a 404. */
  model: string;
  /** LoRA adapters served on top of `model` (vLLM --lora-modules). */
  adapters: { has(name: string): boolean };
  maxModelLen: number;
  /** Output budget of a chat request without max_tokens (at most what the context leaves). */
  defaultMaxChatTokens: number;
}

const MAX_N = 128;

export function completionSpec(body: CompletionBody, served: ServedModel): RequestSpec {
  const common = commonParams(body, 'completion', served);
  if (body.stream_options && !body.stream) throw badRequest('Stream options can only be defined when `stream=True`.', 'stream_options');
  const logprobs = body.logprobs ?? null;
  if (logprobs !== null && logprobs > MAX_LOGPROBS) {
    throw badRequest(`Requested sample logprobs of ${logprobs}, which is greater than max allowed: ${MAX_LOGPROBS}`, 'logprobs');
  }
  const maxTokens = body.max_tokens ?? 16;
  if (maxTokens < 1) throw badRequest(`max_tokens must be at least 1, got ${maxTokens}.`, 'max_tokens');
  // vLLM's CompletionRequest.check_logprobs and the engine's max_logprobs check.
  let promptLogprobs = body.prompt_logprobs ?? null;
  if (promptLogprobs !== null) {
    if (body.stream === true) throw badRequest('`prompt_logprobs` are not available when `stream=True`.', 'prompt_logprobs');
    if (promptLogprobs === -1) promptLogprobs = MAX_LOGPROBS;
    else if (promptLogprobs > MAX_LOGPROBS) {
      throw badRequest(`Requested prompt logprobs of ${promptLogprobs}, which is greater than max allowed: ${MAX_LOGPROBS}`, 'prompt_logprobs');
    }
  }
  const seqs = promptList(body.prompt).flatMap((x) =>
    samples(body.n, typeof x === 'string' ? estimateTokenizer.encode(x) : x, typeof x === 'string' ? x : estimateTokenizer.decode(x), maxTokens),
  );
  return {
    params: {
      ...common,
      echo: body.echo === true,
      logprobs,
      promptLogprobs,
      tokensAsIds: body.return_tokens_as_token_ids === true,
      returnTokenIds: body.return_token_ids === true,
    },
    seqs,
  };
}

/**
 * A Responses API request: its instructions and input as chat messages (api/responses.ts), run as
 * that chat request would be, answered in the Responses shapes (responses-format.ts).
 */
export function responsesSpec(body: ResponsesRequest, served: ServedModel): RequestSpec {
  const chat: Record<string, unknown> = {
    model: body.model,
    messages: responsesMessages(body),
    max_tokens: body.max_output_tokens ?? null,
    temperature: body.temperature ?? null,
    top_p: body.top_p ?? null,
    stream: body.stream === true,
  };
  for (const k of ['priority', 'cache_salt', 'seed'] as const) if ((body as Record<string, unknown>)[k] !== undefined) chat[k] = (body as Record<string, unknown>)[k];
  const spec = chatSpec(parseBody(chatSchema, chat), served);
  spec.params.kind = 'responses';
  spec.params.responses = { instructions: body.instructions ?? null, maxOutputTokens: body.max_output_tokens ?? null };
  return spec;
}

export function chatSpec(body: ChatBody, served: ServedModel): RequestSpec {
  const common = commonParams(body, 'chat', served);
  if (body.stream_options && !body.stream) throw badRequest('Stream options can only be defined when `stream=True`.', 'stream_options');
  const top = body.top_logprobs ?? null;
  if (top !== null && top > MAX_LOGPROBS) {
    throw badRequest(`Requested sample logprobs of ${top}, which is greater than max allowed: ${MAX_LOGPROBS}`, 'top_logprobs');
  }
  if (top !== null && top > 0 && body.logprobs !== true) {
    throw badRequest('when using `top_logprobs`, `logprobs` must be set to true.', 'top_logprobs');
  }
  checkToolUsage(body);
  const text = renderChat(body.messages, body.add_generation_prompt ?? true);
  const promptIds = estimateTokenizer.encode(text);
  const requested = body.max_completion_tokens ?? body.max_tokens ?? null;
  if (requested !== null && requested < 1) throw badRequest(`max_tokens must be at least 1, got ${requested}.`, 'max_tokens');
  const room = served.maxModelLen - promptIds.length;
  const maxTokens = requested ?? Math.max(1, Math.min(room, served.defaultMaxChatTokens));
  return {
    params: {
      ...common,
      echo: false,
      logprobs: body.logprobs === true ? (top ?? 0) : null,
      promptLogprobs: null,
      tokensAsIds: false,
      returnTokenIds: false,
    },
    seqs: samples(body.n, promptIds, text, maxTokens),
  };
}

/**
 * Sampling seed of one sample. The first sample uses the request's seed as given (absent → the
 * sampler derives one from the prompt), so n=1 output does not depend on n; the others get seeds
 * derived from it and their position, so the n samples differ but are reproducible.
 */
export function sampleSeed(seed: number | undefined, spec: SeqSpec): number | undefined {
  if (spec.sample === 0) return seed;
  const base = seed ?? seedFromString(spec.promptIds.join(','));
  return seedFromString(`${base}/${spec.sample}`);
}

type OwnParams = 'echo' | 'logprobs' | 'promptLogprobs' | 'tokensAsIds' | 'returnTokenIds';

function commonParams(body: CompletionBody | ChatBody, kind: 'completion' | 'chat', served: ServedModel): Omit<GenParams, OwnParams> {
  const lora = checkModel(body.model, served.model, served.adapters);
  if ((body.n ?? 1) > MAX_N) throw badRequest(`n must be at most ${MAX_N}, got ${body.n}.`, 'n');
  if (body.min_tokens !== undefined && body.min_tokens > 0) {
    // Accepted and ignored would change outputs silently; refuse instead.
    throw badRequest('min_tokens is not supported by this server.', 'min_tokens');
  }
  return {
    kind,
    stream: body.stream === true,
    includeUsage: body.stream === true && body.stream_options?.include_usage === true,
    continuousUsage: body.stream === true && body.stream_options?.include_usage === true && body.stream_options?.continuous_usage_stats === true,
    seed: body.seed ?? undefined,
    temperature: body.temperature ?? 1,
    topP: body.top_p ?? 1,
    stop: stopList(body.stop),
    stopTokenIds: body.stop_token_ids ?? [],
    ignoreEos: body.ignore_eos === true,
    includeStopStrInOutput: body.include_stop_str_in_output === true,
    priority: body.priority ?? 0,
    cacheSalt: body.cache_salt ?? undefined,
    lora,
  };
}

/** The n samples of one prompt: one engine request each (vLLM's parallel sampling). */
function samples(n: number | null | undefined, promptIds: number[], promptText: string, maxTokens: number): SeqSpec[] {
  return Array.from({ length: n ?? 1 }, (_, sample) => ({ sample, promptIds, promptText, maxTokens }));
}

/**
 * vLLM's ChatCompletionRequest.check_tool_usage (vllm/entrypoints/openai/chat_completion/protocol.py),
 * its messages as they are: no empty `tools`; a `tool_choice` other than "none" needs `tools`; a
 * named one must name a function among them. The simulation calls no tools: it answers in text.
 */
function checkToolUsage(body: ChatBody): void {
  const tools = body.tools;
  if (tools !== undefined && tools !== null && tools.length === 0) {
    throw badRequest('`tools` must not be an empty array. Either provide at least one tool or omit the field entirely.', 'tools');
  }
  const choice = body.tool_choice;
  if (choice === undefined || choice === null || choice === 'none') return;
  if (tools === undefined || tools === null) throw badRequest('When using `tool_choice`, `tools` must be set.', 'tool_choice');
  if (typeof choice === 'string') return;
  const usage = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`';
  const fn = choice.function;
  if (typeof fn !== 'object' || fn === null || Array.isArray(fn)) {
    throw badRequest(`Invalid value for \`function\`: \`${JSON.stringify(fn ?? null)}\` in \`tool_choice\`! ${usage}`, 'tool_choice.function');
  }
  if (!('name' in fn)) throw badRequest(`Expected field \`name\` in \`function\` in \`tool_choice\`! ${usage}`, 'tool_choice.function.name');
  const name = (fn as { name: unknown }).name;
  if (typeof name !== 'string' || name.length === 0) {
    throw badRequest(`Invalid \`name\` in \`function\`: \`${JSON.stringify(name)}\` in \`tool_choice\`! ${usage}`, 'tool_choice.function.name');
  }
  if (!tools.some((t) => t.function.name === name)) throw badRequest('The tool specified in `tool_choice` does not match any of the specified `tools`', 'tool_choice');
}
