/**
 * A live simulated vLLM worker: a real HTTP server that speaks vLLM's OpenAI-compatible API,
 * /metrics, /tokenize and /health, backed by the engine model paced in real time (optionally
 * compressed by `speed`). Output text comes from the synthetic language model through the shared
 * tokenizer, so it is deterministic given the prompt, seed and sampling parameters.
 *
 * What the gateway can observe is what it would observe on vLLM: streamed tokens arrive once per
 * engine step, a client disconnect aborts the engine request (counted under
 * vllm:request_success_total{finished_reason="abort"}), prompt-too-long and unknown-model errors
 * come back with vLLM's statuses and bodies, and KV-cache events can be published on ZeroMQ.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Engine } from '../../engine/engine.js';
import { buildEngineConfig } from '../../engine/profiles.js';
import { createSampler, createSyntheticLm, type SampledLogprob, type SyntheticLm } from '../../engine/synthetic-lm.js';
import type { EngineConfig, EngineModel, FinishReason, FinishedOutput } from '../../engine/types.js';
import type { KvEvent } from '../../kv/events.js';
import { readBody } from '../../api/body.js';
import { EOS_TOKEN_ID, estimateTokenizer, renderChat } from '../../tokenizer/index.js';
import { seedFromString } from '../../util/rng.js';
import { EngineDriver } from './engine-driver.js';
import { Generation } from './generation.js';
import { KvEventPublisher } from './kv-event-publisher.js';
import {
  MAX_LOGPROBS,
  SSE_DONE,
  SimError,
  badRequest,
  chatSchema,
  completionSchema,
  detokenizeSchema,
  notFound,
  parseBody,
  sseData,
  stopList,
  tokenizeSchema,
  unavailable,
  usage,
  type ChatBody,
  type CompletionBody,
} from './openai-protocol.js';
import { VllmMetrics } from './vllm-metrics-exporter.js';

/** The subset of a pino logger the worker uses. */
export interface SimLogger {
  info(obj: unknown, msg?: string): void;
  warn(obj: unknown, msg?: string): void;
}

export interface SimWorkerOptions {
  /** Default 127.0.0.1. */
  host?: string;
  /** 0 (default) = an ephemeral port. */
  port?: number;
  /** Served model name, checked against the request's `model`. Default 'llama-3.1-8b'. */
  model?: string;
  /** Engine profile (src/engine/profiles.ts) when the served name is not one. Default: `model`. */
  profile?: string;
  /** GPU profile: h100 (default), a100, a10g. */
  gpu?: string;
  tp?: number;
  /** Time compression: 10 → steps take a tenth of their modelled time. Default 1. */
  speed?: number;
  /** Overrides the number of KV blocks computed from GPU memory. */
  numGpuBlocks?: number;
  maxNumSeqs?: number;
  maxNumBatchedTokens?: number;
  blockSize?: number;
  gpuMemoryUtilization?: number;
  maxModelLen?: number;
  enablePrefixCaching?: boolean;
  /** Seed of the engine's block-hash chain (random per process otherwise, like vLLM). */
  hashSeed?: number;
  /** Publish KV-cache events on ZeroMQ (vLLM's --kv-events-config). */
  kvEvents?: { endpoint: string | number; replayEndpoint?: string | number; topic?: string };
  /** Emit pre-0.9 metric names (vllm:gpu_cache_usage_perc, vllm:gpu_prefix_cache_*). */
  legacyMetricNames?: boolean;
  /**
   * Chat requests without max_tokens run until EOS or the context limit, as on vLLM, but at most
   * this many tokens (greedy sampling of the synthetic model may never emit EOS). Default 1024.
   */
  defaultMaxChatTokens?: number;
  /** Make the synthetic LM a draft model of another (speculative-decoding experiments). */
  draftOf?: string;
  draftFidelity?: number;
  logger?: SimLogger;
}

export interface SimWorkerStats {
  /** Generation requests accepted (one per prompt). */
  requests: number;
  /** Requests aborted because their client went away. */
  clientAborts: number;
  /** Generation requests not yet finished. */
  inFlight: number;
}

export interface SimWorker {
  url: string;
  host: string;
  port: number;
  /** Served model name. */
  model: string;
  engine: EngineModel;
  speed: number;
  kvEventsEndpoint?: string;
  kvReplayEndpoint?: string;
  stats(): SimWorkerStats;
  /** Ends in-flight responses (streams get an error event, others a 503), frees the ports. */
  close(): Promise<void>;
}

