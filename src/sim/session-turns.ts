/**
 * Closed-loop sessions in the fleet simulation: when a request that carries `next` (a session's
 * turn) is over — finished, answered by the cache, rejected or shed — `next(now)` gives the
 * session's following turn, which arrives at its own time (now + think time, never before now).
 */
import type { BenchRequest } from '../workload/types.js';
import type { SimRequest } from './sim-request.js';

export class SessionTurns {
  private scheduled = 0;

  /** `arriveAt(t, req)` makes req an arrival event at virtual time t. */
  constructor(private readonly arriveAt: (t: number, req: BenchRequest) => void) {}

  /** Turns scheduled and not yet arrived: the run is not over while there are any. */
  get pending(): number {
    return this.scheduled;
  }

  /** `rec` is over at `now`: schedule its session's next turn, if it has one. */
  followUp(rec: SimRequest, now: number): void {
    const next = rec.next;
    if (next === undefined) return;
    rec.next = undefined;
    const r = next(now);
    if (r === undefined) return;
    this.scheduled++;
    this.arriveAt(Math.max(now, r.arrivalMs), r);
  }

  /** A scheduled turn arrived. */
  arrived(): void {
    this.scheduled--;
  }
}
