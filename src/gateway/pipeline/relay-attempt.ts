/**
 * One attempt at serving a request on one worker: an undici dispatch handler that sends the
 * client's bytes to the worker and relays the response to the client as it arrives. Written the
 * way undici's own handlers are (lib/handler/redirect-handler.js, retry-handler.js): the state is
 * in fields, and each undici callback or outside event is one method.
 *
 * An attempt settles exactly once — the response ended, the upstream failed, or abort() gave it
 * up (deadline, first-byte timeout, client gone, shutdown, worker taken out of service) — and
 * settling is the only place that completes the route (Router.complete), counts the outcome and
 * resolves run(). Callbacks arriving after that are ignored.
 *
 * Until the first body byte the client has seen nothing (the response head is written together
 * with the first chunk), so a failure settles as "not done" and the relay may try another worker.
 * After it, a failure ends the response honestly: an SSE error event for a stream, a cut
 * connection for JSON.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Dispatcher } from 'undici';
import { ApiError, echo, errors } from '../../api/errors.js';
import { OutputTokenCounter } from '../../api/output-tokens.js';
import { atEventBoundary, sseErrorEvent, TAIL_AT_BOUNDARY, updateTail } from '../../api/sse.js';
import { endSoon, holdWrites } from '../../http/write-batch.js';
import type { CircuitBreaker } from '../../fleet/circuit-breaker.js';
import { AnswerPace } from '../../fleet/decode-pace.js';
import type { WorkerRegistry } from '../../fleet/registry.js';
import type { Upstreams } from '../../fleet/upstreams.js';
import type { WorkerState } from '../../fleet/worker-state.js';
import type { Router } from '../../scheduler/router.js';
import type { RouteDecision } from '../../scheduler/types.js';
import type { GatewayMetrics } from '../../telemetry/metrics.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Clock } from '../../util/clock.js';
import { generates, type RequestContext } from '../../request/context.js';
import { releasePromptTokens } from './prepare.js';

/** What an attempt uses of the gateway (the relay passes its own options). */
export interface AttemptEnv {
  router: Router;
  fleet: WorkerRegistry;
  upstreams: Upstreams;
  metrics: GatewayMetrics;
  clock: Clock;
  /**
   * Streams only: no first body byte within this many ms abandons the attempt (or within the time
   * prefillAllowanceMs allows the attempt's prompt, if longer).
   */
  firstByteMs: number;
  /** How long a worker may take to prefill `uncachedTokens` before its first byte, safety multiple included (ms). */
  prefillAllowanceMs?: (worker: WorkerState, uncachedTokens: number) => number;
  /** Where a worker's raw error text and address go (never to the client). */
  logger?: Pick<Logger, 'warn'>;
  /** Told of bytes from workers and of streamed first bytes (outlier detection). */
  watch?: AttemptWatch;
  /** Write to the client with the event loop turn's other writes (server.batchWrites; http/write-batch.ts). */
  batchWrites?: boolean;
}

/** What passive outlier detection learns from attempts. */
export interface AttemptWatch {
  /** Bytes arrived from a suspected worker (the attempt has already set its lastByteAt). */
  onBytes(worker: WorkerState): void;
  /** A streamed first byte took `ms` from dispatch. */
  onFirstByte(worker: WorkerState, ms: number): void;
}

/**
 * done: the response is over (whatever it was); otherwise nothing reached the client yet, and the
 * relay may try another worker unless `final` (the request itself may have brought its worker down).
 */
export type AttemptResult = { done: true } | { done: false; error: ApiError; final?: boolean };

type FailReason = 'connect' | 'status_5xx' | 'overloaded' | 'first_byte_timeout' | 'deadline' | 'stream_error' | 'worker_down' | 'suspected' | 'stalled' | 'truncated' | 'worker_died';
type AbortCause = FailReason | 'client' | 'shutdown';

