/**
 * Everything the gateway knows about one inference request as it moves through the pipeline.
 * Stages read and extend it; the relay consumes it.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Tenant } from '../admission/tenants.js';
import type { ApiError } from '../api/errors.js';
import type { ResponsesRequest } from '../api/responses.js';
import type { ChatCompletionRequest, CompletionRequest, EmbeddingsRequest, PassthroughRequest } from '../api/schemas.js';
import type { WorkerState } from '../fleet/worker-state.js';
import type { TraceContext } from '../http/trace-context.js';
import type { RouteDecision, RouteRequest } from '../scheduler/types.js';
import { RequestState } from '../util/state.js';

/**
 * What an inference request asks for: generated text (chat, completions, responses: OpenAI's
 * Responses API), embeddings, or one of vLLM's other model-addressed endpoints (`passthrough`:
 * tokenize, score, rerank, pooling, classify), relayed as it is to a worker of the model it names.
 */
export type InferenceKind = 'chat' | 'completions' | 'responses' | 'embeddings' | 'passthrough';

/**
 * The kinds whose answer is generated text: streamed or not, its length learned. Chat and
 * completions are also cached and drafted; responses are neither (a response may be stored on
 * its worker and continued there by id).
 */
export type GenerationKind = 'chat' | 'completions' | 'responses';

export function generates(kind: InferenceKind): kind is GenerationKind {
  return kind === 'chat' || kind === 'completions' || kind === 'responses';
}

/** The request bodies the gateway validates, one per InferenceKind. */
export type InferenceBody = ChatCompletionRequest | CompletionRequest | ResponsesRequest | EmbeddingsRequest | PassthroughRequest;

export interface RequestContext {
  /** kvgate's id for the request (a UUID): the response's x-request-id and the upstream's. */
  id: string;
  /** The client's own id (x-client-request-id, or x-request-id), echoed as x-client-request-id. */
  clientRequestId: string | null;
  /** Send x-kvgate-worker / x-kvgate-prefix-hit (server.routingHeaders, or an admin caller). */
  exposeRouting: boolean;
  /** The tenant's cache salt when the pool isolates cached prompts per tenant (else null). */
  cacheSalt: string | null;
  kind: InferenceKind;
  /** The URL path, e.g. '/v1/chat/completions' (also forwarded to the worker). */
  path: string;
  req: IncomingMessage;
  res: ServerResponse;
  /** Clock time the request arrived (ms). */
  startedAt: number;
  /** Who sent it: resolved from the API key before anything else (`default` when the gateway is open). */
  tenant: Tenant;

  /** The client's body exactly as received: forwarded unchanged unless `bodyModified`. */
  rawBody: Buffer;
  /**
   * A multipart upload's Content-Type (boundary included), null for JSON. Such a body is always
   * forwarded as received, with this type: `body` holds only the fields kvgate read from it.
   */
  uploadContentType: string | null;
  /** The client's W3C trace context, passed on to the worker (http/trace-context.ts); null without one. */
  trace: TraceContext | null;
  /** The validated body. A stage that changes it must set `bodyModified` (the relay re-serialises). */
  body: InferenceBody;
  bodyModified: boolean;

  model: string;
  stream: boolean;
  /** max_tokens (chat: max_completion_tokens first) or the configured assumption when absent. */
  maxTokens: number;
  maxTokensExplicit: boolean;
  /** Clock time by which the response must be complete. */
  deadlineAt: number;

  /**
   * What the routing policy sees. Built once, before the stages run — except early stages (the
   * response cache), which run before the prompt is tokenized and must not read it.
   */
  routeRequest: RouteRequest;
  /** Workers the request may be routed to (the model's workers; a stage may narrow or swap them). */
  candidates: readonly WorkerState[];
  /**
   * Set by a stage to veto the router's first pick: an error to answer instead of dispatching (the
   * relay undoes the pick's reservation), or null to go on. Admission uses it to shed a sheddable
   * request whose worker already has too much prefill waiting.
   */
  checkPick?: (d: RouteDecision) => ApiError | null;
  /**
   * Set by a stage whose changes to the request hold for the first worker only: called before
   * every further attempt, to undo them (the disaggregation stage drops kv_transfer_params).
   */
  beforeRetry?: () => void;
  /**
   * A decision a stage already made and charged (Router.commit): the relay's first attempt goes
   * there instead of routing again.
   */
  routed?: RouteDecision;

