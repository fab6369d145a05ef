/**
 * Runs an async task per worker on an interval, never overlapping with itself: the next run is
 * scheduled only when the previous one has finished (at `intervalMs` after it started, or at once
 * if it overran). Timers are unref'd so a watcher never keeps a process alive on its own.
 *
 * A worker run by runOnce() before start() (the fleet's first scrape, waited for before the
 * gateway listens) is next run an interval after that run began, and never while it still runs:
 * a worker that has not answered its first scrape is not sent a second one beside it.
 */
export class PerWorkerLoop<W extends { id: string }> {
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private running = false;
  /** Each worker's last runOnce() run: when it began and when it settles. */
  private readonly ranOnce = new Map<string, { started: number; done: Promise<void> }>();
  /** Workers whose schedule starts once their runOnce() run has settled. */
  private readonly afterOnce = new Set<string>();

  /**
   * @param workers the workers to run for; a caller that adds to or removes from it later (a
   *   config reload) tells the loop with add() and remove()
   * @param intervalMs may be changed later (setInterval: from each worker's next run on)
   */
  constructor(
    private readonly workers: readonly W[],
    private intervalMs: number,
    private readonly task: (w: W) => Promise<void>,
  ) {}

  /** A worker was added to `workers`: start its schedule (if the loop runs). */
  add(w: W): void {
    if (this.running) this.schedule(w, 0);
  }

  /** A worker was removed: no further runs (one in progress finishes and is not rescheduled). */
  remove(id: string): void {
    const t = this.timers.get(id);
    if (t) clearTimeout(t);
    this.timers.delete(id);
    this.afterOnce.delete(id);
    this.ranOnce.delete(id);
  }

  setInterval(ms: number): void {
    this.intervalMs = ms;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    for (const w of this.workers) {
      const once = this.ranOnce.get(w.id);
      this.ranOnce.delete(w.id);
      if (once === undefined) {
        this.schedule(w, 0);
        continue;
      }
      this.afterOnce.add(w.id);
      void once.done.then(() => {
        // Stopped or removed meanwhile: no schedule.
        if (!this.running || !this.afterOnce.delete(w.id)) return;
        this.schedule(w, Math.max(0, this.intervalMs - (performance.now() - once.started)));
      });
    }
  }

  stop(): void {
    this.running = false;
    for (const t of this.timers.values()) clearTimeout(t);
    this.timers.clear();
    this.afterOnce.clear();
  }

  /** Run the task for every worker now (tests, startup). Does not disturb the schedule. */
  async runOnce(): Promise<void> {
    await Promise.all(
      this.workers.map((w) => {
        const started = performance.now();
        const done = this.task(w).catch(() => undefined);
        // Kept for start() only: a running loop's schedule already goes on beside such runs.
        if (!this.running) this.ranOnce.set(w.id, { started, done });
        return done;
      }),
    );
  }

  private schedule(w: W, delay: number): void {
    const t = setTimeout(() => {
      const started = performance.now();
      this.task(w)
        .catch(() => undefined)
        .finally(() => {
          // Stopped, or the worker was removed (or removed and added again: a new chain runs).
          if (!this.running || this.timers.get(w.id) !== t) return;
          this.schedule(w, Math.max(0, this.intervalMs - (performance.now() - started)));
        });
    }, delay);
    t.unref();
    this.timers.set(w.id, t);
  }
}
