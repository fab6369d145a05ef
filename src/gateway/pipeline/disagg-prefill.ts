/**
 * The first step of a disaggregated request: its prompt prefilled on a prefill worker, whose answer
 * carries the `kv_transfer_params` the decode worker pulls the KV with. The request sent is the
 * client's, changed as vLLM's own P/D proxy changes it (vllm-project/vllm
 * `tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`, send_request_to_service; the same
 * in `examples/online_serving/disaggregated_serving/`):
 *
 *   kv_transfer_params: {do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null,
 *                        remote_block_ids: null, remote_host: null, remote_port: null}
 *   stream: false, max_tokens: 1 (and max_completion_tokens: 1 where given), no stream_options,
 *   no min_tokens / min_completion_tokens (the decode request keeps them)
 *
 * and the answer's `kv_transfer_params` — as the NixlConnector's request_finished returns them
 * (vllm `vllm/distributed/kv_transfer/kv_connector/v1/nixl/scheduler.py`, formerly
 * `nixl_connector.py`): {do_remote_prefill: true, do_remote_decode: false, remote_block_ids,
 * remote_engine_id, remote_request_id, remote_host, remote_port, tp_size} — go into the decode
 * request as they are. The prefill worker keeps the blocks until a decode worker has read them,
 * or VLLM_NIXL_ABORT_REQUEST_TIMEOUT (480 s) has passed.
 *
 * A failed prefill (no answer, an error status, an answer without kv_transfer_params) is tried on
 * another prefill worker, up to `attempts` in all; nothing has reached the client yet. Each try
 * is charged to its worker through the router (its own reservation, id `<request>/prefill`),
 * released when the try ends: the prefill worker's blocks are then the KV connector's to free.
 */
import type { RouteDecision, RouteRequest } from '../../scheduler/types.js';
import type { Router } from '../../scheduler/router.js';
import type { WorkerRegistry } from '../../fleet/registry.js';
import type { Upstreams } from '../../fleet/upstreams.js';
import type { WorkerState } from '../../fleet/worker-state.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Clock } from '../../util/clock.js';
import { RequestState } from '../../util/state.js';
import type { RequestContext } from '../../request/context.js';
import type { DisaggMetrics } from './disagg-metrics.js';

export interface PrefillEnv {
  router: Router;
  fleet: WorkerRegistry;
  upstreams: Upstreams;
  clock: Clock;
  logger: Pick<Logger, 'warn'>;
  metrics: DisaggMetrics;
  /** The shortest wait for a prefill's answer, ms (the relay's first-byte timeout). */
  firstByteMs: number;
  /** How long a worker may take to prefill `tokens` (the relay's allowance), ms. */
  prefillAllowanceMs(worker: WorkerState, tokens: number): number;
}

/** The prefill's answer, for the decode request. */
export interface PrefillDone {
  ok: true;
  worker: WorkerState;
  /** The answer's kv_transfer_params, for the decode request. */
  params: Record<string, unknown>;
  /** Clock time of the answer. */
  endedAt: number;
}

export type PrefillResult = PrefillDone | { ok: false; reason: 'failed' | 'cancelled' };

/** What the prefill request asks of the worker that its answer is not passed on. */
const PREFILL_PARAMS = {
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: null,
  remote_block_ids: null,
  remote_host: null,
  remote_port: null,
};

/** The client's body as the prefill worker gets it. */
function prefillBody(body: Record<string, unknown>): Record<string, unknown> {
  const b: Record<string, unknown> = { ...body, kv_transfer_params: PREFILL_PARAMS, stream: false, max_tokens: 1 };
  if ('max_completion_tokens' in b) b.max_completion_tokens = 1;
  delete b.stream_options;
  delete b.min_tokens;
  delete b.min_completion_tokens;
  return b;
}

/**
 * Prefill the request's prompt: first on `first` (the policy's pick, not yet charged), then on
 * others of `workers` as the policy picks them, up to `attempts` in all.
 */