  /**
   * Per-request values that stages share (an admission ticket, a cache key, a speculation plan),
   * typed by their keys. A stage declares its key once, at module level, next to the stage, and
   * exports it if other stages or `onFinish` hooks read the value:
   *
   * ```ts
   * export const ADMISSION_TICKET = stateKey<AdmissionTicket>('admission.ticket');
   * ctx.state.set(ADMISSION_TICKET, ticket);     // in the admission stage
   * ctx.state.get(ADMISSION_TICKET)?.release();  // later: AdmissionTicket | undefined
   * ```
   *
   * Keys compare by identity, so two stages cannot collide even if they pick the same name (which
   * is only shown when debugging); by convention it is `<stage>.<value>`.
   */
  state: RequestState;
  /** Called with every upstream body chunk relayed to the client (e.g. to fill a response cache). */
  taps: Array<(chunk: Buffer) => void>;
  /** Called once when the request is over, whatever the outcome. */
  onFinish: Array<(ctx: RequestContext) => void>;
  /**
   * Response headers every answer to this request carries, whoever writes it (the relay, a
   * stage, an error): its ids, its priority class, the rate limiter's state, the cache's verdict.
   * Kept here rather than set on `res` one by one: Node writes a head given as one object without
   * re-validating each field, and a head given after `res.setHeader` goes field by field through
   * setHeader (about twice the cost of the whole head, measured in docs/performance.md).
   */
  headers: Record<string, string>;
  /** Extra fields for the request's log line, set by stages (e.g. `cache: 'hit'`). */
  logFields: Record<string, string | number | boolean> | null;

  // Outcome, filled as the request proceeds.
  /** True once the client went away (or the gateway gave up on it at shutdown). */
  aborted: boolean;
  abortReason: 'client' | 'shutdown' | null;
  attempts: number;
  decision: RouteDecision | null;
  workerId: string | null;
  upstreamStatus: number | null;
  /** Final status reported to metrics/logs (499 = client went away). */
  status: number;
  /** ms from arrival to the first body byte relayed. */
  ttftMs: number | null;
  /**
   * The answer's size in tokens, set when a generation ends well (a worker's answer relayed, or
   * the cascade's) or is cut short mid-stream: its output tokens, and its prompt tokens where the
   * answer's usage says them (null otherwise: a stream that did not ask for usage). An embeddings
   * answer's usage gives its prompt tokens (and no output).
   */
  usage: AnswerUsage | null;
  /** Set while an upstream attempt is running: aborts it. */
  abortUpstream: ((reason: 'client' | 'shutdown') => void) | null;
}

/** The fields a request's pipeline fills as it goes, as they are before it starts. */
export type RequestOutcome = Pick<
  RequestContext,
  | 'taps'
  | 'onFinish'
  | 'logFields'
  | 'aborted'
  | 'abortReason'
  | 'attempts'
  | 'decision'
  | 'workerId'
  | 'upstreamStatus'
  | 'status'
  | 'ttftMs'
  | 'usage'
  | 'abortUpstream'
>;

/** An answer's size in tokens (RequestContext.usage). */
export interface AnswerUsage {
  promptTokens: number | null;
  /** Of the prompt tokens, those the worker served from its prefix cache, where its usage says. */
  cachedTokens?: number;
  outputTokens: number;
}

/** A fresh outcome: for a new request, or for a sub-request run through the pipeline on its behalf. */
export function freshOutcome(): RequestOutcome {
  return {
    taps: [],
    onFinish: [],
    logFields: null,
    aborted: false,
    abortReason: null,
    attempts: 0,
    decision: null,
    workerId: null,
    upstreamStatus: null,
    status: 0,
    ttftMs: null,
    usage: null,
    abortUpstream: null,
  };
}

/**
 * The context the handler builds for each request: every field of RequestContext declared and
 * initialised here, so the compiler checks that none is missing (the fields the pipeline fills in
 * later — tenant, body, routeRequest, candidates — are set before anything reads them).
 */
export class LiveRequestContext implements RequestContext {
  cacheSalt: string | null = null;
  tenant!: Tenant;
  rawBody: Buffer;
  uploadContentType: string | null = null;
  trace: TraceContext | null = null;
  body!: InferenceBody;
  bodyModified = false;
  model = '';
  stream = false;
  maxTokens = 0;
  maxTokensExplicit = false;
  deadlineAt = Infinity;
  routeRequest!: RouteRequest;
  candidates!: readonly WorkerState[];
  checkPick?: (d: RouteDecision) => ApiError | null = undefined;
  beforeRetry?: () => void = undefined;
  routed?: RouteDecision = undefined;
  readonly state = new RequestState();
  readonly headers: Record<string, string>;
  taps: Array<(chunk: Buffer) => void> = [];
  onFinish: Array<(ctx: RequestContext) => void> = [];
  logFields: Record<string, string | number | boolean> | null = null;
  aborted = false;
  abortReason: 'client' | 'shutdown' | null = null;
  attempts = 0;
  decision: RouteDecision | null = null;
  workerId: string | null = null;
  upstreamStatus: number | null = null;
  status = 0;
  ttftMs: number | null = null;
  usage: AnswerUsage | null = null;
  abortUpstream: ((reason: 'client' | 'shutdown') => void) | null = null;

  constructor(
    readonly id: string,
    readonly clientRequestId: string | null,
    public exposeRouting: boolean,
    readonly kind: InferenceKind,
    readonly path: string,
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    readonly startedAt: number,
    emptyBody: Buffer,
  ) {
    this.rawBody = emptyBody;
    this.headers = clientRequestId === null ? { 'x-request-id': id } : { 'x-request-id': id, 'x-client-request-id': clientRequestId };
  }
}
