/**
 * The response of a request kvgate picked a worker for, as it passes through the ext_proc stream:
 * the same accounting the gateway's relay does for a response it relays (gateway/pipeline/
 * relay-attempt.ts) — the first token (TTFT, Router.firstToken), the answer's usage and length
 * (OutputTokenCounter; policies learn answer lengths), the request's taps (a response-cache
 * fill), the worker's circuit breaker, and exactly one Router.complete, which releases the pick's
 * reservation (in-flight entry, KV estimate) whatever ends the request: the response's end, the
 * proxy cancelling the stream, or the proxy saying another endpoint served it.
 */
import { OutputTokenCounter } from '../api/output-tokens.js';
import { TAIL_AT_BOUNDARY, updateTail } from '../api/sse.js';
import { AnswerPace } from '../fleet/decode-pace.js';
import { releasePromptTokens } from '../gateway/pipeline/prepare.js';
import type { WorkerRegistry } from '../fleet/registry.js';
import type { WorkerState } from '../fleet/worker-state.js';
import { generates, type RequestContext } from '../request/context.js';
import type { Router } from '../scheduler/router.js';
import type { GatewayMetrics } from '../telemetry/metrics.js';
import type { Clock } from '../util/clock.js';

export interface AccountingEnv {
  router: Router;
  fleet: WorkerRegistry;
  metrics: GatewayMetrics;
  clock: Clock;
  /** Told when the proxy says another endpoint served a request than the one picked. */
  onServedElsewhere?: () => void;
  /** Told when charging the endpoint that served it threw (the policy read what is let go). */
  onChargeFailed?: (e: unknown) => void;
}

/** In a Responses stream, the first event after the response's announcement comes with the first token. */
const RESPONSES_OUTPUT_EVENT = Buffer.from('response.output_');

export class ResponseAccounting {
  private status = 0;
  private firstByte = false;
  private firstTokenSeen = false;
  private tail = TAIL_AT_BOUNDARY;
  private readonly outputTokens = new OutputTokenCounter();
  /** This answer's inter-token times, for the worker's recent TPOT (admission reads it). */
  private readonly pace = new AnswerPace();
  private settled = false;

  constructor(
    private readonly env: AccountingEnv,
    private readonly ctx: RequestContext,
    private worker: WorkerState,
  ) {}

  get workerId(): string {
    return this.worker.id;
  }

  /** The response's head: its status (`:status`). */
  onHeaders(status: number): void {
    this.status = status;
    this.ctx.upstreamStatus = status;
  }

  /** A chunk of the response body, as the proxy relays it to the client. */
  onChunk(chunk: Buffer): void {
    if (this.settled || chunk.length === 0) return;
    const ctx = this.ctx;
    const now = (this.worker.lastByteAt = this.env.clock.now());
    if (this.status >= 400) return;
    if (!this.firstByte) {
      this.firstByte = true;
      // A Responses stream's first events announce the response before the prompt is prefilled.
      if (!(ctx.stream && ctx.kind === 'responses')) this.onFirstToken();
    }
    if (!this.firstTokenSeen && chunk.indexOf(RESPONSES_OUTPUT_EVENT) !== -1) this.onFirstToken();
    this.outputTokens.chunk(chunk, ctx.stream, this.tail);
    if (ctx.stream) {
      this.tail = updateTail(this.tail, chunk);
      if (this.firstTokenSeen && ctx.kind !== 'responses') this.pace.chunk(this.worker.decodePace, this.outputTokens.eventCount, now);
    }
    for (let i = 0; i < ctx.taps.length; i++) {
      try {
        ctx.taps[i]!(chunk);
      } catch {
        // A failing tap (a cache fill) must not break the response it observes: it is dropped.
        ctx.taps.splice(i--, 1);
      }
    }
  }

