/**
 * KV-pressure admission in the fleet simulation (FleetSimOptions.admission): the gateway's own
 * AdmissionController (src/admission/), on the run's virtual clock and WorkerStates. At arrival a
 * request is admitted (routed now), queued, or refused (shed); the queue is pumped after every
 * step's results and every scrape (capacity freed), and at queue deadlines (timer events), exactly
 * as the live admission stage pumps it on request ends and on a timer. A request's class comes from
 * its integer priority (absent: standard) through `vllmPriority`.
 */
import { AdmissionController, type AdmissionSettings, type Refusal } from '../admission/controller.js';
import type { WorkerState } from '../fleet/worker-state.js';
import type { Clock } from '../util/clock.js';
import type { BenchRequest } from '../workload/types.js';
import type { SimRequest } from './sim-request.js';
import type { PriorityClass } from '../admission/classes.js';

/** What the fleet simulation lends admission. */
export interface AdmissionHost {
  model: string;
  /** The max_tokens the request sends. */
  declaredMax(req: BenchRequest): number;
  /** An admitted request goes on: the response cache, then the router. */
  proceed(rec: SimRequest, now: number): void;
  refuse(rec: SimRequest, status: number, code: string): void;
  /** `rec` waits in the queue until its deadline `deadline` at the latest. */
  queued(rec: SimRequest, deadline: number): void;
}

export class SimAdmission {
  private readonly controller: AdmissionController<WorkerState>;

  constructor(
    settings: AdmissionSettings,
    private readonly clock: Clock,
    staleAfterMs: number,
    workers: WorkerState[],
    private readonly host: AdmissionHost,
  ) {
    this.controller = new AdmissionController<WorkerState>({ settings, clock, staleAfterMs, workersFor: () => workers });
  }

  /**
   * Admit, queue or refuse `rec` of class `cls` with `sequences` answers at arrival: true when it
   * is admitted now (the caller routes it); queued and refused requests are the host's.
   */
  admit(rec: SimRequest, cls: PriorityClass, sequences: number): boolean {
    const host = this.host;
    const r = this.controller.submit(
      { id: rec.id, model: host.model, cls, promptTokens: rec.req.promptTokens.length, maxTokens: host.declaredMax(rec.req), sequences, latestStart: Infinity },
      {
        onAdmit: (t) => {
          rec.ticket = t;
          host.proceed(rec, this.clock.now());
        },
        onRefuse: (f) => host.refuse(rec, f.status, f.code),
      },
    );
    if (r.kind === 'refused') {
      host.refuse(rec, r.refusal.status, r.refusal.code);
      return false;
    }
    if (r.kind === 'queued') {
      host.queued(rec, r.entry.deadline);
      return false;
    }
    rec.ticket = r.ticket;
    return true;
  }

  /**
   * A sheddable request whose worker already has more than a step of prefill waiting is shed there
   * (the live relay makes the same check after its first pick): the refusal, or null.
   */
  checkPick(rec: SimRequest, worker: WorkerState): Refusal | null {
    if (!rec.ticket) return null;
    const charged = worker.inflight.get(rec.id);
    return charged ? this.controller.checkPick(rec.ticket, worker, charged.uncachedTokens) : null;
  }

  /** Admit what now fits and expire what is due. */
  pump(): void {
    this.controller.pump();
  }

  queueDepth(): number {
    return this.controller.queueDepth();
  }
}

/** The router has charged a worker for `rec` (or it is over): its admission ticket is no longer pending. */
export function releaseTicket(rec: SimRequest): void {
  if (rec.ticket) {
    rec.ticket.release();
    rec.ticket = undefined;
  }
}
