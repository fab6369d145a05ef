/**
 * What the cascade makes of a request before any worker is asked: whether it can reproduce the
 * request exactly (else the plain path, and why), the sampling parameters and output rules it
 * will apply, and the request's prompt class.
 */
import type { ChatCompletionRequest, CompletionRequest } from '../api/schemas.js';
import type { SamplingParams } from './sampling.js';

/**
 * A cheap content class: 'code' when the prompt carries a code fence or is dense in code
 * punctuation, else 'prose' (acceptance often differs between the two).
 */
export function contentClass(text: string): 'code' | 'prose' {
  if (text.includes('```')) return 'code';
  const sample = text.length > 4000 ? text.slice(-4000) : text;
  let punct = 0;
  for (let i = 0; i < sample.length; i++) {
    const c = sample.charCodeAt(i);
    // { } ( ) ; = < > [ ]
    if (c === 123 || c === 125 || c === 40 || c === 41 || c === 59 || c === 61 || c === 60 || c === 62 || c === 91 || c === 93) punct++;
  }
  return sample.length > 0 && punct / sample.length > 0.04 ? 'code' : 'prose';
}

/** Fields of a request the cascade reproduces exactly; any other non-null field sends it down the plain path. */
const COMMON_FIELDS = new Set(['model', 'stream', 'stream_options', 'max_tokens', 'temperature', 'top_p', 'n', 'stop', 'stop_token_ids', 'seed', 'user', 'priority']);
const CHAT_FIELDS = new Set([...COMMON_FIELDS, 'messages', 'max_completion_tokens', 'logprobs', 'top_logprobs']);
const COMPLETION_FIELDS = new Set([...COMMON_FIELDS, 'prompt', 'echo', 'logprobs']);

export interface Plan {
  params: SamplingParams;
  seed: number | null;
  stop: string[];
  stopTokenIds: number[];
  priority: number | undefined;
  includeUsage: boolean;
}

/** Why a request cannot go through the cascade exactly, or its plan. */
export function planRequest(kind: 'chat' | 'completions', body: ChatCompletionRequest | CompletionRequest): { ok: true; plan: Plan } | { ok: false; reason: string } {
  const b = body as Record<string, unknown>;
  const allowed = kind === 'chat' ? CHAT_FIELDS : COMPLETION_FIELDS;
  for (const [k, v] of Object.entries(b)) {
    if (v === null || v === undefined) continue;
    if (!allowed.has(k)) return { ok: false, reason: 'unsupported_field' };
  }
  if ((body.n ?? 1) !== 1) return { ok: false, reason: 'n' };
  if (b.logprobs === true || (typeof b.logprobs === 'number') || (b.top_logprobs !== undefined && b.top_logprobs !== null)) return { ok: false, reason: 'logprobs' };
  if (b.echo === true) return { ok: false, reason: 'echo' };
  const so = b.stream_options as Record<string, unknown> | null | undefined;
  if (so && Object.entries(so).some(([k, v]) => k !== 'include_usage' && v !== null && v !== undefined && v !== false)) return { ok: false, reason: 'unsupported_field' };
  if (kind === 'completions') {
    const p = (body as CompletionRequest).prompt;
    if (Array.isArray(p) && p.length > 0 && typeof p[0] !== 'number' && p.length > 1) return { ok: false, reason: 'batch' };
  }
  const stopIds = b.stop_token_ids;
  if (stopIds !== undefined && stopIds !== null && !(Array.isArray(stopIds) && stopIds.every((x) => Number.isInteger(x) && x >= 0))) return { ok: false, reason: 'unsupported_field' };
  const stop = body.stop === null || body.stop === undefined ? [] : (typeof body.stop === 'string' ? [body.stop] : body.stop).filter((s) => s.length > 0);
  return {
    ok: true,
    plan: {
      params: { temperature: body.temperature ?? 1, topP: body.top_p ?? 1 },
      seed: body.seed ?? null,
      stop,
      stopTokenIds: (stopIds as number[] | undefined) ?? [],
      priority: body.priority,
      includeUsage: body.stream === true && so?.include_usage === true,
    },
  };
}
