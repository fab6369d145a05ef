/**
 * How long a draft call may take. A draft call asks for k tokens from a small, fast model; its
 * answer is only worth waiting for while the round it feeds still beats generating on the target
 * alone. So its deadline is derived from what it was asked:
 *
 *     deadline(k) = min(cap, max(floorMs, factor × k × msPerToken))
 *     cap         = min(callTimeoutMs, k × tpotBudgetMs)      (callTimeoutMs without a budget)
 *
 * msPerToken is the draft pool's measured time per asked token: an exponentially weighted mean of
 * (call ms ÷ k) over its calls that answered (round trip included, so for small k it errs long).
 * Before the first answer it is `initialMsPerToken`. The floor absorbs scheduling jitter of a
 * loaded host; the factor leaves room for a draft worker that is busy rather than hung; the cap
 * keeps a round within the request's time-per-output-token budget: k draft tokens may spend at
 * most the time the budget allows for k output tokens, or the round cannot pay off.
 *
 * Calls that missed their deadline are not measured: a hung worker would otherwise stretch the
 * deadline of its healthy peers.
 */

export interface DraftDeadlineOptions {
  /** Shortest deadline (ms). */
  floorMs: number;
  /** Multiple of the expected call time allowed. */
  factor: number;
  /** Longest deadline (ms): the cascade's per-call timeout. */
  callTimeoutMs: number;
  /** Time-per-output-token budget (ms), or null. */
  tpotBudgetMs: number | null;
  /** Time per asked token assumed before a pool's first measured call (ms). */
  initialMsPerToken?: number;
}

/** Weight of the newest call in the per-token mean. */
const EWMA_ALPHA = 0.1;

export class DraftDeadlines {
  private readonly msPerToken = new Map<string, number>();

  constructor(private readonly o: DraftDeadlineOptions) {}

  /** The deadline (whole ms, as timers take them) of a call asking the draft pool `pool` for k tokens. */
  deadlineMs(pool: string, k: number): number {
    const o = this.o;
    const perToken = this.msPerToken.get(pool) ?? o.initialMsPerToken ?? 10;
    const cap = o.tpotBudgetMs === null ? o.callTimeoutMs : Math.min(o.callTimeoutMs, Math.max(1, k) * o.tpotBudgetMs);
    return Math.ceil(Math.min(cap, Math.max(o.floorMs, o.factor * Math.max(1, k) * perToken)));
  }

  /** A draft call to `pool` for k tokens answered in `ms`. */
  observe(pool: string, k: number, ms: number): void {
    if (k <= 0 || !(ms >= 0)) return;
    const x = ms / k;
    const prev = this.msPerToken.get(pool);
    this.msPerToken.set(pool, prev === undefined ? x : prev + EWMA_ALPHA * (x - prev));
  }

  /** The pool's measured time per asked token (ms), or null before its first answer. */
  measuredMsPerToken(pool: string): number | null {
    return this.msPerToken.get(pool) ?? null;
  }
}