const DONE: AttemptResult = { done: true };
const EMPTY = Buffer.alloc(0);
/** Most of a worker's error body kept (for the log, or the normalised 4xx message). */
const MAX_ERROR_TEXT = 4096;
/** In a Responses stream, the first event after the response's announcement (`response.output_item.added`) comes with the first token. */
const RESPONSES_OUTPUT_EVENT = Buffer.from('response.output_');
const MAX_TIMER_MS = 2 ** 31 - 1;
/**
 * The longest Retry-After taken from a worker, seconds: a worker's larger value (a misconfigured
 * or hostile `Retry-After: 999999`) is clamped to it before it backs the worker off or reaches a
 * client. A worker that needs longer fails its health probes instead.
 */
export const MAX_UPSTREAM_RETRY_AFTER_SECONDS = 60;
/** How a chat or completions stream ends (vLLM serving_chat.py / serving_completion.py). */
const SSE_DONE_MARK = Buffer.from('data: [DONE]');
/** Bytes of a stream's end kept to find SSE_DONE_MARK in (it may arrive split over chunks). */
const END_WINDOW = 32;
/** The events that end a Responses stream (vLLM's responses_stream_generator); it sends no [DONE]. */
const RESPONSES_END_EVENTS = [Buffer.from('response.completed'), Buffer.from('response.incomplete'), Buffer.from('response.failed')];

export class RelayAttempt implements Dispatcher.DispatchHandler {
  private readonly worker: WorkerState;
  private readonly breaker: CircuitBreaker;
  private resolve: ((r: AttemptResult) => void) | null = null;
  private settled = false;
  /** Set by abort(): the upstream request was cancelled on purpose, its error callback is ignored. */
  private abortedBy: AbortCause | null = null;
  private controller: Dispatcher.DispatchController | null = null;
  /** The first-byte timeout, then the request deadline. */
  private timer: NodeJS.Timeout | null = null;
  /** The worker's status code (0 until its response head arrives). */
  private status = 0;
  /** The head the client gets, written with the first body chunk. */
  private resHeaders: Record<string, string> | null = null;
  /** A worker's 4xx/5xx body (bounded): logged for 5xx, normalised to OpenAI's shape for 4xx. */
  private errorText = '';
  /** The worker's Retry-After on a 503/429, ms. */
  private retryAfterMs: number | undefined;
  /** Clock time of dispatch and of the last byte from the worker (outlier detection reads them). */
  dispatchedAt = 0;
  lastByteAt = 0;
  /** Prompt tokens the worker is expected to compute for this attempt (what the router charged it). */
  readonly uncachedTokens: number;
  /** The first-byte timeout of this attempt: env.firstByteMs, or longer for a long prefill. */
  private readonly firstByteMs: number;
  /** True once any byte reached the client: from then on nothing can be retried. */
  private sentBytes = false;
  /**
   * True once the answer's first token has passed (its TTFT taken, the router told). That is its
   * first byte, except in a Responses stream, whose first events announce the response before the
   * prompt is prefilled (vLLM's responses_stream_generator): there it is the first output event.
   */
  private firstTokenSeen = false;
  /** A stream's last bytes relayed (at least END_WINDOW of them once that many came): did it end with [DONE]? */
  private endBytes: Buffer = EMPTY;
  /** A Responses stream relayed its closing event. */
  private responsesEnded = false;
  /** Last two bytes relayed (api/sse.ts), so an error event never lands inside a partial event. */
  private tail = TAIL_AT_BOUNDARY;
  /** The answer's length, counted as it passes (the routing policy learns answer lengths). */
  private readonly outputTokens = new OutputTokenCounter();
  /** This answer's inter-token times, for the worker's recent TPOT (admission reads it). */
  private readonly pace = new AnswerPace();
  /**
   * `ctx.abortUpstream` while the attempt runs (client gone, shutdown). Created with the instance
   * on purpose: the same arrow created in run() made V8 promote most finished requests' objects to
   * the old generation (15× the promoted bytes, ~40% more gateway CPU per request under load).
   */
  private readonly abortFromOutside = (why: 'client' | 'shutdown'): void => this.abort(why);

