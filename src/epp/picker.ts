/**
 * The decision for one request that arrived over ext_proc: the gateway's own path up to the pick —
 * API key → tenant, the body validated as the HTTP surface validates it (gateway/pipeline/
 * handler.ts acceptBody), the proxy's subset hint applied to the candidates, the stages (response
 * cache, admission with its priorities, KV-pressure shedding and rate limits, response affinity)
 * and the router's pick with its reservation — ending in an endpoint for the proxy instead of a
 * relay. A stage that answers the request itself (a cache hit) gives an ImmediateResponse; a
 * refusal gives its error as one.
 */
import { ApiError, errors } from '../api/errors.js';
import type { WorkerState } from '../fleet/worker-state.js';
import type { GatewayMembers } from '../gateway/composition/compose.js';
import { acceptBody, checkMediaType, inferenceRoute, runRequestStages, type AcceptDeps } from '../gateway/pipeline/handler.js';
import type { RequestContext } from '../request/context.js';
import type { ProcessingResponse } from './descriptor.js';
import type { CollectedResponse } from './http-stand-ins.js';
import { droppedReason, immediate, immediateError } from './immediate.js';

/** What the proxy is told. */
export type Decision =
  /** Route to `worker` (`endpoints` in order: the pick, then its fallbacks); `body` replaces the request's when changed. */
  | { kind: 'pick'; worker: WorkerState; endpoints: string[]; body: Buffer | null; reserved: boolean }
  /** Answer the client with this ImmediateResponse; `reason` labels the metric. */
  | { kind: 'answer'; response: ProcessingResponse; status: number; reason: string }
  /** The stream went away meanwhile: nothing to send. */
  | { kind: 'gone' };

/** The request as the stream has read it. */
export interface ProxiedRequest {
  method: string;
  /** `:path` without its query. */
  path: string;
  headers: Record<string, string>;
  /** The whole body; null when the request had none (headers with end_of_stream). */
  body: Buffer | null;
  /** `ip:port` endpoints the proxy allows (its subset hint); null: any. */
  subset: ReadonlySet<string> | null;
}

const endpoints = new WeakMap<WorkerState, string>();

/** A worker's endpoint as the proxy names it: `ip:port` (`[v6]:port`), from its URL. */
export function endpointOf(w: WorkerState): string {
  let e = endpoints.get(w);
  if (e === undefined) {
    const u = new URL(w.url);
    e = `${u.hostname}:${u.port !== '' ? u.port : u.protocol === 'https:' ? '443' : '80'}`;
    endpoints.set(w, e);
  }
  return e;
}

export class Picker {
  private readonly accept: AcceptDeps;

  constructor(
    private readonly g: GatewayMembers,
    /** Endpoints named after the pick (epp.fallbacks). */
    private readonly fallbacks: number,
  ) {
    this.accept = {
      config: g.config,
      fleet: g.registry,
      clock: g.clock,
      stages: g.pipeline.late,
      earlyStages: g.pipeline.early,
      prepareRouting: g.prepare,
      cacheSaltFor: g.cacheSaltFor,
    };
  }

  async decide(ctx: RequestContext, r: ProxiedRequest, res: CollectedResponse): Promise<Decision> {
    try {
      if (this.g.life.closing) throw errors.shuttingDown();
      // Who is asking comes first, as at the gateway's own edge.
      ctx.tenant = this.g.tenants.authenticate(r.headers.authorization);
      const route = inferenceRoute(r.path);
      if (route === null || r.method !== 'POST') return this.byLoad(r);
      const contentType = checkMediaType(ctx.req, route.form);
      ctx.rawBody = r.body ?? Buffer.alloc(0);
      const caps = acceptBody(this.accept, ctx, route.kind, route.form, contentType);
      if (r.subset !== null) {
        const allowed = r.subset;
        ctx.candidates = ctx.candidates.filter((w) => allowed.has(endpointOf(w)));
        if (ctx.candidates.length === 0) throw noEndpointInSubset(ctx.model, allowed, this.g.config.limits.retryAfterSeconds);
      }
      const ran = runRequestStages(this.accept, ctx, caps);
      const handled = typeof ran === 'boolean' ? ran : await ran;
      if (ctx.aborted) return { kind: 'gone' };
      if (handled) return await this.answered(ctx, res);
      // Again after the stages: admission hands back the workers the request fits on, from the whole pool.
      if (r.subset !== null) {
        const allowed = r.subset;
        ctx.candidates = ctx.candidates.filter((w) => allowed.has(endpointOf(w)));
        if (ctx.candidates.length === 0) throw noEndpointInSubset(ctx.model, allowed, this.g.config.limits.retryAfterSeconds);
      }
      return this.pick(ctx);
    } catch (e) {
      if (ctx.aborted) return { kind: 'gone' };
      const err = e instanceof ApiError ? e : errors.internal((e as Error)?.message ?? String(e));
      if (!(e instanceof ApiError)) this.g.logger.error({ err: e, id: ctx.id }, 'unexpected error picking an endpoint');
      ctx.status = err.status;
      return { kind: 'answer', response: immediateError(err, ctx.headers), status: err.status, reason: droppedReason(err) };
    }
  }

