/**
 * The proxy: routes a prepared request, sends the client's bytes to the chosen worker over a
 * keep-alive pool, and relays the worker's response bytes to the client as they arrive.
 *
 * Failure handling:
 * - An attempt that fails before any byte reached the client (connect error, 5xx, body error, no
 *   first streamed byte within `firstByteMs`) is retried on another worker, up to `retries` times,
 *   within the request's deadline. The response headers are written together with the first body
 *   chunk precisely so that this stays possible.
 * - Worker 4xx answers are relayed as they are and not retried.
 * - Once bytes have reached the client nothing is retried: a failing stream ends with an SSE error
 *   event (see api/sse.ts), a failing JSON response is cut (the client sees a truncated body).
 * - The client going away aborts the upstream request, so the worker frees the sequence.
 * Router.complete is called exactly once per attempt on every path, Router.firstToken once when
 * the attempt's first body byte arrives.
 */
import type { Dispatcher } from 'undici';
import { ApiError, errors } from '../api/errors.js';
import { atEventBoundary, sseErrorEvent, TAIL_AT_BOUNDARY, updateTail } from '../api/sse.js';
import type { WorkerRegistry } from '../fleet/registry.js';
import type { Upstreams } from '../fleet/upstreams.js';
import type { WorkerState } from '../fleet/worker-state.js';
import type { Router } from '../scheduler/router.js';
import type { RouteDecision } from '../scheduler/types.js';
import type { GatewayMetrics } from '../telemetry/metrics.js';
import type { Clock } from '../util/clock.js';
import type { RequestContext } from './context.js';

export interface ProxyOptions {
  router: Router;
  fleet: WorkerRegistry;
  upstreams: Upstreams;
  metrics: GatewayMetrics;
  clock: Clock;
  firstByteMs: number;
  /** Further attempts after the first (on other workers). */
  retries: number;
  retryAfterSeconds: number;
}

type AttemptResult = { done: true } | { done: false; error: ApiError };

type FailReason = 'connect' | 'status_5xx' | 'first_byte_timeout' | 'deadline' | 'stream_error' | 'worker_down';

const DONE: AttemptResult = { done: true };
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Path prefix of a worker URL ('' for a bare origin), cached per worker. */
const basePaths = new WeakMap<WorkerState, string>();
function basePath(w: WorkerState): string {
  let b = basePaths.get(w);
  if (b === undefined) {
    b = new URL(w.url).pathname.replace(/\/$/, '');
    basePaths.set(w, b);
  }
  return b;
}

export class Proxy {
  /** Attempts waiting for their first byte, per worker: abandoned at once if the worker goes down. */
  private readonly waiting = new Map<string, Set<() => void>>();

  constructor(private readonly o: ProxyOptions) {}

  /**
   * The worker was taken out of routing (health probes failing): attempts still waiting for its
   * first byte are given up and retried elsewhere, rather than hanging until their deadline (a
   * non-streaming answer only arrives at the end). Attempts already relaying bytes are left alone.
   */
  workerDown(workerId: string): void {
    const set = this.waiting.get(workerId);
    if (!set) return;
    for (const abortAttempt of [...set]) abortAttempt();
  }

  /** Serve the request at some worker. Resolves when the response is over; throws ApiError if no byte was sent. */
  async forward(ctx: RequestContext): Promise<void> {
    const { router, metrics } = this.o;
    let exclude: Set<string> | undefined;
    let lastError: ApiError | null = null;
    for (let attempt = 0; attempt <= this.o.retries; attempt++) {
      if (ctx.aborted) return;
      if (attempt > 0 && this.o.clock.now() >= ctx.deadlineAt) break;
      const out = router.route(ctx.routeRequest, ctx.candidates, exclude);
      if (!out.ok) {
        if (lastError) throw lastError;
        if (out.status === 400) throw new ApiError(400, 'invalid_request_error', out.code, out.message);
        throw errors.noWorker(out.message, this.o.retryAfterSeconds);
      }
      const d = out.decision;
      (exclude ??= new Set()).add(d.worker.id);
      ctx.decision = d;
      ctx.workerId = d.worker.id;
      ctx.attempts++;
      metrics.decisionsBy.get(d.policy, d.worker.id, d.reason).inc();
      metrics.prefixHitBy.get(d.policy).observe(d.expectedPrefixHit);
      this.o.fleet.breaker(d.worker.id).onDispatch();
      const r = await this.attempt(ctx, d);
      if (r.done) return;
      if (ctx.aborted) {
        // The client left (nothing to answer) or the gateway is shutting down (answer 503).
        if (ctx.abortReason === 'shutdown') throw r.error;
        return;
      }
      lastError = r.error;
    }
    throw lastError ?? errors.deadline('the request deadline passed before a worker could be tried');
  }

