/**
 * Token parity: does kvgate compute, for a prompt, the token ids the worker's engine computes? The
 * exact prefix index maps a worker's KV events into kvgate's block hashes through the events'
 * token ids; prompts are hashed from kvgate's own ids. If the two tokenizations differ, no prompt
 * ever matches a block the worker reported, and routing on "exact" KV events is silently blind.
 *
 * A probe tokenizes a few sample requests both ways and compares the ids:
 * - kvgate's side goes through preparePrompt and the model's PromptTokenizer, the path a real
 *   request takes (gateway/prepare.ts), so a chat is rendered as kvgate would render it;
 * - the worker's side asks the engine: `POST /v1/chat/completions/render` (the whole chat request,
 *   tools included, rendered and tokenized by the engine; answers a GenerateRequest whose
 *   `token_ids` are the prompt's: vllm-project/vllm `vllm/entrypoints/serve/render/api_router.py`,
 *   `vllm/entrypoints/serve/disagg/protocol.py`),
 *   else `POST /tokenize` (TokenizeChatRequest `{model, messages, tools, add_generation_prompt,
 *   chat_template_kwargs}` or TokenizeCompletionRequest `{model, prompt}`, answering `{tokens,
 *   count, max_model_len}`: `vllm/entrypoints/serve/tokenize/protocol.py`).
 * The samples are a plain completion, a chat with tools, a chat with multi-part content and a
 * Responses request (instructions and input items, as kvgate turns them into chat messages).
 */
import { responsesMessages, type ResponsesRequest } from '../../api/responses.js';
import type { ChatCompletionRequest, CompletionRequest } from '../../api/schemas.js';
import type { PromptTokenizer, TokenizeContext } from '../../tokenizer/registry.js';
import { chatRenderOptions, preparePrompt } from '../pipeline/prepare.js';

export type ParitySampleKind = 'completion' | 'chat-tools' | 'chat-multipart' | 'responses';

interface ParitySample {
  kind: ParitySampleKind;
  /** What the sample stands for, in a message. */
  label: string;
  body(model: string): CompletionRequest | ChatCompletionRequest | ResponsesRequest;
}

const SYSTEM =
  'You are a careful assistant for a logistics company. Answer in short sentences, cite the shipment id you were given, and ask before you change an order.';

const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_shipment_status',
    description: 'Current status and location of a shipment',
    parameters: { type: 'object', properties: { shipment_id: { type: 'string' } }, required: ['shipment_id'] },
  },
};

/** The probe prompts. Long enough to fill a few 16-token blocks, with punctuation, digits and a newline. */
export const PARITY_SAMPLES: readonly ParitySample[] = [
  {
    kind: 'completion',
    label: 'a completion prompt',
    body: (model) =>
      ({
        model,
        prompt: 'Shipment 4471-B left Rotterdam on 12 March at 06:40.\nIts next stop is Hamburg, where customs will inspect 3 of its 18 containers before it continues east.',
        max_tokens: 1,
      }) as CompletionRequest,
  },
  {
    kind: 'chat-tools',
    label: 'a chat prompt with tools',
    body: (model) =>
      ({
        model,
        messages: [
          { role: 'system', content: SYSTEM },
          { role: 'user', content: 'Where is shipment 4471-B now, and when will it reach Hamburg?' },
        ],
        tools: [WEATHER_TOOL],
        max_tokens: 1,
      }) as unknown as ChatCompletionRequest,
  },
  {
    kind: 'chat-multipart',
    label: 'a chat prompt with multi-part content',
    body: (model) =>
      ({
        model,
        messages: [
          { role: 'system', content: SYSTEM },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'Here is the manifest of shipment 4471-B:' },
              { type: 'text', text: '18 containers, 3 flagged for inspection (ids 7, 11 and 15).' },
            ],
          },
        ],
        max_tokens: 1,
      }) as unknown as ChatCompletionRequest,
  },
  {
    kind: 'responses',
    label: 'a Responses API prompt',
    body: (model) =>
      ({
        model,
        instructions: SYSTEM,
        input: [
          { role: 'user', content: 'Which containers of shipment 4471-B are flagged?' },
          { role: 'assistant', content: 'Containers 7, 11 and 15.' },
          { role: 'user', content: [{ type: 'input_text', text: 'Why were they flagged?' }] },
        ],
        max_output_tokens: 1,
      }) as unknown as ResponsesRequest,
  },
];

export interface ParitySampleResult {
  kind: ParitySampleKind;
  /** Equal ids; null when the worker could not be asked (then `error` says why). */
  match: boolean | null;
  kvgateTokens: number;
  workerTokens: number;
  /** Index of the first id that differs (the shorter length when one is a prefix of the other). */
  firstDifference?: number;
  /** Which worker endpoint answered ('render' or 'tokenize'). */
  via?: 'render' | 'tokenize';
  error?: string;
}

