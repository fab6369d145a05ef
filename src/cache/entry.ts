/**
 * What the cache stores for one answer, and how it is turned back into a response.
 *
 * The canonical form is the assembled, non-streaming answer: the `chat.completion` or
 * `text_completion` object a worker returns for `stream: false`, with every field it sent. An
 * answer that arrived as JSON is stored as it is; one that arrived as an SSE stream is assembled
 * into the same object first (assemble.ts). Either is rendered as JSON or as an SSE stream in
 * OpenAI's chunk format (role chunk, content chunk with the finish reason, a usage chunk when
 * `stream_options.include_usage` asks for one, `data: [DONE]`), whichever form filled it.
 */
import type { CacheRoute } from './key.js';

/** A completion as the cache keeps it. Its fields are those of the upstream answer. */
export interface CompletionBody {
  id?: string;
  object?: string;
  created?: number;
  model?: string;
  choices: CompletionChoice[];
  usage?: Record<string, unknown> | null;
  [extra: string]: unknown;
}

export interface CompletionChoice {
  index: number;
  /** chat */
  message?: Record<string, unknown> & { role?: string; content?: string | null; tool_calls?: ToolCall[] };
  /** completions */
  text?: string;
  logprobs?: unknown;
  finish_reason: string | null;
  stop_reason?: unknown;
  [extra: string]: unknown;
}

export interface ToolCall {
  id?: string;
  type?: string;
  function?: { name?: string; arguments?: string };
  [extra: string]: unknown;
}

/** An embeddings answer as the cache keeps it: the `list` of vectors the worker returned. */
export interface EmbeddingsList {
  id?: string;
  object?: string;
  created?: number;
  model?: string;
  data: Array<{ index: number; embedding: number[] | string; [extra: string]: unknown }>;
  usage?: Record<string, unknown> | null;
  [extra: string]: unknown;
}

export interface CacheEntry {
  v: 1;
  tenant: string;
  route: CacheRoute;
  /** Wall-clock time it was stored (ms since the epoch): the Age header and max-age. */
  storedAt: number;
  /** An EmbeddingsList for route 'embeddings', else a CompletionBody. */
  body: CompletionBody | EmbeddingsList;
}

/** Finish reasons of an answer that ended normally; anything else ('abort', 'error', null) is not stored. */
const NORMAL_FINISH = new Set(['stop', 'length', 'tool_calls', 'function_call', 'content_filter']);

/** Why a would-be entry is not an answer worth storing, or null if it is. */
export function incompleteReason(body: unknown, route: CacheRoute): string | null {
  if (body === null || typeof body !== 'object') return 'not an object';
  if (route === 'embeddings') {
    const data = (body as Partial<EmbeddingsList>).data;
    if ((body as { error?: unknown }).error !== undefined) return 'error body';
    if (!Array.isArray(data) || data.length === 0) return 'no data';
    for (const d of data) {
      if (d === null || typeof d !== 'object' || typeof d.index !== 'number') return 'bad item';
      if (!Array.isArray(d.embedding) && typeof d.embedding !== 'string') return 'bad item';
    }
    return null;
  }
  const b = body as Partial<CompletionBody>;
  if ((b as { error?: unknown }).error !== undefined) return 'error body';
  if (!Array.isArray(b.choices) || b.choices.length === 0) return 'no choices';
  for (const c of b.choices) {
    if (c === null || typeof c !== 'object') return 'bad choice';
    if (typeof c.finish_reason !== 'string' || !NORMAL_FINISH.has(c.finish_reason)) return `finish_reason ${String(c.finish_reason)}`;
    if (route === 'chat' ? c.message === null || typeof c.message !== 'object' : typeof c.text !== 'string') return 'bad choice';
  }
  return null;
}

/** True if the entry holds a usage block (needed for JSON answers and include_usage streams). */
export function hasUsage(e: CacheEntry): boolean {
  return e.body.usage !== undefined && e.body.usage !== null;
}

export function renderJson(e: CacheEntry): string {
  return JSON.stringify(e.body);
}

/** Top-level fields every chunk repeats. */
function chunkBase(e: CacheEntry): Record<string, unknown> {
  const b = e.body;
  const base: Record<string, unknown> = {
    id: b.id,
    object: e.route === 'chat' ? 'chat.completion.chunk' : 'text_completion',
    created: b.created,
    model: b.model,
  };
  if (b.system_fingerprint !== undefined) base.system_fingerprint = b.system_fingerprint;
  return base;
}

const sse = (obj: unknown): string => `data: ${JSON.stringify(obj)}\n\n`;

/** A chat message as the delta of a content chunk (role goes in the first chunk). */
function messageDelta(m: NonNullable<CompletionChoice['message']>): Record<string, unknown> {
  const d: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(m)) {
    if (k === 'role' || v === null || v === undefined) continue;
    if (Array.isArray(v) && v.length === 0) continue;
    if (k === 'tool_calls' && Array.isArray(v)) d[k] = (v as ToolCall[]).map((tc, i) => ({ index: i, ...tc }));
    else d[k] = v;
  }
  return d;
}

/** The chunk objects of the entry as a stream, without usage or [DONE]. */
function streamChunks(e: CacheEntry): Array<Record<string, unknown>> {
  const base = chunkBase(e);
  const out: Array<Record<string, unknown>> = [];
  // Only generated text is streamed: an embeddings entry is only ever answered as JSON.
  for (const c of (e.body as CompletionBody).choices) {
    if (e.route === 'chat') {
      const m = c.message ?? {};
      out.push({ ...base, choices: [{ index: c.index, delta: { role: m.role ?? 'assistant', content: '' }, logprobs: null, finish_reason: null }] });
      const choice: Record<string, unknown> = { index: c.index, delta: messageDelta(m), logprobs: c.logprobs ?? null, finish_reason: c.finish_reason };
      if (c.stop_reason !== undefined) choice.stop_reason = c.stop_reason;
      out.push({ ...base, choices: [choice] });
    } else {
      const choice: Record<string, unknown> = { index: c.index, text: c.text ?? '', logprobs: c.logprobs ?? null, finish_reason: c.finish_reason };
      if (c.stop_reason !== undefined) choice.stop_reason = c.stop_reason;
      out.push({ ...base, choices: [choice] });
    }
  }
  return out;
}

/** The usage chunk (`choices: []`) that include_usage asks for, if the entry has usage. */
export function usageChunk(e: CacheEntry): Record<string, unknown> | null {
  return hasUsage(e) ? { ...chunkBase(e), choices: [], usage: e.body.usage } : null;
}

export const SSE_DONE = 'data: [DONE]\n\n';

/** The whole entry as an SSE body. */
export function renderSse(e: CacheEntry, includeUsage: boolean): string {
  let s = '';
  for (const c of streamChunks(e)) s += sse(c);
  if (includeUsage) {
    const u = usageChunk(e);
    if (u) s += sse(u);
  }
  return s + SSE_DONE;
}

export function sseEvent(obj: unknown): string {
  return sse(obj);
}