const BODY_LIMIT = 64 * 1024 * 1024;

export async function startSimWorker(opts: SimWorkerOptions = {}): Promise<SimWorker> {
  const model = opts.model ?? 'llama-3.1-8b';
  const built = buildEngineConfig({
    gpu: opts.gpu ?? 'h100',
    model: opts.profile ?? model,
    tp: opts.tp,
    gpuMemoryUtilization: opts.gpuMemoryUtilization,
    blockSize: opts.blockSize,
    maxNumSeqs: opts.maxNumSeqs,
    maxNumBatchedTokens: opts.maxNumBatchedTokens,
    enablePrefixCaching: opts.enablePrefixCaching,
    hashSeed: opts.hashSeed,
    kvEvents: opts.kvEvents !== undefined,
    emitTokens: true,
    maxModelLen: opts.maxModelLen,
  });
  const config: EngineConfig = opts.numGpuBlocks !== undefined ? { ...built, numGpuBlocks: opts.numGpuBlocks } : built;
  const engine = new Engine(config);
  // A draft LM agrees with its target where it should; either way it is named by the served model.
  const lm = createSyntheticLm(model, opts.draftOf !== undefined ? { draftOf: opts.draftOf, fidelity: opts.draftFidelity } : {});
  const sim = new SimWorkerServer({
    model,
    engine,
    lm,
    speed: opts.speed ?? 1,
    legacyMetricNames: opts.legacyMetricNames ?? false,
    gpuMemoryUtilization: opts.gpuMemoryUtilization ?? 0.9,
    defaultMaxChatTokens: opts.defaultMaxChatTokens ?? 1024,
  });

  let publisher: KvEventPublisher | null = null;
  let kvEndpoints: { endpoint: string; replayEndpoint?: string } | null = null;
  if (opts.kvEvents) {
    publisher = new KvEventPublisher({
      endpoint: opts.kvEvents.endpoint,
      replayEndpoint: opts.kvEvents.replayEndpoint,
      topic: opts.kvEvents.topic,
    });
    try {
      kvEndpoints = await publisher.start();
    } catch (err) {
      await publisher.close();
      sim.stop();
      throw err;
    }
    sim.kvPublisher = publisher;
  }

  const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => sim.handle(req, res));
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (err) {
    sim.stop();
    await publisher?.close();
    throw err;
  }
  const addr = server.address() as AddressInfo;
  const host = opts.host ?? '127.0.0.1';
  const urlHost = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  const url = `http://${urlHost === '0.0.0.0' ? '127.0.0.1' : urlHost === '[::]' ? '[::1]' : urlHost}:${addr.port}`;
  opts.logger?.info(
    { url, model, gpu: opts.gpu ?? 'h100', numGpuBlocks: config.numGpuBlocks, blockSize: config.blockSize, speed: sim.driver.speed, kvEvents: kvEndpoints },
    'simulated vLLM worker listening',
  );

  let closing: Promise<void> | null = null;
  const worker: SimWorker = {
    url,
    host,
    port: addr.port,
    model,
    engine,
    speed: sim.driver.speed,
    stats: () => sim.stats(),
    close() {
      closing ??= (async () => {
        sim.shutdown();
        await new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        });
        await publisher?.close();
      })();
      return closing;
    },
  };
  if (kvEndpoints) {
    worker.kvEventsEndpoint = kvEndpoints.endpoint;
    if (kvEndpoints.replayEndpoint !== undefined) worker.kvReplayEndpoint = kvEndpoints.replayEndpoint;
  }
  return worker;
}

// ---------------------------------------------------------------------------------------------

interface ServerParts {
  model: string;
  engine: EngineModel;
  lm: SyntheticLm;
  speed: number;
  legacyMetricNames: boolean;
  gpuMemoryUtilization: number;
  defaultMaxChatTokens: number;
}

/** What one generation request asks of the engine, after validation. */
interface SeqSpec {
  /** Which of the request's n samples of this prompt this is (0 = the first). */
  sample: number;
  promptIds: number[];
  /** Prompt text, for echo. */
  promptText: string;
  maxTokens: number;
}

interface GenParams {
  kind: 'completion' | 'chat';
  stream: boolean;
  includeUsage: boolean;
  continuousUsage: boolean;
  echo: boolean;
  /** Top alternatives per token, or null when logprobs were not requested. */
  logprobs: number | null;
  seed: number | undefined;
  temperature: number;
  topP: number;
  stop: string[];
  stopTokenIds: number[];
  ignoreEos: boolean;
  includeStopStrInOutput: boolean;
  priority: number;
}

