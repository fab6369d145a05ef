/**
 * The HTTP surface: dispatches a request by path and method, and runs inference requests through
 * read → parse → validate → prepare → stages → relay, answering every failure with an OpenAI
 * error body. Each accepted request is accounted exactly once (metrics, one log line). The routes
 * the gateway answers itself (health, readiness, models, metrics, admin) are in local-routes.ts.
 */
import { isUtf8 } from 'node:buffer';
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { DEFAULT_TENANT_ID, mayUse, type TenantDirectory } from '../../admission/tenants.js';
import { readBody } from '../../api/body.js';
import { jsonNestsDeeperThan, MAX_JSON_DEPTH } from '../../api/json-depth.js';
import { checkAudioForm, formFields, isFormType } from '../../api/form.js';
import { plainChatRequest } from '../../api/plain-chat.js';
import { responsesRequestSchema, type ResponsesRequest } from '../../api/responses.js';
import { ApiError, echo, errors, sendError } from '../../api/errors.js';
import {
  chatCompletionRequestSchema,
  completionRequestSchema,
  embeddingsRequestSchema,
  passthroughRequestSchema,
  promptList,
  validate,
  type ChatCompletionRequest,
  type CompletionRequest,
  type EmbeddingsRequest,
} from '../../api/schemas.js';
import { aliasTarget, type GatewayConfig, type RequestCaps, type RequestCapsOverride } from '../../config/index.js';
import type { WorkerRegistry } from '../../fleet/registry.js';
import type { WorkerState } from '../../fleet/worker-state.js';
import { traceContextOf } from '../../http/trace-context.js';
import { flatLineWriter, type FlatFields, type Logger } from '../../telemetry/logger.js';
import type { GatewayMetrics } from '../../telemetry/metrics.js';
import type { Clock } from '../../util/clock.js';
import { generates, LiveRequestContext, type GenerationKind, type InferenceBody, type InferenceKind, type RequestContext } from '../../request/context.js';
import { createLocalRoutes, type LocalRoute } from '../admin/local-routes.js';
import { requestPromptTokens, type RouteRequest } from '../../scheduler/types.js';
import { knownPromptLength, outputBudget, requestBudgetMs } from './prepare.js';
import type { Relay } from './relay.js';
import type { LookupOutcome } from '../responses/response-lookup.js';
import { runStages, type GatewayStage } from '../../request/stage.js';
import type { TenantSlot, TenantSlots } from './tenant-slots.js';

export interface HandlerDeps {
  config: GatewayConfig;
  fleet: WorkerRegistry;
  relay: Relay;
  metrics: GatewayMetrics;
  logger: Logger;
  clock: Clock;
  stages: GatewayStage[];
  /** Stages that run before the prompt is tokenized (GatewayStage.early). */
  earlyStages: GatewayStage[];
  /**
   * Tokenize the prompt and build ctx.routeRequest (once; later calls do nothing). A promise only
   * when it has to wait for the tokens.
   */
  prepareRouting: (ctx: RequestContext) => Promise<void> | undefined;
  /** API keys → tenants; consulted before the body is read. */
  tenants: TenantDirectory;
  /** Each tenant's requests counted from its key read, before the body (tenant-slots.ts). */
  tenantSlots?: TenantSlots;
  /** Routes added by parts of the gateway (/admin/cache). */
  extraRoutes: ReadonlyMap<string, LocalRoute>;
  /** Requests in progress (for graceful shutdown). */
  active: Set<RequestContext>;
  isClosing: () => boolean;
  /** True while shutting down (drain delay included): /ready answers 503. */
  isDraining: () => boolean;
  /** A worker drained or put back through /admin/workers/{id}/drain. */
  onDrain?: (w: WorkerState, draining: boolean) => void;
  /** The tenant's cache salt if `pool` isolates cached prompts per tenant, else null. */
  cacheSaltFor: (pool: string | undefined, tenant: string) => string | null;
  /** `GET /v1/responses/{id}`, `POST /v1/responses/{id}/cancel` (gateway/responses/response-lookup.ts). */
  responseLookup?: (path: string, query: string, req: IncomingMessage, res: ServerResponse) => Promise<LookupOutcome>;
}

/** A client's own request id is echoed (x-client-request-id) and logged only if it looks like one. */
const REQUEST_ID_OK = /^[A-Za-z0-9._:-]{1,128}$/;

