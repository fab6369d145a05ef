/**
 * The engines' native token-in routes, beside the OpenAI ones: one request, token ids in, one
 * engine run, a JSON answer.
 *
 * - SGLang's `POST /generate` (`kvgate sim --engine sglang`): the fields of GenerateReqInput
 *   (sgl-project/sglang python/sglang/srt/managers/io_struct.py) — `text` or `input_ids`,
 *   `sampling_params` {max_new_tokens, temperature, top_p, stop_token_ids, ignore_eos,
 *   sampling_seed}, `return_logprob`, `logprob_start_len`, `top_logprobs_num`,
 *   `return_text_in_logprobs` — answered as the tokenizer manager builds it
 *   (managers/tokenizer_manager.py): `{text, output_ids, meta_info: {id, finish_reason,
 *   prompt_tokens, completion_tokens, cached_tokens, input_token_logprobs, …}}`, each logprob a
 *   `[logprob, token_id, text|null]` triple. `input_token_logprobs` covers prompt positions
 *   logprob_start_len … end, its first entry padded with null
 *   (scheduler_output_processor_mixin.py: "Always pad the first one with None"). With logprobs
 *   asked for, the prefix match is capped at logprob_start_len (managers/schedule_batch.py,
 *   Req._compute_max_prefix_len): the prompt before it is reused, the positions after computed.
 * - vLLM's `POST /inference/v1/generate` (vllm/entrypoints/serve/disagg/protocol.py): `{token_ids,
 *   sampling_params: <SamplingParams>}` → `{request_id, choices: [{index, token_ids, logprobs,
 *   finish_reason}], prompt_logprobs}`. `skip_reading_prefix_cache` defaults to true when
 *   prompt_logprobs are asked for (vllm/sampling_params.py); set to false, the cached prefix is
 *   read and its rows have no logits: vLLM leaves them uninitialised
 *   (gpu_model_runner.py, _get_prompt_logprobs_dict), the simulated worker null.
 *
 * Batched bodies (lists of prompts) and streaming are not simulated on these routes: a 400 says so.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import type { EngineModel, FinishReason } from '../../engine/types.js';
import { createSampler, type SampledLogprob, type SyntheticLm } from '../../engine/synthetic-lm.js';
import { EOS_TOKEN_ID, estimateTokenizer } from '../../tokenizer/index.js';
import type { EngineDriver } from './engine-driver.js';
import { vllmPromptLogprobs } from './logprobs.js';
import { SimError, badRequest, parseBody, sendJson, unavailable } from './openai-protocol.js';
import type { SimMetricsExporter } from './sglang-metrics-exporter.js';

/** What the native routes need of the worker. */
export interface NativeHost {
  readonly model: string;
  readonly engine: EngineModel;
  readonly driver: EngineDriver;
  readonly metrics: SimMetricsExporter;
  /** The synthetic LM in force now. */
  lm(): SyntheticLm;
  /** Count an accepted generation request (the worker's stats). */
  countRequest(): void;
  readonly shuttingDown: boolean;
}

/** One engine run, as the native routes ask for it. */
interface NativeJob {
  promptIds: number[];
  maxTokens: number;
  temperature: number;
  topP: number;
  seed: number | undefined;
  /** Alternatives recorded per output token. */
  topLogprobs: number;
  ignoreEos: boolean;
  stopTokenIds: readonly number[];
  priority: number;
  skipPrefixCache: boolean;
  prefixCacheLimit?: number;
}

interface NativeResult {
  id: string;
  outputIds: number[];
  logprobs: SampledLogprob[];
  reason: FinishReason;
  /** The stop token the output ended on, if it ended on one. */
  matched: number | null;
  cachedTokens: number;
  e2eSeconds: number;
}

const tokenIds = z.array(z.int().nonnegative());
const intOrNull = z.int().nullable().optional();

