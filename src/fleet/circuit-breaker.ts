/**
 * Per-worker circuit breaker. `failuresToOpen` consecutive upstream failures open the circuit
 * (the worker leaves routing via WorkerState.circuitOpen) for `coolDownMs`; then it is half-open:
 * the worker is routable again for exactly one probe request. The probe's success closes the
 * circuit, its failure opens it for another cool-down.
 */
import type { WorkerState } from './worker-state.js';

export type BreakerState = 'closed' | 'open' | 'half-open';

export interface CircuitBreakerOptions {
  failuresToOpen: number;
  coolDownMs: number;
  /** Called on every transition (logs, metrics). */
  onTransition?: (worker: WorkerState, to: BreakerState) => void;
}

export class CircuitBreaker {
  state: BreakerState = 'closed';
  consecutiveFailures = 0;
  private timer: NodeJS.Timeout | null = null;
  private probeInFlight = false;

  constructor(
    readonly worker: WorkerState,
    private readonly opts: CircuitBreakerOptions,
  ) {}

  /** A request was dispatched to the worker. In half-open, it is the one probe. */
  onDispatch(): void {
    if (this.state === 'half-open' && !this.probeInFlight) {
      this.probeInFlight = true;
      // Keep everyone else away until the probe answers.
      this.worker.circuitOpen = true;
    }
  }

  onSuccess(): void {
    this.consecutiveFailures = 0;
    if (this.state !== 'closed') this.transition('closed');
  }

  onFailure(): void {
    this.consecutiveFailures++;
    if (this.state === 'half-open' || (this.state === 'closed' && this.consecutiveFailures >= this.opts.failuresToOpen)) {
      this.transition('open');
    }
  }

  /**
   * Evidence the worker is back (a scrape or health probe answered after failing, e.g. it was
   * restarted): an open circuit goes half-open now instead of at the end of its cool-down.
   */
  onRecovered(): void {
    if (this.state === 'open') this.transition('half-open');
  }

  /** The request ended without telling anything about the worker (the client went away). */
  onNeutral(): void {
    if (this.state === 'half-open' && this.probeInFlight) {
      this.probeInFlight = false;
      this.worker.circuitOpen = false;
    }
  }

  private transition(to: BreakerState): void {
    this.state = to;
    this.probeInFlight = false;
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    this.worker.circuitOpen = to === 'open';
    if (to === 'open') {
      this.timer = setTimeout(() => {
        this.timer = null;
        this.transition('half-open');
      }, this.opts.coolDownMs);
      this.timer.unref();
    }
    this.opts.onTransition?.(this.worker, to);
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }
}