  /** The router's pick among the candidates, reserved until the response ends (ResponseAccounting). */
  private pick(ctx: RequestContext): Decision {
    const { router, metrics, registry, config } = this.g;
    const out = router.route(ctx.routeRequest, ctx.candidates);
    if (!out.ok) {
      if (out.status === 400) throw new ApiError(400, 'invalid_request_error', out.code, out.message);
      throw errors.noWorker(out.message, config.limits.retryAfterSeconds);
    }
    const d = out.decision;
    const veto = ctx.checkPick?.(d) ?? null;
    if (veto) {
      router.complete(ctx.id, false);
      throw veto;
    }
    ctx.decision = d;
    ctx.workerId = d.worker.id;
    ctx.attempts = 1;
    metrics.decisionsBy.series(d.policy, d.worker.id, d.reason).inc();
    metrics.prefixHitBy.series(d.policy).observe(d.expectedPrefixHit);
    registry.breaker(d.worker.id).onDispatch();
    let body: Buffer | null = null;
    // A body a stage changed (an alias resolved, the tenant's cache salt) goes to the worker as changed.
    if (ctx.bodyModified && ctx.uploadContentType === null) {
      body = ctx.rawBody = Buffer.from(JSON.stringify(ctx.body));
      ctx.bodyModified = false;
    }
    return { kind: 'pick', worker: d.worker, endpoints: this.withFallbacks(d.worker, ctx.candidates), body, reserved: true };
  }

  /**
   * A request kvgate does not route by its prompt (no body, not POST, or a path that is not an
   * inference route: `GET /v1/models`, say): the routable worker with the fewest requests in flight,
   * nothing reserved.
   */
  private byLoad(r: ProxiedRequest): Decision {
    const pool = this.g.registry.workers.filter((w) => w.routable && (r.subset === null || r.subset.has(endpointOf(w))));
    if (pool.length === 0) {
      throw r.subset !== null
        ? noEndpointInSubset('', r.subset, this.g.config.limits.retryAfterSeconds)
        : errors.noWorker('no worker is routable', this.g.config.limits.retryAfterSeconds);
    }
    let best = pool[0]!;
    for (const w of pool) if (w.inflightCount < best.inflightCount) best = w;
    return { kind: 'pick', worker: best, endpoints: this.withFallbacks(best, pool), body: null, reserved: false };
  }

  /** The pick, then up to epp.fallbacks other routable candidates, least loaded first. */
  private withFallbacks(w: WorkerState, candidates: readonly WorkerState[]): string[] {
    const n = this.fallbacks;
    if (n === 0) return [endpointOf(w)];
    const rest = candidates.filter((x) => x !== w && x.routable).sort((a, b) => a.inflightCount - b.inflightCount);
    return [w, ...rest.slice(0, n)].map(endpointOf);
  }

  /** A stage answered the request itself (a response-cache hit): its answer, once written, as an ImmediateResponse. */
  private async answered(ctx: RequestContext, res: CollectedResponse): Promise<Decision> {
    if (!res.writableEnded && !res.destroyed) await res.finished;
    if (ctx.aborted || res.destroyed) return { kind: 'gone' };
    const status = res.statusCode;
    ctx.status = status;
    return { kind: 'answer', response: immediate(status, res.head, res.body(), 'kvgate_answered'), status, reason: res.head['x-kvgate-cache'] === 'hit' ? 'cache-hit' : 'answered' };
  }
}

function noEndpointInSubset(model: string, subset: ReadonlySet<string>, retryAfterSeconds: number): ApiError {
  const named = subset.size === 0 ? 'the proxy allowed no endpoint (an empty subset hint)' : `none of the ${subset.size} endpoint(s) the proxy allowed serves ${model === '' ? 'requests' : `model '${model}'`} and is routable`;
  return new ApiError(503, 'overloaded_error', 'no_endpoint_in_subset', named, null, { 'retry-after': String(retryAfterSeconds) });
}
