/**
 * The admission stage (src/admission/ holds the decisions; this file ties them to a request):
 *
 * 1. Class: the tenant's default priority class, lowered (never raised) by the request's
 *    `x-kvgate-priority` header (a class name or a vLLM integer) or its body's integer `priority`.
 *    A header that is neither is a 400. The class goes to routing as vLLM's integer
 *    (`admission.vllmPriority.values`) and, when every worker the request may go to is in a pool
 *    listed in `admission.vllmPriority.pools`, into the forwarded body as `priority`.
 * 2. Rate limits of the tenant (RPM, TPM, RPD, TPD, concurrent): 429 `rate_limit_exceeded` with
 *    OpenAI's x-ratelimit-* headers (sent on every answer to a limited tenant) and Retry-After. TPM
 *    and TPD reserve prompt tokens + max_tokens per answer at the start and, with
 *    `admission.tokensCounted: used`, settle the reservation to the tokens the request used when it
 *    ends (usedTokens).
 * 3. KV-pressure admission (`admission.enabled`): admit (narrowing `ctx.candidates` to the workers
 *    the request fits on), queue (the promise below waits; a client
 *    that disconnects leaves the queue at once), or refuse with 503 + Retry-After (shed, or its
 *    deadline passed while queued) / 429 (queue full).
 *
 * It runs after the response cache (a hit costs no KV and is answered before admission) and
 * before any other stage added with gateway.use(). The queue is pumped when an admitted request
 * ends and every `PUMP_MS` while anything waits (scrapes free capacity; deadlines pass).
 */
import { classOfVllmPriority, lowerOnly, parsePriority, type PriorityClass } from '../../admission/classes.js';
import { AdmissionController, type AdmissionTicket, type Refusal } from '../../admission/controller.js';
import { AdmissionMetrics } from '../../admission/metrics.js';
import { RateLimiter, type RateCheck, type RateLimitStore, type TenantLimits } from '../../admission/rate-limit.js';
import { ApiError } from '../../api/errors.js';
import type { GatewayConfig } from '../../config/index.js';
import type { WorkerRegistry } from '../../fleet/registry.js';
import type { WorkerState } from '../../fleet/worker-state.js';
import type { Registry } from 'prom-client';
import type { Clock } from '../../util/clock.js';
import { stateKey } from '../../util/state.js';
import { RESERVE_OUTPUT_TOKENS_CAP } from '../../scheduler/router.js';
import { requestPromptTokens, requestSequences } from '../../scheduler/types.js';
import type { RequestContext } from '../../request/context.js';
import { chargedTokens } from './prepare.js';
import type { GatewayStage, StageResult } from '../../request/stage.js';
import type { GatewayService } from '../types.js';

/** How often the queue is pumped while requests wait, ms. */
const PUMP_MS = 20;

/** The request's priority class, for later stages and hooks. */
export const ADMISSION_CLASS = stateKey<PriorityClass>('admission.class');
/** The request's admission ticket (absent when admission is off or refused it). */
export const ADMISSION_TICKET = stateKey<AdmissionTicket<WorkerState>>('admission.ticket');

export interface AdmissionSetup {
  stage: GatewayStage;
  /** Null when `admission.enabled` is false (classes and rate limits still apply). */
  controller: AdmissionController<WorkerState> | null;
  service: GatewayService;
  /**
   * Take up a reloaded config's admission thresholds, queue settings and tenants' rate limits
   * (`admission.enabled` and `admission.vllmPriority` are fixed at start).
   */
  retune(config: GatewayConfig): void;
}