export interface ParityReport {
  workerId: string;
  model: string;
  /** The tokenizer spec kvgate uses for the model. */
  tokenizer: string;
  /** 'match': every sample agreed; 'mismatch': one did not; 'unknown': the worker could not be asked. */
  verdict: 'match' | 'mismatch' | 'unknown';
  samples: ParitySampleResult[];
  /** A sentence for logs and /admin/workers, naming the fix when the verdict is 'mismatch'. */
  message: string;
  /** When the probe ran, ms since the epoch. */
  at: number;
}

export interface ParityProbeOptions {
  workerId: string;
  workerUrl: string;
  model: string;
  /** Pool of the model, for the fix's wording. */
  pool?: string;
  tokenizer: PromptTokenizer;
  /** Headers for the worker (its API key). */
  headers?: Record<string, string>;
  timeoutMs?: number;
  fetchImpl?: typeof fetch;
  now?: () => number;
}

/** kvgate's ids for a sample: the path of gateway/prepare.ts prepareRouting. */
export async function kvgateIds(
  tokenizer: PromptTokenizer,
  kind: ParitySampleKind,
  body: CompletionRequest | ChatCompletionRequest | ResponsesRequest,
  workerUrl: string | undefined,
): Promise<{ ids: number[]; degraded?: string }> {
  const k = kind === 'completion' ? 'completions' : kind === 'responses' ? 'responses' : 'chat';
  const prompt = preparePrompt(k, body, tokenizer.sync, 1);
  if (prompt.promptTokens !== null) {
    const t = typeof prompt.promptTokens === 'function' ? prompt.promptTokens() : prompt.promptTokens;
    return { ids: Array.from(t) };
  }
  const ctx: TokenizeContext = { model: body.model };
  if (workerUrl !== undefined) ctx.workerUrl = workerUrl;
  if (k !== 'completions') {
    const chat = k === 'chat' ? (body as ChatCompletionRequest) : ({ messages: responsesMessages(body as ResponsesRequest) } as ChatCompletionRequest);
    ctx.messages = chat.messages;
    ctx.render = prompt.render ?? chatRenderOptions(chat);
  }
  const t = await tokenizer.tokenize(prompt.promptText, ctx);
  return { ids: Array.from(t.tokens), ...(t.degraded !== undefined ? { degraded: t.degraded } : {}) };
}

class WorkerAskError extends Error {}

