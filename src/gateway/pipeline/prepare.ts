/**
 * Turns a validated request body into what routing needs: the prompt as the worker will see it,
 * its tokens, the output budget, the session key and the deadline.
 */
import type { IncomingMessage } from 'node:http';
import { responsesMessages, type ResponsesRequest } from '../../api/responses.js';
import { promptList, type ChatCompletionRequest, type CompletionRequest, type EmbeddingsRequest } from '../../api/schemas.js';
import type { WorkerState } from '../../fleet/worker-state.js';
import { promptLength, requestPromptTokens, requestSequences, type RouteRequest } from '../../scheduler/types.js';
import { renderChat, type ChatRenderOptions } from '../../tokenizer/chat-template.js';
import { ChatTokenCache, DEFAULT_KEPT_IDS } from '../../tokenizer/chat-tokens.js';
import { estimateTokenizer } from '../../tokenizer/estimate.js';
import type { Tokenizer } from '../../tokenizer/types.js';
import { PROMPT_ADAPTER, PROMPT_SALT } from '../../kv/prompt-blocks.js';
import { RequestState } from '../../util/state.js';
import type { PromptTokenizer, TokenizeContext } from '../../tokenizer/registry.js';
import { generates, type InferenceBody, type InferenceKind, type RequestContext } from '../../request/context.js';

/** vLLM's default max_tokens for /v1/completions. */
const COMPLETIONS_DEFAULT_MAX_TOKENS = 16;

export interface DeadlinePolicy {
  firstByteMs: number;
  minTokensPerSecond: number;
  /** A fixed deadline instead of the derived one. */
  requestMs?: number;
}

/**
 * Time a request may take: the first-byte allowance plus max_tokens at the slowest acceptable
 * rate, so a long generation at a healthy pace is never cut off (e.g. defaults 30 s + 5 tok/s:
 * 4,096 tokens → 849 s).
 */
export function requestBudgetMs(maxTokens: number, p: DeadlinePolicy): number {
  if (p.requestMs !== undefined) return p.requestMs;
  return p.firstByteMs + (maxTokens / p.minTokensPerSecond) * 1000;
}

/**
 * The ids of chat prompts under the `estimate` tokenizer, message by message, long messages kept:
 * a conversation's history and a repeated system prompt or document are tokenized once
 * (tokenizer/chat-tokens.ts). One per process, like the tokenizer it serves.
 */
const estimateChatTokens = new ChatTokenCache(estimateTokenizer, { maxTokens: DEFAULT_KEPT_IDS, minChars: 256 });

/**
 * Long chat messages whose ids were kept from an earlier request (hits) or tokenized (misses),
 * and the ids kept now, in this process.
 */
export function keptMessageCounts(): { hits: number; misses: number; ids: number } {
  return { hits: estimateChatTokens.hits, misses: estimateChatTokens.misses, ids: estimateChatTokens.size };
}

/**
 * Keep at most `maxIds` ids of long messages (`tokenizers.keptIds`; 0: none). Process-wide: a
 * second gateway in the same process sets it for both.
 */
export function keepMessageIds(maxIds: number): void {
  estimateChatTokens.resize(maxIds);
}

/** A prompt's token ids, or how to compute them (and only their number) when first read. */
export type PromptTokens = ArrayLike<number> | LazyTokens;

interface LazyTokens {
  (): ArrayLike<number>;
  count(): number;
}

export interface PreparedPrompt {
  promptText: string;
  /**
   * The token ids; a function when the prompt is text and a synchronous tokenizer was given
   * (tokenized when something first reads them: round-robin and least-load never do); null when
   * only an asynchronous tokenizer was given (the caller tokenizes).
   */
  promptTokens: PromptTokens | null;
  maxTokens: number;
  maxTokensExplicit: boolean;
  /**
   * Set for a prompt rendered with the model's chat template, which writes its special tokens out:
   * false adds none when encoding (vLLM's default for chat), true adds them on top (the request's
   * `add_special_tokens`). Unset: the tokenizer's own setting.
   */
  addSpecialTokens?: boolean;
  /** A chat prompt's rendering options (chatRenderOptions), for a tokenizer that renders it itself. */
  render?: ChatRenderOptions;
}