/** `application/json`, with or without parameters (charset). */
const JSON_TYPE = /^application\/json\s*(;|$)/i;

/** An inference route: what it asks for, and its `route` label in metrics and logs. */
interface InferenceRoute {
  kind: InferenceKind;
  label: string;
  /** The body is a multipart upload (api/form.ts), not JSON. */
  form: boolean;
}

const route = (kind: InferenceKind, label: string = kind, form = false): InferenceRoute => ({ kind, label, form });

/** The inference route at `path` (null for any other path). */
export function inferenceRoute(path: string): { kind: InferenceKind; form: boolean } | null {
  return INFERENCE.get(path) ?? null;
}

const INFERENCE: ReadonlyMap<string, InferenceRoute> = new Map([
  ['/v1/chat/completions', route('chat')],
  ['/v1/completions', route('completions')],
  ['/v1/responses', route('responses')],
  ['/v1/embeddings', route('embeddings')],
  // vLLM's other model-addressed endpoints, relayed as they are; one label per endpoint, its
  // versioned paths together.
  ['/tokenize', route('passthrough', 'tokenize')],
  ['/detokenize', route('passthrough', 'detokenize')],
  ['/score', route('passthrough', 'score')],
  ['/v1/score', route('passthrough', 'score')],
  ['/rerank', route('passthrough', 'rerank')],
  ['/v1/rerank', route('passthrough', 'rerank')],
  ['/v2/rerank', route('passthrough', 'rerank')],
  ['/pooling', route('passthrough', 'pooling')],
  ['/classify', route('passthrough', 'classify')],
  // Speech to text (a Whisper-class model served by vLLM): a multipart upload, routed by its model
  // and relayed byte for byte.
  ['/v1/audio/transcriptions', route('passthrough', 'audio_transcriptions', true)],
  ['/v1/audio/translations', route('passthrough', 'audio_translations', true)],
]);

const SCHEMAS = {
  chat: chatCompletionRequestSchema,
  completions: completionRequestSchema,
  responses: responsesRequestSchema,
  embeddings: embeddingsRequestSchema,
  passthrough: passthroughRequestSchema,
} as const;

/** Answers one client request (the server's request listener, behind the connection guard). */
export type Handler = (req: IncomingMessage, res: ServerResponse) => void;

