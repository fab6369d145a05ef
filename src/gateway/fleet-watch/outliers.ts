/**
 * Passive outlier detection: notices a hung worker (SIGSTOP, a wedged engine, a dead network
 * path that still accepts connections) from the traffic itself, long before health probes fail.
 *
 * A worker *owes bytes* while it has streamed requests in flight: one waiting for its first token,
 * or one relaying tokens (a decode step every few tens of ms). It is *silent* for the time since
 * the later of its last byte (on any connection: requests, scrapes, probes) and the dispatch of
 * the oldest stream it owes. Silence longer than its allowance —
 *
 *     allowance = max(minSilenceMs,
 *                     ttftFactor × max(its recent TTFT, the median of its peers'),
 *                     ttftFactor × its longest prefill / its prefill rate)
 *
 * (recent TTFT: an exponentially weighted mean of dispatch → first streamed byte; longest prefill:
 * the most uncached prompt tokens of one attempt on it still waiting for its first byte; prefill
 * rate: the routing policy's measured or configured tokens/s for the worker) — makes it
 * *suspected*, at once:
 * - it gets no new requests (the `healthy` filter skips suspected workers);
 * - every attempt on it that has not sent the client a byte (streamed or not) and has waited
 *   longer than the allowance is abandoned and retried on another worker: the client has seen
 *   nothing, so nothing is duplicated visibly;
 * - a stream already relaying from it that stays silent past the allowance ends with an SSE
 *   error event instead of hanging until the request deadline;
 * - its circuit breaker counts a failure, so repeated episodes open it.
 * A metrics scrape or health probe that times out makes it suspected too, if nothing at all has
 * come from the worker for minSilenceMs and it either has requests in flight or a second check in
 * a row timed out (non-streamed traffic owes no bytes until it ends, so this is what catches a
 * hung worker serving only that; one slow scrape of an idle or streaming worker is not enough).
 *
 * If every worker of a model is suspected, the `healthy` filter routes to them anyway: suspicion
 * steers traffic, it never refuses it (health probes and circuit breakers do that).
 *
 * Any byte from the worker clears the suspicion (a scrape or probe answering in time clears it
 * once nothing it owed is left waiting).
 *
 * Non-streamed requests are not judged by silence: their whole answer comes at the end.
 *
 * A worker prefilling a long prompt sends nothing until it is done (58,000 uncached tokens take a
 * simulated H100 about 2 s): its silence is judged against that work, never against a fixed time,
 * so a long prompt on a healthy worker is neither retried elsewhere nor counted against it. The
 * longest single prefill, not the sum of all waiting: an engine schedules first come, first served
 * (vLLM's scheduler), so each first token follows the one before by at most its own prefill; and a
 * hung worker that keeps being sent short prompts until it is suspected does not earn itself more
 * silence with each of them.
 *
 * A speculative cascade's draft calls are not relayed attempts: the cascade gives each a deadline
 * of its own (src/speculative/draft-deadline.ts) and reports one it missed (onCallTimedOut), which
 * suspects a worker also silent for minSilenceMs; its answers count as bytes (onBytes).
 */
import type { WorkerState } from '../../fleet/worker-state.js';
import type { Clock } from '../../util/clock.js';
import type { AttemptWatch, RelayAttempt } from '../pipeline/relay-attempt.js';

export interface OutlierOptions {
  minSilenceMs: number;
  ttftFactor: number;
  checkIntervalMs: number;
  clock: Clock;
  /** Attempts in flight on a worker (the relay's). */
  attemptsOn: (workerId: string) => Iterable<RelayAttempt>;
  /**
   * The worker's prefill throughput, tokens/s: measured by the routing policy, or its configured
   * default (KvgatePolicy.prefillRate). Absent: DEFAULT_PREFILL_TOKENS_PER_SEC.
   */
  prefillRate?: (w: WorkerState) => number;
  onSuspect?: (w: WorkerState, reason: string) => void;
  onClear?: (w: WorkerState) => void;
}

/** Weight of the newest sample in the TTFT mean. */
const EWMA_ALPHA = 0.2;
/**
 * Prefill throughput assumed for a worker whose routing policy measures none, tokens/s: the
 * kvgate policy's default `prefillTokensPerSec` (scheduler/policies/kvgate/knobs.ts). Erring slow only
 * lengthens the allowance while a long prompt is in flight.
 */
export const DEFAULT_PREFILL_TOKENS_PER_SEC = 10_000;