/**
 * The prompt as the worker will see it and its output budget. With a synchronous `tokenizer`,
 * text prompts are tokenized on first use; otherwise `promptTokens` is null and the caller
 * tokenizes.
 */
export function preparePrompt(
  kind: InferenceKind,
  body: InferenceBody,
  tokenizer: Tokenizer | null,
  assumedMaxTokens: number,
  /** The tenant's cache salt where the pool isolates tenants: kept message ids are per tenant. */
  isolationScope?: string,
): PreparedPrompt {
  const encode = (text: string): PromptTokens | null => {
    if (!tokenizer) return null;
    return Object.assign(() => tokenizer.encode(text), { count: () => tokenizer.count(text) });
  };
  if (kind === 'chat') {
    const b = body as ChatCompletionRequest;
    const explicit = b.max_completion_tokens ?? b.max_tokens ?? undefined;
    const render = chatRenderOptions(b);
    // The model's own chat template where the tokenizer has one (hf:), as the worker renders the
    // request: the same ids, so prefix blocks match those the worker reports in its KV events. A
    // request that brings its own template (`chat_template`) is not rendered with it here: the
    // gateway does not run a client's template. It is routed on kvgate's template instead.
    const own = b.chat_template == null ? (tokenizer?.renderChat?.(b.messages, render) ?? null) : null;
    if (own !== null && tokenizer !== null) {
      // vLLM adds no special tokens to a rendered chat unless the request asks (add_special_tokens).
      const special = b.add_special_tokens === true;
      return {
        promptText: own,
        promptTokens: Object.assign(() => tokenizer.encode(own, special), { count: () => tokenizer.encode(own, special).length }),
        maxTokens: explicit ?? assumedMaxTokens,
        maxTokensExplicit: explicit !== undefined,
        addSpecialTokens: special,
        render,
      };
    }
    // kvgate's template, as the simulated worker renders it: only add_generation_prompt applies.
    // Long messages the tokenizer keeps are rendered from its copy (ChatTokenCache.shareKept).
    if (tokenizer === estimateTokenizer) estimateChatTokens.shareKept(b.messages, isolationScope);
    const promptText = renderChat(b.messages, render.addGenerationPrompt);
    return {
      promptText,
      promptTokens:
        tokenizer === estimateTokenizer
          ? Object.assign(() => estimateChatTokens.encode(b.messages, render.addGenerationPrompt, isolationScope), { count: () => estimateTokenizer.count(promptText) })
          : encode(promptText),
      maxTokens: explicit ?? assumedMaxTokens,
      maxTokensExplicit: explicit !== undefined,
      render,
    };
  }
  if (kind === 'responses') {
    // What the worker renders: instructions and input as chat messages, through its template.
    const b = body as ResponsesRequest;
    const chat = { model: b.model, messages: responsesMessages(b), max_tokens: b.max_output_tokens } as ChatCompletionRequest;
    return preparePrompt('chat', chat, tokenizer, assumedMaxTokens, isolationScope);
  }
  if (kind === 'passthrough') {
    const promptText = passthroughText(body);
    return { promptText, promptTokens: encode(promptText), maxTokens: 1, maxTokensExplicit: true };
  }
  // Embeddings: the input is prefilled and pooled, nothing is generated. Routed as a prompt with a
  // one-token answer (the policies' estimates assume at least one), like a completion's prompt.
  const embeddings = kind === 'embeddings';
  const explicit = embeddings ? undefined : ((body as CompletionRequest).max_tokens ?? undefined);
  const maxTokens = embeddings ? 1 : (explicit ?? COMPLETIONS_DEFAULT_MAX_TOKENS);
  const p = embeddings ? (body as EmbeddingsRequest).input : (body as CompletionRequest).prompt;
  // A batch of prompts is routed on its first: they usually share a prefix and go to one worker.
  if (typeof p === 'string') {
    return { promptText: p, promptTokens: encode(p), maxTokens, maxTokensExplicit: explicit !== undefined };
  }
  const first = p[0]!;
  if (typeof first === 'string') {
    return { promptText: first, promptTokens: encode(first), maxTokens, maxTokensExplicit: explicit !== undefined };
  }
  const ids = typeof first === 'number' ? (p as number[]) : (first);
  // Token ids need no tokenizer; their text is only for policies that match characters.
  return { promptText: estimateTokenizer.decode(ids), promptTokens: ids, maxTokens, maxTokensExplicit: explicit !== undefined };
}