  /**
   * The proxy names the endpoint that actually served the request (after its own retries): the
   * reservation moves there, so the in-flight count and the prefix the pick recorded belong to the
   * worker that holds them. False if that worker cannot be charged (unknown, or refused by the policy).
   */
  servedBy(w: WorkerState): boolean {
    if (this.settled || w === this.worker) return true;
    const { router } = this.env;
    router.complete(this.ctx.id, false);
    this.env.onServedElsewhere?.();
    this.worker = w;
    this.ctx.workerId = w.id;
    let out: ReturnType<Router['route']>;
    try {
      // After the first token the prompt's ids are let go: the policy has their length and the
      // block hashes it kept at the decision. One that needs an id again cannot charge the
      // endpoint, and the request goes on uncharged rather than failing.
      out = router.route(this.ctx.routeRequest, [w]);
    } catch (e) {
      this.env.onChargeFailed?.(e);
      return false;
    }
    if (!out.ok) return false;
    this.ctx.decision = out.decision;
    return true;
  }

  /** The response ended (its last body chunk, or a head with no body, or its trailers). */
  end(): void {
    if (this.settled) return;
    const { ctx, status } = this;
    const breaker = this.env.fleet.breaker(this.worker.id);
    if (status >= 500 || status === 429) {
      if (status === 503 || status === 429) breaker.onOverloaded(undefined);
      else breaker.onFailure();
    } else breaker.onSuccess();
    if (!this.firstTokenSeen && status < 400) this.onFirstToken();
    ctx.status = status === 0 ? 200 : status;
    const kind = ctx.kind;
    let answered: number | undefined;
    if (status < 400 && generates(kind)) {
      const choices = kind === 'chat' ? ((ctx.body as { n?: number | null }).n ?? 1) : 1;
      answered = this.outputTokens.total(kind, ctx.stream, choices);
      if (answered !== undefined) {
        ctx.usage = { promptTokens: this.outputTokens.promptTotal(kind) ?? null, cachedTokens: this.outputTokens.cachedPromptTotal(), outputTokens: answered };
      }
    } else if (status < 400 && kind === 'embeddings') {
      const prompt = this.outputTokens.promptTotal(kind);
      if (prompt !== undefined) ctx.usage = { promptTokens: prompt, outputTokens: 0 };
    }
    this.settle(status < 400, status < 400 ? 'ok' : 'client_error', answered);
  }

  /** The stream ended before the response did (the proxy cancelled it, or closed it early). */
  abandon(why: 'client' | 'shutdown'): void {
    if (this.settled) return;
    const ctx = this.ctx;
    this.env.fleet.breaker(this.worker.id).onNeutral();
    // A stream cut short was generated as far as it was relayed: its tokens count as used.
    if (this.firstByte && ctx.stream && generates(ctx.kind)) {
      const choices = ctx.kind === 'chat' ? ((ctx.body as { n?: number | null }).n ?? 1) : 1;
      const relayed = this.outputTokens.total(ctx.kind, true, choices);
      if (relayed !== undefined && relayed > 0) ctx.usage = { promptTokens: null, outputTokens: relayed };
    }
    ctx.aborted = true;
    ctx.abortReason = why;
    ctx.status = why === 'client' ? 499 : 503;
    this.settle(false, why === 'client' ? 'client_abort' : 'shutdown');
  }

  private onFirstToken(): void {
    this.firstTokenSeen = true;
    this.ctx.ttftMs = this.env.clock.now() - this.ctx.startedAt;
    this.env.router.firstToken(this.ctx.id);
    // As the gateway's relay does: the ids are most of what a long prompt's request holds while
    // its answer streams, and only a re-route (servedBy) could read them again.
    releasePromptTokens(this.ctx.routeRequest);
  }

  private settle(ok: boolean, outcome: string, outputTokens?: number): void {
    this.settled = true;
    this.env.router.complete(this.ctx.id, ok, outputTokens);
    this.env.metrics.attemptsBy.series(this.worker.id, outcome).inc();
  }
}
