/**
 * Time source injected into every piece of policy code (scheduler, admission, speculation
 * controller). The live gateway uses the monotonic wall clock; the fleet simulation passes a
 * virtual clock it advances itself. Times are milliseconds.
 */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = {
  now: () => performance.now(),
};

/** A clock that only moves when told to: the discrete-event simulation's time. */
export class VirtualClock implements Clock {
  private t: number;
  constructor(start = 0) {
    this.t = start;
  }
  now(): number {
    return this.t;
  }
  /** Move to an absolute time; time never runs backwards. */
  set(t: number): void {
    if (t > this.t) this.t = t;
  }
  advance(ms: number): void {
    if (ms > 0) this.t += ms;
  }
}
