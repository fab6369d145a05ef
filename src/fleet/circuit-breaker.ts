/**
 * Per-worker circuit breaker. Two triggers open the circuit (the worker leaves routing via
 * WorkerState.circuitOpen) for `coolDownMs`:
 *   - `failuresToOpen` consecutive upstream failures;
 *   - a failure rate: at least `failureRate.threshold` of the outcomes in the last
 *     `failureRate.windowMs` were failures, counting only once the window holds
 *     `failureRate.minRequests` outcomes (a worker failing every other request never has five
 *     failures in a row, yet is broken).
 * After the cool-down it is half-open: the worker is routable again for exactly one probe
 * request. The probe's success closes the circuit, its failure opens it for another cool-down.
 *
 * Overload is not breakage: a worker that answers 503 or 429 itself (vLLM under pressure, a
 * worker-side limiter) is backed off — out of routing for its Retry-After, else
 * `overloadBackoffMs`, doubling while it keeps answering so, up to `maxBackoffMs` — and its
 * breaker counts neither a failure nor a success. State stays 'closed' during a back-off.
 *
 * Gateway replicas sharing state (src/shared/breaker-channel.ts) tell each other their breakers'
 * openings and closings: applyPeerOpen / applyPeerClose put this breaker in the state another
 * replica reached, and the transition is reported with cause 'peer' (not published again). From
 * there everything proceeds locally: the cool-down's end makes it half-open, and this replica's
 * own probe decides.
 */
import { OutcomeWindow } from './outcome-window.js';
import type { WorkerState } from './worker-state.js';

export type BreakerState = 'closed' | 'open' | 'half-open';
/** What made a transition: this replica's own outcomes and timers, or another replica's word. */
export type TransitionCause = 'local' | 'peer';

export interface CircuitBreakerOptions {
  failuresToOpen: number;
  coolDownMs: number;
  /** Failure-rate trigger (absent: consecutive failures only). */
  failureRate?: { threshold: number; windowMs: number; minRequests: number };
  /** Back-off after a 503/429 without Retry-After, ms (default 1000). */
  overloadBackoffMs?: number;
  /** Longest back-off, ms (default 30000). */
  maxBackoffMs?: number;
  /** Clock for the failure-rate window, ms (default performance.now). */
  now?: () => number;
  /** Called on every transition (logs, metrics, sharing with other replicas), with the state left. */
  onTransition?: (worker: WorkerState, to: BreakerState, cause: TransitionCause, from: BreakerState) => void;
  /** Called when the worker is backed off for overload, with the back-off in ms. */
  onBackoff?: (worker: WorkerState, ms: number) => void;
}

export class CircuitBreaker {
  state: BreakerState = 'closed';
  consecutiveFailures = 0;
  /** Outcomes in the failure-rate window (null without the failure-rate trigger). */
  private readonly outcomes: OutcomeWindow | null;
  private timer: NodeJS.Timeout | null = null;
  private probeInFlight = false;
  private backoffTimer: NodeJS.Timeout | null = null;
  /** Current back-off, ms (0 when the worker is not backed off). */
  backoffMs = 0;
  private readonly now: () => number;
  /** When the current opening's cool-down ends (the `now` clock); 0 when not open. */
  private openUntil = 0;
  /** Who opened the circuit (null when not open). */
  private openCause: TransitionCause | null = null;