async function postJson(fetchImpl: typeof fetch, url: string, body: unknown, headers: Record<string, string>, timeoutMs: number): Promise<{ status: number; json: unknown }> {
  let res: Response;
  try {
    res = await fetchImpl(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (err) {
    const e = err as Error;
    throw new WorkerAskError(`POST ${url} failed: ${e.name === 'TimeoutError' ? `no answer in ${timeoutMs} ms` : e.message}`);
  }
  const text = await res.text().catch(() => '');
  let json: unknown = null;
  try {
    json = text === '' ? null : JSON.parse(text);
  } catch {
    json = null;
  }
  if (!res.ok && res.status !== 404 && res.status !== 405) throw new WorkerAskError(`POST ${url} answered ${res.status}${text ? `: ${text.slice(0, 200)}` : ''}`);
  return { status: res.status, json };
}

function intArray(v: unknown): number[] | null {
  return Array.isArray(v) && v.every((t) => Number.isInteger(t)) ? (v as number[]) : null;
}

/**
 * The worker's ids for a sample. A chat goes to the render endpoint first (the engine renders the
 * very request, tools and all); a worker without it (404/405) is asked its /tokenize.
 */
export async function workerIds(
  workerUrl: string,
  kind: ParitySampleKind,
  body: CompletionRequest | ChatCompletionRequest | ResponsesRequest,
  opts: { headers?: Record<string, string>; timeoutMs?: number; fetchImpl?: typeof fetch } = {},
): Promise<{ ids: number[]; via: 'render' | 'tokenize' }> {
  const base = workerUrl.replace(/\/+$/, '');
  const f = opts.fetchImpl ?? fetch;
  const headers = opts.headers ?? {};
  const timeoutMs = opts.timeoutMs ?? 5_000;
  if (kind === 'completion') {
    const b = body as CompletionRequest;
    const r = await postJson(f, `${base}/tokenize`, { model: b.model, prompt: b.prompt }, headers, timeoutMs);
    const ids = r.status === 200 ? intArray((r.json as { tokens?: unknown } | null)?.tokens) : null;
    if (ids === null) throw new WorkerAskError(`POST ${base}/tokenize answered ${r.status} without an integer "tokens" array`);
    return { ids, via: 'tokenize' };
  }
  const chat: ChatCompletionRequest =
    kind === 'responses'
      ? ({ model: body.model, messages: responsesMessages(body as ResponsesRequest), max_tokens: 1 } as unknown as ChatCompletionRequest)
      : (body as ChatCompletionRequest);
  const rendered = await postJson(f, `${base}/v1/chat/completions/render`, chat, headers, timeoutMs);
  if (rendered.status === 200) {
    const ids = intArray((rendered.json as { token_ids?: unknown } | null)?.token_ids);
    if (ids !== null) return { ids, via: 'render' };
  }
  const render = chatRenderOptions(chat);
  const tb: Record<string, unknown> = { model: chat.model, messages: chat.messages, add_generation_prompt: render.addGenerationPrompt };
  if (render.tools !== undefined) tb['tools'] = render.tools;
  if (render.templateKwargs !== undefined) tb['chat_template_kwargs'] = render.templateKwargs;
  const r = await postJson(f, `${base}/tokenize`, tb, headers, timeoutMs);
  const ids = r.status === 200 ? intArray((r.json as { tokens?: unknown } | null)?.tokens) : null;
  if (ids === null) throw new WorkerAskError(`POST ${base}/tokenize answered ${r.status} without an integer "tokens" array (and ${base}/v1/chat/completions/render answered ${rendered.status})`);
  return { ids, via: 'tokenize' };
}

function firstDifference(a: readonly number[], b: readonly number[]): number | undefined {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? undefined : n;
}

/** Probe one worker: every sample, both ways. Never throws: a worker that cannot be asked gives 'unknown'. */
export async function probeTokenParity(o: ParityProbeOptions): Promise<ParityReport> {
  const samples: ParitySampleResult[] = [];
  for (const s of PARITY_SAMPLES) {
    const body = s.body(o.model);
    const r: ParitySampleResult = { kind: s.kind, match: null, kvgateTokens: 0, workerTokens: 0 };
    try {
      const w = await workerIds(o.workerUrl, s.kind, body, {
        ...(o.headers ? { headers: o.headers } : {}),
        ...(o.timeoutMs !== undefined ? { timeoutMs: o.timeoutMs } : {}),
        ...(o.fetchImpl ? { fetchImpl: o.fetchImpl } : {}),
      });
      r.workerTokens = w.ids.length;
      r.via = w.via;
      const k = await kvgateIds(o.tokenizer, s.kind, body, o.workerUrl);
      r.kvgateTokens = k.ids.length;
      if (k.degraded !== undefined) {
        // A remote tokenizer that fell back to the estimate: this is not what serving would use
        // when the worker answers, so the sample says nothing either way.
        r.error = `kvgate's tokenizer degraded: ${k.degraded}`;
      } else {
        const d = firstDifference(k.ids, w.ids);
        r.match = d === undefined;
        if (d !== undefined) r.firstDifference = d;
      }
    } catch (err) {
      r.error = (err as Error).message;
    }
    samples.push(r);
  }
  return { workerId: o.workerId, model: o.model, tokenizer: o.tokenizer.spec, ...verdictOf(o, samples), samples, at: (o.now ?? Date.now)() };
}

function verdictOf(o: ParityProbeOptions, samples: ParitySampleResult[]): Pick<ParityReport, 'verdict' | 'message'> {
  const bad = samples.find((s) => s.match === false);
  if (bad) {
    const label = PARITY_SAMPLES.find((p) => p.kind === bad.kind)!.label;
    const key = `tokenizers.models.${JSON.stringify(o.model).slice(1, -1)}`;
    return {
      verdict: 'mismatch',
      message:
        `${o.pool !== undefined ? `pool ${o.pool}: ` : ''}tokenizer '${o.tokenizer.spec}' gives different ids than worker ${o.workerId}'s ` +
        `${bad.via === 'render' ? '/v1/chat/completions/render' : '/tokenize'} for ${label} ` +
        `(first difference at token ${bad.firstDifference}; kvgate ${bad.kvgateTokens} tokens, worker ${bad.workerTokens}); ` +
        `set ${key} to 'hf:<path to the model's tokenizer.json>' (with its tokenizer_config.json beside it, for the chat template) or 'remote'`,
    };
  }
  const asked = samples.filter((s) => s.match === true).length;
  if (asked === samples.length) return { verdict: 'match', message: `tokenizer '${o.tokenizer.spec}' gives worker ${o.workerId}'s ids on ${asked} sample prompts` };
  const why = samples.find((s) => s.error !== undefined)?.error ?? 'no answer';
  return { verdict: 'unknown', message: `token parity with worker ${o.workerId} not checked: ${why}` };
}