export function createHandler(deps: HandlerDeps): Handler {
  const { config, metrics } = deps;
  const local = createLocalRoutes({ ...deps, metricsAccess: () => config.admin, readyRequiresWorker: config.server.readyRequiresWorker, aliases: () => config.aliases });
  const cors = { origins: new Set(config.server.corsOrigins) };
  const requestLog = new RequestLogSampler();
  const requestLine = flatLineWriter(deps.logger);

  return (req, res) => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    const inference = INFERENCE.get(path);
    if (cors.origins.size > 0 && corsHeaders(cors, req, res) && req.method === 'OPTIONS') {
      res.writeHead(204, { 'access-control-max-age': '600' });
      res.end();
      return;
    }
    if (inference !== undefined) {
      if (req.method !== 'POST') return sendError(res, errors.methodNotAllowed(req.method ?? '?', path, 'POST'));
      void handleInference(deps, inference, path, req, res);
      return;
    }
    if (deps.responseLookup !== undefined && path.startsWith('/v1/responses/')) {
      void lookup(deps, requestLog, requestLine, deps.responseLookup, path, q === -1 ? '' : url.slice(q), req, res);
      return;
    }
    if (local(path, req, res)) return;
    sendError(res, errors.routeNotFound(path));
  };

  async function handleInference(
    d: HandlerDeps,
    { kind, form }: InferenceRoute,
    path: string,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    const startedAt = d.clock.now();
    // kvgate's own id names the response and the upstream request, always: two clients sending
    // the same id must not share one. The client's id is echoed separately and logged.
    const id = randomUUID();
    const given = req.headers['x-client-request-id'] ?? req.headers['x-request-id'];
    const clientRequestId = typeof given === 'string' && REQUEST_ID_OK.test(given) ? given : null;
    const ctx: RequestContext = new LiveRequestContext(id, clientRequestId, config.server.routingHeaders, kind, path, req, res, startedAt, EMPTY);
    if (req.headers.traceparent !== undefined) ctx.trace = traceContextOf(req.headers);
    d.active.add(ctx);
    metrics.inflight++;
    const onClose = (): void => {
      if (res.writableFinished) return;
      ctx.aborted = true;
      ctx.abortReason ??= 'client';
      ctx.abortUpstream?.('client');
    };
    res.on('close', onClose);
    let slot: TenantSlot | undefined;
    try {
      if (d.isClosing()) throw errors.shuttingDown();
      // Who is asking comes first: an unauthenticated body is never read.
      ctx.tenant = d.tenants.authenticate(req.headers.authorization);
      // Counted against its tenant from now, while its body arrives (a stalled body included).
      slot = d.tenantSlots?.enter(ctx.tenant);
      if (!ctx.exposeRouting && isAdminCaller(d.tenants, req)) ctx.exposeRouting = true;
      const contentType = checkMediaType(req, form);
      const maxBytes = form ? config.limits.maxUploadBytes : config.limits.maxBodyBytes;
      const read = await readBody(req, maxBytes, config.server.bodyTimeoutMs);
      slot?.bodyRead();
      if (!read.ok) {
        if (read.reason === 'aborted') {
          ctx.aborted = true;
          ctx.status = 499;
          return;
        }
        if (read.reason === 'timeout') {
          throw errors.requestTimeout(`the request body did not arrive within ${config.server.bodyTimeoutMs} ms`);
        }
        // The rest of the body is never read: close the connection after answering.
        throw new ApiError(413, 'invalid_request_error', 'request_too_large',
          `request body exceeds the limit of ${maxBytes} bytes`, null, { connection: 'close' });
      }
      ctx.rawBody = read.body;
      const caps = acceptBody(d, ctx, kind, form, contentType);
      const ran = runRequestStages(d, ctx, caps);
      const handled = typeof ran === 'boolean' ? ran : await ran;
      if (handled) {
        // Shutdown while a stage held the request (e.g. queued for admission): answer it.
        if (ctx.abortReason === 'shutdown' && !res.headersSent) throw errors.shuttingDown();
        if (ctx.status === 0) ctx.status = ctx.aborted ? 499 : res.statusCode;
        return;
      }
      if (!ctx.aborted) await d.relay.forward(ctx);
      if (ctx.abortReason === 'shutdown' && !res.headersSent) throw errors.shuttingDown();
      if (ctx.aborted && ctx.status === 0) ctx.status = 499;
    } catch (e) {
      const err = e instanceof ApiError ? e : errors.internal((e as Error)?.message ?? String(e));
      if (!(e instanceof ApiError)) d.logger.error({ err: e, id }, 'unexpected error handling request');
      ctx.status = ctx.abortReason === 'client' ? 499 : err.status;
      if (!res.headersSent && !res.destroyed) sendError(res, err, ctx.headers);
      else if (!res.writableEnded) res.destroy();
    } finally {
      slot?.end();
      res.off('close', onClose);
      finishRequest(d, ctx, requestLog, requestLine);
    }
  }
}

/** What validating a request's body and running the stages use of the handler's deps (the EPP uses them too). */
export type AcceptDeps = Pick<HandlerDeps, 'config' | 'fleet' | 'clock' | 'stages' | 'earlyStages' | 'prepareRouting' | 'cacheSaltFor'>;

/**
 * Parses and validates `ctx.rawBody` as a request of `kind`, and fills in what the stages and the
 * router read: body, model (aliases resolved), candidates, output budget, cache salt, deadline.
 * Throws an ApiError for a body kvgate refuses. Returns the caps that apply.
 */