  constructor(
    readonly worker: WorkerState,
    private readonly opts: CircuitBreakerOptions,
  ) {
    this.now = opts.now ?? (() => performance.now());
    this.outcomes = opts.failureRate ? new OutcomeWindow(opts.failureRate.windowMs) : null;
  }

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
    this.record(false);
    this.endBackoff();
    // A success while open is a request dispatched before the opening. It closes a circuit this
    // replica opened (as it always did), but not one another replica opened: that replica's
    // failures outweigh a straggler here, and the cool-down's end brings the probe.
    if (this.state === 'half-open' || (this.state === 'open' && this.openCause === 'local')) this.transition('closed');
  }

  onFailure(): void {
    this.consecutiveFailures++;
    this.record(true);
    if (this.state === 'half-open' || (this.state === 'closed' && (this.consecutiveFailures >= this.opts.failuresToOpen || this.rateTripped()))) {
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

  /**
   * The worker answered 503 or 429: back it off for `retryAfterMs` (its Retry-After) or the
   * current back-off, doubled each time it repeats. Not a failure; a half-open probe that meets
   * it leaves the circuit half-open.
   */
  onOverloaded(retryAfterMs?: number): void {
    const base = this.opts.overloadBackoffMs ?? 1000;
    const max = this.opts.maxBackoffMs ?? 30_000;
    const ms = Math.min(max, retryAfterMs !== undefined && retryAfterMs > 0 ? retryAfterMs : this.backoffMs > 0 ? this.backoffMs * 2 : base);
    if (this.state === 'half-open') this.probeInFlight = false;
    if (this.state !== 'closed') return; // open: already out of routing; half-open: the next probe decides
    this.backoffMs = ms;
    this.worker.circuitOpen = true;
    if (this.backoffTimer) clearTimeout(this.backoffTimer);
    this.backoffTimer = setTimeout(() => {
      this.backoffTimer = null;
      // Back in routing; backoffMs stays, so a repeat doubles it until a success resets it.
      if (this.state === 'closed') this.worker.circuitOpen = false;
    }, ms);
    this.backoffTimer.unref();
    this.opts.onBackoff?.(this.worker, ms);
  }

  /** The cool-down of an opening, ms. */
  get coolDownMs(): number {
    return this.opts.coolDownMs;
  }

  /** Ms left of the current opening's cool-down (0 when not open). */
  openRemainingMs(): number {
    return this.state === 'open' ? Math.max(0, this.openUntil - this.now()) : 0;
  }

  /**
   * Another replica opened this worker's circuit with `ms` of cool-down left: open it here for as
   * long (never longer than this breaker's own cool-down), unless it is already open for longer.
   * True when the state changed.
   */
  applyPeerOpen(ms: number): boolean {
    const forMs = Math.max(0, Math.min(ms, this.opts.coolDownMs));
    if (forMs <= 0) return false;
    if (this.state === 'open' && this.openRemainingMs() >= forMs) return false;
    this.transition('open', 'peer', forMs);
    return true;
  }

  /**
   * Another replica's probe succeeded: close this circuit too (its failure counts start afresh).
   * True when the state changed.
   */
  applyPeerClose(): boolean {
    if (this.state === 'closed') return false;
    this.consecutiveFailures = 0;
    this.transition('closed', 'peer');
    return true;
  }

  /** Failures / outcomes in the current window (0 with no outcome). */
  failureRate(): number {
    if (!this.outcomes) return 0;
    const c = this.outcomes.counts(this.now());
    return c.total === 0 ? 0 : c.failed / c.total;
  }

  private endBackoff(): void {
    this.backoffMs = 0;
    if (this.backoffTimer) {
      clearTimeout(this.backoffTimer);
      this.backoffTimer = null;
      if (this.state === 'closed') this.worker.circuitOpen = false;
    }
  }

  private record(failed: boolean): void {
    this.outcomes?.record(this.now(), failed);
  }

  private rateTripped(): boolean {
    const fr = this.opts.failureRate;
    if (!fr || !this.outcomes) return false;
    const c = this.outcomes.counts(this.now());
    return c.total >= fr.minRequests && c.failed / c.total >= fr.threshold;
  }

  private transition(to: BreakerState, cause: TransitionCause = 'local', coolDownMs = this.opts.coolDownMs): void {
    const from = this.state;
    this.state = to;
    this.probeInFlight = false;
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    if (to === 'open') {
      // A fresh start after the cool-down: the window's old failures must not reopen it at once.
      this.outcomes?.clear();
      if (this.backoffTimer) clearTimeout(this.backoffTimer);
      this.backoffTimer = null;
      this.backoffMs = 0;
    }
    this.worker.circuitOpen = to === 'open';
    this.openUntil = to === 'open' ? this.now() + coolDownMs : 0;
    this.openCause = to === 'open' ? cause : null;
    if (to === 'open') {
      this.timer = setTimeout(() => {
        this.timer = null;
        this.transition('half-open');
      }, coolDownMs);
      this.timer.unref();
    }
    this.opts.onTransition?.(this.worker, to, cause, from);
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    if (this.backoffTimer) clearTimeout(this.backoffTimer);
    this.timer = null;
    this.backoffTimer = null;
  }
}
