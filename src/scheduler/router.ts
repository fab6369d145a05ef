/**
 * The router: runs a policy over the workers of a model's pool and charges the pick to the chosen
 * worker synchronously (pick-time reservation), so a burst that arrives between two metric scrapes
 * sees each earlier pick. The live gateway and the fleet simulation both route through this class.
 */
import { PROMPT_ADAPTER } from '../kv/prompt-blocks.js';
import type { InflightRequest, WorkerState } from '../fleet/worker-state.js';
import type { Clock } from '../util/clock.js';
import type { Rng } from '../util/rng.js';
import { requestPromptTokens, requestSequences, type Policy, type RouteDecision, type RouteOutcome, type RouteRequest, type RoutingContext } from './types.js';

export interface RouterOptions {
  policy: Policy;
  clock: Clock;
  rng: Rng;
  /** Metrics older than this are treated as stale (default 5 s: five missed 1 s scrapes). */
  staleAfterMs?: number;
  /**
   * Told when the policy's onFirstToken or onComplete throws, after the router's own accounting
   * is done: the request goes on, its worker's charge released as usual. Absent: the error is
   * thrown on (the simulation stops on it).
   */
  onHookError?: (hook: 'onFirstToken' | 'onComplete', reqId: string, err: unknown) => void;
}

/** What happened to a request this router charged to a worker. */
export type LoadEvent = 'begin' | 'first' | 'end';
/** Told of every charge, first token and end, after the worker's accounting changed (it must only queue). */
export type LoadObserver = (event: LoadEvent, worker: WorkerState, request: InflightRequest) => void;

/** Expected output length used for block reservations when max_tokens is large or absent. */
export const RESERVE_OUTPUT_TOKENS_CAP = 1024;

export class Router {
  readonly policy: Policy;
  private readonly clock: Clock;
  private readonly rng: Rng;
  readonly staleAfterMs: number;
  private readonly onHookError: RouterOptions['onHookError'];
  /** Decisions awaiting completion, by request id. */
  private readonly open = new Map<string, { req: RouteRequest; decision: RouteDecision; charge: InflightRequest; firstToken: boolean }>();
  /** Told of this router's charges (other gateway replicas mirror them: src/shared/load-channel.ts). */
  loadObserver: LoadObserver | null = null;

  constructor(opts: RouterOptions) {
    this.policy = opts.policy;
    this.clock = opts.clock;
    this.rng = opts.rng;
    this.staleAfterMs = opts.staleAfterMs ?? 5000;
    this.onHookError = opts.onHookError;
  }

  context(): RoutingContext {
    return { now: this.clock.now(), rng: this.rng, staleAfterMs: this.staleAfterMs };
  }

  /**
   * Pick a worker among `workers` (already narrowed to the request's model) and reserve it.
   * `exclude` lists workers a retry must avoid.
   */
  route(req: RouteRequest, workers: readonly WorkerState[], exclude?: ReadonlySet<string>): RouteOutcome {
    const ctx = this.context();
    const pool = exclude && exclude.size > 0 ? workers.filter((w) => !exclude.has(w.id)) : workers;
    if (pool.length === 0) {
      return { ok: false, status: 503, code: 'no_worker_available', message: `no worker serves model '${req.model}'` };
    }
    const out = this.policy.route(req, pool, ctx);
    if (out.ok) this.charge(req, out.decision, ctx);
    return out;
  }

  /**
   * Reserve a decision the policy made without the router (a stage that weighed the policy's
   * picks in several pools before choosing, as disaggregation does): charged as route() charges.
   */
  commit(req: RouteRequest, d: RouteDecision): void {
    this.charge(req, d, this.context());
  }

  private charge(req: RouteRequest, d: RouteDecision, ctx: RoutingContext): void {
    const w = d.worker;
    // The whole request is charged: every prompt of a batch, and output for each of its sequences.
    const prompt = requestPromptTokens(req);
    const uncached = Math.round(prompt * (1 - d.expectedPrefixHit));
    const sequences = requestSequences(req);
    const expectedOut = Math.min(req.maxTokens, RESERVE_OUTPUT_TOKENS_CAP);
    const charge: InflightRequest = {
      id: req.id,
      promptTokens: prompt,
      uncachedTokens: uncached,
      maxTokens: sequences * req.maxTokens,
      blocks: Math.ceil((uncached + sequences * expectedOut) / w.blockSize),
      dispatchedAt: ctx.now,
    };
    if (sequences > 1) charge.sequences = sequences;
    const adapter = req.state.get(PROMPT_ADAPTER);
    if (adapter !== undefined) charge.adapter = adapter;
    w.begin(charge);
    this.open.set(req.id, { req, decision: d, charge, firstToken: false });
    this.loadObserver?.('begin', w, charge);
    this.policy.onDispatch?.(req, d, ctx);
  }

  /** The first token of `reqId` arrived. Idempotent: later calls for the same decision do nothing. */
  firstToken(reqId: string): void {
    const o = this.open.get(reqId);
    if (!o || o.firstToken) return;
    o.firstToken = true;
    const ctx = this.context();
    o.decision.worker.firstToken(reqId, ctx.now);
    this.loadObserver?.('first', o.decision.worker, o.charge);
    try {
      this.policy.onFirstToken?.(o.req, o.decision.worker, ctx);
    } catch (e) {
      this.hookFailed('onFirstToken', reqId, e);
    }
  }

  /**
   * The request ended (ok=false: failed, cancelled or abandoned for a retry). Idempotent.
   * `outputTokens`: the answer's length in tokens, when known (policies learn answer lengths); for
   * a request of several sequences, all of them (the policy is told the mean per sequence).
   */
  complete(reqId: string, ok: boolean, outputTokens?: number): void {
    const o = this.open.get(reqId);
    if (!o) return;
    this.open.delete(reqId);
    o.decision.worker.end(reqId);
    this.loadObserver?.('end', o.decision.worker, o.charge);
    // Policies learn per sequence: a batch's or an `n` > 1 request's count is all its answers'.
    const seqs = requestSequences(o.req);
    const perSequence = outputTokens === undefined || seqs === 1 ? outputTokens : Math.round(outputTokens / seqs);
    // A streamed answer's pace after its first token (a non-streamed one's first byte is its end).
    const ctx = this.context();
    const firstAt = o.charge.firstTokenAt;
    if (ok && o.req.stream !== false && firstAt !== undefined && perSequence !== undefined && perSequence >= 2) {
      o.decision.worker.learnDecode((ctx.now - firstAt) / (perSequence - 1));
    }
    try {
      this.policy.onComplete?.(o.req, o.decision.worker, ok, ctx, perSequence);
    } catch (e) {
      this.hookFailed('onComplete', reqId, e);
    }
  }

  /** A policy hook threw: a request must not hang on a policy's fault (the caller's own steps still run). */
  private hookFailed(hook: 'onFirstToken' | 'onComplete', reqId: string, err: unknown): void {
    if (this.onHookError === undefined) throw err;
    this.onHookError(hook, reqId, err);
  }

  get openCount(): number {
    return this.open.size;
  }
}