export function acceptBody(d: AcceptDeps, ctx: RequestContext, kind: InferenceKind, form: boolean, contentType: string): RequestCaps {
  const { config, fleet } = d;
  const startedAt = ctx.startedAt;
  let parsed: unknown;
  if (form) {
    // Relayed as it came: the worker gets the client's boundary, so the body is never rebuilt.
    ctx.uploadContentType = contentType;
    parsed = checkAudioForm(formFields(ctx.rawBody, contentType));
  } else {
    // Before parsing: what the gateway does with a value (validation, re-serialising, the cache
    // key) recurses, and must never meet a body that would overflow the stack.
    if (jsonNestsDeeperThan(ctx.rawBody)) throw errors.nestedTooDeep(MAX_JSON_DEPTH);
    // JSON is exchanged in UTF-8 (RFC 8259 §8.1): bytes that are not would be read with
    // replacement characters here and sent on as they came.
    if (!isUtf8(ctx.rawBody)) throw errors.invalidJson('it is not valid UTF-8');
    // A UTF-8 byte order mark before the JSON (Windows PowerShell 5.1 sends one) may be ignored
    // by a parser (RFC 8259 §8.1), and Python's json, under vLLM's server, does: it is dropped,
    // and the body goes on re-serialised, without it.
    const text = ctx.rawBody.toString('utf8');
    const bom = text.charCodeAt(0) === 0xfeff;
    try {
      parsed = JSON.parse(bom ? text.slice(1) : text);
    } catch (e) {
      throw errors.invalidJson((e as Error).message);
    }
    if (bom) ctx.bodyModified = true;
  }
  // A plain chat request (nearly every one) is copied as the schema would output it, without
  // zod's generic parser; anything else, and every refusal, is the schema's (api/plain-chat.ts).
  const plain = kind === 'chat' ? plainChatRequest(parsed) : null;
  const v = plain !== null ? { ok: true as const, value: plain as InferenceBody } : validate<InferenceBody>(SCHEMAS[kind], parsed);
  if (!v.ok) throw errors.invalidField(v.param, v.message);
  const body = v.value;
  ctx.body = body;
  const asked = body.model;
  // An alias is served as the model it names, under that name at the worker (not in an upload,
  // relayed byte for byte).
  const served = form ? undefined : aliasTarget(config.aliases, asked);
  if (served !== undefined) {
    body.model = served;
    ctx.bodyModified = true;
  }
  ctx.model = body.model;
  // Only generated text is streamed (any other `stream` field passes through to the worker).
  ctx.stream = generates(kind) && (body as { stream?: unknown }).stream === true;
  const workers = mayUse(ctx.tenant, body.model) ? fleet.forModel(body.model) : undefined;
  if (!workers) throw errors.modelNotFound(asked);
  ctx.candidates = workers;
  const budget = outputBudget(kind, body, config.timeouts.assumedMaxTokens);
  ctx.maxTokens = budget.maxTokens;
  ctx.maxTokensExplicit = budget.explicit;
  const salt = form ? null : d.cacheSaltFor(workers[0]?.pool, ctx.tenant.id);
  if (salt !== null) {
    // Always the gateway's, never the client's: a client must not pick another tenant's salt.
    (body as Record<string, unknown>).cache_salt = salt;
    ctx.bodyModified = true;
    ctx.cacheSalt = salt;
  }
  const caps = capsFor(config, workers[0]?.pool, ctx.tenant.caps);
  if (generates(kind)) checkCaps(kind, body as ChatCompletionRequest | CompletionRequest | ResponsesRequest, budget, caps);
  else if (kind === 'embeddings') checkEmbeddingInputs(body as EmbeddingsRequest, caps);
  ctx.deadlineAt = startedAt + Math.min(requestBudgetMs(budget.maxTokens, config.timeouts), caps.maxRequestMs);
  return caps;
}

/**
 * Runs the early stages, tokenizes the prompt, runs the other stages: true if a stage answered
 * the request itself. Early stages (the response cache) answer without the prompt's tokens: a hit
 * never waits for tokenization. Nothing is awaited that did not return a promise: a stage or a
 * tokenizer that has to wait says so by returning one (each await costs a promise and a turn of
 * the microtask queue), so the result is a promise only when something had to wait.
 */
export function runRequestStages(d: AcceptDeps, ctx: RequestContext, caps: RequestCaps): boolean | Promise<boolean> {
  const kind = ctx.kind;
  if (d.earlyStages.length > 0) {
    const r = runStages(d.earlyStages, ctx);
    if (typeof r === 'string') {
      if (r === 'handled') return true;
    } else {
      return r.then((v) => (v === 'handled' ? true : afterEarlyStages(d, ctx, caps, kind)));
    }
  }
  return afterEarlyStages(d, ctx, caps, kind);
}

function afterEarlyStages(d: AcceptDeps, ctx: RequestContext, caps: RequestCaps, kind: InferenceKind): boolean | Promise<boolean> {
  const prepared = d.prepareRouting(ctx);
  if (prepared !== undefined) return prepared.then(() => lateStages(d, ctx, caps, kind));
  return lateStages(d, ctx, caps, kind);
}

