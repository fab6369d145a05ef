/**
 * The relay: routes a prepared request, sends the client's bytes to the chosen worker over a
 * keep-alive pool, and relays the worker's response bytes to the client as they arrive. Each try
 * at one worker is a RelayAttempt (relay-attempt.ts); this file holds the retry loop around them.
 *
 * Failure handling:
 * - An attempt that fails before any byte reached the client (connect error, 5xx, body error, no
 *   first streamed byte within `firstByteMs`) is retried on another worker, up to `retries` times,
 *   within the request's deadline. The response headers are written together with the first body
 *   chunk precisely so that this stays possible.
 * - Worker 4xx answers are relayed as they are and not retried, except 429: like a 503 it means
 *   the worker is overloaded, so the worker is backed off (its circuit breaker, not counted as a
 *   failure) and the request tried elsewhere; when every attempt met an overloaded worker the client gets 503
 *   `upstream_overloaded` with Retry-After (a real failure among them: its error).
 * - A request whose worker dropped its connection while serving it and no other request is not
 *   retried: it may be what brought the worker down (a prompt that crashes the engine), and sent on
 *   it could take the next worker down too. The client gets 502 `upstream_worker_failed_on_request`.
 * - Once bytes have reached the client nothing is retried: a failing stream ends with an SSE error
 *   event (see api/sse.ts), a failing JSON response is cut (the client sees a truncated body).
 * - The client going away aborts the upstream request, so the worker frees the sequence.
 * Router.complete is called exactly once per attempt on every path (the attempt's own call when it
 * settles, else the relay's when the attempt ended any other way), Router.firstToken once when the
 * attempt's first body byte arrives.
 */
import { ApiError, errors } from '../../api/errors.js';
import type { RequestContext } from '../../request/context.js';
import { RelayAttempt, type AttemptEnv, type AttemptResult } from './relay-attempt.js';

export interface RelayOptions extends AttemptEnv {
  /** Further attempts after the first (on other workers). */
  retries: number;
  retryAfterSeconds: number;
}

const NONE: ReadonlySet<RelayAttempt> = new Set();

export class Relay {
  /** Attempts waiting for their first byte, per worker: abandoned at once if the worker goes down. */
  private readonly waiting = new Map<string, Set<RelayAttempt>>();
  /** Every attempt in flight, per worker (outlier detection inspects them). */
  private readonly running = new Map<string, Set<RelayAttempt>>();

  constructor(private readonly o: RelayOptions) {}

  /**
   * The worker was taken out of routing (health probes failing): attempts still waiting for its
   * first byte are given up and retried elsewhere, rather than hanging until their deadline (a
   * non-streaming answer only arrives at the end). Attempts already relaying bytes are left alone.
   */
  workerDown(workerId: string): void {
    const set = this.waiting.get(workerId);
    if (!set) return;
    for (const attempt of [...set]) attempt.workerDown();
  }

  /**
   * New first-byte timeout, retry count and Retry-After (config reload): for attempts started
   * from now on (an attempt already waiting keeps the timer it armed).
   */
  retune(o: Pick<RelayOptions, 'firstByteMs' | 'retries' | 'retryAfterSeconds'>): void {
    this.o.firstByteMs = o.firstByteMs;
    this.o.retries = o.retries;
    this.o.retryAfterSeconds = o.retryAfterSeconds;
  }

  /** The first-byte timeout now in force (config reloads retune it). */
  get firstByteMs(): number {
    return this.o.firstByteMs;
  }

  /** Serve the request at some worker. Resolves when the response is over; throws ApiError if no byte was sent. */
  async forward(ctx: RequestContext): Promise<void> {
    const { router, metrics } = this.o;
    /** The workers tried so far, made only when there is a second attempt. */
    let exclude: Set<string> | undefined;
    let lastWorker = '';
    let lastError: ApiError | null = null;
    // A body a stage changed is serialised once, here, before any worker is picked: if that fails
    // nothing has been charged, and the attempts send the same bytes.
    if (ctx.bodyModified && ctx.uploadContentType === null) {
      ctx.rawBody = Buffer.from(JSON.stringify(ctx.body));
      ctx.bodyModified = false;
    }
    for (let attempt = 0; attempt <= this.o.retries; attempt++) {
      if (ctx.aborted) return;
      if (attempt > 0) {
        if (this.o.clock.now() >= ctx.deadlineAt) break;
        (exclude ??= new Set()).add(lastWorker);
        ctx.beforeRetry?.();
      }
      const routed = attempt === 0 ? ctx.routed : undefined;
      const out = routed !== undefined ? { ok: true as const, decision: routed } : router.route(ctx.routeRequest, ctx.candidates, exclude);
      if (!out.ok) {
        if (lastError) throw lastError;
        if (out.status === 400) throw new ApiError(400, 'invalid_request_error', out.code, out.message);
        throw errors.noWorker(out.message, this.o.retryAfterSeconds);
      }
      const d = out.decision;
      let r: AttemptResult;
      // The pick's reservation (the worker's in-flight entry, its KV estimate) is this block's:
      // the attempt completes it when it settles, and whatever else ends the block (a veto, a
      // throw before or during dispatch) releases it here. Router.complete is idempotent, so a
      // settled attempt's release is not repeated.
      try {
        const veto = attempt === 0 ? (ctx.checkPick?.(d) ?? null) : null;
        if (veto) throw veto;
        lastWorker = d.worker.id;
        ctx.decision = d;
        ctx.workerId = d.worker.id;
        ctx.attempts++;
        metrics.decisionsBy.series(d.policy, d.worker.id, d.reason).inc();
        metrics.prefixHitBy.series(d.policy).observe(d.expectedPrefixHit);
        this.o.fleet.breaker(d.worker.id).onDispatch();
        const att = new RelayAttempt(this.o, ctx, d, this.waitingOn(d.worker.id));
        const running = this.runningOn(d.worker.id);
        running.add(att);
        try {
          r = await att.run();
        } finally {
          running.delete(att);
        }
      } finally {
        router.complete(ctx.id, false);
      }
      if (r.done) return;
      if (ctx.aborted) {
        // The client left (nothing to answer) or the gateway is shutting down (answer 503).
        if (ctx.abortReason === 'shutdown') throw r.error;
        return;
      }
      if (r.final === true) throw r.error;
      // A real failure says more than a worker being busy: answer with it if there was one.
      if (!(lastError && r.error.code === 'upstream_overloaded')) lastError = r.error;
    }
    throw lastError ?? errors.deadline('the request deadline passed before a worker could be tried');
  }

  /** Attempts in flight on a worker (waiting for their first byte or relaying). */
  attemptsOn(workerId: string): Iterable<RelayAttempt> {
    return this.running.get(workerId) ?? NONE;
  }

  private runningOn(workerId: string): Set<RelayAttempt> {
    let set = this.running.get(workerId);
    if (!set) this.running.set(workerId, (set = new Set()));
    return set;
  }

  private waitingOn(workerId: string): Set<RelayAttempt> {
    let set = this.waiting.get(workerId);
    if (!set) this.waiting.set(workerId, (set = new Set()));
    return set;
  }
}
