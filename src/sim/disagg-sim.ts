/**
 * Prefill/decode disaggregation in the fleet simulation: workers [0, prefill) are the prefill
 * pool (role `prefill`), the rest the decode pool (role `decode`), and each request is decided by
 * the gateway's own decider and worker selection (src/scheduler/disagg/), as the live relay is.
 *
 * A disaggregated request, in virtual time:
 * 1. its prefill half (`<idx>p`, max_tokens 1, EngineRequest.remoteDecode) runs on the prefill
 *    worker, which keeps its blocks when it finishes;
 * 2. the gateway relays it to the decode worker (overheadMs), which admits it with blocks for the
 *    whole prompt (EngineRequest.remotePrefill) and reports the pull in its step (StepResult.kvPulls);
 * 3. after the transfer time of the tokens it pulls (kv-link.ts), the decode worker has the KV
 *    (Engine.kvArrived) and the prefill worker frees its blocks (Engine.releaseKv);
 * 4. the decode worker recomputes the last prompt token, and its first token is the client's:
 *    TTFT includes the prefill, both hops and the transfer.
 * A local request is served whole by the decode worker the decider weighed, as any request is.
 */
import type { Engine } from '../engine/engine.js';
import type { KvTransferModel } from '../engine/kv-link.js';
import type { EngineRequest, FinishedOutput, KvPull } from '../engine/types.js';
import type { WorkerRole, WorkerState } from '../fleet/worker-state.js';
import { DISAGG_REASONS, type DeciderOptions, type DisaggReason } from '../scheduler/disagg/decider.js';
import { planDisaggregation, rolePools, type DisaggPlanEnv, type RolePools } from '../scheduler/disagg/select.js';
import type { Policy, RouteDecision } from '../scheduler/types.js';
import type { Router } from '../scheduler/router.js';
import type { TimeModel } from '../engine/types.js';
import { LatencyHistogram } from '../util/latency-histogram.js';
import { SimRouteRequest, type SimRequest } from './sim-request.js';

export interface SimDisaggOptions {
  /** Workers [0, prefill) form the prefill pool; the others the decode pool. */
  prefill: number;
  /**
   * The prefill workers' role: `prefill` (default: they only prefill for decode workers) or
   * `both` (they also serve local requests whole, and may decode, as the decode pool's workers do).
   */
  prefillRole?: 'prefill' | 'both';
  /** The model's KV over the link between the pools. */
  transfer: KvTransferModel;
  decider: DeciderOptions;
}

/** What disaggregation did in a run. */
export interface SimDisaggResult {
  prefillWorkers: number;
  decodeWorkers: number;
  /** Decisions by reason (DISAGG_REASONS). */
  decisions: Record<DisaggReason, number>;
  /** Requests served disaggregated (their prefill ran on a prefill worker). */
  disaggregated: number;
  /** KV transfers completed, and their bytes over all ranks. */
  transfers: number;
  transferBytes: number;
  /** Each transfer's time, ms. */
  transferMs: LatencyHistogram;
  /** From a prefill's end to the decode worker's first token, ms (the relay hop, the transfer, the decode's first step). */
  handoffMs: LatencyHistogram;
}

/** What the fleet simulation lends the feature. */
export interface DisaggHost {
  now(): number;
  /** Run fn at virtual time t. */
  at(t: number, fn: () => void): void;
  /** Constant gateway + network delay of each hop, ms. */
  overheadMs: number;
  engine(w: number): Engine;
  /** Queue an engine request on worker w and make sure it steps. */
  submit(w: number, req: EngineRequest): void;
  /** Make worker w step if it is idle (blocks were freed, KV arrived). */
  wake(w: number): void;
  /** The engine request that answers `rec` (its whole answer). */
  engineRequest(rec: SimRequest): EngineRequest;
  /** A worker was charged with a request (the per-worker `routed` count). */
  routed(w: number): void;
  workerIndex(id: string): number;
}

/** One disaggregated request between its decision and its decode's admission. */
interface InFlight {
  rec: SimRequest;
  prefill: number;
  decode: number;
  prefillRoute: SimRouteRequest;
  prefillEnd: number;
}

/** Prefill throughput of a worker's time model on a 2,048-token chunk, tokens/s (for policies without a learned rate). */
export function modelPrefillRate(tm: TimeModel): number {
  const n = 2048;
  return (1000 * n) / tm.stepMs({ prefill: [{ newTokens: n, contextLen: n }], decodeSeqs: 0, decodeContextTokens: 0 });
}

export class SimDisagg {
  private readonly flights = new Map<string, InFlight>();
  /** Disaggregated requests whose decode has not yet had its first token, by request id. */
  private readonly handoff = new Map<string, number>();
  private readonly out: SimDisaggResult;
  /** Calls scheduled and not yet run (relay hops, transfers): the run is not over while any is. */
  private scheduled = 0;

  constructor(
    private readonly o: SimDisaggOptions,
    private readonly workers: number,
    private readonly host: DisaggHost,
    private readonly prefillRate: (w: WorkerState) => number,
  ) {
    if (!Number.isInteger(o.prefill) || o.prefill < 1 || o.prefill >= workers) {
      throw new Error(`a disaggregated fleet needs 1 to ${workers - 1} prefill workers of ${workers}, got ${o.prefill}`);
    }
    this.out = {
      prefillWorkers: o.prefill,
      decodeWorkers: workers - o.prefill,
      decisions: Object.fromEntries(DISAGG_REASONS.map((r) => [r, 0])) as Record<DisaggReason, number>,
      disaggregated: 0,
      transfers: 0,
      transferBytes: 0,
      transferMs: new LatencyHistogram(),
      handoffMs: new LatencyHistogram(),
    };
  }

