/**
 * The status line of `kvgate bench --jobs N` (bench-parallel.ts): the runs in flight and an ETA.
 *
 * The ETA counts runs, not requests: every policy makes its plain run and, with --capacity, the
 * probes its search still has to make (capacity.ts probesLeft: exact once the search has
 * bracketed the capacity, an estimate before). A run's wall time is the mean of the runs finished
 * so far (before any has finished, what the runs in flight project from their progress). The
 * remaining runs share the lanes (at most --jobs, at most one per policy left), and no policy's
 * own remaining runs can finish sooner than one after another. Left out: the runs beside a
 * policy's (--cache, isolation), and probes run ahead on lent threads, which only make it sooner.
 */
import { meetsTarget, probesLeft, type CapacitySettings } from '../bench/capacity.js';

interface PolicyProgress {
  label: string;
  /** Requests of the run in flight so far. */
  done: number;
  /** When the run in flight began, ms (the clock's). */
  runStartedAt: number;
  /** Capacity probes judged so far, in order. */
  outcomes: Array<{ scale: number; met: boolean }>;
}

export class ParallelProgress {
  private readonly running = new Map<string, PolicyProgress>();
  private finished = 0;
  private lastDraw = 0;
  private readonly started: number;
  private runsDone = 0;
  private runsMs = 0;

  /**
   * `runs` policies, `total` requests per plain run (unknown for a trace without --limit),
   * `jobs` lanes; `capacity` when each policy searches its capacity.
   */
  constructor(
    private readonly runs: number,
    private readonly total: number | undefined,
    private readonly jobs: number,
    private readonly capacity: CapacitySettings | null,
    private readonly stream: Pick<NodeJS.WriteStream, 'write'> = process.stderr,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.started = now();
  }

  /** A policy's next run began (its plain run or a probe). */
  start(policy: string, label: string): void {
    const t = this.now();
    const p = this.running.get(policy);
    if (p) {
      this.runEnded(p, t);
      p.label = label;
      p.done = 0;
      p.runStartedAt = t;
    } else {
      this.running.set(policy, { label, done: 0, runStartedAt: t, outcomes: [] });
    }
    this.draw(true);
  }

  update(policy: string, done: number): void {
    const r = this.running.get(policy);
    if (r) r.done = done;
    this.draw(false);
  }

  /** One of the policy's capacity probes was judged: its scale and figures. */
  probe(policy: string, p: { rate_scale: number; attainment: number; worst_band_attainment?: number }): void {
    const r = this.running.get(policy);
    if (!r || !this.capacity) return;
    r.outcomes.push({ scale: p.rate_scale, met: meetsTarget(p, this.capacity.target, this.capacity.minBandAttainment) });
  }

  /** One policy's every run is done. */
  end(policy: string): void {
    const p = this.running.get(policy);
    if (p) this.runEnded(p, this.now());
    this.running.delete(policy);
    this.finished++;
    this.draw(true);
  }

  /** A line of its own above the status line (a capacity probe's result). */
  note(line: string): void {
    this.stream.write(`\r\x1b[K${line}\n`);
    this.draw(true);
  }

  clear(): void {
    this.stream.write('\r\x1b[K');
  }

  /** Seconds left by the model above; null while nothing has run long enough to time a run. */
  etaSeconds(): number | null {
    const t = this.now();
    const runMs = this.meanRunMs(t);
    if (runMs === null) return null;
    // A policy's plain run is its search's first probe (unless probes must last longer than it).
    const perPolicy = this.capacity ? probesLeft([], this.capacity.precision, this.capacity.maxProbes) : 1;
    const waiting = this.runs - this.finished - this.running.size;
    let runsLeft = waiting * perPolicy;
    let longest = waiting > 0 ? perPolicy : 0;
    for (const p of this.running.values()) {
      // The run in flight counts for the part of it not yet done.
      const current = Math.max(0, 1 - this.fraction(p));
      const after = this.capacity ? this.searchLeft(p) : 0;
      runsLeft += current + after;
      longest = Math.max(longest, current + after);
    }
    const lanes = Math.max(1, Math.min(this.jobs, this.runs - this.finished));
    return (Math.max(runsLeft / lanes, longest) * runMs) / 1000;
  }

  /** Probes the policy's search makes after the one in flight (its plain run before the first is judged). */
  private searchLeft(p: PolicyProgress): number {
    const c = this.capacity!;
    return Math.max(0, probesLeft(p.outcomes, c.precision, c.maxProbes) - 1);
  }

  private fraction(p: PolicyProgress): number {
    return this.total ? Math.min(1, p.done / this.total) : 0;
  }

  private meanRunMs(t: number): number | null {
    if (this.runsDone > 0) return this.runsMs / this.runsDone;
    // No run finished yet: the runs in flight, projected from how far they are.
    let sum = 0;
    let n = 0;
    for (const p of this.running.values()) {
      const f = this.fraction(p);
      if (f >= 0.05) {
        sum += (t - p.runStartedAt) / f;
        n++;
      }
    }
    return n > 0 ? sum / n : null;
  }

  private runEnded(p: PolicyProgress, t: number): void {
    this.runsDone++;
    this.runsMs += t - p.runStartedAt;
  }

  private draw(force: boolean): void {
    const now = this.now();
    if (!force && now - this.lastDraw < 200) return;
    this.lastDraw = now;
    const secs = (now - this.started) / 1000;
    const parts = [...this.running.values()].map((r) => (this.total ? `${r.label} ${Math.floor(100 * this.fraction(r))}%` : `${r.label} ${r.done}`));
    const eta = this.finished < this.runs ? this.etaSeconds() : null;
    const etaText = eta === null ? '' : `, ETA ${Math.round(eta)} s`;
    this.stream.write(`\r${this.finished}/${this.runs} policies done; ${parts.join(', ')} (${secs.toFixed(1)} s${etaText})\x1b[K`);
  }
}