  /**
   * @param waiting the worker's attempts still waiting for their first byte (Relay.workerDown
   *   gives them up); this attempt is in it from run() until its first byte or until it settles.
   */
  constructor(
    private readonly env: AttemptEnv,
    private readonly ctx: RequestContext,
    private readonly decision: RouteDecision,
    private readonly waiting: Set<RelayAttempt>,
  ) {
    this.worker = decision.worker;
    this.breaker = env.fleet.breaker(decision.worker.id);
    this.uncachedTokens = decision.worker.inflight.get(ctx.id)?.uncachedTokens ?? 0;
    const prefill = this.uncachedTokens > 0 ? (env.prefillAllowanceMs?.(decision.worker, this.uncachedTokens) ?? 0) : 0;
    this.firstByteMs = Math.min(MAX_TIMER_MS, Math.max(env.firstByteMs, prefill));
  }

  /** Arm the timers, make the attempt cancellable, dispatch; resolves when the attempt settles. */
  run(): Promise<AttemptResult> {
    return new Promise<AttemptResult>((resolve) => {
      this.resolve = resolve;
      // Before the first byte of a stream the first-byte timeout applies too (whichever is sooner).
      // A non-streaming answer comes all at once at the end, so only the deadline bounds it.
      if (this.ctx.stream && this.firstByteMs < this.remainingMs()) {
        this.timer = setTimeout(() => this.abort('first_byte_timeout'), this.firstByteMs);
      } else {
        this.armDeadline();
      }
      this.ctx.abortUpstream = this.abortFromOutside;
      this.waiting.add(this);
      this.dispatch();
    });
  }

  /** The worker was taken out of routing while this attempt waited for its first byte. */
  workerDown(): void {
    this.abort('worker_down');
  }

  /** Outlier detection suspects the worker hung and this attempt has had no byte: retry it elsewhere. */
  suspectedHung(): void {
    this.abort('suspected');
  }

  /** A stream already relaying went silent on a suspected worker for too long: end it honestly. */
  stalled(): void {
    this.abort('stalled');
  }

  /** True once bytes reached the client (the attempt can no longer be retried). */
  get relaying(): boolean {
    return this.sentBytes;
  }

  get isStream(): boolean {
    return this.ctx.stream;
  }