export class OutlierDetector implements AttemptWatch {
  private readonly ttft = new Map<string, number>();
  /** Workers whose last check timed out (a second in a row suspects an idle worker). */
  private readonly timedOut = new Set<string>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly workers: readonly WorkerState[],
    private readonly o: OutlierOptions,
  ) {}

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => this.check(), this.o.checkIntervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  // ---- what attempts and the fleet watchers report ----

  onBytes(w: WorkerState): void {
    w.lastByteAt = this.o.clock.now();
    if (w.suspected) this.clear(w);
  }

  onFirstByte(w: WorkerState, ms: number): void {
    // A first byte that a long prefill explains says how long the prompt was, not how responsive
    // the worker is: it would stretch the allowance of every short request after it.
    if (this.o.ttftFactor * this.prefillMs(w) > this.o.minSilenceMs) return;
    const prev = this.ttft.get(w.id);
    this.ttft.set(w.id, prev === undefined ? ms : prev + EWMA_ALPHA * (ms - prev));
  }

  /** A scrape or probe of the worker answered (error null) or failed. */
  onWatchResult(w: WorkerState, error: string | null): void {
    if (error === null) {
      this.timedOut.delete(w.id);
      w.lastByteAt = this.o.clock.now();
      if (w.suspected && !this.owesAnyWaiting(w)) this.clear(w);
      return;
    }
    if (!/timed out/.test(error)) return;
    const repeated = this.timedOut.has(w.id);
    this.timedOut.add(w.id);
    if (this.o.clock.now() - w.lastByteAt < this.allowanceMs(w)) return;
    let busy = false;
    for (const _ of this.o.attemptsOn(w.id)) busy = true;
    if (busy || repeated) this.suspect(w, `a check of the worker timed out (${error})`);
  }

  /**
   * A call made to the worker outside the relay (a speculative cascade's draft call) got no answer
   * by its deadline. The deadline is short (a few tokens' time), so one missed deadline alone is
   * a slow answer, not a hung worker: the worker is suspected if, besides, nothing at all has come
   * from it for minSilenceMs (its scrapes and probes answer every few hundred ms while it is up).
   * Returns whether it is suspected now.
   */
  onCallTimedOut(w: WorkerState, reason: string): boolean {
    const silentFor = this.o.clock.now() - w.lastByteAt;
    if (silentFor < this.o.minSilenceMs) return w.suspected;
    this.suspect(w, `${reason}; no byte from it for ${Math.round(silentFor)} ms`);
    return true;
  }

  /** The worker's allowed silence now (ms). */
  allowanceMs(w: WorkerState): number {
    const own = this.ttft.get(w.id) ?? 0;
    const peers: number[] = [];
    for (const p of this.workers) {
      if (p === w || p.model !== w.model) continue;
      const t = this.ttft.get(p.id);
      if (t !== undefined) peers.push(t);
    }
    peers.sort((a, b) => a - b);
    const median = peers.length > 0 ? peers[Math.floor(peers.length / 2)]! : 0;
    return Math.max(this.o.minSilenceMs, this.o.ttftFactor * Math.max(own, median), this.o.ttftFactor * this.prefillMs(w));
  }

  /** How long the worker needs for the longest prefill it was sent and has not answered a byte for (ms). */
  prefillMs(w: WorkerState): number {
    let backlog = 0;
    for (const a of this.o.attemptsOn(w.id)) if (!a.relaying && a.uncachedTokens > backlog) backlog = a.uncachedTokens;
    if (backlog <= 0) return 0;
    const rate = this.o.prefillRate?.(w) ?? DEFAULT_PREFILL_TOKENS_PER_SEC;
    return rate > 0 && Number.isFinite(rate) ? (1000 * backlog) / rate : (1000 * backlog) / DEFAULT_PREFILL_TOKENS_PER_SEC;
  }

  /** One pass over the fleet (run every checkIntervalMs; tests may call it). */
  check(): void {
    const now = this.o.clock.now();
    for (const w of this.workers) {
      let oldest = Infinity;
      for (const a of this.o.attemptsOn(w.id)) if (a.isStream && a.dispatchedAt < oldest) oldest = a.dispatchedAt;
      if (oldest === Infinity) continue;
      const allowance = this.allowanceMs(w);
      const silentFor = now - Math.max(w.lastByteAt, oldest);
      if (silentFor > allowance) this.suspect(w, `no byte for ${Math.round(silentFor)} ms with streams in flight (allowed ${Math.round(allowance)} ms)`);
    }
    for (const w of this.workers) if (w.suspected) this.giveUpOverdue(w, now);
  }

  private suspect(w: WorkerState, reason: string): void {
    if (!w.suspected) {
      w.suspected = true;
      this.o.onSuspect?.(w, reason);
    }
    this.giveUpOverdue(w, this.o.clock.now());
  }

  /**
   * On a suspected worker: an attempt that has had no byte for longer than the allowance goes to
   * another worker; a stream already relaying that went silent that long is ended (it cannot move).
   */
  private giveUpOverdue(w: WorkerState, now: number): void {
    let allowance = -1;
    for (const a of [...this.o.attemptsOn(w.id)]) {
      if (allowance < 0) allowance = this.allowanceMs(w);
      if (!a.relaying) {
        if (now - a.dispatchedAt > allowance) a.suspectedHung();
      } else if (a.isStream && now - a.lastByteAt > allowance) {
        a.stalled();
      }
    }
  }

  private clear(w: WorkerState): void {
    w.suspected = false;
    this.o.onClear?.(w);
  }

  private owesAnyWaiting(w: WorkerState): boolean {
    for (const a of this.o.attemptsOn(w.id)) if (!a.relaying) return true;
    return false;
  }
}
