/**
 * How fast a worker is decoding right now, as the answers streaming from it show: milliseconds per
 * output token over the last moments, prefill stalls included — the TPOT its running requests are
 * getting.
 *
 * Each observation is the time between two stream chunks of one answer and the tokens the later
 * one carried. Both sums decay exponentially with the time since they were added (time constant
 * PACE_TAU_MS), so the figure is the answers' recent TPOT. The decayed sum of the times says how
 * much of the recent past the answers covered: one answer streaming at any pace keeps it near
 * PACE_TAU_MS. Below PACE_MIN_COVER_MS there is no figure, so it fades rather than sticks when a
 * worker goes quiet (about 0.7 s after its last answer ended).
 */

/** Time constant of the decay, ms: about ten steps of a loaded engine. */
export const PACE_TAU_MS = 500;
/** Least decayed time the observations must cover for a figure, ms. */
const PACE_MIN_COVER_MS = PACE_TAU_MS / 4;

export class DecodePace {
  private ms = 0;
  private tokens = 0;
  private at = -Infinity;

  /** `tokens` output tokens arrived `gapMs` after the answer's previous ones, at clock time `now`. */
  observe(gapMs: number, tokens: number, now: number): void {
    if (!(tokens > 0) || !(gapMs >= 0)) return;
    this.decayTo(now);
    this.ms += gapMs;
    this.tokens += tokens;
  }

  /** Recent milliseconds per output token, or undefined when too little was seen lately. */
  msPerToken(now: number): number | undefined {
    if (this.tokens === 0) return undefined;
    const f = now > this.at ? Math.exp((this.at - now) / PACE_TAU_MS) : 1;
    return this.ms * f < PACE_MIN_COVER_MS ? undefined : this.ms / this.tokens;
  }

  private decayTo(now: number): void {
    if (now > this.at) {
      const f = this.at === -Infinity ? 0 : Math.exp((this.at - now) / PACE_TAU_MS);
      this.ms *= f;
      this.tokens *= f;
      this.at = now;
    }
  }
}

/**
 * One streamed answer's share of its worker's DecodePace: at each chunk, the events (tokens) it
 * carried since the answer's previous chunk and the time between the two. The first chunk seen
 * only sets the mark (the time before it is the answer's TTFT, not its TPOT).
 */
export class AnswerPace {
  private lastAt = Number.NaN;
  private lastEvents = 0;

  /** A chunk arrived at `now`; `events`: the answer's stream events so far, this chunk's included. */
  chunk(pace: DecodePace, events: number, now: number): void {
    if (events <= this.lastEvents && !Number.isNaN(this.lastAt)) return;
    if (!Number.isNaN(this.lastAt)) pace.observe(now - this.lastAt, events - this.lastEvents, now);
    this.lastAt = now;
    this.lastEvents = events;
  }
}