const sglangBody = z.looseObject({
  text: z.string().optional(),
  input_ids: tokenIds.optional(),
  sampling_params: z
    .looseObject({
      max_new_tokens: z.int().nonnegative().optional(),
      temperature: z.number().nonnegative().optional(),
      top_p: z.number().gt(0).max(1).optional(),
      stop_token_ids: tokenIds.nullable().optional(),
      ignore_eos: z.boolean().optional(),
      sampling_seed: z.int().nullable().optional(),
      n: z.literal(1).optional(),
    })
    .optional(),
  return_logprob: z.boolean().optional(),
  logprob_start_len: z.int().min(-1).optional(),
  top_logprobs_num: z.int().nonnegative().optional(),
  return_text_in_logprobs: z.boolean().optional(),
  stream: z.literal(false).optional(),
  rid: z.string().optional(),
  priority: z.int().optional(),
});

const vllmBody = z.looseObject({
  token_ids: tokenIds.min(1),
  model: z.string().nullable().optional(),
  sampling_params: z.looseObject({
    max_tokens: z.int().positive().nullable().optional(),
    temperature: z.number().nonnegative().nullable().optional(),
    top_p: z.number().gt(0).max(1).nullable().optional(),
    seed: intOrNull,
    logprobs: intOrNull,
    prompt_logprobs: intOrNull,
    skip_reading_prefix_cache: z.boolean().nullable().optional(),
    stop_token_ids: tokenIds.nullable().optional(),
    ignore_eos: z.boolean().optional(),
    n: z.literal(1).optional(),
  }),
  stream: z.literal(false).nullable().optional(),
  priority: z.int().optional(),
  request_id: z.string().optional(),
});

/** SGLang's error body for /generate (http_server.py: `{"error": {"message": …}}`). */
function sglangError(res: ServerResponse, status: number, message: string): void {
  sendJson(res, status, { error: { message } });
}