export function setupAdmission(deps: {
  config: GatewayConfig;
  fleet: WorkerRegistry;
  clock: Clock;
  registry: Registry;
  staleAfterMs: number;
  /**
   * The rate limiter to use instead of this process's own (which it is given, as its fallback):
   * the Redis-shared one when replicas share state (src/shared/).
   */
  rateLimiter?: (local: RateLimiter) => RateLimitStore;
}): AdmissionSetup {
  const { config, fleet, clock } = deps;
  const a = config.admission;
  const values = a.vllmPriority.values;
  const passAll = a.vllmPriority.pools.includes('*');
  const passPools = new Set(a.vllmPriority.pools);
  const limits = new Map<string, TenantLimits>(config.tenants.map((t) => [t.id, t.limits]));
  const localLimiter = new RateLimiter(limits, clock.now());
  let settleTokens = a.tokensCounted === 'used';
  const limiter: RateLimitStore = deps.rateLimiter ? deps.rateLimiter(localLimiter) : localLimiter;
  let controller: AdmissionController<WorkerState> | null = null;
  const metrics = new AdmissionMetrics(deps.registry, () => fleet.models(), () => controller);
  if (a.enabled) {
    controller = new AdmissionController<WorkerState>({
      settings: {
        thresholds: a.thresholds,
        queue: a.queue,
        retryAfterSeconds: config.limits.retryAfterSeconds,
        reserveOutputCap: RESERVE_OUTPUT_TOKENS_CAP,
      },
      clock,
      staleAfterMs: deps.staleAfterMs,
      workersFor: (m) => fleet.forModel(m),
      observer: metrics,
    });
  }
  /**
   * The model a request is admitted (queued, metered) under: its own once a worker serves it; a
   * name routed to workers that would load it on demand, their base model's until then, so that a
   * client's made-up names add neither queues nor metric series.
   */
  const admittedAs = (model: string): string => (fleet.serving(model) !== undefined ? model : (fleet.adapterOf(model) ?? model));
  let pumpTimer: NodeJS.Timeout | null = null;
  const pump = (): void => {
    if (!controller) return;
    controller.pump();
    if (controller.queueDepth() === 0 && pumpTimer) {
      clearInterval(pumpTimer);
      pumpTimer = null;
    }
  };
  const keepPumping = (): void => {
    if (pumpTimer) return;
    pumpTimer = setInterval(pump, PUMP_MS);
    pumpTimer.unref();
  };

  const refusal = (r: Refusal): ApiError =>
    new ApiError(r.status, 'overloaded_error', r.code, r.message, null, { 'retry-after': String(r.retryAfterSeconds) });

  const stage: GatewayStage = {
    name: 'admission',
    handle(ctx: RequestContext): StageResult | Promise<StageResult> {
      // 1. The class.
      const cls = decideClass(ctx, values, passAll, passPools);

      // 2. Rate limits (a shared limiter answers asynchronously).
      if (limiter.limits(ctx.tenant.id)) {
        const tokens = chargedTokens(ctx.kind, ctx.routeRequest, ctx.maxTokens);
        const r = limiter.take(ctx.tenant.id, tokens, clock.now());
        const charged = (r: RateCheck): void => {
          Object.assign(ctx.headers, r.headers);
          if (!r.ok) {
            metrics.decision(admittedAs(ctx.model), cls, 'rate_limited');
            metrics.rateLimited(ctx.tenant.id, r.reason);
            throw new ApiError(429, r.kind, 'rate_limit_exceeded', r.message, null, { 'retry-after': String(r.retryAfterSeconds) });
          }
          const release = r.release;
          if (!settleTokens) ctx.onFinish.push(() => release());
          else {
            const prompt = requestPromptTokens(ctx.routeRequest);
            ctx.onFinish.push((c) => release(usedTokens(c, prompt), clock.now()));
          }
        };
        if (r instanceof Promise) {
          return r.then((x) => {
            charged(x);
            return kvPressure(ctx, cls);
          });
        }
        charged(r);
      }
      return kvPressure(ctx, cls);
    },
  };

  /** 3. KV pressure. */
  function kvPressure(ctx: RequestContext, cls: PriorityClass): StageResult | Promise<StageResult> {
      const c = controller;
      if (!c) return 'continue';
      const latestStart = Math.min(ctx.deadlineAt, ctx.startedAt + config.timeouts.firstByteMs);
      let settle: ((r: StageResult) => void) | null = null;
      let fail: ((e: ApiError) => void) | null = null;
      const started = (t: AdmissionTicket<WorkerState>): void => {
        ctx.state.set(ADMISSION_TICKET, t);
        // Route only where its blocks fit (the estimate counts output still to be written).
        if (t.workers) ctx.candidates = t.workers;
        if (t.cls === 'sheddable') {
          ctx.checkPick = (d) => {
            const charged = d.worker.inflight.get(ctx.id);
            const r = charged ? c.checkPick(t, d.worker, charged.uncachedTokens) : null;
            return r ? refusal(r) : null;
          };
        }
        ctx.onFinish.push(() => {
          t.release();
          // Capacity may be free now (the router released its reservation).
          if (c.queueDepth(t.model) > 0) c.pump(t.model);
        });
      };
      const out = c.submit(
        {
          id: ctx.id,
          model: admittedAs(ctx.model),
          cls,
          promptTokens: requestPromptTokens(ctx.routeRequest),
          maxTokens: ctx.maxTokens,
          sequences: requestSequences(ctx.routeRequest),
          latestStart,
        },
        {
          onAdmit: (t) => {
            started(t);
            ctx.abortUpstream = null;
            ctx.logFields = { ...ctx.logFields, queuedMs: Math.round(t.queuedMs) };
            settle?.('continue');
          },
          onRefuse: (r) => {
            ctx.abortUpstream = null;
            fail?.(refusal(r));
          },
        },
      );
      if (out.kind === 'admitted') {
        started(out.ticket);
        return 'continue';
      }
      if (out.kind === 'refused') throw refusal(out.refusal);
      const entry = out.entry;
      keepPumping();
      return new Promise<StageResult>((resolve, reject) => {
        settle = resolve;
        fail = reject;
        // The client going away (or shutdown) takes the request out of the queue at once.
        ctx.abortUpstream = () => {
          ctx.abortUpstream = null;
          c.cancel(entry);
          resolve('handled');
        };
      });
  }

  return {
    stage,
    controller,
    retune(next) {
      controller?.retune({
        thresholds: next.admission.thresholds,
        queue: next.admission.queue,
        retryAfterSeconds: next.limits.retryAfterSeconds,
        reserveOutputCap: RESERVE_OUTPUT_TOKENS_CAP,
      });
      settleTokens = next.admission.tokensCounted === 'used';
      const nextLimits = new Map<string, TenantLimits>(next.tenants.map((t) => [t.id, t.limits]));
      localLimiter.setLimits(nextLimits, clock.now());
      if (limiter !== localLimiter) limiter.setLimits?.(nextLimits, clock.now());
    },
    service: {
      name: 'admission',
      close() {
        if (pumpTimer) clearInterval(pumpTimer);
        pumpTimer = null;
      },
    },
  };
}

