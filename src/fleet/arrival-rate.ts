/**
 * How often requests reach a worker lately: the requests this gateway dispatched to it, each
 * counted as 1 / ARRIVAL_TAU_MS and decayed exponentially with its age, so the sum is the recent
 * rate per millisecond (a steady stream of r per ms holds it at r).
 */

/**
 * Time constant, ms: tens of arrivals at a worker of a fleet at light load (a few per second
 * each), short enough that a burst shows within it.
 */
const ARRIVAL_TAU_MS = 10_000;

export class ArrivalRate {
  private sum = 0;
  private at = -Infinity;

  /** A request reached the worker at clock time `now`. */
  add(now: number): void {
    this.sum = this.perMs(now) + 1 / ARRIVAL_TAU_MS;
    if (now > this.at) this.at = now;
  }

  /** Arrivals per millisecond, as of clock time `now`. */
  perMs(now: number): number {
    if (this.at === -Infinity) return 0;
    return now > this.at ? this.sum * Math.exp((this.at - now) / ARRIVAL_TAU_MS) : this.sum;
  }
}