class SimWorkerServer {
  readonly model: string;
  readonly engine: EngineModel;
  readonly driver: EngineDriver;
  readonly metrics: VllmMetrics;
  kvPublisher: KvEventPublisher | null = null;
  private readonly lm: SyntheticLm;
  private readonly defaultMaxChatTokens: number;
  private readonly exchanges = new Set<Exchange>();
  private requests = 0;
  private clientAborts = 0;
  private shuttingDown = false;

  constructor(p: ServerParts) {
    this.model = p.model;
    this.engine = p.engine;
    this.lm = p.lm;
    this.defaultMaxChatTokens = p.defaultMaxChatTokens;
    this.metrics = new VllmMetrics(p.engine, {
      modelName: p.model,
      legacyNames: p.legacyMetricNames,
      gpuMemoryUtilization: p.gpuMemoryUtilization,
    });
    this.driver = new EngineDriver(p.engine, {
      speed: p.speed,
      onStep: (step) => {
        if (step.kvEvents.length > 0) this.kvPublisher?.publish(step.kvEvents);
      },
    });
  }

  stats(): SimWorkerStats {
    return { requests: this.requests, clientAborts: this.clientAborts, inFlight: this.driver.inFlight };
  }

  stop(): void {
    this.driver.stop();
  }

  /** End every in-flight exchange and stop the engine loop. */
  shutdown(): void {
    this.shuttingDown = true;
    for (const ex of [...this.exchanges]) ex.abortForShutdown();
    this.driver.stop();
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    this.route(req, res).catch((err: unknown) => {
      if (err instanceof SimError) return sendJsonError(res, err);
      sendJsonError(res, new SimError(500, 'InternalServerError', err instanceof Error ? err.message : String(err)));
    });
  }

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?', 1)[0]!;
    const method = req.method ?? 'GET';
    const post = (fn: (body: unknown) => Promise<void> | void) => this.withBody(req, res, method, fn);
    switch (path) {
      case '/health':
        return this.get(method, res, () => {
          res.writeHead(200, { 'content-length': 0 });
          res.end();
        });
      case '/ping':
        return this.get(method, res, () => sendJson(res, 200, {}));
      case '/version':
        return this.get(method, res, () => sendJson(res, 200, { version: '0.10.1-sim' }));
      case '/v1/models':
        return this.get(method, res, () => sendJson(res, 200, this.modelList()));
      case '/metrics':
        return this.get(method, res, async () => {
          const text = await this.metrics.render();
          res.writeHead(200, { 'content-type': this.metrics.contentType, 'content-length': Buffer.byteLength(text) });
          res.end(text);
        });
      case '/v1/completions':
        return post((b) => this.generate(req, res, 'completion', b));
      case '/v1/chat/completions':
        return post((b) => this.generate(req, res, 'chat', b));
      case '/reset_prefix_cache':
        // vLLM's development endpoint: drop every cached block no running request uses.
        if (method !== 'POST') return sendJson(res, 405, { detail: 'Method Not Allowed' }, { allow: 'POST' });
        this.resetPrefixCache();
        res.writeHead(200, { 'content-length': 0 });
        return void res.end();
      case '/tokenize':
        return post((b) => this.tokenize(res, b));
      case '/detokenize':
        return post((b) => this.detokenize(res, b));
      default:
        // FastAPI's body for an unknown route.
        return sendJson(res, 404, { detail: 'Not Found' });
    }
  }

  private async get(method: string, res: ServerResponse, fn: () => void | Promise<void>): Promise<void> {
    if (method !== 'GET' && method !== 'HEAD') return sendJson(res, 405, { detail: 'Method Not Allowed' }, { allow: 'GET' });
    await fn();
  }

  private async withBody(
    req: IncomingMessage,
    res: ServerResponse,
    method: string,
    fn: (body: unknown) => Promise<void> | void,
  ): Promise<void> {
    if (method !== 'POST') return sendJson(res, 405, { detail: 'Method Not Allowed' }, { allow: 'POST' });
    const r = await readBody(req, BODY_LIMIT);
    if (!r.ok) {
      if (r.reason === 'too_large') throw new SimError(413, 'BadRequestError', `Request body exceeds ${BODY_LIMIT} bytes`);
      return; // client went away while sending
    }
    let body: unknown;
    try {
      body = JSON.parse(r.body.toString('utf8'));
    } catch (err) {
      throw badRequest(`JSON decode error: ${err instanceof Error ? err.message : String(err)}`);
    }
    if (body === null || typeof body !== 'object' || Array.isArray(body)) throw badRequest('Input should be a valid dictionary or object to extract fields from');
    await fn(body);
  }

  private resetPrefixCache(): void {
    this.engine.resetPrefixCache();
    // The engine hands these to the next step; when idle there may be none for a while.
    const extra = this.engine as Partial<{ takeKvEvents(): KvEvent[] }>;
    if (typeof extra.takeKvEvents === 'function') {
      const events = extra.takeKvEvents();
      if (events.length > 0) this.kvPublisher?.publish(events);
    }
  }

  private modelList(): unknown {
    return {
      object: 'list',
      data: [
        {
          id: this.model,
          object: 'model',
          created: Math.floor(Date.now() / 1000),
          owned_by: 'vllm',
          root: this.model,
          parent: null,
          max_model_len: this.engine.config.maxModelLen,
          permission: [
            {
              id: `modelperm-${randomUUID().replaceAll('-', '')}`,
              object: 'model_permission',
              created: Math.floor(Date.now() / 1000),
              allow_create_engine: false,
              allow_sampling: true,
              allow_logprobs: true,
              allow_search_indices: false,
              allow_view: true,
              allow_fine_tuning: false,
              organization: '*',
              group: null,
              is_blocking: false,
            },
          ],
        },
      ],
    };
  }

  private checkModel(model: string | null | undefined): void {
    if (model !== undefined && model !== null && model !== this.model) {
      throw notFound(`The model \`${model}\` does not exist.`);
    }
  }

  private tokenize(res: ServerResponse, raw: unknown): void {
    const body = parseBody(tokenizeSchema, raw);
    this.checkModel(body.model);
    const text =
      'prompt' in body ? body.prompt : renderChat(body.messages, (body as { add_generation_prompt?: boolean }).add_generation_prompt ?? true);
    const tokens = estimateTokenizer.encode(text as string);
    sendJson(res, 200, { count: tokens.length, max_model_len: this.engine.config.maxModelLen, tokens, token_strs: null });
  }

  private detokenize(res: ServerResponse, raw: unknown): void {
    const body = parseBody(detokenizeSchema, raw);
    this.checkModel(body.model);
    sendJson(res, 200, { prompt: estimateTokenizer.decode(body.tokens) });
  }

  // ---- generation ----

  private generate(req: IncomingMessage, res: ServerResponse, kind: 'completion' | 'chat', raw: unknown): void {
    if (this.shuttingDown) throw unavailable('The server is shutting down.');
    const { params, seqs } = kind === 'completion' ? this.completionSpec(parseBody(completionSchema, raw)) : this.chatSpec(parseBody(chatSchema, raw));
    for (const s of seqs) {
      if (s.promptIds.length === 0) throw badRequest('The prompt cannot be empty.', 'prompt');
      const err = this.engine.check(s.promptIds.length, s.maxTokens);
      if (err) throw badRequest(err.message);
    }
    const headerId = req.headers['x-request-id'];
    const baseId = typeof headerId === 'string' && headerId.length > 0 && headerId.length <= 200 ? headerId : randomUUID().replaceAll('-', '');
    const id = `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${baseId}`;
    res.setHeader('x-request-id', baseId);
    const ex = new Exchange(this, res, id, params, seqs);
    this.exchanges.add(ex);
    ex.start();
  }

  private commonParams(body: CompletionBody | ChatBody, kind: 'completion' | 'chat'): Omit<GenParams, 'echo' | 'logprobs'> {
    this.checkModel(body.model);
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
    };
  }

  private completionSpec(body: CompletionBody): { params: GenParams; seqs: SeqSpec[] } {
    const common = this.commonParams(body, 'completion');
    if (body.stream_options && !body.stream) throw badRequest('Stream options can only be defined when `stream=True`.', 'stream_options');
    const logprobs = body.logprobs ?? null;
    if (logprobs !== null && logprobs > MAX_LOGPROBS) {
      throw badRequest(`Requested sample logprobs of ${logprobs}, which is greater than max allowed: ${MAX_LOGPROBS}`, 'logprobs');
    }
    const maxTokens = body.max_tokens ?? 16;
    if (maxTokens < 1) throw badRequest(`max_tokens must be at least 1, got ${maxTokens}.`, 'max_tokens');
    const p = body.prompt;
    const prompts: Array<string | number[]> =
      typeof p === 'string' ? [p] : p.length > 0 && typeof p[0] === 'number' ? [p as number[]] : (p as Array<string | number[]>);
    const seqs = prompts.flatMap((x) =>
      samples(body.n, typeof x === 'string' ? estimateTokenizer.encode(x) : x, typeof x === 'string' ? x : estimateTokenizer.decode(x), maxTokens),
    );
    return { params: { ...common, echo: body.echo === true, logprobs }, seqs };
  }

  private chatSpec(body: ChatBody): { params: GenParams; seqs: SeqSpec[] } {
    const common = this.commonParams(body, 'chat');
    if (body.stream_options && !body.stream) throw badRequest('Stream options can only be defined when `stream=True`.', 'stream_options');
    const top = body.top_logprobs ?? null;
    if (top !== null && top > MAX_LOGPROBS) {
      throw badRequest(`Requested sample logprobs of ${top}, which is greater than max allowed: ${MAX_LOGPROBS}`, 'top_logprobs');
    }
    if (top !== null && top > 0 && body.logprobs !== true) {
      throw badRequest('when using `top_logprobs`, `logprobs` must be set to true.', 'top_logprobs');
    }
    const text = renderChat(body.messages, body.add_generation_prompt ?? true);
    const promptIds = estimateTokenizer.encode(text);
    const requested = body.max_completion_tokens ?? body.max_tokens ?? null;
    if (requested !== null && requested < 1) throw badRequest(`max_tokens must be at least 1, got ${requested}.`, 'max_tokens');
    const room = this.engine.config.maxModelLen - promptIds.length;
    const maxTokens = requested ?? Math.max(1, Math.min(room, this.defaultMaxChatTokens));
    return {
      params: { ...common, echo: false, logprobs: body.logprobs === true ? (top ?? 0) : null },
      seqs: samples(body.n, promptIds, text, maxTokens),
    };
  }

  // ---- called by exchanges ----

  submit(ex: Exchange, seq: SeqRun, params: GenParams): void {
    const recorder = createSampler(this.lm, {
      seed: sampleSeed(params.seed, seq.spec),
      temperature: params.temperature,
      topP: params.topP,
      topLogprobs: params.logprobs ?? 0,
      recordLogprobs: params.logprobs !== null,
    });
    seq.logprobs = params.logprobs !== null ? recorder.logprobs : null;
    seq.gen = new Generation({
      stop: params.stop,
      stopTokenIds: params.stopTokenIds,
      ignoreEos: params.ignoreEos,
      includeStopStrInOutput: params.includeStopStrInOutput,
      logprobs: seq.logprobs,
    });
    seq.arrivalMs = this.driver.now();
    this.requests++;
    this.driver.submit(
      {
        id: seq.engineId,
        prompt: seq.spec.promptIds,
        maxTokens: seq.spec.maxTokens,
        sampler: recorder.sampler,
        eosTokenId: EOS_TOKEN_ID,
        ignoreEos: params.ignoreEos,
        priority: params.priority,
      },
      {
        onStarted: (cached, at) => {
          seq.cachedTokens = cached;
          seq.startedMs = at;
        },
        onOutput: (tokens, fin, at) => ex.onOutput(seq, tokens, fin, at),
      },
    );
  }

  /** The sequence ended on a stop string / stop token id the engine does not know about. */
  cancelEngine(seq: SeqRun): void {
    this.driver.cancel(seq.engineId);
  }

  recordFirstToken(seq: SeqRun, at: number): void {
    this.metrics.observeTimeToFirstToken(Math.max(0, at - seq.arrivalMs) / 1000);
  }

  recordInterToken(seconds: number): void {
    this.metrics.observeInterTokenLatency(seconds);
  }

  recordFinished(seq: SeqRun, reason: FinishReason, at: number): void {
    const started = seq.startedMs;
    const first = seq.firstTokenMs;
    this.metrics.observeFinished(reason, {
      e2e: Math.max(0, at - seq.arrivalMs) / 1000,
      queue: started === null ? null : Math.max(0, started - seq.arrivalMs) / 1000,
      prefill: started === null || first === null ? null : Math.max(0, first - started) / 1000,
      decode: first === null ? null : Math.max(0, at - first) / 1000,
      promptTokens: seq.spec.promptIds.length,
      outputTokens: seq.gen.tokens.length,
    });
  }

  clientGone(ex: Exchange): void {
    this.clientAborts++;
    this.metrics.countClientDisconnect();
    this.exchanges.delete(ex);
  }

  done(ex: Exchange): void {
    this.exchanges.delete(ex);
  }

  promptLogprobs(promptIds: readonly number[], top: number): Array<SampledLogprob | null> {
    return promptLogprobs(this.lm, promptIds, top);
  }

  now(): number {
    return this.driver.now();
  }
}