/** SGLang's POST /generate. */
export async function sglangGenerate(host: NativeHost, req: IncomingMessage, res: ServerResponse, raw: unknown): Promise<void> {
  const r = sglangBody.safeParse(raw);
  if (!r.success) {
    const issue = r.error.issues[0]!;
    const where = issue.path.join('.');
    const batched = issue.path[0] === 'input_ids' || issue.path[0] === 'text' || issue.path[0] === 'stream';
    return sglangError(res, 400, batched ? `${where}: batched or streamed /generate requests are not simulated (${issue.message})` : `${where}: ${issue.message}`);
  }
  const b = r.data;
  if ((b.text === undefined) === (b.input_ids === undefined)) return sglangError(res, 400, 'Either text or input_ids should be provided.');
  const promptIds = b.input_ids ?? estimateTokenizer.encode(b.text!);
  if (promptIds.length === 0) return sglangError(res, 400, 'The input is empty.');
  const sp = b.sampling_params ?? {};
  const maxTokens = sp.max_new_tokens ?? 128;
  const contextLen = host.engine.config.maxModelLen;
  if (promptIds.length + maxTokens > contextLen) {
    return sglangError(res, 400, `Requested token count exceeds the model's maximum context length of ${contextLen} tokens. You requested a total of ${promptIds.length + maxTokens} tokens: ${promptIds.length} tokens from the input messages and ${maxTokens} tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.`);
  }
  const returnLogprob = b.return_logprob === true;
  const start = b.logprob_start_len ?? -1;
  if (returnLogprob && start >= promptIds.length) return sglangError(res, 400, `logprob_start_len (${start}) is superfluous since input_ids has length ${promptIds.length}`);
  const top = returnLogprob ? (b.top_logprobs_num ?? 0) : 0;
  const job: NativeJob = {
    promptIds,
    maxTokens,
    temperature: sp.temperature ?? 1,
    topP: sp.top_p ?? 1,
    seed: sp.sampling_seed ?? undefined,
    topLogprobs: top,
    ignoreEos: sp.ignore_eos === true,
    stopTokenIds: sp.stop_token_ids ?? [],
    priority: b.priority ?? 0,
    skipPrefixCache: false,
    ...(returnLogprob && start >= 0 ? { prefixCacheLimit: start } : {}),
  };
  if (maxTokens === 0) return sglangError(res, 400, 'max_new_tokens = 0 is not simulated');
  const out = await run(host, req, res, job, b.rid ?? randomUUID().replaceAll('-', ''));
  if (out === null) return;
  const withText = b.return_text_in_logprobs === true;
  const triple = (lp: number | null, id: number): [number | null, number, string | null] => [lp, id, withText ? estimateTokenizer.idToPiece(id) : null];
  const meta: Record<string, unknown> = {
    id: out.id,
    finish_reason: out.reason === 'length' ? { type: 'length', length: out.outputIds.length } : out.reason === 'stop' ? { type: 'stop', matched: out.matched } : { type: 'abort', message: 'Abort' },
    prompt_tokens: promptIds.length,
    completion_tokens: out.outputIds.length,
    cached_tokens: out.cachedTokens,
    e2e_latency: out.e2eSeconds,
  };
  if (returnLogprob) {
    const lm = host.lm();
    const inputLp: Array<[number | null, number, string | null]> = [];
    const inputTop: Array<Array<[number | null, number, string | null]> | null> = [];
    if (start >= 0) {
      for (let j = start; j < promptIds.length; j++) {
        if (j === start) {
          inputLp.push(triple(null, promptIds[j]!));
          inputTop.push(null);
          continue;
        }
        const d = lm.distribution(promptIds, j);
        const at = d.tokens.indexOf(promptIds[j]!);
        inputLp.push(triple(at >= 0 ? d.logprobs[at]! : OUTSIDE_TOP_K_LOGPROB, promptIds[j]!));
        const alts: Array<[number | null, number, string | null]> = [];
        for (let k = 0; k < Math.min(top, d.tokens.length); k++) alts.push(triple(d.logprobs[k]!, d.tokens[k]!));
        inputTop.push(alts);
      }
    }
    meta.input_token_logprobs = inputLp;
    meta.output_token_logprobs = out.logprobs.map((lp) => triple(lp.logprob, lp.token));
    if (top > 0) {
      meta.input_top_logprobs = inputTop;
      meta.output_top_logprobs = out.logprobs.map((lp) => lp.top.map((t) => triple(t.logprob, t.token)));
    }
  }
  sendJson(res, 200, { text: estimateTokenizer.decode(out.outputIds), output_ids: out.outputIds, meta_info: meta });
}

/** vLLM's POST /inference/v1/generate. */
export async function vllmGenerate(host: NativeHost, req: IncomingMessage, res: ServerResponse, raw: unknown): Promise<void> {
  const b = parseBody(vllmBody, raw);
  if (b.model !== undefined && b.model !== null && b.model !== host.model) throw new SimError(404, 'NotFoundError', `The model \`${b.model}\` does not exist.`);
  const sp = b.sampling_params;
  const maxTokens = sp.max_tokens ?? 16;
  const err = host.engine.check(b.token_ids.length, maxTokens);
  if (err) throw badRequest(err.message);
  const promptLogprobs = sp.prompt_logprobs ?? null;
  const job: NativeJob = {
    promptIds: b.token_ids,
    maxTokens,
    temperature: sp.temperature ?? 1,
    topP: sp.top_p ?? 1,
    seed: sp.seed ?? undefined,
    topLogprobs: sp.logprobs ?? 0,
    ignoreEos: sp.ignore_eos === true,
    stopTokenIds: sp.stop_token_ids ?? [],
    priority: b.priority ?? 0,
    skipPrefixCache: sp.skip_reading_prefix_cache ?? promptLogprobs !== null,
  };
  const out = await run(host, req, res, job, b.request_id ?? randomUUID().replaceAll('-', ''));
  if (out === null) return;
  let prompt: unknown[] | null = null;
  if (promptLogprobs !== null) {
    // Row j scores prompt token j from position j - 1's logits: none for the cached positions.
    prompt = vllmPromptLogprobs(host.lm(), b.token_ids, promptLogprobs).map((e, j) => (j <= out.cachedTokens ? null : e));
  }
  const piece = (id: number): string => estimateTokenizer.idToPiece(id);
  const content = out.logprobs.map((lp) => ({
    token: piece(lp.token),
    logprob: lp.logprob,
    bytes: [...Buffer.from(piece(lp.token), 'utf8')],
    top_logprobs: lp.top.map((t) => ({ token: piece(t.token), logprob: t.logprob, bytes: [...Buffer.from(piece(t.token), 'utf8')] })),
  }));
  sendJson(res, 200, {
    request_id: out.id,
    choices: [{ index: 0, token_ids: out.outputIds, logprobs: sp.logprobs === null || sp.logprobs === undefined ? null : { content }, finish_reason: out.reason }],
    prompt_logprobs: prompt,
  });
}