  // ---- undici dispatch handler ----

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.settled) controller.abort(new Error(this.abortedBy ?? 'abandoned'));
  }

  onResponseStart(controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    this.controller = controller;
    if (this.settled || statusCode < 200) return; // 1xx: the real head follows
    this.status = statusCode;
    this.ctx.upstreamStatus = statusCode;
    // A 5xx (or a 429: the worker itself is overloaded) fails the attempt once its body is
    // collected, and is retried elsewhere.
    if (failsAttempt(statusCode)) {
      this.retryAfterMs = retryAfterMs(headers['retry-after']);
      return;
    }
    this.resHeaders = this.clientHeaders(headers);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.settled) return;
    // Outlier detection reads these; only a suspected worker needs more than two stores per chunk.
    const w = this.worker;
    const now = (this.lastByteAt = w.lastByteAt = this.env.clock.now());
    if (w.suspected) this.env.watch?.onBytes(w);
    if (this.status >= 400) {
      if (this.errorText.length < MAX_ERROR_TEXT) this.errorText += chunk.toString('utf8', 0, MAX_ERROR_TEXT);
      return;
    }
    const ctx = this.ctx;
    if (!this.sentBytes) this.onFirstByte();
    if (!this.firstTokenSeen && chunk.indexOf(RESPONSES_OUTPUT_EVENT) !== -1) this.onFirstToken();
    this.outputTokens.chunk(chunk, ctx.stream, this.tail);
    if (ctx.stream) {
      this.tail = updateTail(this.tail, chunk);
      this.trackEnd(chunk);
      if (this.firstTokenSeen && ctx.kind !== 'responses') this.pace.chunk(w.decodePace, this.outputTokens.eventCount, now);
    }
    if (ctx.taps.length > 0) runTaps(ctx, chunk);
    const res = ctx.res;
    if (this.env.batchWrites === true) holdWrites(res.socket);
    if (!res.write(chunk)) {
      controller.pause();
      res.once('drain', () => controller.resume());
    }
  }

  onResponseEnd(): void {
    if (this.settled) return;
    const { ctx, status } = this;
    if (failsAttempt(status)) {
      if (status >= 500) this.env.logger?.warn({ id: ctx.id, worker: this.worker.id, status, body: this.errorText.slice(0, 500) }, 'worker answered an error');
      this.fail(status === 503 || status === 429 ? 'overloaded' : 'status_5xx', `worker ${this.worker.id} answered ${status}`);
      return;
    }
    if (status >= 400) {
      this.relayClientError();
      return;
    }
    if (ctx.stream && !this.streamFinished()) {
      // The worker closed the stream cleanly but before its end: the answer is cut short.
      this.env.logger?.warn({ id: ctx.id, worker: this.worker.id, kind: ctx.kind }, 'worker ended a stream without its closing event');
      this.fail('truncated', `worker ${this.worker.id} ended the stream before the answer was complete`);
      return;
    }
    if (!this.sentBytes) {
      // An empty body: the head goes out alone.
      ctx.ttftMs = this.env.clock.now() - ctx.startedAt;
      this.env.router.firstToken(ctx.id);
      ctx.res.writeHead(status, this.resHeaders ?? ctx.headers);
    } else if (!this.firstTokenSeen) this.onFirstToken();
    if (this.env.batchWrites === true) endSoon(ctx.res);
    else ctx.res.end();
    ctx.status = status;
    // A 4xx is the request's fault, not the worker's.
    this.breaker.onSuccess();
    // The answer's length in tokens, which the policy learns (only generated text has one).
    const kind = ctx.kind;
    let answered: number | undefined;
    if (status < 400 && generates(kind)) {
      answered = this.outputTokens.total(kind, ctx.stream, chatChoices(ctx));
      if (answered !== undefined) {
        ctx.usage = { promptTokens: this.outputTokens.promptTotal(kind) ?? null, cachedTokens: this.outputTokens.cachedPromptTotal(), outputTokens: answered };
      }
    } else if (status < 400 && kind === 'embeddings') {
      // Embeddings write nothing, but their inputs are tokens a tenant used.
      const prompt = this.outputTokens.promptTotal(kind);
      if (prompt !== undefined) ctx.usage = { promptTokens: prompt, outputTokens: 0 };
    }
    this.settle(DONE, status < 400, status < 400 ? 'ok' : 'client_error', answered);
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    if (this.settled || this.abortedBy !== null) return;
    // The raw error names the worker's address: it goes to the log, the client gets the worker's id.
    this.env.logger?.warn({ id: this.ctx.id, worker: this.worker.id, err: errMessage(err) }, 'worker request failed');
    if (!this.sentBytes && droppedConnection(err) && this.aloneOnWorker()) {
      this.fail('worker_died', `worker ${this.worker.id} dropped the connection while serving this request alone`);
    } else if (this.status === 0) this.fail('connect', `worker ${this.worker.id} is unreachable`);
    else this.fail('stream_error', 'the connection to the worker failed');
  }

  /**
   * A worker's 4xx, in OpenAI's shape whatever the worker wrote (vLLM's has a numeric `code` and
   * an `object` field; FastAPI's is `{"detail": ...}`): the message kept (truncated), the code a
   * string. A 401/403 from a worker means kvgate's upstream credentials are wrong, which the
   * client cannot fix: that is a 502.
   */
  private relayClientError(): void {
    const { ctx, status } = this;
    const err = normaliseWorkerError(status, this.errorText, this.worker.id);
    if (err.status >= 500) {
      this.env.logger?.warn({ id: ctx.id, worker: this.worker.id, status, body: this.errorText.slice(0, 500) }, 'worker refused kvgate');
    }
    const payload = JSON.stringify(err.body());
    ctx.ttftMs = this.env.clock.now() - ctx.startedAt;
    this.env.router.firstToken(ctx.id);
    const h: Record<string, string> = { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(payload)) };
    Object.assign(h, ctx.headers);
    if (ctx.exposeRouting) h['x-kvgate-worker'] = this.worker.id;
    ctx.res.writeHead(err.status, h);
    ctx.res.end(payload);
    ctx.status = err.status;
    this.breaker.onSuccess();
    this.settle(DONE, false, 'client_error');
  }

  // ---- steps ----

  private dispatch(): void {
    const { ctx, worker } = this;
    this.dispatchedAt = this.lastByteAt = this.env.clock.now();
    // An upload goes as it came (a stage's change to its fields, e.g. the priority, is not sent).
    const upload = ctx.uploadContentType;
    const body = ctx.bodyModified && upload === null ? Buffer.from(JSON.stringify(ctx.body)) : ctx.rawBody;
    const headers: Record<string, string> = { ...worker.upstreamHeaders, 'content-type': upload ?? 'application/json', 'x-request-id': ctx.id };
    if (ctx.trace !== null) Object.assign(headers, ctx.trace.headers);
    this.env.upstreams.relayFor(worker.id, worker.url).dispatch(
      {
        method: 'POST',
        path: basePath(worker) + ctx.path,
        headers,
        body,
      },
      this,
    );
  }

  /** The response head the client gets for a worker's 2xx-4xx head. */
  private clientHeaders(upstream: IncomingHttpHeaders): Record<string, string> {
    const ct = upstream['content-type'];
    const h: Record<string, string> = { 'content-type': ct === undefined ? 'application/json' : String(ct) };
    Object.assign(h, this.ctx.headers);
    // Off by default: they tell a caller how much of a prompt the gateway has seen from anyone.
    if (this.ctx.exposeRouting) {
      h['x-kvgate-worker'] = this.worker.id;
      h['x-kvgate-prefix-hit'] = this.decision.expectedPrefixHit.toFixed(3);
    }
    if (this.ctx.stream) {
      h['cache-control'] = 'no-cache';
      h['x-accel-buffering'] = 'no';
    } else {
      const cl = upstream['content-length'];
      if (cl !== undefined) h['content-length'] = String(cl);
    }
    return h;
  }

  /** The first body byte: the head goes out with it, and from now on nothing is retried. */
  private onFirstByte(): void {
    const ctx = this.ctx;
    const now = this.env.clock.now();
    if (ctx.stream) this.env.watch?.onFirstByte(this.worker, now - this.dispatchedAt);
    // A Responses stream's first token comes with its first output event (onResponseData).
    if (!(ctx.stream && ctx.kind === 'responses')) this.onFirstToken();
    if (ctx.stream) this.armDeadline();
    this.stopWaiting();
    ctx.res.writeHead(this.status, this.resHeaders!);
    this.sentBytes = true;
  }

  /**
   * The answer's first token: its TTFT, and the router learns the prefill is done. The request is
   * past retrying, so its prompt's token ids go (releasePromptTokens).
   */
  private onFirstToken(): void {
    this.firstTokenSeen = true;
    this.ctx.ttftMs = this.env.clock.now() - this.ctx.startedAt;
    this.env.router.firstToken(this.ctx.id);
    releasePromptTokens(this.ctx.routeRequest);
  }

  /** Cancel the upstream request and settle the attempt now (undici's error callback is then ignored). */
  private abort(why: AbortCause): void {
    if (this.abortedBy !== null || this.settled) return;
    this.abortedBy = why;
    if (why === 'client' || why === 'shutdown') this.clientGone(why);
    else this.fail(why, why);
    // undici may report the cancellation synchronously; the attempt is settled by now.
    this.controller?.abort(new Error(why));
  }

  /** The worker (or the clock) failed this attempt: account it, then end or hand back the request. */
  private fail(reason: FailReason, message: string): void {
    if (this.settled) return;
    const { ctx, worker } = this;
    this.env.metrics.upstreamFailures.labels(worker.id, reason).inc();
    // A slow generation hitting its deadline says nothing about the worker's health, and a
    // worker already marked down by its health probes needs no breaker.
    // A worker answering 503/429 is overloaded, not broken: it is backed off instead.
    if (reason === 'deadline' || reason === 'worker_down' || reason === 'suspected') this.breaker.onNeutral();
    else if (reason === 'overloaded') this.breaker.onOverloaded(this.retryAfterMs);
    else this.breaker.onFailure();
    if (!this.sentBytes) {
      const err = this.errorBeforeBytes(reason, message);
      ctx.status = err.status;
      // The relay tries another worker unless the deadline has passed, or the request may be what
      // killed this one: sent on, it could kill the next (a prompt that crashes the engine).
      this.settle(reason === 'worker_died' ? { done: false, error: err, final: true } : { done: false, error: err }, false, reason);
      return;
    }
    // Bytes are out: end the response honestly, never as a clean success.
    const err =
      reason === 'deadline'
        ? errors.deadline('the request deadline passed mid-response')
        : reason === 'stalled'
          ? errors.upstream(`worker ${worker.id} stopped responding mid-response`, 'upstream_stream_error')
          : reason === 'truncated'
            ? errors.upstream(message, 'upstream_stream_truncated')
            : errors.upstream(`worker ${worker.id} failed mid-response: ${message}`, 'upstream_stream_error');
    ctx.status = err.status;
    if (ctx.stream && !ctx.res.destroyed) this.endWithErrorEvent(err);
    else ctx.res.destroy();
    this.settle(DONE, false, reason);
  }

  private errorBeforeBytes(reason: FailReason, message: string): ApiError {
    const id = this.worker.id;
    switch (reason) {
      case 'deadline':
        return errors.deadline(`worker ${id} did not finish within the request deadline`);
      case 'first_byte_timeout':
        return errors.deadline(`worker ${id} sent nothing within ${this.firstByteMs} ms`);
      case 'overloaded':
        return new ApiError(503, 'overloaded_error', 'upstream_overloaded', message, null, {
          'retry-after': String(Math.max(1, Math.ceil((this.retryAfterMs ?? 1000) / 1000))),
        });
      case 'worker_down':
        return errors.upstream(`worker ${id} was taken out of service (failing health probes)`, 'upstream_unreachable');
      case 'suspected':
        return errors.deadline(`worker ${id} stopped responding`);
      case 'worker_died':
        return errors.upstream(
          `worker ${id} failed while serving this request and no other (its connection dropped); it was not retried on another worker, in case the request itself brought the worker down`,
          'upstream_worker_failed_on_request',
        );
      default:
        return errors.upstream(message, reason === 'connect' ? 'upstream_unreachable' : 'upstream_error');
    }
  }

  /** The client went away, or the gateway is shutting down: neither is the worker's fault. */
  private clientGone(why: 'client' | 'shutdown'): void {
    if (this.settled) return;
    const { ctx } = this;
    const res = ctx.res;
    this.breaker.onNeutral();
    if (why === 'shutdown' && !res.headersSent) {
      this.settle({ done: false, error: errors.shuttingDown() }, false, 'shutdown');
      return;
    }
    if (why === 'shutdown' && ctx.stream && !res.destroyed) {
      this.endWithErrorEvent(errors.shuttingDown());
    } else if (!res.writableEnded) {
      res.destroy();
    }
    ctx.status = why === 'client' ? 499 : 503;
    this.settle(DONE, false, why === 'client' ? 'client_abort' : 'shutdown');
  }

  /**
   * Whether this attempt was the only request the worker had when its connection dropped. A worker
   * that dies with several requests drops them all at once: each then settles in turn, the later
   * ones finding fewer left in flight, so a drop on the same worker within SIBLING_DROP_MS of
   * another makes none of them the one to blame.
   */
  private aloneOnWorker(): boolean {
    const w = this.worker;
    const now = this.env.clock.now();
    const last = lastDropAt.get(w);
    lastDropAt.set(w, now);
    if (last !== undefined && now - last < SIBLING_DROP_MS) return false;
    return w.inflight.size <= 1;
  }

  /** Keep the stream's last bytes (copying only chunks shorter than the window) and note a Responses stream's closing event. */
  private trackEnd(chunk: Buffer): void {
    if (this.ctx.kind === 'responses' && !this.responsesEnded) {
      // The event's name may be split between this chunk and the last: look across the seam too.
      const prev = this.endBytes;
      const seam = prev.length > 0 ? Buffer.concat([prev.subarray(Math.max(0, prev.length - END_WINDOW)), chunk.subarray(0, END_WINDOW)]) : EMPTY;
      for (const e of RESPONSES_END_EVENTS) if (chunk.indexOf(e) !== -1 || seam.indexOf(e) !== -1) this.responsesEnded = true;
    }
    const n = chunk.length;
    if (n >= END_WINDOW) this.endBytes = chunk;
    else if (n > 0) this.endBytes = Buffer.concat([this.endBytes.subarray(Math.max(0, this.endBytes.length - (END_WINDOW - n))), chunk]);
  }

  /** The stream reached its own end: [DONE] for chat and completions, a closing event for Responses. */
  private streamFinished(): boolean {
    const kind = this.ctx.kind;
    if (kind === 'responses') return this.responsesEnded;
    if (kind !== 'chat' && kind !== 'completions') return true;
    const b = this.endBytes;
    return b.subarray(Math.max(0, b.length - END_WINDOW)).indexOf(SSE_DONE_MARK) !== -1;
  }

  /** Ends a stream with an error event, first terminating a partially relayed event. */
  private endWithErrorEvent(err: ApiError): void {
    this.ctx.res.end((atEventBoundary(this.tail) ? '' : '\n\n') + sseErrorEvent(err));
  }

  /** The one way an attempt ends: complete the route, count the outcome, resolve run(). */
  private settle(result: AttemptResult, ok: boolean, outcome: string, outputTokens?: number): void {
    if (this.settled) return;
    this.settled = true;
    this.stopWaiting();
    if (this.timer) clearTimeout(this.timer);
    this.ctx.abortUpstream = null;
    // A stream cut short (the client gone, the worker failing mid-way, the deadline) was generated
    // as far as it was relayed: its tokens count as used.
    const ctx = this.ctx;
    if (!ok && this.sentBytes && ctx.stream && ctx.usage === null && generates(ctx.kind)) {
      const relayed = this.outputTokens.total(ctx.kind, true, chatChoices(ctx));
      if (relayed !== undefined && relayed > 0) ctx.usage = { promptTokens: null, outputTokens: relayed };
    }
    this.env.router.complete(this.ctx.id, ok, outputTokens);
    this.env.metrics.attemptsBy.series(this.worker.id, outcome).inc();
    this.resolve!(result);
  }

  /**
   * The deadline's timer is set for the time left rounded down to a whole second, and set again
   * for the rest when it fires early. Node keeps one list of timers per distinct duration, and a
   * new duration puts a new list in a priority queue: with the exact time left every request made
   * and removed a list of its own; rounded, the requests of one second share one, and setting and
   * clearing a timer costs what it does with a constant duration (0.4–0.6 µs less a timer in a
   * micro-benchmark, docs/performance.md). A deadline is never late for it.
   */
  private armDeadline(): void {
    if (this.timer) clearTimeout(this.timer);
    const left = this.remainingMs();
    this.timer = setTimeout(this.onDeadlineTimer, left < 1000 ? left : left - (left % 1000));
  }

  private readonly onDeadlineTimer = (): void => {
    const left = this.remainingMs();
    if (left > 0) this.timer = setTimeout(this.onDeadlineTimer, left);
    else this.abort('deadline');
  };

  /** Time left before the request deadline; setTimeout treats anything above 2^31−1 ms as 1 ms. */
  private remainingMs(): number {
    return Math.min(MAX_TIMER_MS, Math.max(0, this.ctx.deadlineAt - this.env.clock.now()));
  }

  private stopWaiting(): void {
    this.waiting.delete(this);
  }
}

