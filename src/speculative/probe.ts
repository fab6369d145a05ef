/**
 * Start-up capability checks of a cascade's pools. Verification needs, from the workers' API:
 *   - the target: /tokenize (prompts are tokenized where the model runs, chat template included)
 *     and /v1/completions accepting token-id prompts with `prompt_logprobs` (each position's
 *     logprob, rank and text) and `return_tokens_as_token_ids`;
 *   - the draft: the same tokenizer as the target, and /v1/completions returning per-token
 *     logprobs of the top candidates with `return_tokens_as_token_ids`.
 * An SGLang target (`engine: sglang`) is asked instead for /v1/tokenize and /generate scoring
 * token ids with return_logprob from logprob_start_len (verify-call.ts).
 * One worker per pool that answers is asked (workers that do not answer are skipped); each
 * missing capability becomes one problem line naming the pool, the worker and the capability.
 */
import type { WorkerState } from '../fleet/worker-state.js';
import type { CascadeModel } from './cascade.js';
import { parseSglangVerification } from './verify-call.js';
import { parseDraft, parseVerification, postJson, WorkerCallError, type WorkerPools } from './worker-calls.js';

const PROBE_TEXT = 'The quick brown fox jumps over the lazy dog, and then it runs into the forest.';

export interface ProbeInput {
  /** Config path of the cascade, for messages. */
  at: string;
  cascade: CascadeModel;
  drafts: readonly WorkerState[];
  targets: readonly WorkerState[];
  pools: WorkerPools;
  timeoutMs: number;
}