function lateStages(d: AcceptDeps, ctx: RequestContext, caps: RequestCaps, kind: InferenceKind): boolean | Promise<boolean> {
  // Counted as routing counts them, before admission or routing charge anything.
  if (kind === 'embeddings' && ctx.routeRequest !== undefined) checkEmbeddingTokens(ctx.routeRequest, caps);
  if (d.stages.length === 0) return false;
  const r = runStages(d.stages, ctx);
  return typeof r === 'string' ? r === 'handled' : r.then((v) => v === 'handled');
}

/** A stored response retrieved or cancelled: relayed, then counted and logged as requests are. */
async function lookup(
  deps: HandlerDeps,
  requestLog: RequestLogSampler,
  requestLine: ReturnType<typeof flatLineWriter>,
  run: NonNullable<HandlerDeps['responseLookup']>,
  path: string,
  query: string,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const startedAt = deps.clock.now();
  const id = randomUUID();
  res.setHeader('x-request-id', id);
  deps.metrics.inflight++;
  let o: LookupOutcome = { route: 'responses_lookup' };
  try {
    o = await run(path, query, req, res);
  } catch (e) {
    // run() answers its own failures; this is a bug, answered rather than left to crash the process.
    deps.logger.error({ err: e, id }, 'unexpected error in a response lookup');
    if (!res.headersSent && !res.destroyed) sendError(res, errors.internal((e as Error)?.message ?? String(e)));
    else if (!res.writableEnded) res.destroy();
  } finally {
    deps.metrics.inflight--;
    const model = o.model ?? 'unknown';
    const status = res.statusCode;
    const durationMs = deps.clock.now() - startedAt;
    deps.metrics.requestsBy.series(o.route, model, String(status)).inc();
    deps.metrics.durationBy.series(o.route, model).observe(durationMs / 1000);
    const clean = status >= 200 && status < 400 && res.writableFinished;
    if (!clean || requestLog.take(deps.config.log.requestSampleRate)) {
      requestLine(
        { id, route: o.route, model: o.model, worker: o.worker, status, durationMs: Math.round(durationMs * 100) / 100 },
        'request',
      );
    }
  }
}

const EMPTY = Buffer.alloc(0);

/**
 * Only JSON bodies, sent as such: a `text/plain` or form body is what a web page can make a
 * browser post cross-site without a preflight, so it is refused (415) before being read. So is a
 * compressed body (kvgate does not decompress, and a worker must not be handed one blind). The
 * audio routes take the multipart upload OpenAI's API defines, and nothing else; a page could
 * post one cross-site, so on a gateway reachable from browsers set API keys (a form cannot send
 * an Authorization header). Returns the content type.
 */
export function checkMediaType(req: IncomingMessage, form: boolean): string {
  const ct = req.headers['content-type'];
  if (ct === undefined || !(form ? isFormType(ct) : JSON_TYPE.test(ct))) {
    const want = form ? 'multipart/form-data with a boundary' : 'application/json';
    throw errors.unsupportedMediaType(`Content-Type must be ${want}${ct === undefined ? '' : `, got '${echo(ct)}'`}`);
  }
  const ce = req.headers['content-encoding'];
  if (ce !== undefined && ce.trim().toLowerCase() !== 'identity') {
    throw errors.unsupportedMediaType(`Content-Encoding '${echo(ce)}' is not supported: send the body uncompressed`);
  }
  return ct;
}

/**
 * An admin caller sees the routing headers: the Authorization key is an admin key (an open
 * gateway), or `x-kvgate-admin-key` carries one beside a tenant's key.
 */
function isAdminCaller(tenants: TenantDirectory, req: IncomingMessage): boolean {
  if (!tenants.adminGuarded) return false;
  const extra = req.headers['x-kvgate-admin-key'];
  if (typeof extra === 'string' && tenants.isAdmin(`Bearer ${extra}`)) return true;
  return tenants.open && tenants.isAdmin(req.headers.authorization);
}