/** Path prefix of a worker URL ('' for a bare origin), cached per worker. */
/** The answers a chat request asks for (`n`), each of whose streams opens with a role event; 1 otherwise. */
function chatChoices(ctx: RequestContext): number {
  return ctx.kind === 'chat' ? ((ctx.body as { n?: number | null }).n ?? 1) : 1;
}

const basePaths = new WeakMap<WorkerState, string>();
function basePath(w: WorkerState): string {
  let b = basePaths.get(w);
  if (b === undefined) {
    b = new URL(w.url).pathname.replace(/\/$/, '');
    basePaths.set(w, b);
  }
  return b;
}

/** A failing tap (a cache fill, say) must not break the response it observes: it is dropped. */
function runTaps(ctx: RequestContext, chunk: Buffer): void {
  for (let i = 0; i < ctx.taps.length; i++) {
    try {
      ctx.taps[i]!(chunk);
    } catch {
      ctx.taps.splice(i--, 1);
    }
  }
}

/** Clock time of each worker's last dropped connection (RelayAttempt.aloneOnWorker). */
const lastDropAt = new WeakMap<WorkerState, number>();
/** Drops on one worker this close together (ms) are one event: the worker went down with all of them. */
const SIBLING_DROP_MS = 1000;

/**
 * The worker's end of an established connection closed under the request (undici's SocketError
 * "other side closed", a reset, a broken pipe): unlike a refused or timed-out connect, the worker
 * had the request.
 */
