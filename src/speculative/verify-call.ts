/**
 * The cascade's verification call, the cheapest each engine takes over HTTP. The target scores
 * context (C tokens) + draft tokens in one prefill-only pass; what that pass costs is the context
 * the engine recomputes:
 *
 * - SGLang (`engine: sglang`): `POST /generate` with `input_ids`, `return_logprob`,
 *   `logprob_start_len: C - 1` and `top_logprobs_num`. SGLang caps the prefix match of a request
 *   returning logprobs at logprob_start_len (python/sglang/srt/managers/schedule_batch.py,
 *   Req._compute_max_prefix_len), so the cached context is reused and only the last context token
 *   and the drafts are computed. Its input logprobs start at logprob_start_len with the first entry
 *   padded with null (scheduler_output_processor_mixin.py): entry 0 is the last context token,
 *   entries 1…k score the drafts.
 * - vLLM: `POST /inference/v1/generate` (vllm/entrypoints/serve/disagg/protocol.py), whose
 *   `sampling_params` is a whole SamplingParams, with `prompt_logprobs` and
 *   `skip_reading_prefix_cache: false`. vLLM's OpenAI routes cannot say that: CompletionRequest has
 *   no such field and drops unknown ones (vllm/entrypoints/openai/completion/protocol.py,
 *   engine/protocol.py OpenAIBaseModel), and SamplingParams sets it to true whenever prompt
 *   logprobs are asked for (vllm/sampling_params.py) — so `/v1/completions` recomputes the whole
 *   context every round. Rows of prompt positions served from the cache carry no logits (vLLM
 *   leaves them uninitialised): every draft row must hold its draft token, or the verification is
 *   redone the old way. A worker answering that route 400/404/405/422 (an older vLLM, a server
 *   without it) is remembered and verified through `/v1/completions` from then on.
 *   (`prompt_logprob_token_ids` with `prompt_logprob_start`, vllm#54335, scores only given token
 *   ids — no rank, no top-N — and always skips the cache: not enough for exact verification.)
 */
import type { WorkerState } from '../fleet/worker-state.js';
import type { Logger } from '../telemetry/logger.js';
import type { ScoredPosition, Verification } from './rounds.js';
import type { VerifyRoute, VerifyRoutes } from './verify-routes.js';
import { parseVerification, postJson, scoredPosition, WorkerCallError, type CallTarget } from './worker-calls.js';

/** Statuses by which a worker says it has no such route or takes no such body. */
const ROUTE_REFUSED = new Set([400, 404, 405, 422]);


/** One verification's inputs. */
export interface VerifyArgs {
  /** The served model name (sent as `model` where the route takes one). */
  model: string;
  context: readonly number[];
  drafts: readonly number[];
  temperature: number;
  topP: number;
  seed: number;
  /** Candidates per position: 1 for greedy (the argmax), the configured N when sampling. */
  top: number;
  /** vLLM's priority, passed on to vLLM workers only. */
  priority?: number;
}

export interface VerifyOutcome {
  ver: Verification;
  route: VerifyRoute;
}

/** Verify `a.drafts` on the target `w` by the cheapest route it takes. */
export async function verifyDraft(t: CallTarget, w: WorkerState, routes: VerifyRoutes, a: VerifyArgs, signal: AbortSignal, logger: Logger): Promise<VerifyOutcome> {
  const from = a.context.length;
  const route = routes.routeFor(w);
  if (route === 'sglang-generate') {
    const json = await postJson(t, '/generate', sglangVerifyBody(a), signal);
    return { ver: parseSglangVerification(json, a.drafts), route };
  }
  if (route === 'vllm-generate') {
    try {
      const json = await postJson(t, '/inference/v1/generate', vllmGenerateBody(a), signal);
      const ver = parseVllmGenerateVerification(json, from, a.drafts);
      if (ver !== null) return { ver, route };
      // A draft row came from the cache (another request computed this very context): recompute.
    } catch (e) {
      if (!(e instanceof WorkerCallError) || e.status === null || !ROUTE_REFUSED.has(e.status)) throw e;
      if (routes.refuse(w.id)) {
        logger.warn({ worker: w.id, status: e.status, err: e.message.slice(0, 200) }, 'target refused /inference/v1/generate: verifying on /v1/completions (the whole context recomputed each round)');
      }
    }
  }
  const json = await postJson(t, '/v1/completions', completionsVerifyBody(a), signal);
  return { ver: parseVerification(json, from, a.drafts.length), route: 'vllm-completions' };
}

/** vLLM's OpenAI verification: the whole context + drafts, prompt_logprobs (the cache skipped). */
function completionsVerifyBody(a: VerifyArgs): Record<string, unknown> {
  return {
    model: a.model,
    prompt: a.drafts.length > 0 ? a.context.concat(a.drafts) : a.context,
    max_tokens: 1,
    temperature: a.temperature,
    top_p: a.topP,
    seed: a.seed,
    prompt_logprobs: a.top,
    logprobs: 0,
    return_tokens_as_token_ids: true,
    ...(a.priority !== undefined ? { priority: a.priority } : {}),
  };
}

