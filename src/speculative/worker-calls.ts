/**
 * The calls a cascade makes to vLLM-compatible workers, over keep-alive undici pools, and the
 * parsing of their answers into what verification needs. Field names are vLLM's OpenAI-compatible
 * server's (vllm/entrypoints/openai/protocol.py):
 *   - draft:  POST /v1/completions {prompt: [token ids], max_tokens: k, logprobs: N,
 *             return_tokens_as_token_ids: true} → choices[0].logprobs.tokens ['token_id:7', …] and
 *             .top_logprobs [{'token_id:7': -0.1, …}, …] (raw logprobs of the top N + the sampled one);
 *   - verify (verify-call.ts chooses the engine's cheapest; this is vLLM's OpenAI one):
 *             POST /v1/completions {prompt: context + draft tokens, max_tokens: 1, prompt_logprobs: N,
 *             logprobs: 0, return_tokens_as_token_ids: true} → choices[0].prompt_logprobs
 *             [null, {'7': {logprob, rank, decoded_token}, …}, …] (one per prompt position) and the
 *             generated token (the target's own draw after the last draft token), its text;
 *   - continue: the same with stream: true and max_tokens: the rest, when the draft is gone;
 *   - POST /tokenize {prompt} or {messages} → {tokens}.
 */
import type { Pool } from 'undici';
import { Upstreams } from '../fleet/upstreams.js';
import type { DraftProposal, ScoredPosition, Verification } from './rounds.js';
import { VerifyRoutes } from './verify-routes.js';

export type { DraftProposal, ScoredPosition, Verification };

export class WorkerCallError extends Error {
  constructor(
    message: string,
    /** HTTP status when the worker answered, else null (connect error, timeout, malformed body). */
    readonly status: number | null,
  ) {
    super(message);
  }
}

/**
 * Keep-alive pools to the cascade's workers, by worker id: the gateway's own kind (one undici Pool
 * per worker, no fixed undici deadlines), kept apart from the relay's so cascade rounds never
 * queue behind relayed streams.
 */
export class WorkerPools extends Upstreams {
  /** Which verification request each target worker takes (learned: verify-call.ts). */
  readonly verifyRoutes = new VerifyRoutes();

  constructor(connectTimeoutMs: number) {
    super({ connections: 0, keepAliveTimeoutMs: 4_000, connectTimeoutMs });
  }
}

export interface CallTarget {
  pool: Pool;
  workerId: string;
  requestId: string;
  /** The client's trace context (traceparent, tracestate), passed on with every call. */
  traceHeaders?: Record<string, string>;
}

function callHeaders(t: CallTarget): Record<string, string> {
  const h: Record<string, string> = { 'content-type': 'application/json', 'x-request-id': t.requestId };
  return t.traceHeaders === undefined ? h : Object.assign(h, t.traceHeaders);
}

/** POST a JSON body and parse the JSON answer; non-200 answers and bad bodies throw WorkerCallError. */
export async function postJson(t: CallTarget, path: string, body: unknown, signal: AbortSignal): Promise<any> {
  let r;
  try {
    r = await t.pool.request({
      method: 'POST',
      path,
      headers: callHeaders(t),
      body: JSON.stringify(body),
      signal,
    });
  } catch (e) {
    throw new WorkerCallError(`${t.workerId}: ${(e as Error).message}`, null);
  }
  let text: string;
  try {
    text = await r.body.text();
  } catch (e) {
    throw new WorkerCallError(`${t.workerId}: ${(e as Error).message}`, null);
  }
  if (r.statusCode !== 200) throw new WorkerCallError(`${t.workerId} answered ${r.statusCode}: ${text.slice(0, 300)}`, r.statusCode);
  try {
    return JSON.parse(text);
  } catch {
    throw new WorkerCallError(`${t.workerId} answered with a body that is not JSON`, r.statusCode);
  }
}

/** 'token_id:123' → 123. */
function tokenIdOf(name: unknown): number {
  if (typeof name === 'string' && name.startsWith('token_id:')) {
    const n = Number(name.slice(9));
    if (Number.isInteger(n) && n >= 0) return n;
  }
  throw new WorkerCallError(`expected a token named 'token_id:<id>' (return_tokens_as_token_ids), got ${JSON.stringify(name)}`, null);
}

/** choices[0] of a draft answer → its tokens and candidates. */
export function parseDraft(json: any): DraftProposal {
  const c = json?.choices?.[0];
  const lp = c?.logprobs;
  if (!lp || !Array.isArray(lp.tokens)) throw new WorkerCallError('draft answer has no logprobs.tokens', null);
  const tokens = lp.tokens.map(tokenIdOf);
  const tops: unknown[] = Array.isArray(lp.top_logprobs) ? lp.top_logprobs : [];
  const candidates = tokens.map((t: number, i: number) => {
    const m = new Map<number, number>();
    const top = tops[i];
    if (top && typeof top === 'object') for (const [k, v] of Object.entries(top as Record<string, number>)) m.set(tokenIdOf(k), v);
    if (!m.has(t) && typeof lp.token_logprobs?.[i] === 'number') m.set(t, lp.token_logprobs[i]);
    return m;
  });
  return { tokens, candidates, finishReason: c.finish_reason ?? null };
}