function droppedConnection(e: Error): boolean {
  const code = (e as { code?: string }).code;
  return code === 'UND_ERR_SOCKET' || code === 'ECONNRESET' || code === 'EPIPE';
}

function errMessage(e: Error): string {
  const code = (e as { code?: string }).code;
  return code ? `${code} ${e.message}` : e.message;
}

/** Worker statuses that fail the attempt (retried elsewhere) instead of being relayed. */
function failsAttempt(status: number): boolean {
  return status >= 500 || status === 429;
}

/** A Retry-After header in seconds (HTTP dates are not followed), as ms, at most MAX_UPSTREAM_RETRY_AFTER_SECONDS. */
function retryAfterMs(v: string | string[] | undefined): number | undefined {
  const s = Array.isArray(v) ? v[0] : v;
  if (s === undefined || !/^\s*\d+\s*$/.test(s)) return undefined;
  return Math.min(Number(s), MAX_UPSTREAM_RETRY_AFTER_SECONDS) * 1000;
}

/** A worker's 4xx body → an ApiError in OpenAI's shape (see RelayAttempt.relayClientError). */
export function normaliseWorkerError(status: number, text: string, workerId: string): ApiError {
  if (status === 401 || status === 403) {
    return errors.upstream(`worker ${workerId} refused kvgate's credentials (check the pool's apiKey)`, 'upstream_auth_failed');
  }
  let message: string | null = null;
  let param: string | null = null;
  let code: string | null = null;
  try {
    const j = JSON.parse(text) as Record<string, unknown>;
    const e = (j.error !== null && typeof j.error === 'object' ? j.error : j) as Record<string, unknown>;
    if (typeof e.message === 'string') message = e.message;
    else if (typeof e.detail === 'string') message = e.detail;
    else if (Array.isArray(e.detail)) message = JSON.stringify(e.detail);
    if (typeof e.param === 'string') param = e.param;
    if (typeof e.code === 'string' && /^[a-z0-9_]{1,64}$/.test(e.code)) code = e.code;
  } catch {
    // Not JSON: a generic message below.
  }
  const type = status === 404 ? 'not_found_error' : 'invalid_request_error';
  return new ApiError(
    status,
    type,
    code ?? STATUS_CODES[status] ?? 'invalid_request',
    message !== null ? echo(message, 1000) : `the worker refused the request (${status})`,
    param !== null ? echo(param, 100) : null,
  );
}

const STATUS_CODES: Record<number, string> = {
  400: 'invalid_request',
  404: 'not_found',
  405: 'method_not_allowed',
  408: 'request_timeout',
  413: 'request_too_large',
  422: 'invalid_value',
  429: 'rate_limited',
};