// ---------------------------------------------------------------------------------------------

const MAX_N = 128;

/** The n samples of one prompt: one engine request each (vLLM's parallel sampling). */
function samples(n: number | null | undefined, promptIds: number[], promptText: string, maxTokens: number): SeqSpec[] {
  return Array.from({ length: n ?? 1 }, (_, sample) => ({ sample, promptIds, promptText, maxTokens }));
}

/**
 * Sampling seed of one sample. The first sample uses the request's seed as given (absent → the
 * sampler derives one from the prompt), so n=1 output does not depend on n; the others get seeds
 * derived from it and their position, so the n samples differ but are reproducible.
 */
function sampleSeed(seed: number | undefined, spec: SeqSpec): number | undefined {
  if (spec.sample === 0) return seed;
  const base = seed ?? seedFromString(spec.promptIds.join(','));
  return seedFromString(`${base}/${spec.sample}`);
}

/** One prompt's run through the engine. */
interface SeqRun {
  index: number;
  engineId: string;
  spec: SeqSpec;
  gen: Generation;
  logprobs: SampledLogprob[] | null;
  cachedTokens: number;
  arrivalMs: number;
  startedMs: number | null;
  firstTokenMs: number | null;
  lastTokenMs: number;
  /** First streamed chunk not yet sent (chat: role chunk; completion: echo). */
  first: boolean;
}