/** choices[0] of a verification answer; `from` is the index of the first draft token in the prompt. */
/**
 * One position of vLLM's `prompt_logprobs` (`{token id: {logprob, rank, decoded_token}}`): the
 * log-probabilities and texts it lists and its best-ranked token; 'malformed' for an entry that is
 * not of that shape, null when no token is ranked.
 */
export function scoredPosition(entry: object): ScoredPosition | 'malformed' | null {
  const raw = new Map<number, number>();
  const text = new Map<number, string>();
  let argmax = -1;
  let best = Infinity;
  for (const [k, v] of Object.entries(entry as Record<string, { logprob: number; rank?: number; decoded_token?: string }>)) {
    const id = Number(k);
    if (!Number.isInteger(id) || !v || typeof v.logprob !== 'number') return 'malformed';
    raw.set(id, v.logprob);
    text.set(id, typeof v.decoded_token === 'string' ? v.decoded_token : '');
    const rank = typeof v.rank === 'number' ? v.rank : Infinity;
    if (rank < best) {
      best = rank;
      argmax = id;
    }
  }
  return argmax < 0 ? null : { raw, text, argmax };
}

export function parseVerification(json: any, from: number, count: number): Verification {
  const c = json?.choices?.[0];
  const pl = c?.prompt_logprobs;
  if (!Array.isArray(pl)) throw new WorkerCallError('verification answer has no prompt_logprobs', null);
  if (pl.length < from + count) throw new WorkerCallError(`prompt_logprobs has ${pl.length} entries, expected ${from + count}`, null);
  const positions: ScoredPosition[] = [];
  for (let i = from; i < from + count; i++) {
    const entry = pl[i];
    if (!entry || typeof entry !== 'object') throw new WorkerCallError(`prompt_logprobs[${i}] is empty`, null);
    const scored = scoredPosition(entry);
    if (scored === 'malformed') throw new WorkerCallError(`prompt_logprobs[${i}] has a malformed entry`, null);
    if (scored === null) throw new WorkerCallError(`prompt_logprobs[${i}] has no ranked token`, null);
    positions.push(scored);
  }
  const lp = c.logprobs;
  if (!lp || !Array.isArray(lp.tokens) || lp.tokens.length < 1) throw new WorkerCallError('verification answer has no logprobs.tokens', null);
  return { positions, next: { token: tokenIdOf(lp.tokens[0]), text: typeof c.text === 'string' ? c.text : '', finishReason: c.finish_reason ?? null } };
}

/** A streamed completion's token groups: ids and text per SSE chunk. */
export async function* streamCompletion(
  t: CallTarget,
  body: unknown,
  signal: AbortSignal,
): AsyncGenerator<{ ids: number[]; text: string; finishReason: string | null }> {
  let r;
  try {
    r = await t.pool.request({
      method: 'POST',
      path: '/v1/completions',
      headers: callHeaders(t),
      body: JSON.stringify(body),
      signal,
    });
  } catch (e) {
    throw new WorkerCallError(`${t.workerId}: ${(e as Error).message}`, null);
  }
  if (r.statusCode !== 200) {
    const text = await r.body.text().catch(() => '');
    throw new WorkerCallError(`${t.workerId} answered ${r.statusCode}: ${text.slice(0, 300)}`, r.statusCode);
  }
  let buf = '';
  try {
    for await (const chunk of r.body) {
      buf += (chunk as Buffer).toString('utf8');
      let nl: number;
      while ((nl = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, nl);
        buf = buf.slice(nl + 2);
        if (!block.startsWith('data: ')) continue;
        const data = block.slice(6);
        if (data === '[DONE]') return;
        const ev = JSON.parse(data);
        if (ev.error) throw new WorkerCallError(`${t.workerId} stream failed: ${ev.error.message ?? 'error event'}`, null);
        const c = ev.choices?.[0];
        if (!c) continue;
        // SGLang lists a chunk's ids in token_ids (return_token_ids); vLLM names them in the logprobs.
        const ids = Array.isArray(c.token_ids) ? c.token_ids.filter((t: unknown) => Number.isInteger(t)) : Array.isArray(c.logprobs?.tokens) ? c.logprobs.tokens.map(tokenIdOf) : [];
        yield { ids, text: typeof c.text === 'string' ? c.text : '', finishReason: c.finish_reason ?? null };
      }
    }
  } catch (e) {
    if (e instanceof WorkerCallError) throw e;
    throw new WorkerCallError(`${t.workerId}: ${(e as Error).message}`, null);
  }
  throw new WorkerCallError(`${t.workerId}: stream ended without [DONE]`, null);
}