export async function runPrefill(
  env: PrefillEnv,
  ctx: RequestContext,
  first: RouteDecision,
  workers: readonly WorkerState[],
  attempts: number,
): Promise<PrefillResult> {
  const body = Buffer.from(JSON.stringify(prefillBody(ctx.body as unknown as Record<string, unknown>)));
  const id = `${ctx.id}/prefill`;
  const tried = new Set<string>();
  for (let i = 0; i < attempts; i++) {
    if (ctx.aborted) return { ok: false, reason: 'cancelled' };
    const req = prefillRequest(ctx.routeRequest, id);
    let d: RouteDecision = first;
    if (i === 0) env.router.commit(req, first);
    else {
      const out = env.router.route(req, workers, tried);
      if (!out.ok) break;
      d = out.decision;
    }
    const w = d.worker;
    tried.add(w.id);
    const uncached = w.inflight.get(id)?.uncachedTokens ?? 0;
    let ok = false;
    try {
      const r = await callPrefill(env, ctx, w, body, uncached);
      if (r === 'cancelled') {
        env.metrics.prefills.labels(ctx.model, 'cancelled').inc();
        return { ok: false, reason: 'cancelled' };
      }
      if (r !== null) {
        ok = true;
        env.metrics.prefills.labels(ctx.model, 'ok').inc();
        return { ok: true, worker: w, params: r, endedAt: env.clock.now() };
      }
    } finally {
      env.router.complete(id, ok);
    }
  }
  return { ok: false, reason: 'failed' };
}

/** One prefill call: the answer's kv_transfer_params, null on a failure, 'cancelled' if the client left. */
async function callPrefill(env: PrefillEnv, ctx: RequestContext, w: WorkerState, body: Buffer, uncached: number): Promise<Record<string, unknown> | null | 'cancelled'> {
  const breaker = env.fleet.breaker(w.id);
  breaker.onDispatch();
  const ac = new AbortController();
  ctx.abortUpstream = () => ac.abort();
  const waitMs = Math.max(1, Math.min(ctx.deadlineAt - env.clock.now(), Math.max(env.firstByteMs, env.prefillAllowanceMs(w, uncached))));
  const timer = setTimeout(() => ac.abort(), waitMs);
  const started = env.clock.now();
  const fail = (outcome: 'error' | 'no_kv_params', why: string, workerFault: boolean): null => {
    if (workerFault) breaker.onFailure();
    else breaker.onNeutral();
    env.metrics.prefills.labels(ctx.model, outcome).inc();
    env.logger.warn({ id: ctx.id, worker: w.id, err: why }, 'prefill for a disaggregated request failed');
    return null;
  };
  try {
    const headers: Record<string, string> = { ...w.upstreamHeaders, 'content-type': 'application/json', 'x-request-id': ctx.id };
    if (ctx.trace !== null) Object.assign(headers, ctx.trace.headers);
    let status: number;
    let text: string;
    try {
      const r = await env.upstreams.for(w.id, w.url).request({ method: 'POST', path: new URL(w.url).pathname.replace(/\/$/, '') + ctx.path, headers, body, signal: ac.signal });
      status = r.statusCode;
      text = await r.body.text();
    } catch (e) {
      if (ctx.aborted) {
        breaker.onNeutral();
        return 'cancelled';
      }
      return fail('error', ac.signal.aborted ? `no answer within ${Math.round(waitMs)} ms` : (e as Error).message, true);
    }
    if (status !== 200) return fail('error', `status ${status}: ${text.slice(0, 300)}`, status >= 500);
    let params: unknown;
    try {
      params = (JSON.parse(text) as { kv_transfer_params?: unknown }).kv_transfer_params;
    } catch {
      return fail('error', 'the answer is not JSON', true);
    }
    breaker.onSuccess();
    if (params === null || typeof params !== 'object' || Array.isArray(params)) {
      return fail('no_kv_params', 'the answer has no kv_transfer_params (is the worker started with a KV connector?)', false);
    }
    env.router.firstToken(`${ctx.id}/prefill`);
    env.metrics.prefillSeconds.labels(ctx.model).observe((env.clock.now() - started) / 1000);
    return params as Record<string, unknown>;
  } finally {
    clearTimeout(timer);
    ctx.abortUpstream = null;
  }
}

/** The request as routed to the prefill pool: its own id (a reservation of its own), one output token. */
function prefillRequest(rr: RouteRequest, id: string): RouteRequest {
  return {
    id,
    model: rr.model,
    promptText: rr.promptText,
    promptTokens: rr.promptTokens,
    ...(rr.promptTokenCount !== undefined ? { promptTokenCount: rr.promptTokenCount } : {}),
    maxTokens: 1,
    sessionKey: rr.sessionKey,
    tenant: rr.tenant,
    priority: rr.priority,
    stream: false,
    state: new RequestState(),
  };
}