/**
 * What a passthrough request (tokenize, score, rerank, pooling, classify) is routed on: the text it
 * sends a worker, as far as the body's common fields tell — `prompt`, `input`, `query`, `text_1`
 * or `data_1` (a string, or the first of an array of strings), else its chat `messages` rendered
 * with kvgate's template — or '' when it sends none (detokenize). Routed as a prompt with a
 * one-token answer, as embeddings are.
 */
function passthroughText(body: InferenceBody): string {
  const b = body as Record<string, unknown>;
  for (const k of ['prompt', 'input', 'query', 'text_1', 'data_1']) {
    const v = b[k];
    if (typeof v === 'string') return v;
    if (Array.isArray(v) && typeof v[0] === 'string') return v[0];
  }
  const messages = b.messages;
  if (Array.isArray(messages) && messages.every((m) => typeof m === 'object' && m !== null && typeof (m as { role?: unknown }).role === 'string')) {
    return renderChat(messages as ChatCompletionRequest['messages'], b.add_generation_prompt !== false);
  }
  return '';
}

/**
 * Marks a request that starts more than one sequence at its worker (RouteRequest.sequences,
 * batchPromptTokens): a batch of prompts (a completions `prompt` or embeddings `input` array), `n`
 * answers to each, or both. The router reserves, the KV fit and admission count, and rate limits
 * charge the whole request from these; routing itself reads the first prompt. The first prompt's
 * length is the route request's; the others are the ids' count, or for text scaled from the
 * first's tokens per character (no tokenizing: a batch may hold thousands of inputs). A single
 * prompt with one answer is left as it is.
 */
export function describeSequences(kind: InferenceKind, body: InferenceBody, rr: RouteRequest): void {
  const n = generates(kind) ? ((body as { n?: number | null }).n ?? 1) : 1;
  if (kind === 'completions' || kind === 'embeddings') {
    const p = promptList(kind === 'completions' ? (body as CompletionRequest).prompt : (body as EmbeddingsRequest).input);
    if (p.length > 1) {
      const first = promptLength(rr);
      const f0 = p[0]!;
      const perChar = typeof f0 === 'string' ? first / Math.max(1, f0.length) : 0;
      let total = first;
      for (let i = 1; i < p.length; i++) {
        const x = p[i]!;
        total += typeof x === 'string' ? Math.ceil(x.length * perChar) : x.length;
      }
      rr.batchPromptTokens = total;
      rr.sequences = p.length * n;
      return;
    }
  }
  if (n > 1) rr.sequences = n;
}

/**
 * The tokens a request asks the fleet for in all, as rate limits charge them: every prompt of a
 * batch and every answer it may write (each of its sequences up to max_tokens; embeddings and
 * vLLM's other endpoints write none). Charging only the prompt routed on would let a tenant pass
 * any tokens-per-minute limit by batching.
 */
export function chargedTokens(kind: InferenceKind, rr: RouteRequest, maxTokens: number): number {
  const prompts = requestPromptTokens(rr);
  return generates(kind) ? prompts + requestSequences(rr) * maxTokens : prompts;
}