/** The caps that apply: global, lowered by the pool's, lowered by the tenant's. */
function capsFor(config: GatewayConfig, pool: string | undefined, tenant: RequestCapsOverride): RequestCaps {
  const p = pool !== undefined ? config.pools.get(pool)?.caps : undefined;
  const pick = (k: keyof RequestCaps): number => Math.min(config.caps[k], p?.[k] ?? Infinity, tenant[k] ?? Infinity);
  return {
    maxN: pick('maxN'),
    maxTokens: pick('maxTokens'),
    maxTotalTokens: pick('maxTotalTokens'),
    maxRequestMs: pick('maxRequestMs'),
    maxEmbeddingInputs: pick('maxEmbeddingInputs'),
    maxEmbeddingTokens: pick('maxEmbeddingTokens'),
  };
}

/** 400 naming `input` when an embeddings request holds more inputs than its caps allow (no tokenizing). */
function checkEmbeddingInputs(body: EmbeddingsRequest, caps: RequestCaps): void {
  const inputs = promptList(body.input).length;
  if (inputs > caps.maxEmbeddingInputs) {
    throw errors.capExceeded('input', `input holds ${inputs} inputs, more than the ${caps.maxEmbeddingInputs} allowed per request`);
  }
}

/**
 * 400 naming `input` when an embeddings request's inputs come to more prompt tokens than its caps
 * allow: every input's tokens, as routing and rate limits count them (prepare.ts, describeSequences).
 */
function checkEmbeddingTokens(rr: RouteRequest, caps: RequestCaps): void {
  const tokens = requestPromptTokens(rr);
  if (tokens > caps.maxEmbeddingTokens) {
    throw errors.capExceeded('input', `input comes to ${tokens} tokens, more than the ${caps.maxEmbeddingTokens} allowed per request`);
  }
}

/** 400 naming the parameter when a request asks for more than its caps allow. */
function checkCaps(
  kind: GenerationKind,
  body: ChatCompletionRequest | CompletionRequest | ResponsesRequest,
  budget: { maxTokens: number; explicit: boolean },
  caps: RequestCaps,
): void {
  // A Responses API request has one answer.
  const n = kind === 'responses' ? 1 : ((body as ChatCompletionRequest | CompletionRequest).n ?? 1);
  if (n > caps.maxN) throw errors.capExceeded('n', `n is ${n}, more than the ${caps.maxN} allowed`);
  const tokensParam =
    kind === 'responses'
      ? 'max_output_tokens'
      : kind === 'chat' && (body as ChatCompletionRequest).max_completion_tokens != null
        ? 'max_completion_tokens'
        : 'max_tokens';
  if (budget.explicit && budget.maxTokens > caps.maxTokens) {
    throw errors.capExceeded(tokensParam, `${tokensParam} is ${budget.maxTokens}, more than the ${caps.maxTokens} allowed`);
  }
  const prompts = kind === 'completions' ? Math.max(1, promptList((body as CompletionRequest).prompt).length) : 1;
  const perChoice = Math.min(budget.maxTokens, caps.maxTokens);
  const total = n * prompts * perChoice;
  if (total > caps.maxTotalTokens) {
    const what = prompts > 1 ? `n × prompts × ${tokensParam} (${n} × ${prompts} × ${perChoice})` : `n × ${tokensParam} (${n} × ${perChoice})`;
    const unset = budget.explicit ? '' : ` (${tokensParam} unset: assumed ${perChoice}; set it lower)`;
    throw errors.capExceeded(n > 1 ? 'n' : tokensParam, `${what} is ${total} output tokens, more than the ${caps.maxTotalTokens} allowed per request${unset}`);
  }
}


/** Adds CORS headers when the request's Origin is allowed; true if it was. */
function corsHeaders(cors: { origins: ReadonlySet<string> }, req: IncomingMessage, res: ServerResponse): boolean {
  const origin = req.headers.origin;
  if (origin === undefined) return false;
  const any = cors.origins.has('*');
  if (!any && !cors.origins.has(origin)) return false;
  res.setHeader('access-control-allow-origin', any ? '*' : origin);
  res.setHeader('vary', 'Origin');
  res.setHeader('access-control-expose-headers', 'x-request-id, x-client-request-id');
  if (req.method === 'OPTIONS') {
    res.setHeader('access-control-allow-methods', 'GET, POST, OPTIONS');
    res.setHeader('access-control-allow-headers', 'authorization, content-type, x-client-request-id, x-session-id');
  }
  return true;
}

/**
 * Which successful requests get a log line under `log.requestSampleRate` r: one in every 1/r, in
 * turn (credit accumulates r per request and a line is written when it reaches 1), so the share
 * is exact over any window and no random draw is made. Read per request: a config reload applies
 * at once.
 */