  /** Each worker's role, by index. */
  roles(): WorkerRole[] {
    const p = this.o.prefillRole ?? 'prefill';
    return Array.from({ length: this.workers }, (_, i) => (i < this.o.prefill ? p : 'decode'));
  }

  get pending(): number {
    return this.scheduled;
  }

  /** Whether an engine sequence id is a prefill half. */
  owns(seqId: string): boolean {
    return seqId.endsWith('p');
  }

  /** The pools of a replica's workers. */
  pools(states: readonly WorkerState[]): RolePools {
    return rolePools(states)!;
  }

  /**
   * Decide `rec` as the gateway's disaggregation stage does (src/gateway/pipeline/disagg-stage.ts):
   * the decode worker the decider weighed is charged (Router.commit); disaggregated, the prefill
   * worker is charged with the prompt and max_tokens 1 and the prefill half dispatched (true);
   * local, the charged decode decision is returned for the caller to dispatch; null when no decode
   * worker can take it now (the caller routes it over the decode pool, which answers why).
   */
  route(rec: SimRequest, router: Router, policy: Policy, pools: RolePools): RouteDecision | true | null {
    const env: DisaggPlanEnv = { prefillRate: this.prefillRate, transferMs: (tokens) => this.o.transfer.ms(tokens) };
    const plan = planDisaggregation(policy, rec.route, pools, router.context(), env, this.o.decider);
    this.out.decisions[plan.decision.reason]++;
    if (plan.decode === null) return null;
    router.commit(rec.route, plan.decode);
    if (plan.decision.mode === 'local' || plan.prefill === null) return plan.decode;
    const host = this.host;
    const dw = host.workerIndex(plan.decode.worker.id);
    const pw = host.workerIndex(plan.prefill.worker.id);
    const prompt = rec.req.promptTokens.length;
    // A prompt either worker refuses is the decode worker's to answer (its 400), on the local path.
    if (host.engine(dw).check(prompt, rec.route.maxTokens) ?? host.engine(pw).check(prompt, 1)) return plan.decode;
    const pr = new SimRouteRequest(`${rec.id}p`, rec.route.model, rec.req.promptTokens, 1, rec.req.promptText);
    router.commit(pr, plan.prefill);
    host.routed(dw);
    host.routed(pw);
    this.out.disaggregated++;
    this.flights.set(pr.id, { rec, prefill: pw, decode: dw, prefillRoute: pr, prefillEnd: NaN });
    const prefillReq: EngineRequest = { ...host.engineRequest(rec), id: pr.id, maxTokens: 1, remoteDecode: true };
    this.later(host.overheadMs, () => host.submit(pw, prefillReq));
    return true;
  }

  /** The prefill half `f` finished on worker w: relay the request to its decode worker. */
  prefillFinished(router: Router, f: FinishedOutput, now: number): void {
    const fl = this.flights.get(f.id)!;
    router.firstToken(f.id);
    router.complete(f.id, f.reason !== 'abort', f.outputTokens);
    fl.prefillEnd = now;
    const host = this.host;
    // Held KV is released when the decode worker has pulled it; a prefill that held nothing (it
    // stopped short) leaves the decode worker to recompute the prompt.
    const decodeReq: EngineRequest = { ...host.engineRequest(fl.rec), ...(f.kvHeld ? { remotePrefill: true } : {}) };
    if (!f.kvHeld) this.flights.delete(f.id);
    this.handoff.set(fl.rec.id, now);
    this.later(host.overheadMs, () => host.submit(fl.decode, decodeReq));
  }

  /** Worker w's step admitted these pulls at `now`: each arrives after its transfer time. */
  pulls(w: number, pulls: readonly KvPull[], now: number): void {
    for (const p of pulls) {
      const fl = this.flights.get(`${p.id}p`);
      const ms = this.o.transfer.ms(p.tokens);
      this.out.transfers++;
      this.out.transferBytes += this.o.transfer.bytes(p.tokens);
      this.out.transferMs.add(ms, 1);
      this.later(now + ms - this.host.now(), () => {
        this.host.engine(w).kvArrived(p.id);
        this.host.wake(w);
        if (fl) {
          this.flights.delete(`${p.id}p`);
          this.host.engine(fl.prefill).releaseKv(`${p.id}p`);
          this.host.wake(fl.prefill);
        }
      });
    }
  }

  /** A request's first token: for a disaggregated one, the end of its handoff. */
  firstToken(id: string, now: number): void {
    const start = this.handoff.get(id);
    if (start === undefined) return;
    this.handoff.delete(id);
    this.out.handoffMs.add(now - start, 1);
  }

  result(): SimDisaggResult {
    return this.out;
  }

  private later(delayMs: number, fn: () => void): void {
    if (delayMs <= 0) return fn();
    this.scheduled++;
    this.host.at(this.host.now() + delayMs, () => {
      this.scheduled--;
      fn();
    });
  }
}
