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
 *
 * This file starts a worker and holds its HTTP routes and engine side. Beside it: request-spec.ts
 * (a validated body → one sequence per prompt and sample, and their sampling parameters),
 * exchange.ts (one request's response: SSE chunks or a JSON body, stops, client gone, shutdown;
 * responses-format.ts for the Responses API's shapes),
 * logprobs.ts (vLLM's logprob formats), openai-protocol.ts (schemas, errors, writing answers),
 * generation.ts (incremental detokenization, stop strings), engine-driver.ts (real-time pacing),
 * vllm-metrics-exporter.ts (/metrics) and kv-event-publisher.ts (ZeroMQ).
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readBody } from '../../api/body.js';
import { promptList } from '../../api/schemas.js';
import { Engine } from '../../engine/engine.js';
import { KV_LINKS, KvTransferModel, type KvLink } from '../../engine/kv-link.js';
import { buildEngineConfig, resolveModel, type WeightDtype } from '../../engine/profiles.js';
import { createSampler, createSyntheticLm, fidelityForAcceptance, type SampledLogprob, type SyntheticLm } from '../../engine/synthetic-lm.js';
import type { EngineConfig, EngineModel, FinishReason } from '../../engine/types.js';
import type { KvEvent } from '../../kv/events.js';
import { EOS_TOKEN_ID, estimateTokenizer, renderChat } from '../../tokenizer/index.js';
import { seededRng } from '../../util/rng.js';
import { EngineDriver } from './engine-driver.js';
import { EMBEDDING_DIM, embeddingsSchema, inputTooLongMessage, writeEmbeddingsAnswer } from './embeddings.js';
import { Exchange, type ExchangeHost, type SeqRun } from './exchange.js';
import { Generation } from './generation.js';
import { KvEventPublisher, type KvEventEncoding } from './kv-event-publisher.js';
import { kvRequestRole, SimKvConnector, type KvConnectorStats, type KvRequestRole, type KvRole } from './kv-transfer.js';
import { promptLogprobs, vllmPromptLogprobs, type PromptLogprobEntry } from './logprobs.js';
import {
  SimError,
  badRequest,
  chatSchema,
  checkModel,
  completionSchema,
  detokenizeSchema,
  parseBody,
  sendJson,
  sendJsonError,
  sendText,
  tokenizeSchema,
  unavailable,
} from './openai-protocol.js';
import { chatSpec, completionSpec, responsesSpec, sampleSeed, type GenParams, type ServedModel } from './request-spec.js';
import { responsesRequestSchema } from '../../api/responses.js';
import { VllmMetrics } from './vllm-metrics-exporter.js';
import { vllmGenerate, type NativeHost } from './native-generate.js';
import { SglangMetrics, type SimMetricsExporter } from './sglang-metrics-exporter.js';
import { sglangRoute } from './sglang-routes.js';

/** The subset of a pino logger the worker uses. */
export interface SimLogger {
  info(obj: unknown, msg?: string): void;
  warn(obj: unknown, msg?: string): void;
}

export interface SimWorkerOptions {
  /** Default 127.0.0.1. */
  host?: string;
  /**
   * Which server to be: `vllm` (default) or `sglang` — SGLang's metric names, its native /generate
   * and /v1/tokenize (sglang-routes.ts), over the same engine model.
   */
  engine?: 'vllm' | 'sglang';
  /**
   * vLLM: serve POST /inference/v1/generate (default true). False models a vLLM without that
   * route, which answers it 404 as FastAPI does an unknown path.
   */
  inferenceGenerate?: boolean;
  /** 0 (default) = an ephemeral port. */
  port?: number;
  /** Served model name, checked against the request's `model`. Default 'llama-3.1-8b'. */
  model?: string;
  /**
   * LoRA adapters served on top of `model` (vLLM `--enable-lora --lora-modules NAME=PATH`): listed
   * in /v1/models with `parent`, accepted as `model`, their requests' blocks keyed by the adapter.
   */
  adapters?: readonly string[];
  /**
   * With adapters: most adapters in one batch (vLLM --max-loras; default 1, as vLLM's). A request
   * whose adapter would be one too many waits until one is out of the batch.
   */
  maxLoras?: number;
  /**
   * Serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter, as vLLM does with
   * VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (and --enable-lora): adapters loaded there are listed,
   * served and unloaded like the configured ones. Default false (the routes answer 404).
   */
  runtimeLoraUpdating?: boolean;
  /**
   * Load an adapter on demand when a request names one not loaded whose whole name this regular
   * expression matches (vLLM's LoRA resolver plugins, e.g. lora_filesystem_resolver finding it in
   * VLLM_LORA_RESOLVER_CACHE_DIR); any other unknown name is answered 404. Implies
   * runtimeLoraUpdating, which vLLM's resolvers need.
   */
  loraResolver?: string;
  /** Engine profile (src/engine/profiles.ts) when the served name is not one. Default: `model`. */
  profile?: string;
  /** GPU profile: h100 (default), a100, a10g. */
  gpu?: string;
  tp?: number;
  /** Weight dtype of the engine profile: bf16 (default), fp8, int4. */
  weightDtype?: WeightDtype;
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
  kvEvents?: {
    endpoint: string | number;
    replayEndpoint?: string | number;
    topic?: string;
    /** Payload encoding: 'map' (current vLLM, the default) or 'array' (older vLLM). */
    encoding?: KvEventEncoding;
    /** Share of batches not sent live (kept for replay), for tests of gap repair. */
    dropRate?: number;
  };
  /** Host memory for the KV offload tier, GiB (vLLM's CPU offloading connector); absent: none. */
  cpuOffloadGib?: number;
  /** Emit pre-0.9 metric names (vllm:gpu_cache_usage_perc, vllm:gpu_prefix_cache_*). */
  legacyMetricNames?: boolean;
  /**
   * Chat requests without max_tokens run until EOS or the context limit, as on vLLM, but at most
   * this many tokens (greedy sampling of the synthetic model may never emit EOS). Default 1024.
   */
  defaultMaxChatTokens?: number;
  /** Require `Authorization: Bearer <key>` on /v1/* (vLLM's --api-key). */
  apiKey?: string;
  /**
   * Make the synthetic LM a draft model of another (the served name of the target): it predicts
   * like the target in a fraction `draftFidelity` of contexts, or — given `draftAcceptance` instead
   * — in whatever fraction makes speculative sampling at temperature 1 accept that share of its
   * tokens (src/engine/synthetic-lm.ts, fidelityForAcceptance).
   */
  draftOf?: string;
  draftFidelity?: number;
  /** A number, or a shift: `{ before, after, atMs }` switches acceptance at simulated time atMs. */
  draftAcceptance?: number | { before: number; after: number; atMs: number };
  /**
   * Speculative decoding inside the engine (vLLM's --speculative-config with a draft model): k
   * draft tokens per step from the `draftModel` profile on the same GPUs, each accepted with
   * probability `acceptance` — a number, or a function of the simulated time in ms (a shifting
   * acceptance). Exports vLLM's spec-decode counters.
   */
  speculative?: { k: number; draftModel: string; acceptance: number | ((nowMs: number) => number); seed?: number };
  /**
   * A KV connector for prefill/decode disaggregation (vLLM's --kv-transfer-config with
   * NixlConnector; sim/worker/kv-transfer.ts): `prefill` answers do_remote_decode requests with
   * kv_transfer_params and holds their blocks, `decode` pulls a prefill's KV for
   * do_remote_prefill requests, `both` does either. Absent: kv_transfer_params are ignored.
   */
  kvRole?: KvRole;
  /** The link KV transfers take (src/engine/kv-link.ts). Default ib-400. */
  kvLink?: KvLink;
  /** Simulated ms a prefill's held blocks wait for a decode worker's read (vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT: 480 s). */
  kvHoldTimeoutMs?: number;
  logger?: SimLogger;
}

export interface SimWorkerStats {
  /** Generation requests accepted (one per prompt; an embeddings input counts as one). */
  requests: number;
  /** Requests aborted because their client went away. */
  clientAborts: number;
  /** Generation requests not yet finished. */
  inFlight: number;
  /** Response bytes written but not yet taken by clients' sockets (stays small: backpressure). */
  bufferedBytes: number;
  /** Prompt tokens the engine computed (a prefix-cache hit or pulled KV is not computed). */
  computedPromptTokens: number;
  /** With a KV connector: held prefills, pulls under way, tokens pulled, holds expired, failed reads. */
  kv?: KvConnectorStats;
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
  /** The worker's simulated time (ms since it started). */
  now(): number;
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
    weightDtype: opts.weightDtype,
    gpuMemoryUtilization: opts.gpuMemoryUtilization,
    blockSize: opts.blockSize,
    maxNumSeqs: opts.maxNumSeqs,
    maxNumBatchedTokens: opts.maxNumBatchedTokens,
    enablePrefixCaching: opts.enablePrefixCaching,
    hashSeed: opts.hashSeed,
    kvEvents: opts.kvEvents !== undefined,
    emitTokens: true,
    maxModelLen: opts.maxModelLen,
    cpuOffloadGib: opts.cpuOffloadGib,
  });
  let config: EngineConfig = opts.numGpuBlocks !== undefined ? { ...built, numGpuBlocks: opts.numGpuBlocks } : built;
  // The engine's clock for a shifting acceptance: set once the driver exists.
  let simNow: () => number = () => 0;
  if (opts.speculative) {
    const sp = opts.speculative;
    const draftTimeModel = buildEngineConfig({ gpu: opts.gpu ?? 'h100', model: sp.draftModel, tp: opts.tp, maxModelLen: undefined }).timeModel;
    const acc = sp.acceptance;
    if (typeof acc === 'number' && !(acc >= 0 && acc <= 1)) throw new Error(`speculative acceptance must be in [0, 1], got ${acc}`);
    config = {
      ...config,
      speculative: { k: sp.k, draftTimeModel, acceptance: typeof acc === 'number' ? () => acc : () => acc(simNow()), rng: seededRng(sp.seed ?? 1) },
    };
  }
  const runtimeLora = opts.runtimeLoraUpdating === true || opts.loraResolver !== undefined;
  if ((opts.adapters?.length ?? 0) > 0 || runtimeLora) config = { ...config, maxLoras: opts.maxLoras ?? 1 };
  else if (opts.maxLoras !== undefined) throw new Error('maxLoras needs adapters or runtimeLoraUpdating');
  const engine = new Engine(config);
  // A draft LM agrees with its target where it should; either way it is named by the served model.
  if (opts.draftFidelity !== undefined && opts.draftAcceptance !== undefined) throw new Error('give draftFidelity or draftAcceptance, not both');
  if ((opts.draftFidelity !== undefined || opts.draftAcceptance !== undefined) && opts.draftOf === undefined) {
    throw new Error('draftFidelity and draftAcceptance need draftOf (the target model)');
  }
  const da = opts.draftAcceptance;
  const fidelity =
    typeof da === 'number' && opts.draftOf !== undefined ? fidelityForAcceptance(opts.draftOf, model, da) : opts.draftFidelity;
  let lm: SyntheticLm | ((nowMs: number) => SyntheticLm) = createSyntheticLm(model, opts.draftOf !== undefined ? { draftOf: opts.draftOf, fidelity } : {});
  if (typeof da === 'object' && opts.draftOf !== undefined) {
    // A draft whose acceptance shifts: one synthetic draft before the moment, another after it.
    const before = createSyntheticLm(model, { draftOf: opts.draftOf, fidelity: fidelityForAcceptance(opts.draftOf, model, da.before) });
    const after = createSyntheticLm(model, { draftOf: opts.draftOf, fidelity: fidelityForAcceptance(opts.draftOf, model, da.after) });
    lm = (nowMs) => (nowMs < da.atMs ? before : after);
  }
  const sim = new SimWorkerServer({
    model,
    adapters: opts.adapters ?? [],
    runtimeLoraUpdating: runtimeLora,
    loraResolver: opts.loraResolver === undefined ? null : new RegExp(`^(?:${opts.loraResolver})$`),
    engine,
    lm,
    speed: opts.speed ?? 1,
    legacyMetricNames: opts.legacyMetricNames ?? false,
    gpuMemoryUtilization: opts.gpuMemoryUtilization ?? 0.9,
    defaultMaxChatTokens: opts.defaultMaxChatTokens ?? 1024,
    apiKey: opts.apiKey,
    engineKind: opts.engine ?? 'vllm',
    inferenceGenerate: opts.inferenceGenerate ?? true,
  });
  if (opts.kvRole !== undefined) {
    sim.kv = new SimKvConnector({
      role: opts.kvRole,
      engine,
      transfer: new KvTransferModel(opts.kvLink ?? KV_LINKS['ib-400'], resolveModel(opts.profile ?? model), opts.tp ?? 1),
      holdTimeoutMs: opts.kvHoldTimeoutMs ?? 480_000,
      speed: sim.driver.speed,
      tpSize: opts.tp ?? 1,
      wake: () => sim.driver.wake(),
      failRequest: (id, message) => sim.failSeq(id, message),
    });
  }

  simNow = () => sim.driver.now();
  let publisher: KvEventPublisher | null = null;
  let kvEndpoints: { endpoint: string; replayEndpoint?: string } | null = null;
  if (opts.kvEvents) {
    publisher = new KvEventPublisher({
      endpoint: opts.kvEvents.endpoint,
      replayEndpoint: opts.kvEvents.replayEndpoint,
      topic: opts.kvEvents.topic,
      adapters: opts.adapters,
      ...(opts.kvEvents.encoding !== undefined ? { encoding: opts.kvEvents.encoding } : {}),
      ...(opts.kvEvents.dropRate !== undefined ? { dropRate: opts.kvEvents.dropRate } : {}),
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
  if (sim.kv) {
    sim.kv.host = new URL(url).hostname.replace(/^\[|\]$/g, '');
    sim.kv.port = addr.port;
  }
  opts.logger?.info(
    { url, model, gpu: opts.gpu ?? 'h100', numGpuBlocks: config.numGpuBlocks, blockSize: config.blockSize, speed: sim.driver.speed, kvEvents: kvEndpoints },
    `simulated ${opts.engine === 'sglang' ? 'SGLang' : 'vLLM'} worker listening`,
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
    now: () => sim.driver.now(),
    close() {
      closing ??= (async () => {
        sim.shutdown();
        sim.kv?.close();
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
  adapters: readonly string[];
  runtimeLoraUpdating: boolean;
  loraResolver: RegExp | null;
  engine: EngineModel;
  lm: SyntheticLm | ((nowMs: number) => SyntheticLm);
  speed: number;
  legacyMetricNames: boolean;
  gpuMemoryUtilization: number;
  defaultMaxChatTokens: number;
  apiKey?: string;
  engineKind: 'vllm' | 'sglang';
  inferenceGenerate: boolean;
}

/** The worker's HTTP routes and its engine side: runs exchanges' sequences and observes their metrics. */
class SimWorkerServer implements ExchangeHost, NativeHost {
  readonly model: string;
  /** Served adapters (configured, then loaded at run time), each with the path it was loaded from. */
  private readonly adapters = new Map<string, string>();
  private readonly runtimeLoraUpdating: boolean;
  /** The model names a request may use: the base model's aside, the adapters, resolved on demand. */
  private readonly servable: { has(name: string): boolean };
  readonly engine: EngineModel;
  readonly driver: EngineDriver;
  readonly metrics: SimMetricsExporter;
  private readonly engineKind: 'vllm' | 'sglang';
  private readonly inferenceGenerate: boolean;
  kvPublisher: KvEventPublisher | null = null;
  /** The KV connector of a worker started with a role (null: none). */
  kv: SimKvConnector | null = null;
  /** Per exchange: what its kv_transfer_params ask of the connector. */
  private readonly kvRoles = new WeakMap<Exchange, KvRequestRole>();
  /** Decode requests whose KV is pulled, by engine id: the exchange a failed read ends. */
  private readonly pullingExchanges = new Map<string, Exchange>();
  /** The synthetic LM in force at a simulated time (a shifting draft changes it). */
  private readonly lmAt: (nowMs: number) => SyntheticLm;
  private readonly served: ServedModel;
  private readonly exchanges = new Set<Exchange>();
  /** Cancels the embeddings requests in flight (at shutdown). */
  private readonly embedCancels = new Set<() => void>();
  private requests = 0;
  private clientAborts = 0;
  private computedPromptTokens = 0;
  shuttingDown = false;
  private readonly apiKey: string | null;

  constructor(p: ServerParts) {
    this.apiKey = p.apiKey ?? null;
    this.model = p.model;
    for (const a of p.adapters) this.adapters.set(a, `/adapters/${a}`);
    this.runtimeLoraUpdating = p.runtimeLoraUpdating;
    const resolver = p.loraResolver;
    this.servable = {
      has: (name) => {
        if (this.adapters.has(name)) return true;
        if (resolver === null || !resolver.test(name) || name === this.model) return false;
        // Found by the resolver: loaded as through /v1/load_lora_adapter, then served.
        this.adapters.set(name, `/resolved/${name}`);
        this.kvPublisher?.addAdapter(name);
        return true;
      },
    };
    this.engine = p.engine;
    this.lmAt = typeof p.lm === 'function' ? p.lm : () => p.lm as SyntheticLm;
    this.served = { model: p.model, adapters: this.servable, maxModelLen: p.engine.config.maxModelLen, defaultMaxChatTokens: p.defaultMaxChatTokens };
    this.engineKind = p.engineKind;
    this.inferenceGenerate = p.inferenceGenerate;
    this.metrics =
      p.engineKind === 'sglang'
        ? new SglangMetrics(p.engine, { modelName: p.model })
        : new VllmMetrics(p.engine, { modelName: p.model, legacyNames: p.legacyMetricNames, gpuMemoryUtilization: p.gpuMemoryUtilization });
    this.driver = new EngineDriver(p.engine, {
      speed: p.speed,
      onStep: (step) => {
        if (step.kvEvents.length > 0) this.kvPublisher?.publish(step.kvEvents);
        this.computedPromptTokens += step.prefillTokens;
        for (const pull of step.kvPulls) this.kv?.onPull(pull);
      },
    });
  }

  stats(): SimWorkerStats {
    let buffered = 0;
    for (const ex of this.exchanges) buffered += ex.bufferedBytes;
    const s: SimWorkerStats = { requests: this.requests, clientAborts: this.clientAborts, inFlight: this.driver.inFlight, bufferedBytes: buffered, computedPromptTokens: this.computedPromptTokens };
    if (this.kv) s.kv = this.kv.stats();
    return s;
  }

  stop(): void {
    this.driver.stop();
  }

  /** End every in-flight exchange and stop the engine loop. */
  shutdown(): void {
    this.shuttingDown = true;
    for (const ex of [...this.exchanges]) ex.abortForShutdown();
    for (const cancel of [...this.embedCancels]) cancel();
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
    // vLLM's --api-key guards the /v1 routes only (health, metrics and tokenize stay open).
    if (this.apiKey !== null && path.startsWith('/v1/') && req.headers.authorization !== `Bearer ${this.apiKey}`) {
      return sendJson(res, 401, { error: 'Unauthorized' });
    }
    const post = (fn: (body: unknown) => Promise<void> | void) => this.withBody(req, res, method, fn);
    if (this.engineKind === 'sglang') {
      const own = sglangRoute(this, path, method, req, res, post);
      if (own !== false) return own;
    }
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
      case '/inference/v1/generate':
        if (!this.inferenceGenerate) return sendJson(res, 404, { detail: 'Not Found' });
        return post((b) => vllmGenerate(this, req, res, b));
      case '/v1/chat/completions':
        return post((b) => this.generate(req, res, 'chat', b));
      case '/v1/responses':
        return post((b) => this.generate(req, res, 'responses', b));
      case '/reset_prefix_cache':
        // vLLM's development endpoint: drop every cached block no running request uses.
        if (method !== 'POST') return sendJson(res, 405, { detail: 'Method Not Allowed' }, { allow: 'POST' });
        this.resetPrefixCache();
        res.writeHead(200, { 'content-length': 0 });
        return void res.end();
      case '/v1/embeddings':
        return post((b) => this.embeddings(req, res, b));
      case '/v1/load_lora_adapter':
        if (!this.runtimeLoraUpdating) return sendJson(res, 404, { detail: 'Not Found' });
        return post((b) => this.loadLora(res, b));
      case '/v1/unload_lora_adapter':
        if (!this.runtimeLoraUpdating) return sendJson(res, 404, { detail: 'Not Found' });
        return post((b) => this.unloadLora(res, b));
      case '/tokenize':
        return post((b) => this.tokenize(res, b));
      case '/kv_transfer/read':
      case '/kv_transfer/done':
        if (this.kv === null) return sendJson(res, 404, { detail: 'Not Found' });
        return post((b) => this.kvSideChannel(res, path, b));
      case '/detokenize':
        return post((b) => this.detokenize(res, b));
      case '/v1/audio/transcriptions':
      case '/v1/audio/translations': {
        // A text model: vLLM answers its speech routes with a 400 (the routes exist, the model
        // does not serve them). The multipart body is drained unread.
        if (method !== 'POST') return sendJson(res, 405, { detail: 'Method Not Allowed' }, { allow: 'POST' });
        req.resume();
        const api = path.endsWith('transcriptions') ? 'Transcriptions' : 'Translations';
        return void req.on('end', () => sendJsonError(res, new SimError(400, 'BadRequestError', `The model does not support ${api} API`)));
      }
      default:
        if (path.startsWith('/v1/models/')) {
          // vLLM's retrieve: the served model, or its 404 error body.
          return this.get(method, res, () => {
            const id = decodeURIComponent(path.slice('/v1/models/'.length));
            const list = this.modelList() as { data: unknown[] };
            const entry = list.data.find((m) => (m as { id: string }).id === id);
            if (entry !== undefined) return sendJson(res, 200, entry);
            sendJsonError(res, new SimError(404, 'NotFoundError', `The model \`${id.slice(0, 100)}\` does not exist.`));
          });
        }
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
      // vLLM's server parses the body's bytes with Python's json.loads, which takes a UTF-8 byte
      // order mark before the JSON (json.detect_encoding → 'utf-8-sig'); JSON.parse does not.
      const text = r.body.toString('utf8');
      body = JSON.parse(text.charCodeAt(0) === 0xfeff ? text.slice(1) : text);
    } catch (err) {
      throw badRequest(`JSON decode error: ${err instanceof Error ? err.message : String(err)}`);
    }
    if (body === null || typeof body !== 'object' || Array.isArray(body)) throw badRequest('Input should be a valid dictionary or object to extract fields from');
    await fn(body);
  }

  /** SGLang's /flush_cache: the prefix cache emptied, as vLLM's /reset_prefix_cache does. */
  flushCache(): void {
    this.resetPrefixCache();
  }

  lm(): SyntheticLm {
    return this.lmAt(this.driver.now());
  }

  countRequest(): void {
    this.requests++;
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
    const card = (id: string, root: string, parent: string | null, maxModelLen: number | undefined) => ({
      id,
      object: 'model',
      created: Math.floor(Date.now() / 1000),
      owned_by: this.engineKind,
      root,
      parent,
      ...(maxModelLen !== undefined ? { max_model_len: maxModelLen } : {}),
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
    });
    // vLLM lists a LoRA adapter with its path as `root`, its base model as `parent` and no
    // max_model_len (vllm/entrypoints/openai/serving_models.py, show_available_models).
    return {
      object: 'list',
      data: [
        card(this.model, this.model, null, this.engine.config.maxModelLen),
        ...[...this.adapters].map(([a, path]) => card(a, path, this.model, undefined)),
      ],
    };
  }

  // ---- LoRA adapters at run time (vllm/entrypoints/openai/serving_models.py) ----

  /** Load an adapter: listed and served from now on; vLLM's checks, messages and plain-text answer. */
  private loadLora(res: ServerResponse, raw: unknown): void {
    const body = raw as { lora_name?: unknown; lora_path?: unknown };
    const name = typeof body.lora_name === 'string' ? body.lora_name : '';
    const path = typeof body.lora_path === 'string' ? body.lora_path : '';
    if (name === '' || path === '') throw new SimError(400, 'InvalidUserInput', "Both 'lora_name' and 'lora_path' must be provided.");
    if (this.adapters.has(name)) throw new SimError(400, 'InvalidUserInput', `The lora adapter '${name}' has already been loaded.`);
    this.adapters.set(name, path);
    this.kvPublisher?.addAdapter(name);
    sendText(res, 200, `Success: LoRA adapter '${name}' added successfully.`);
  }

  /** Unload an adapter: no longer listed, new requests for it answered 404; those running finish. */
  private unloadLora(res: ServerResponse, raw: unknown): void {
    const body = raw as { lora_name?: unknown; lora_int_id?: unknown };
    const name = typeof body.lora_name === 'string' ? body.lora_name : '';
    if (name === '' && body.lora_int_id === undefined) throw new SimError(400, 'InvalidUserInput', "either 'lora_name' and 'lora_int_id' needs to be provided.");
    if (!this.adapters.has(name)) throw new SimError(404, 'NotFoundError', `The lora adapter '${name}' cannot be found.`);
    this.adapters.delete(name);
    sendText(res, 200, `Success: LoRA adapter '${name}' removed successfully.`);
  }

  private tokenize(res: ServerResponse, raw: unknown): void {
    const body = parseBody(tokenizeSchema, raw);
    checkModel(body.model, this.model, this.servable);
    const text =
      'prompt' in body ? body.prompt : renderChat(body.messages, (body as { add_generation_prompt?: boolean }).add_generation_prompt ?? true);
    const tokens = estimateTokenizer.encode(text as string);
    sendJson(res, 200, { count: tokens.length, max_model_len: this.engine.config.maxModelLen, tokens, token_strs: null });
  }

  private detokenize(res: ServerResponse, raw: unknown): void {
    const body = parseBody(detokenizeSchema, raw);
    checkModel(body.model, this.model, this.servable);
    sendJson(res, 200, { prompt: estimateTokenizer.decode(body.tokens) });
  }

  // ---- embeddings ----

  /**
   * Each input is prefilled by the engine (a one-token request whose token is dropped: the engine
   * models generation, and one decode step is what it adds to a prefill), then answered with its
   * vector (embeddings.ts). The client going away cancels the inputs still running.
   */
  private embeddings(req: IncomingMessage, res: ServerResponse, raw: unknown): void {
    if (this.shuttingDown) throw unavailable('The server is shutting down.');
    const body = parseBody(embeddingsSchema, raw);
    const lora = checkModel(body.model, this.model, this.servable);
    const dims = body.dimensions ?? EMBEDDING_DIM;
    if (dims > EMBEDDING_DIM) throw badRequest(`dimensions must be at most ${EMBEDDING_DIM} for this model`, 'dimensions');
    const prompts = promptList(body.input).map((x) => (typeof x === 'string' ? estimateTokenizer.encode(x) : x));
    const maxModelLen = this.engine.config.maxModelLen;
    for (const ids of prompts) {
      if (ids.length === 0) throw badRequest('The input cannot be empty.', 'input');
      if (ids.length > maxModelLen) throw badRequest(inputTooLongMessage(maxModelLen, ids.length), 'input');
      // The rest of the engine's own limits (its KV cache's size; the one token it decodes).
      const err = this.engine.check(ids.length, 1);
      if (err) throw badRequest(err.message, 'input');
    }
    const headerId = req.headers['x-request-id'];
    const baseId = typeof headerId === 'string' && headerId.length > 0 && headerId.length <= 200 ? headerId : randomUUID().replaceAll('-', '');
    const ids = prompts.map((_, i) => `embd-${baseId}-${i}`);
    let left = prompts.length;
    let over = false;
    const end = (): void => {
      over = true;
      this.embedCancels.delete(cancel);
      res.off('close', cancel);
    };
    const cancel = (): void => {
      if (over) return;
      end();
      for (const id of ids) this.driver.cancel(id);
      if (this.shuttingDown && !res.headersSent) sendJsonError(res, unavailable('The server is shutting down.'));
    };
    res.on('close', cancel);
    this.embedCancels.add(cancel);
    const sampler = createSampler(this.lmAt(this.driver.now()), { temperature: 0, recordLogprobs: false }).sampler;
    prompts.forEach((prompt, i) => {
      this.requests++;
      this.driver.submit(
        { id: ids[i]!, prompt, maxTokens: 1, sampler, ignoreEos: true, priority: body.priority ?? 0, cacheSalt: body.cache_salt ?? undefined, lora },
        {
          onOutput: (_tokens, fin) => {
            if (fin === null || over || --left > 0) return;
            end();
            const answer = { id: `embd-${baseId}`, created: Math.floor(Date.now() / 1000), model: lora ?? this.model, prompts, dims, format: body.encoding_format ?? 'float' };
            // Called from the engine loop: a failure here answers this request, never the process.
            writeEmbeddingsAnswer(res, answer).catch((err: unknown) => {
              if (!res.headersSent) sendJsonError(res, new SimError(500, 'InternalServerError', err instanceof Error ? err.message : String(err)));
              else res.destroy();
            });
          },
        },
      );
    });
  }

  // ---- generation ----

  private generate(req: IncomingMessage, res: ServerResponse, kind: 'completion' | 'chat' | 'responses', raw: unknown): void {
    if (this.shuttingDown) throw unavailable('The server is shutting down.');
    const { params, seqs } =
      kind === 'completion'
        ? completionSpec(parseBody(completionSchema, raw), this.served)
        : kind === 'responses'
          ? responsesSpec(parseBody(responsesRequestSchema, raw), this.served)
          : chatSpec(parseBody(chatSchema, raw), this.served);
    for (const s of seqs) {
      if (s.promptIds.length === 0) throw badRequest('The prompt cannot be empty.', 'prompt');
      const err = this.engine.check(s.promptIds.length, s.maxTokens);
      if (err) throw badRequest(err.message);
    }
    const headerId = req.headers['x-request-id'];
    const baseId = typeof headerId === 'string' && headerId.length > 0 && headerId.length <= 200 ? headerId : randomUUID().replaceAll('-', '');
    const id = kind === 'responses' ? `resp_${baseId}` : `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${baseId}`;
    res.setHeader('x-request-id', baseId);
    const ex = new Exchange(this, res, id, params, seqs);
    this.exchanges.add(ex);
    // One prompt, one sample: what a disaggregated request is (vLLM's P/D proxies send no other).
    const kvRole = seqs.length === 1 ? kvRequestRole(this.kv?.role ?? null, raw) : null;
    if (kvRole !== null) this.kvRoles.set(ex, kvRole);
    ex.start();
  }

  /** The KV side channel (sim/worker/kv-transfer.ts): a decode worker reads a held prefill, then says it is done. */
  private kvSideChannel(res: ServerResponse, path: string, raw: unknown): void {
    const b = raw as { remote_engine_id?: unknown; remote_request_id?: unknown };
    const kv = this.kv!;
    if (path === '/kv_transfer/read') {
      const r = kv.read(b.remote_engine_id, b.remote_request_id);
      return r === null ? sendJson(res, 404, { detail: 'no KV held for that request' }) : sendJson(res, 200, r);
    }
    return kv.done(b.remote_engine_id, b.remote_request_id) ? sendJson(res, 200, {}) : sendJson(res, 404, { detail: 'no KV held for that request' });
  }

  /** A decode request's KV could not be read: it fails (vLLM's kv_load_failure_policy "fail"). */
  failSeq(engineId: string, message: string): void {
    const ex = this.pullingExchanges.get(engineId);
    this.pullingExchanges.delete(engineId);
    ex?.fail(new SimError(500, 'InternalServerError', message));
  }

  // ---- ExchangeHost: called by exchanges ----

  submit(ex: Exchange, seq: SeqRun, params: GenParams): void {
    const recorder = createSampler(this.lmAt(this.driver.now()), {
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
    const kv = this.kvRoles.get(ex);
    if (kv?.source !== undefined) {
      this.kv!.expect(seq.engineId, kv.source);
      this.pullingExchanges.set(seq.engineId, ex);
    }
    this.driver.submit(
      {
        id: seq.engineId,
        prompt: seq.spec.promptIds,
        maxTokens: seq.spec.maxTokens,
        sampler: recorder.sampler,
        eosTokenId: EOS_TOKEN_ID,
        ignoreEos: params.ignoreEos,
        priority: params.priority,
        cacheSalt: params.cacheSalt,
        lora: params.lora,
        // vLLM V1 computes the whole prompt of a request that wants prompt logprobs.
        skipPrefixCache: params.promptLogprobs !== null,
        ...(kv?.remoteDecode ? { remoteDecode: true } : {}),
        ...(kv?.remotePrefill ? { remotePrefill: true } : {}),
      },
      {
        onStarted: (cached, at) => {
          seq.cachedTokens = cached;
          seq.startedMs = at;
        },
        onOutput: (tokens, fin, at) => {
          if (fin !== null && kv !== undefined) {
            if (fin.kvHeld === true) ex.kvTransferParams = this.kv!.onHeld(seq.engineId);
            this.releasePull(seq);
          }
          ex.onOutput(seq, tokens, fin, at);
        },
      },
    );
  }

  /** The sequence ended on a stop string / stop token id the engine does not know about. */
  cancelEngine(seq: SeqRun): void {
    this.driver.cancel(seq.engineId);
    this.releasePull(seq);
  }

  /** A decode request ended: a KV read not made yet frees the prefill worker's blocks. */
  private releasePull(seq: SeqRun): void {
    if (this.pullingExchanges.delete(seq.engineId)) this.kv?.forget(seq.engineId);
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
    return promptLogprobs(this.lmAt(this.driver.now()), promptIds, top);
  }

  vllmPromptLogprobs(promptIds: readonly number[], top: number): Array<PromptLogprobEntry | null> {
    return vllmPromptLogprobs(this.lmAt(this.driver.now()), promptIds, top);
  }

  now(): number {
    return this.driver.now();
  }
}
