/**
 * The `disaggregation` stage: serves a model whose workers have roles (`role: prefill | decode`)
 * as a disaggregated vLLM fleet. Per request the decider (src/scheduler/disagg/) chooses:
 *   - local: the request goes on to the relay over the decode pool (workers of role decode or
 *     both), which prefills and decodes it like any other;
 *   - disaggregated: the prompt is prefilled on a prefill worker first (disagg-prefill.ts), then
 *     the request goes on to the relay over the decode pool carrying the prefill's
 *     `kv_transfer_params`: the decode worker pulls the KV and streams the answer. The client sees
 *     one ordinary response — the decode worker's, whose usage counts the whole prompt.
 * Failures: a prefill that fails on every prefill worker tried leaves the request local (nothing
 * has reached the client); a decode worker that fails before its first byte is retried on another
 * decode worker as a local request (the KV it was to read may be gone); after its first byte the
 * relay ends the answer as it ends any (an error event in a stream). A client that goes away
 * during the prefill aborts it; during the decode the relay aborts that; each worker's
 * reservation is released when its part ends.
 */
import type { WorkerState } from '../../fleet/worker-state.js';
import { linkTransferMs } from '../../kv/link-transfer.js';
import { generates, type RequestContext } from '../../request/context.js';
import type { GatewayStage, StageResult } from '../../request/stage.js';
import type { DeciderOptions } from '../../scheduler/disagg/decider.js';
import { planDisaggregation, rolePools, type RolePools } from '../../scheduler/disagg/select.js';
import type { DisaggMetrics } from './disagg-metrics.js';
import { runPrefill, type PrefillEnv } from './disagg-prefill.js';

export interface DisaggOptions extends DeciderOptions {
  prefillAttempts: number;
  kvBytesPerToken: number;
  linkGbps: number;
  linkLatencyMs: number;
}

export interface DisaggStageEnv extends PrefillEnv {
  metrics: DisaggMetrics;
  /** The policy's prefill rate for a worker, tokens/s. */
  prefillRate(w: WorkerState): number;
  options(): DisaggOptions;
}

export function disaggregationStage(env: DisaggStageEnv): GatewayStage {
  return {
    name: 'disaggregation',
    handle: (ctx) => {
      const pools = rolePools(ctx.candidates);
      if (pools === null) return 'continue';
      ctx.candidates = pools.decode;
      if (!twoStep(ctx)) {
        env.metrics.decisions.labels(ctx.model, 'local', 'request').inc();
        return 'continue';
      }
      return serve(env, ctx, pools);
    },
  };
}

/** A request the two-step relay takes: one chat or completions prompt, one sample, no prompt logprobs. */
function twoStep(ctx: RequestContext): boolean {
  if (!generates(ctx.kind) || ctx.kind === 'responses' || ctx.uploadContentType !== null) return false;
  const b = ctx.body as unknown as Record<string, unknown>;
  if (typeof b.n === 'number' && b.n > 1) return false;
  if (b.prompt_logprobs !== undefined && b.prompt_logprobs !== null) return false;
  const p = b.prompt;
  return p === undefined || typeof p === 'string' || (Array.isArray(p) && p.every((t) => typeof t === 'number'));
}

async function serve(env: DisaggStageEnv, ctx: RequestContext, pools: RolePools): Promise<StageResult> {
  const o = env.options();
  const router = env.router;
  const plan = planDisaggregation(router.policy, ctx.routeRequest, pools, router.context(), {
    prefillRate: env.prefillRate,
    // The KV transfer the decider assumes: the simulation's link model over the configured link.
    transferMs: (tokens) => linkTransferMs(tokens * o.kvBytesPerToken, (o.linkGbps * 1e9) / 8, o.linkLatencyMs),
  }, o);
  const d = plan.decision;
  env.metrics.decisions.labels(ctx.model, d.mode, d.reason).inc();
  (ctx.logFields ??= {}).disagg = `${d.mode}:${d.reason}`;
  // The decode worker the decider weighed is the one the relay's first attempt goes to: reserved
  // now (the policy is asked once per pool), released by the relay, or here if it never runs.
  if (plan.decode !== null) {
    router.commit(ctx.routeRequest, plan.decode);
    ctx.routed = plan.decode;
    ctx.onFinish.push(() => router.complete(ctx.id, false));
  }
  if (d.mode === 'local' || plan.prefill === null) return 'continue';
  const prefillWorkers = pools.prefill.filter((w) => w !== plan.decode?.worker);
  const r = await runPrefill(env, ctx, plan.prefill, prefillWorkers, o.prefillAttempts);
  if (!r.ok) {
    if (r.reason === 'cancelled') return 'handled';
    env.metrics.fallbacks.labels(ctx.model, 'prefill_failed').inc();
    ctx.logFields.disagg = 'local:prefill_failed';
    return 'continue';
  }
  ctx.logFields.disaggPrefillWorker = r.worker.id;
  // Beside x-kvgate-worker (the decode worker), for callers that may see routing.
  if (ctx.exposeRouting) ctx.headers['x-kvgate-prefill-worker'] = r.worker.id;
  const body = ctx.body as unknown as Record<string, unknown>;
  body.kv_transfer_params = r.params;
  ctx.bodyModified = true;
  observeTransfer(env, ctx, r.params);
  // The KV the decode worker was to read may be gone after it failed: a retry prefills locally.
  let retried = false;
  ctx.beforeRetry = () => {
    retried = true;
    delete body.kv_transfer_params;
    ctx.rawBody = Buffer.from(JSON.stringify(body));
    ctx.beforeRetry = undefined;
    env.metrics.fallbacks.labels(ctx.model, 'decode_retry').inc();
    if (ctx.logFields) ctx.logFields.disagg = 'local:decode_retry';
  };
  const prefillEnd = r.endedAt;
  ctx.onFinish.push((c) => {
    if (c.stream && c.ttftMs !== null && !retried) {
      env.metrics.prefillToFirstToken.labels(c.model).observe(Math.max(0, c.startedAt + c.ttftMs - prefillEnd) / 1000);
    }
  });
  return 'continue';
}

/** The transfer's size: the prefill answer's blocks (one list, or one per KV-cache group) and the prompt's tokens. */
function observeTransfer(env: DisaggStageEnv, ctx: RequestContext, params: Record<string, unknown>): void {
  const ids = params.remote_block_ids;
  let blocks = 0;
  if (Array.isArray(ids)) for (const g of ids) blocks += Array.isArray(g) ? g.length : 1;
  env.metrics.transferBlocks.labels(ctx.model).observe(blocks);
  env.metrics.transferTokens.labels(ctx.model).observe(ctx.routeRequest.promptTokenCount ?? ctx.routeRequest.promptTokens.length);
}