/** How a chat request's prompt is rendered: vLLM's defaults for what the request leaves unset. */
export function chatRenderOptions(b: ChatCompletionRequest): ChatRenderOptions {
  const opts: ChatRenderOptions = {
    addGenerationPrompt: b.add_generation_prompt ?? true,
    continueFinalMessage: b.continue_final_message === true,
  };
  const tools = (b as { tools?: unknown }).tools;
  if (tools != null) opts.tools = tools;
  if (b.documents != null) opts.documents = b.documents;
  if (b.chat_template_kwargs != null) opts.templateKwargs = b.chat_template_kwargs;
  return opts;
}

/** The output budget alone (max_tokens or the assumption): no prompt rendering, no tokenization. */
export function outputBudget(kind: InferenceKind, body: InferenceBody, assumedMaxTokens: number): { maxTokens: number; explicit: boolean } {
  // Embeddings and the passthrough endpoints generate nothing; preparePrompt routes them as a
  // one-token answer.
  if (kind === 'embeddings' || kind === 'passthrough') return { maxTokens: 1, explicit: true };
  if (kind === 'chat') {
    const b = body as ChatCompletionRequest;
    const explicit = b.max_completion_tokens ?? b.max_tokens ?? undefined;
    return { maxTokens: explicit ?? assumedMaxTokens, explicit: explicit !== undefined };
  }
  if (kind === 'responses') {
    const explicit = (body as ResponsesRequest).max_output_tokens ?? undefined;
    return { maxTokens: explicit ?? assumedMaxTokens, explicit: explicit !== undefined };
  }
  const explicit = (body as CompletionRequest).max_tokens ?? undefined;
  return { maxTokens: explicit ?? COMPLETIONS_DEFAULT_MAX_TOKENS, explicit: explicit !== undefined };
}

/**
 * Tokenize a validated request's prompt and build `ctx.routeRequest`, once. With an asynchronous
 * tokenizer ('remote') a worker of the model is asked; it degrades to the estimate by itself if
 * that fails, so this never fails the request. Returns a promise only when it has to wait (a
 * remote tokenizer, a long prompt tokenized on a thread); otherwise the request is prepared when
 * it returns, and the caller need not spend a promise and a turn of the microtask queue on it.
 */
export function prepareRouting(
  ctx: RequestContext,
  tokenizer: PromptTokenizer,
  assumedMaxTokens: number,
  /** The policy reads the token ids (Policy.readsPromptTokens): tokenize now, not on first read. */
  tokenizeNow = true,
  /** The policy's per-prompt preparation (Policy.prepare: block hashes), run once the request is built. */
  preparePolicy?: (req: RouteRequest, workers: readonly WorkerState[]) => void,
): Promise<void> | undefined {
  if (ctx.routeRequest !== undefined) return undefined;
  const prompt = preparePrompt(ctx.kind, ctx.body, tokenizer.sync, assumedMaxTokens, ctx.cacheSalt ?? undefined);
  if (prompt.promptTokens === null) {
    const any = ctx.candidates.find((w) => w.routable) ?? ctx.candidates[0];
    const tctx: TokenizeContext = { model: ctx.model };
    if (any !== undefined) tctx.workerUrl = any.url;
    const chat =
      ctx.kind === 'chat'
        ? (ctx.body as ChatCompletionRequest)
        : ctx.kind === 'responses'
          ? ({ messages: responsesMessages(ctx.body as ResponsesRequest) } as ChatCompletionRequest)
          : null;
    // A chat prompt goes as its messages, to be rendered by the worker as the request will be; one
    // that brings its own template is tokenized as kvgate rendered it (see preparePrompt).
    if (chat !== null && chat.chat_template == null) {
      tctx.messages = chat.messages;
      tctx.render = prompt.render ?? chatRenderOptions(chat);
      if (chat.add_special_tokens !== undefined) tctx.addSpecialTokens = chat.add_special_tokens;
    }
    return tokenizer.tokenize(prompt.promptText, tctx).then((t) => {
      prompt.promptTokens = t.tokens;
      buildRouting(ctx, prompt as PreparedPrompt & { promptTokens: PromptTokens }, tokenizeNow, preparePolicy);
    });
  }
  if (typeof prompt.promptTokens === 'function' && tokenizer.offThread !== undefined) {
    // A long prompt for an `hf:` tokenizer with threads: tokenized there, not on the event loop,
    // whatever the policy. One that never reads the ids still has the prompt's length read (by
    // admission and rate limits), and an `hf:` count is a whole tokenization: done lazily, it
    // would run on the event loop.
    const off = tokenizer.offThread(prompt.promptText, { model: ctx.model, ...(prompt.addSpecialTokens !== undefined ? { addSpecialTokens: prompt.addSpecialTokens } : {}) });
    if (off !== null) {
      return off.then((t) => {
        prompt.promptTokens = t.tokens;
        buildRouting(ctx, prompt as PreparedPrompt & { promptTokens: PromptTokens }, tokenizeNow, preparePolicy);
      });
    }
  }
  buildRouting(ctx, prompt as PreparedPrompt & { promptTokens: PromptTokens }, tokenizeNow, preparePolicy);
  return undefined;
}