/**
 * The request's priority class: the tenant's, lowered (never raised) by an x-kvgate-priority
 * header or a numeric body `priority`; written back as vLLM's priority where its pools take it.
 */
function decideClass(ctx: RequestContext, values: GatewayConfig['admission']['vllmPriority']['values'], passAll: boolean, passPools: ReadonlySet<string>): PriorityClass {
  const header = ctx.req.headers['x-kvgate-priority'];
  let asked: PriorityClass | null = null;
  if (typeof header === 'string' && header.trim() !== '') {
    asked = parsePriority(header, values);
    if (asked === null) {
      throw new ApiError(400, 'invalid_request_error', 'invalid_value',
        `x-kvgate-priority must be critical, standard, sheddable or an integer, got '${header.slice(0, 40)}'`, 'x-kvgate-priority');
    }
  }
  const bodyPriority = ctx.body.priority;
  let cls = lowerOnly(ctx.tenant.priority, asked);
  if (typeof bodyPriority === 'number') cls = lowerOnly(cls, classOfVllmPriority(bodyPriority, values));
  ctx.state.set(ADMISSION_CLASS, cls);
  ctx.routeRequest.priority = values[cls];
  if (passAll || (passPools.size > 0 && ctx.candidates.every((w) => passPools.has(w.pool)))) {
    if (ctx.body.priority !== values[cls]) {
      ctx.body.priority = values[cls];
      ctx.bodyModified = true;
    }
  }
  ctx.logFields = { ...ctx.logFields, priority: cls };
  ctx.headers['x-kvgate-priority'] = cls;
  return cls;
}

/**
 * The tokens a finished request used, to settle its tokens-per-minute reservation with: the
 * answer's usage where known (the prompt's tokens from it, else the count the request was reserved
 * by; a stream cut short counts what it relayed). A request that got no answer (refused, shed,
 * failed) used nothing, unless a worker had it and the client or the deadline ended it: then its
 * prompt (the worker may have prefilled it). An answer relayed with no count of its tokens (vLLM's
 * endpoints that write no usage) keeps its reservation (undefined).
 */
export function usedTokens(ctx: RequestContext, promptTokens: number): number | undefined {
  const u = ctx.usage;
  if (u) return (u.promptTokens ?? promptTokens) + u.outputTokens;
  if (ctx.status < 400 && ctx.ttftMs !== null) return undefined;
  return ctx.workerId !== null && (ctx.status === 499 || ctx.status === 504) ? promptTokens : 0;
}