export async function probeCascade(p: ProbeInput): Promise<{ problems: string[]; maxModelLen: number | null }> {
  const problems: string[] = [];
  let maxModelLen: number | null = null;
  const done = () => ({ problems, maxModelLen });
  const c = p.cascade;
  const ask = (w: WorkerState, path: string, body: unknown) =>
    postJson({ pool: p.pools.for(w.id, w.url), workerId: w.id, requestId: `kvgate-probe-${w.id}` }, path, body, AbortSignal.timeout(p.timeoutMs));

  // The target: tokenize, then score with prompt_logprobs.
  const tokenizePath = (w: WorkerState) => (w.engine === 'sglang' ? '/v1/tokenize' : '/tokenize');
  const target = await firstAnswering(p.targets, (w) => ask(w, tokenizePath(w), { model: c.model, prompt: PROBE_TEXT }));
  if (!target.ok) {
    problems.push(`${p.at}.targetPool: no worker of pool '${c.targetPool}' answered the capability probe (${target.error})`);
    return done();
  }
  const tw = target.worker;
  const ids = target.value?.tokens;
  if (!Array.isArray(ids) || ids.length < 2 || !ids.every((x: unknown) => Number.isInteger(x))) {
    problems.push(`${p.at}.targetPool: worker ${tw.id} of pool '${c.targetPool}' does not return token ids from POST ${tokenizePath(tw)}, which the cascade uses to tokenize prompts`);
    return done();
  }
  if (tw.engine === 'sglang') {
    try {
      const json = await ask(tw, '/generate', {
        input_ids: ids,
        return_logprob: true,
        logprob_start_len: 0,
        top_logprobs_num: c.topLogprobs,
        return_text_in_logprobs: true,
        sampling_params: { max_new_tokens: 1, temperature: 0 },
      });
      const v = parseSglangVerification(json, ids.slice(1));
      if (v.positions[0]!.raw.size < Math.min(2, c.topLogprobs)) throw new WorkerCallError(`input_top_logprobs lack the top ${c.topLogprobs} alternatives`, null);
    } catch (e) {
      problems.push(
        `${p.at}.targetPool: worker ${tw.id} of pool '${c.targetPool}' cannot score prompts for verification: SGLang's POST /generate with input_ids, ` +
          `return_logprob, logprob_start_len and top_logprobs_num: ${c.topLogprobs} must return meta_info.input_token_logprobs and input_top_logprobs (${(e as Error).message})`,
      );
    }
  } else try {
    const json = await ask(tw, '/v1/completions', {
      model: c.model,
      prompt: ids,
      max_tokens: 1,
      temperature: 0,
      prompt_logprobs: c.topLogprobs,
      logprobs: 0,
      return_tokens_as_token_ids: true,
    });
    const v = parseVerification(json, 1, ids.length - 1);
    const first = v.positions[0]!;
    if (!first.raw.has(ids[1]) || first.raw.size < Math.min(2, c.topLogprobs)) throw new WorkerCallError(`prompt_logprobs[1] lacks the prompt token or its top ${c.topLogprobs} alternatives`, null);
  } catch (e) {
    problems.push(
      `${p.at}.targetPool: worker ${tw.id} of pool '${c.targetPool}' cannot score prompts for verification: POST /v1/completions with a token-id prompt, ` +
        `prompt_logprobs: ${c.topLogprobs} and return_tokens_as_token_ids must return choices[0].prompt_logprobs (vLLM's prompt log-probabilities) ` +
        `and the generated token as 'token_id:<id>' (${(e as Error).message})`,
    );
  }

  // vLLM lists max_model_len with the model: a chat answer without max_tokens may run to it.
  try {
    const r = await p.pools.for(tw.id, tw.url).request({ method: 'GET', path: '/v1/models', signal: AbortSignal.timeout(p.timeoutMs) });
    const j = r.statusCode === 200 ? ((await r.body.json()) as any) : (await r.body.text(), null);
    const m = Array.isArray(j?.data) ? j.data.find((x: any) => x?.id === c.model) : undefined;
    if (Number.isInteger(m?.max_model_len) && m.max_model_len > 0) maxModelLen = m.max_model_len;
  } catch {
    // Unknown: chat requests without max_tokens take the plain path.
  }

  // The draft: same tokenizer, per-token logprobs as token ids.
  const draft = await firstAnswering(p.drafts, (w) => ask(w, '/tokenize', { model: c.draftModel, prompt: PROBE_TEXT }));
  if (!draft.ok) {
    problems.push(`${p.at}.draftPool: no worker of pool '${c.draftPool}' answered the capability probe (${draft.error})`);
    return done();
  }
  const dw = draft.worker;
  const dids = draft.value?.tokens;
  if (!Array.isArray(dids) || dids.length !== ids.length || dids.some((x: unknown, i: number) => x !== ids[i])) {
    problems.push(`${p.at}: pools '${c.draftPool}' and '${c.targetPool}' do not share a tokenizer (${dw.id} and ${tw.id} tokenize the same text differently); a cascade needs one`);
    return done();
  }
  try {
    const json = await ask(dw, '/v1/completions', {
      model: c.draftModel,
      prompt: ids,
      max_tokens: 2,
      temperature: 1,
      seed: 1,
      logprobs: c.topLogprobs,
      return_tokens_as_token_ids: true,
    });
    const d = parseDraft(json);
    if (d.tokens.length === 0 || d.candidates[0]!.size < Math.min(2, c.topLogprobs)) throw new WorkerCallError(`top_logprobs lack the top ${c.topLogprobs} candidates`, null);
  } catch (e) {
    problems.push(
      `${p.at}.draftPool: worker ${dw.id} of pool '${c.draftPool}' cannot propose draft tokens: POST /v1/completions with a token-id prompt, ` +
        `logprobs: ${c.topLogprobs} and return_tokens_as_token_ids must return each generated token and its top candidates' logprobs as 'token_id:<id>' (${(e as Error).message})`,
    );
  }
  return done();
}

/** Ask workers in turn until one answers at all (a worker's 4xx is an answer; a refused connection is not). */
async function firstAnswering(
  workers: readonly WorkerState[],
  ask: (w: WorkerState) => Promise<any>,
): Promise<{ ok: true; worker: WorkerState; value: any } | { ok: false; error: string }> {
  let last = 'the pool has no workers';
  for (const w of workers) {
    try {
      return { ok: true, worker: w, value: await ask(w) };
    } catch (e) {
      if (e instanceof WorkerCallError && e.status !== null) return { ok: true, worker: w, value: null };
      last = `${w.id}: ${(e as Error).message}`;
    }
  }
  return { ok: false, error: last };
}