/** prepareRouting's last step, once the prompt's tokens are known (or can be computed on demand). */
function buildRouting(
  ctx: RequestContext,
  prompt: PreparedPrompt & { promptTokens: PromptTokens },
  tokenizeNow: boolean,
  preparePolicy: ((req: RouteRequest, workers: readonly WorkerState[]) => void) | undefined,
): void {
  // Another caller may have prepared the request while this one waited for its tokens.
  if (ctx.routeRequest !== undefined) return;
  const rr = buildRouteRequest(ctx.id, ctx.model, ctx.body, ctx.req, prompt, tokenizeNow);
  rr.tenant = ctx.tenant.id;
  describeSequences(ctx.kind, ctx.body, rr);
  // A LoRA adapter's request (its candidates serve it on top of another model): its blocks are
  // the adapter's, never the base model's or another adapter's, in the block hashes and in the
  // text the character-matching policies see.
  const base = ctx.candidates[0]?.model;
  if (base !== undefined && base !== ctx.model) {
    rr.state.set(PROMPT_ADAPTER, ctx.model);
    rr.promptText = `\u0000lora:${ctx.model}\u0000${rr.promptText}`;
  }
  if (ctx.cacheSalt !== null) {
    // Isolated pool: token-hash indexes salt their block hashes (PROMPT_SALT); character-matching
    // policies see the salt as a prefix, so no two tenants ever share a matched prefix.
    rr.state.set(PROMPT_SALT, ctx.cacheSalt);
    rr.promptText = `\u0000${ctx.cacheSalt}\u0000${rr.promptText}`;
  }
  // With the salt set: block hashes are salted.
  if (tokenizeNow) preparePolicy?.(rr, ctx.candidates);
  ctx.routeRequest = rr;
}

/**
 * The live gateway's RouteRequest. A class, so every request has one shape (an object given
 * getters one by one with defineProperty falls back to slow dictionary properties, which every
 * plugin then pays on every read): the token ids are computed when first read, and the length
 * alone, where nothing has read the ids, from the tokenizer's cheaper count().
 */
class LiveRouteRequest implements RouteRequest {
  readonly state = new RequestState();
  sessionKey: string | undefined = undefined;
  tenant: string | undefined = undefined;
  priority: number | undefined = undefined;
  stream: boolean | undefined = undefined;
  sequences: number | undefined = undefined;
  batchPromptTokens: number | undefined = undefined;
  private ids: ArrayLike<number> | undefined;
  private count: number | undefined = undefined;
  /** The ids are let go (releaseTokens): `ids` is their stand-in, of their length. */
  private released = false;

