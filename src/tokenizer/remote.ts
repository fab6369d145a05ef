/**
 * Tokenization by the worker itself: vLLM's `POST /tokenize` with `{model, prompt}` answers
 * `{tokens: number[], count, max_model_len}`. Exact by construction, at the cost of a round trip
 * per request; any failure (timeout, HTTP error, bad body) is reported to the caller, which falls
 * back to the estimate tokenizer rather than failing the request. A chat prompt is sent as its
 * messages (`{model, messages, add_generation_prompt, ...}`, with the request's own rendering
 * parameters), so the worker renders them with its model's own chat template, as it will for the
 * request itself.
 */
import type { ChatMessageLike, ChatRenderOptions } from './chat-template.js';

export interface RemoteTokenizeOptions {
  /** Give up after this long, ms (default 250). */
  timeoutMs?: number;
  addSpecialTokens?: boolean;
  signal?: AbortSignal;
}

class RemoteTokenizeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RemoteTokenizeError';
  }
}

export async function remoteTokenize(
  workerUrl: string,
  model: string,
  prompt: string | { messages: readonly ChatMessageLike[]; render: ChatRenderOptions },
  opts: RemoteTokenizeOptions = {},
): Promise<number[]> {
  const url = `${workerUrl.replace(/\/+$/, '')}/tokenize`;
  const timeout = AbortSignal.timeout(opts.timeoutMs ?? 250);
  const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;
  let res: Response;
  try {
    const body: Record<string, unknown> = typeof prompt === 'string' ? { model, prompt } : chatTokenizeBody(model, prompt.messages, prompt.render);
    if (opts.addSpecialTokens !== undefined) body['add_special_tokens'] = opts.addSpecialTokens;
    res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal,
    });
  } catch (err) {
    const e = err as Error;
    const why = e.name === 'TimeoutError' ? `timed out after ${opts.timeoutMs ?? 250} ms` : e.message;
    throw new RemoteTokenizeError(`POST ${url} failed: ${why}`);
  }
  if (!res.ok) {
    const text = await res.text().catch(() => '');
    throw new RemoteTokenizeError(`POST ${url} answered ${res.status}${text ? `: ${text.slice(0, 200)}` : ''}`);
  }
  let json: unknown;
  try {
    json = await res.json();
  } catch {
    throw new RemoteTokenizeError(`POST ${url} answered with a body that is not JSON`);
  }
  const tokens = (json as { tokens?: unknown } | null)?.tokens;
  if (!Array.isArray(tokens) || !tokens.every((t) => Number.isInteger(t))) {
    throw new RemoteTokenizeError(`POST ${url} answered without an integer "tokens" array`);
  }
  return tokens as number[];
}

/**
 * vLLM's chat form of `/tokenize` (TokenizeChatRequest): the messages and the parameters that
 * change their rendering. `documents` is not among its fields, so a template that reads them gets
 * none there.
 */
function chatTokenizeBody(model: string, messages: readonly ChatMessageLike[], r: ChatRenderOptions): Record<string, unknown> {
  const body: Record<string, unknown> = { model, messages, add_generation_prompt: r.addGenerationPrompt && !r.continueFinalMessage };
  if (r.continueFinalMessage) body['continue_final_message'] = true;
  if (r.tools !== undefined) body['tools'] = r.tools;
  if (r.templateKwargs !== undefined) body['chat_template_kwargs'] = r.templateKwargs;
  return body;
}