  private attempt(ctx: RequestContext, d: RouteDecision): Promise<AttemptResult> {
    const { router, metrics, clock } = this.o;
    const w = d.worker;
    const breaker = this.o.fleet.breaker(w.id);
    const res = ctx.res;
    let controller: Dispatcher.DispatchController | null = null;
    let abortedBy: FailReason | 'client' | 'shutdown' | null = null;
    let sentBytes = false;
    let tail = TAIL_AT_BOUNDARY;
    let settled = false;
    let status = 0;
    let errorText = '';
    let resHeaders: Record<string, string> | null = null;

    return new Promise<AttemptResult>((resolve) => {
      let timer: NodeJS.Timeout | null = null;
      // setTimeout treats anything above 2^31−1 ms as 1 ms: clamp absurdly distant deadlines.
      const remaining = (): number => Math.min(MAX_TIMER_MS, Math.max(0, ctx.deadlineAt - clock.now()));
      const armDeadline = (): void => {
        if (timer) clearTimeout(timer);
        timer = setTimeout(() => abort('deadline'), remaining());
      };

      const finish = (result: AttemptResult, ok: boolean, outcome: string): void => {
        if (settled) return;
        settled = true;
        stopWaiting();
        if (timer) clearTimeout(timer);
        ctx.abortUpstream = null;
        router.complete(ctx.id, ok);
        metrics.attemptsBy.get(w.id, outcome).inc();
        resolve(result);
      };

      const fail = (reason: FailReason, message: string): void => {
        if (settled) return;
        metrics.upstreamFailures.labels(w.id, reason).inc();
        // A slow generation hitting its deadline says nothing about the worker's health, and a
        // worker already marked down by its health probes needs no breaker.
        if (reason === 'deadline' || reason === 'worker_down') breaker.onNeutral();
        else breaker.onFailure();
        if (!sentBytes) {
          const err =
            reason === 'deadline'
              ? errors.deadline(`worker ${w.id} did not finish within the request deadline`)
              : reason === 'first_byte_timeout'
                ? errors.deadline(`worker ${w.id} sent nothing within ${this.o.firstByteMs} ms`)
                : reason === 'worker_down'
                  ? errors.upstream(`worker ${w.id} was taken out of service (failing health probes)`, 'upstream_unreachable')
                  : errors.upstream(message, reason === 'connect' ? 'upstream_unreachable' : 'upstream_error');
          ctx.status = err.status;
          // forward() tries another worker unless the deadline has passed.
          finish({ done: false, error: err }, false, reason);
          return;
        }
        // Bytes are out: end the response honestly, never as a clean success.
        const err =
          reason === 'deadline'
            ? errors.deadline('the request deadline passed mid-response')
            : errors.upstream(`worker ${w.id} failed mid-response: ${message}`, 'upstream_stream_error');
        ctx.status = err.status;
        if (ctx.stream && !res.destroyed) {
          res.end((atEventBoundary(tail) ? '' : '\n\n') + sseErrorEvent(err));
        } else {
          res.destroy();
        }
        finish(DONE, false, reason);
      };

      const onClientGone = (why: 'client' | 'shutdown'): void => {
        if (settled) return;
        breaker.onNeutral();
        if (why === 'shutdown' && !res.headersSent) {
          finish({ done: false, error: errors.shuttingDown() }, false, 'shutdown');
          return;
        }
        if (why === 'shutdown' && ctx.stream && !res.destroyed) {
          res.end((atEventBoundary(tail) ? '' : '\n\n') + sseErrorEvent(errors.shuttingDown()));
        } else if (!res.writableEnded) {
          res.destroy();
        }
        ctx.status = why === 'client' ? 499 : 503;
        finish(DONE, false, why === 'client' ? 'client_abort' : 'shutdown');
      };

      /** Cancel the upstream request and settle the attempt now (undici's error callback is then ignored). */
      const abort = (why: FailReason | 'client' | 'shutdown'): void => {
        if (abortedBy !== null || settled) return;
        abortedBy = why;
        if (why === 'client' || why === 'shutdown') onClientGone(why);
        else fail(why, why);
        // undici may report the cancellation synchronously; the attempt is settled by now.
        controller?.abort(new Error(why));
      };

      // Before the first byte of a stream the first-byte timeout applies too (whichever is sooner).
      // A non-streaming answer comes all at once at the end, so only the deadline bounds it.
      if (ctx.stream && this.o.firstByteMs < remaining()) {
        timer = setTimeout(() => abort('first_byte_timeout'), this.o.firstByteMs);
      } else {
        armDeadline();
      }
      ctx.abortUpstream = abort;
      let waitSet = this.waiting.get(w.id);
      if (!waitSet) this.waiting.set(w.id, (waitSet = new Set()));
      const onWorkerDown = (): void => abort('worker_down');
      waitSet.add(onWorkerDown);
      const stopWaiting = (): void => void waitSet.delete(onWorkerDown);

      const handler: Dispatcher.DispatchHandler = {
        onRequestStart(c) {
          controller = c;
          if (settled) c.abort(new Error(abortedBy ?? 'abandoned'));
        },
        onResponseStart(c, statusCode, headers) {
          controller = c;
          if (settled || statusCode < 200) return; // 1xx: the real head follows
          status = statusCode;
          ctx.upstreamStatus = status;
          if (status >= 500) return; // collected below, then retried elsewhere
          const ct = headers['content-type'];
          resHeaders = {
            'content-type': ct === undefined ? 'application/json' : String(ct),
            'x-request-id': ctx.id,
            'x-kvgate-worker': w.id,
            'x-kvgate-prefix-hit': d.expectedPrefixHit.toFixed(3),
          };
          if (ctx.stream) {
            resHeaders['cache-control'] = 'no-cache';
            resHeaders['x-accel-buffering'] = 'no';
          } else {
            const cl = headers['content-length'];
            if (cl !== undefined) resHeaders['content-length'] = String(cl);
          }
        },
        onResponseData(c, chunk) {
          if (settled) return;
          if (status >= 500) {
            if (errorText.length < 200) errorText += chunk.toString('utf8', 0, 200);
            return;
          }
          if (!sentBytes) {
            ctx.ttftMs = clock.now() - ctx.startedAt;
            router.firstToken(ctx.id);
            if (ctx.stream) armDeadline();
            stopWaiting();
            res.writeHead(status, resHeaders!);
            sentBytes = true;
          }
          if (ctx.stream) tail = updateTail(tail, chunk);
          if (ctx.taps.length > 0) runTaps(ctx, chunk);
          if (!res.write(chunk)) {
            c.pause();
            res.once('drain', () => c.resume());
          }
        },
        onResponseEnd() {
          if (settled) return;
          if (status >= 500) {
            fail('status_5xx', `worker ${w.id} answered ${status}: ${errorText.slice(0, 200)}`);
            return;
          }
          if (!sentBytes) {
            ctx.ttftMs = clock.now() - ctx.startedAt;
            router.firstToken(ctx.id);
            res.writeHead(status, resHeaders ?? { 'x-request-id': ctx.id, 'x-kvgate-worker': w.id });
          }
          res.end();
          ctx.status = status;
          // A 4xx is the request's fault, not the worker's.
          breaker.onSuccess();
          finish(DONE, status < 400, status < 400 ? 'ok' : 'client_error');
        },
        onResponseError(_c, e) {
          if (settled || abortedBy !== null) return;
          if (status === 0) fail('connect', `worker ${w.id} unreachable: ${errMessage(e)}`);
          else fail('stream_error', errMessage(e));
        },
      };

      const body = ctx.bodyModified ? Buffer.from(JSON.stringify(ctx.body)) : ctx.rawBody;
      this.o.upstreams.for(w.id, w.url).dispatch(
        {
          method: 'POST',
          path: basePath(w) + ctx.path,
          headers: { 'content-type': 'application/json', 'x-request-id': ctx.id },
          body,
        },
        handler,
      );
    });
  }
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

function errMessage(e: Error): string {
  const code = (e as { code?: string }).code;
  return code ? `${code} ${e.message}` : e.message;
}