  constructor(
    readonly id: string,
    readonly model: string,
    public promptText: string,
    private lazy: PromptTokens,
    public maxTokens: number,
  ) {
    this.ids = typeof lazy === 'function' ? undefined : lazy;
  }

  get promptTokens(): ArrayLike<number> {
    return (this.ids ??= (this.lazy as LazyTokens)());
  }

  set promptTokens(ids: ArrayLike<number>) {
    this.ids = ids;
  }

  get promptTokenCount(): number {
    return this.ids !== undefined ? this.ids.length : (this.count ??= (this.lazy as LazyTokens).count());
  }

  /** The length if the prompt has been tokenized or counted already, else undefined (nothing is done for it). */
  get knownTokenCount(): number | undefined {
    return this.ids !== undefined ? this.ids.length : this.count;
  }

  /**
   * Let go of the token ids, keeping their count (releasePromptTokens). Reading an id afterwards
   * is an error (the length still answers): what reads them after the decision keeps what it
   * needs of them in the request's state.
   */
  releaseTokens(): void {
    if (this.ids === undefined || this.released) return;
    const count = (this.count = this.ids.length);
    const stand = (this.ids = releasedIds(this.id, count));
    // The tokenizing closure may hold the ids too.
    this.lazy = Object.assign(() => stand, { count: () => count });
    this.released = true;
  }
}

/**
 * What a request's promptTokens is once its ids are let go: the same length, and an error naming
 * promptTokenCount for any id read. A policy that re-routes the request then (`kvgate epp`: the
 * proxy says another endpoint served it) reads the length and the block hashes kept in its
 * state, never an id; one that needs an id again fails loudly rather than reading a wrong one.
 */
function releasedIds(id: string, count: number): ArrayLike<number> {
  const fail = (): never => {
    throw new Error(`request ${id}: its prompt's token ids were read after its answer's first token, when the gateway lets go of them (promptTokenCount has their number)`);
  };
  return new Proxy(
    { length: count },
    {
      get: (target, key) => (typeof key === 'string' && key !== 'length' && /^\d+$/.test(key) ? fail() : Reflect.get(target, key)),
    },
  ) as ArrayLike<number>;
}

/**
 * The request's answer has begun (its first token relayed): nothing will route it again, so its
 * prompt's token ids are dropped while the answer streams, which for a long prompt is most of what
 * the request holds (4 bytes a token). Their count stays. No-op for a RouteRequest made elsewhere.
 */
export function releasePromptTokens(rr: RouteRequest | undefined): void {
  if (rr instanceof LiveRouteRequest) rr.releaseTokens();
}

/**
 * The request's prompt tokens (every prompt of a batch) as far as the gateway has counted them
 * already; undefined if it has not, and nothing is tokenized to find out (a policy that never
 * reads tokens keeps costing no tokenization).
 */
export function knownPromptLength(rr: RouteRequest | undefined): number | undefined {
  if (!(rr instanceof LiveRouteRequest)) return undefined;
  return rr.batchPromptTokens ?? rr.knownTokenCount;
}

export function buildRouteRequest(
  id: string,
  model: string,
  body: InferenceBody,
  req: IncomingMessage,
  prompt: PreparedPrompt & { promptTokens: PromptTokens },
  tokenizeNow = true,
): RouteRequest {
  const header = req.headers['x-session-id'];
  const sessionKey = body.user ?? (typeof header === 'string' && header !== '' ? header : undefined);
  const tokens = prompt.promptTokens;
  // A policy that reads the ids gets them now: counting first and encoding later would scan the
  // prompt twice.
  const rr = new LiveRouteRequest(id, model, prompt.promptText, tokenizeNow && typeof tokens === 'function' ? tokens() : tokens, prompt.maxTokens);
  if (sessionKey !== undefined) rr.sessionKey = sessionKey;
  if (body.priority !== undefined) rr.priority = body.priority;
  rr.stream = (body as { stream?: unknown }).stream === true;
  return rr;
}