/** An HTTP request in flight: its sequences and how their outputs are written. */
class Exchange {
  private readonly srv: SimWorkerServer;
  private readonly res: ServerResponse;
  private readonly id: string;
  private readonly params: GenParams;
  private readonly seqs: SeqRun[];
  private readonly created = Math.floor(Date.now() / 1000);
  private readonly object: string;
  private remaining: number;
  private ended = false;

  constructor(srv: SimWorkerServer, res: ServerResponse, id: string, params: GenParams, specs: SeqSpec[]) {
    this.srv = srv;
    this.res = res;
    this.id = id;
    this.params = params;
    this.object = params.kind === 'chat' ? (params.stream ? 'chat.completion.chunk' : 'chat.completion') : 'text_completion';
    this.seqs = specs.map((spec, index) => ({
      index,
      engineId: `${id}-${index}`,
      spec,
      gen: undefined as unknown as Generation, // set by submit()
      logprobs: null,
      cachedTokens: 0,
      arrivalMs: 0,
      startedMs: null,
      firstTokenMs: null,
      lastTokenMs: 0,
      first: true,
    }));
    this.remaining = specs.length;
  }

  start(): void {
    const res = this.res;
    res.on('close', () => {
      if (!this.ended) this.onClientGone();
    });
    if (this.params.stream) {
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' });
      res.flushHeaders();
    }
    for (const seq of this.seqs) this.srv.submit(this, seq, this.params);
  }