function vllmGenerateBody(a: VerifyArgs): Record<string, unknown> {
  return {
    model: a.model,
    token_ids: a.context.concat(a.drafts),
    sampling_params: {
      max_tokens: 1,
      temperature: a.temperature,
      top_p: a.topP,
      seed: a.seed,
      prompt_logprobs: a.top,
      logprobs: 0,
      skip_reading_prefix_cache: false,
    },
    ...(a.priority !== undefined ? { priority: a.priority } : {}),
  };
}

function sglangVerifyBody(a: VerifyArgs): Record<string, unknown> {
  return {
    input_ids: a.context.concat(a.drafts),
    return_logprob: true,
    // Entry 0 (the last context token) is padded with null; entries 1…k score the drafts.
    logprob_start_len: a.context.length - 1,
    top_logprobs_num: a.top,
    return_text_in_logprobs: true,
    sampling_params: { max_new_tokens: 1, temperature: a.temperature, top_p: a.topP, sampling_seed: a.seed },
  };
}

type Triple = [number | null, number, string | null];

function isTriple(x: unknown): x is Triple {
  return Array.isArray(x) && x.length >= 2 && (x[0] === null || typeof x[0] === 'number') && Number.isInteger(x[1]);
}

/** SGLang's /generate answer → the drafts' scored positions and the target's own next token. */
export function parseSglangVerification(json: any, drafts: readonly number[]): Verification {
  const meta = json?.meta_info;
  const input = meta?.input_token_logprobs;
  const tops = meta?.input_top_logprobs;
  if (!Array.isArray(input) || !Array.isArray(tops)) throw new WorkerCallError('/generate answer has no meta_info.input_token_logprobs / input_top_logprobs', null);
  if (input.length < drafts.length + 1 || tops.length < drafts.length + 1) {
    throw new WorkerCallError(`/generate answer scores ${input.length - 1} draft positions, expected ${drafts.length}`, null);
  }
  const positions: ScoredPosition[] = [];
  for (let i = 0; i < drafts.length; i++) {
    const own = input[i + 1];
    const top = tops[i + 1];
    if (!isTriple(own) || own[1] !== drafts[i] || !Array.isArray(top) || top.length === 0 || !top.every(isTriple)) {
      throw new WorkerCallError(`/generate answer's logprobs for draft position ${i} are malformed`, null);
    }
    const raw = new Map<number, number>();
    const text = new Map<number, string>();
    let argmax = -1;
    let best = -Infinity;
    for (const [lp, id, s] of [...(top), own]) {
      if (lp === null) continue;
      raw.set(id, lp);
      text.set(id, s ?? '');
      if (lp > best) {
        best = lp;
        argmax = id;
      }
    }
    if (argmax < 0) throw new WorkerCallError(`/generate answer has no scored token at draft position ${i}`, null);
    positions.push({ raw, text, argmax });
  }
  const out = json?.output_ids;
  if (!Array.isArray(out) || !Number.isInteger(out[0])) throw new WorkerCallError('/generate answer has no output_ids', null);
  const fr = meta.finish_reason?.type;
  return {
    positions,
    next: { token: out[0], text: typeof json.text === 'string' ? json.text : '', finishReason: fr === 'stop' || fr === 'length' ? fr : null },
  };
}

/**
 * vLLM's /inference/v1/generate answer → the drafts' positions and the next token; null when a
 * draft row lacks its own token (it came from the cache and holds no logits).
 */
function parseVllmGenerateVerification(json: any, from: number, drafts: readonly number[]): Verification | null {
  const pl = json?.prompt_logprobs;
  const c = json?.choices?.[0];
  if (!Array.isArray(pl) || pl.length < from + drafts.length) throw new WorkerCallError('/inference/v1/generate answer has no prompt_logprobs for the drafts', null);
  const positions: ScoredPosition[] = [];
  for (let i = 0; i < drafts.length; i++) {
    const entry = pl[from + i];
    if (!entry || typeof entry !== 'object' || !(String(drafts[i]) in entry)) return null;
    const scored = scoredPosition(entry);
    if (scored === null || scored === 'malformed') return null;
    positions.push(scored);
  }
  const ids = c?.token_ids;
  if (!Array.isArray(ids) || !Number.isInteger(ids[0])) throw new WorkerCallError('/inference/v1/generate answer has no choices[0].token_ids', null);
  const piece = c.logprobs?.content?.[0]?.token;
  const fr = c.finish_reason;
  return { positions, next: { token: ids[0], text: typeof piece === 'string' ? piece : '', finishReason: fr === 'stop' || fr === 'length' ? fr : null } };
}