export class RequestLogSampler {
  private credit = 0;

  /** True if this request's line is written; `rate` is the configured share (1: every request). */
  take(rate: number): boolean {
    if (rate >= 1) return true;
    this.credit += rate;
    if (this.credit < 1) return false;
    this.credit -= 1;
    return true;
  }
}

/** Counts and logs a request once it is over (metrics, its onFinish hooks, one log line). */
export function finishRequest(d: Pick<HandlerDeps, 'active' | 'metrics' | 'fleet' | 'logger' | 'config' | 'clock'>, ctx: RequestContext, sampler: RequestLogSampler, line: (fields: FlatFields, msg: string) => void): void {
  d.active.delete(ctx);
  const m = d.metrics;
  m.inflight--;
  const route = INFERENCE.get(ctx.path)?.label ?? ctx.kind;
  // Only served models become label values: a client cannot blow up the series count. (A name
  // routed to workers that load adapters on demand counts once it is served: it answered, or a
  // worker lists it.)
  const model = ctx.candidates !== undefined && (ctx.status < 400 || d.fleet.serving(ctx.model) !== undefined) ? ctx.model : 'unknown';
  const durationMs = d.clock.now() - ctx.startedAt;
  m.requestsBy.series(route, model, String(ctx.status)).inc();
  m.durationBy.series(route, model).observe(durationMs / 1000);
  // A non-streamed answer arrives all at once: its first byte is its last, not a TTFT.
  if (ctx.ttftMs !== null && ctx.stream) m.ttftBy.series(route, model).observe(ctx.ttftMs / 1000);
  const usage = ctx.usage;
  let promptTokens: number | undefined;
  if (usage !== null) {
    const tenant = ctx.tenant?.id ?? DEFAULT_TENANT_ID;
    if (generates(ctx.kind)) m.generationTokensBy.series(model, tenant).inc(usage.outputTokens);
    promptTokens = usage.promptTokens ?? knownPromptLength(ctx.routeRequest);
    if (promptTokens !== undefined) m.promptTokensBy.series(model, tenant).inc(promptTokens);
    if (usage.cachedTokens !== undefined) m.cachedPromptTokensBy.series(model, tenant).inc(usage.cachedTokens);
    // Per output token of one sequence, of an answer that ended well: with n answers (or a batch
    // of prompts) the tokens are several sequences' together. A Responses stream's first bytes
    // (response.created) come before its first token, so only chat and completions streams time it.
    const whole = !ctx.aborted && ctx.status < 400;
    if (whole && ctx.stream && ctx.kind !== 'responses' && ctx.ttftMs !== null && usage.outputTokens > 1 && (ctx.routeRequest?.sequences ?? 1) === 1) {
      m.tpotBy.series(route, model).observe((durationMs - ctx.ttftMs) / (usage.outputTokens - 1) / 1000);
    }
  }
  for (const f of ctx.onFinish) {
    try {
      f(ctx);
    } catch (e) {
      d.logger.warn({ err: e, id: ctx.id }, 'onFinish hook failed');
    }
  }
  // Whatever went wrong is always logged; a clean first-attempt success may be sampled.
  const rate = d.config.log.requestSampleRate;
  const clean = ctx.status >= 200 && ctx.status < 400 && ctx.attempts <= 1 && !ctx.aborted;
  if (clean && !sampler.take(rate)) return;
  line(
    {
      id: ctx.id,
      clientRequestId: ctx.clientRequestId ?? undefined,
      traceId: ctx.trace?.traceId,
      route,
      tenant: ctx.tenant?.id,
      model: ctx.model || undefined,
      stream: ctx.stream,
      worker: ctx.workerId ?? undefined,
      attempts: ctx.attempts,
      status: ctx.status,
      ttftMs: ctx.ttftMs === null ? undefined : Math.round(ctx.ttftMs * 10) / 10,
      durationMs: Math.round(durationMs * 100) / 100,
      promptTokens,
      cachedTokens: usage?.cachedTokens,
      outputTokens: usage?.outputTokens,
      ...ctx.logFields,
      sampleRate: clean && rate < 1 ? (rate > 0 ? 1 / rate : undefined) : undefined,
    },
    'request',
  );
}