  onOutput(seq: SeqRun, tokens: readonly number[], fin: FinishedOutput | null, at: number): void {
    if (this.ended) return;
    const gen = seq.gen;
    if (tokens.length > 0) {
      if (seq.firstTokenMs === null) {
        seq.firstTokenMs = at;
        this.srv.recordFirstToken(seq, at);
      } else {
        this.srv.recordInterToken(Math.max(0, at - seq.lastTokenMs) / 1000);
      }
      seq.lastTokenMs = at;
    }
    const stopped = gen.append(tokens);
    if (stopped && !fin) this.srv.cancelEngine(seq);
    if (fin) {
      gen.finish(fin.reason);
      seq.cachedTokens = fin.cachedPromptTokens;
    }
    if (this.params.stream) this.writeChunk(seq);
    if (gen.finished) {
      this.srv.recordFinished(seq, gen.finishReason!, at);
      if (--this.remaining === 0) this.finish();
    }
  }

  // ---- streaming ----

  private writeChunk(seq: SeqRun): void {
    const gen = seq.gen;
    const delta = gen.takeDelta();
    const finished = gen.finished;
    const p = this.params;
    if (p.kind === 'chat') {
      if (seq.first) {
        seq.first = false;
        this.write(this.chunk([{ index: seq.index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]));
      }
      if (delta.text === '' && !finished && delta.numTokens === 0) return;
      if (delta.text === '' && !finished && p.logprobs === null) return;
      this.write(
        this.chunk([
          {
            index: seq.index,
            delta: { content: delta.text },
            logprobs: p.logprobs === null ? null : { content: this.chatLogprobs(seq, delta.firstToken, delta.numTokens) },
            finish_reason: finished ? gen.finishReason : null,
            ...(finished ? { stop_reason: gen.stopReason } : {}),
          },
        ]),
      );
      return;
    }
    let text = delta.text;
    let logprobs: unknown = null;
    if (seq.first) {
      seq.first = false;
      if (p.echo) text = seq.spec.promptText + text;
      if (p.logprobs !== null) logprobs = this.completionLogprobs(seq, delta.firstToken, delta.numTokens, p.echo);
    } else if (p.logprobs !== null) {
      logprobs = this.completionLogprobs(seq, delta.firstToken, delta.numTokens, false);
    }
    if (text === '' && !finished && logprobs === null) return;
    this.write(
      this.chunk([
        {
          index: seq.index,
          text,
          logprobs,
          finish_reason: finished ? gen.finishReason : null,
          stop_reason: finished ? gen.stopReason : null,
        },
      ]),
    );
  }

  private chunk(choices: unknown[]): Record<string, unknown> {
    const c: Record<string, unknown> = { id: this.id, object: this.object, created: this.created, model: this.srv.model, choices };
    if (this.params.continuousUsage) c.usage = this.usage();
    return c;
  }

  private write(obj: unknown): void {
    this.res.write(sseData(obj));
  }

  // ---- completion ----

  private usage() {
    let prompt = 0;
    let completion = 0;
    let cached = 0;
    for (const s of this.seqs) {
      if (s.spec.sample === 0) prompt += s.spec.promptIds.length; // n samples share one prompt
      completion += s.gen.tokens.length;
      if (s.spec.sample === 0) cached += s.cachedTokens;
    }
    return usage(prompt, completion, cached);
  }

  private finish(): void {
    this.ended = true;
    this.srv.done(this);
    const res = this.res;
    if (this.params.stream) {
      if (this.params.includeUsage) {
        this.write({ id: this.id, object: this.object, created: this.created, model: this.srv.model, choices: [], usage: this.usage() });
      }
      res.end(SSE_DONE);
      return;
    }
    sendJson(res, 200, this.params.kind === 'chat' ? this.chatBody() : this.completionBody());
  }

  private chatBody(): unknown {
    const p = this.params;
    return {
      id: this.id,
      object: 'chat.completion',
      created: this.created,
      model: this.srv.model,
      choices: this.seqs.map((s) => ({
        index: s.index,
        message: { role: 'assistant', reasoning_content: null, content: s.gen.text, tool_calls: [] },
        logprobs: p.logprobs === null ? null : { content: this.chatLogprobs(s, 0, s.gen.tokens.length) },
        finish_reason: s.gen.finishReason,
        stop_reason: s.gen.stopReason,
      })),
      usage: this.usage(),
      prompt_logprobs: null,
    };
  }

  private completionBody(): unknown {
    const p = this.params;
    return {
      id: this.id,
      object: 'text_completion',
      created: this.created,
      model: this.srv.model,
      choices: this.seqs.map((s) => ({
        index: s.index,
        text: p.echo ? s.spec.promptText + s.gen.text : s.gen.text,
        logprobs: p.logprobs === null ? null : this.completionLogprobs(s, 0, s.gen.tokens.length, p.echo),
        finish_reason: s.gen.finishReason,
        stop_reason: s.gen.stopReason,
        prompt_logprobs: null,
      })),
      usage: this.usage(),
    };
  }

  // ---- logprobs ----

  private chatLogprobs(seq: SeqRun, from: number, count: number): unknown[] {
    const out: unknown[] = [];
    for (let i = from; i < from + count; i++) {
      const lp = seq.gen.logprobAt(i);
      if (!lp) continue;
      const token = pieceOf(lp.token);
      out.push({
        token,
        logprob: clampLogprob(lp.logprob),
        bytes: [...Buffer.from(token, 'utf8')],
        top_logprobs: lp.top.map((t) => {
          const s = pieceOf(t.token);
          return { token: s, logprob: clampLogprob(t.logprob), bytes: [...Buffer.from(s, 'utf8')] };
        }),
      });
    }
    return out;
  }

  /** vLLM's legacy completion logprobs: tokens, token_logprobs, top_logprobs, text_offset. */
  private completionLogprobs(seq: SeqRun, from: number, count: number, withPrompt: boolean): unknown {
    const tokens: string[] = [];
    const tokenLogprobs: Array<number | null> = [];
    const topLogprobs: Array<Record<string, number> | null> = [];
    const textOffset: number[] = [];
    const top = this.params.logprobs ?? 0;
    let base = 0;
    if (withPrompt) {
      const ids = seq.spec.promptIds;
      const lps = this.srv.promptLogprobs(ids, top);
      let off = 0;
      for (let i = 0; i < ids.length; i++) {
        const piece = pieceOf(ids[i]!);
        tokens.push(piece);
        textOffset.push(off);
        off += piece.length;
        const lp = lps[i] ?? null;
        tokenLogprobs.push(lp === null ? null : clampLogprob(lp.logprob));
        topLogprobs.push(lp === null ? null : topDict(lp));
      }
      base = seq.spec.promptText.length;
    } else if (this.params.echo) {
      base = seq.spec.promptText.length;
    }
    for (let i = from; i < from + count; i++) {
      const lp = seq.gen.logprobAt(i);
      if (!lp) continue;
      tokens.push(pieceOf(lp.token));
      tokenLogprobs.push(clampLogprob(lp.logprob));
      topLogprobs.push(topDict(lp));
      textOffset.push(base + (seq.gen.offsets[i] ?? seq.gen.text.length));
    }
    return { text_offset: textOffset, token_logprobs: tokenLogprobs, tokens, top_logprobs: topLogprobs };
  }

  // ---- endings ----

  private onClientGone(): void {
    this.ended = true;
    for (const s of this.seqs) {
      if (s.gen.finished) continue;
      this.srv.cancelEngine(s);
      s.gen.finish('abort');
      this.srv.recordFinished(s, 'abort', this.srv.now());
    }
    this.srv.clientGone(this);
  }

  abortForShutdown(): void {
    if (this.ended) return;
    this.ended = true;
    for (const s of this.seqs) if (!s.gen.finished) this.srv.cancelEngine(s);
    this.srv.done(this);
    const err = unavailable('The server is shutting down.');
    if (this.params.stream) this.res.end(sseData(err.body()));
    else sendJsonError(this.res, err);
  }
}

// ---------------------------------------------------------------------------------------------

/** The synthetic LM's log-probability of each prompt token given what precedes it (null for the first). */
function promptLogprobs(lm: SyntheticLm, ids: readonly number[], top: number): Array<SampledLogprob | null> {
  const out: Array<SampledLogprob | null> = [null];
  for (let i = 1; i < ids.length; i++) {
    const d = lm.distribution(ids, i);
    const t = ids[i]!;
    let logprob = OUTSIDE_TOP_K_LOGPROB;
    for (let k = 0; k < d.tokens.length; k++) {
      if (d.tokens[k] === t) {
        logprob = d.logprobs[k]!;
        break;
      }
    }
    const alts: Array<{ token: number; logprob: number }> = [];
    for (let k = 0; k < Math.min(top, d.tokens.length); k++) alts.push({ token: d.tokens[k]!, logprob: d.logprobs[k]! });
    out.push({ token: t, logprob, top: alts });
  }
  return out;
}

/**
 * The synthetic model's distributions are sparse (TOP_K candidates): a prompt token outside them
 * gets this floor rather than -inf.
 */
const OUTSIDE_TOP_K_LOGPROB = -20;

function pieceOf(id: number): string {
  return estimateTokenizer.idToPiece(id);
}

/** vLLM clamps -inf to -9999.0 so the JSON stays valid. */
function clampLogprob(x: number): number {
  return Math.max(x, -9999);
}

/** {token: logprob} of the alternatives plus the sampled token, as vLLM's legacy format has it. */
function topDict(lp: SampledLogprob): Record<string, number> {
  const d: Record<string, number> = {};
  for (const t of lp.top) d[pieceOf(t.token)] = clampLogprob(t.logprob);
  d[pieceOf(lp.token)] = clampLogprob(lp.logprob);
  return d;
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  const payload = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), ...headers });
  res.end(payload);
}

function sendJsonError(res: ServerResponse, err: SimError): void {
  sendJson(res, err.status, err.body());
}