/** The synthetic model's floor for a token outside its candidates (as logprobs.ts). */
const OUTSIDE_TOP_K_LOGPROB = -20;

/**
 * Run one job on the engine; null when it was answered otherwise (the client went away, the
 * worker is shutting down).
 */
function run(host: NativeHost, req: IncomingMessage, res: ServerResponse, job: NativeJob, id: string): Promise<NativeResult | null> {
  if (host.shuttingDown) throw unavailable('The server is shutting down.');
  const recorder = createSampler(host.lm(), { seed: job.seed, temperature: job.temperature, topP: job.topP, topLogprobs: job.topLogprobs, recordLogprobs: true });
  const engineId = `native-${id}-${randomUUID().slice(0, 8)}`;
  const arrival = host.driver.now();
  const stops = new Set(job.stopTokenIds);
  host.countRequest();
  return new Promise((resolve) => {
    let over = false;
    let cached = 0;
    let firstAt: number | null = null;
    let lastAt = arrival;
    const ids: number[] = [];
    const gone = (): void => {
      if (over) return;
      over = true;
      host.driver.cancel(engineId);
      host.metrics.countClientDisconnect();
      resolve(null);
    };
    res.on('close', gone);
    const finish = (reason: FinishReason, matched: number | null, at: number): void => {
      over = true;
      res.off('close', gone);
      host.metrics.observeFinished(reason, {
        e2e: Math.max(0, at - arrival) / 1000,
        queue: null,
        prefill: null,
        decode: firstAt === null ? null : Math.max(0, at - firstAt) / 1000,
        promptTokens: job.promptIds.length,
        outputTokens: ids.length,
      });
      resolve({ id, outputIds: ids, logprobs: recorder.logprobs.slice(0, ids.length), reason, matched, cachedTokens: cached, e2eSeconds: Math.max(0, at - arrival) / 1000 });
    };
    host.driver.submit(
      {
        id: engineId,
        prompt: job.promptIds,
        maxTokens: job.maxTokens,
        sampler: recorder.sampler,
        eosTokenId: EOS_TOKEN_ID,
        ignoreEos: job.ignoreEos,
        priority: job.priority,
        skipPrefixCache: job.skipPrefixCache,
        ...(job.prefixCacheLimit !== undefined ? { prefixCacheLimit: job.prefixCacheLimit } : {}),
      },
      {
        onStarted: (c) => {
          cached = c;
        },
        onOutput: (tokens, fin, at) => {
          if (over) return;
          if (tokens.length > 0) {
            if (firstAt === null) {
              firstAt = at;
              host.metrics.observeTimeToFirstToken(Math.max(0, at - arrival) / 1000);
            } else host.metrics.observeInterTokenLatency(Math.max(0, at - lastAt) / 1000 / tokens.length);
            lastAt = at;
          }
          for (const t of tokens) {
            ids.push(t);
            if (stops.has(t)) {
              host.driver.cancel(engineId);
              return finish('stop', t, at);
            }
          }
          if (fin !== null) finish(fin.reason, fin.reason === 'stop' && !job.ignoreEos ? (ids[ids.length - 1] ?? null) : null, at);
        },
      },
    );
    // Gone while the body was read (the socket closed before the engine took the request).
    if (res.socket === null || res.socket.destroyed) gone();
  });
}
