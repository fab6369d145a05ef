/**
 * Drives an engine model in real time: step, wait the step's modelled duration (divided by the
 * speed-up), hand the step's outputs to whoever is waiting on each request, repeat while there is
 * work. When the engine is idle the loop stops; the next submitted request starts it again.
 *
 * Steps are paced against absolute wall-clock deadlines rather than chained timers, so timer
 * lateness does not accumulate: a step whose deadline has already passed (a 7 ms step at speed
 * 200 lasts 35 µs, far below timer resolution) is delivered at once and the next one runs in the
 * same macrotask, until a few milliseconds of CPU have been spent — then the loop yields to I/O
 * with setImmediate. It never spins waiting for time to pass: a step whose deadline is ahead
 * sleeps in a timer.
 *
 * Simulated time (`now()`, milliseconds) is the modelled GPU's: while the engine is busy it advances
 * by each step's modelled duration (a request arriving mid-step is placed inside that step in
 * proportion to the wall time elapsed); while idle it follows the wall clock × speed. Latencies
 * measured on it are therefore the modelled ones, and event-loop jitter — which `speed` would
 * otherwise magnify (1 ms late at speed 200 is 200 modelled ms) — stays out of them.
 */
import type { EngineModel, EngineRequest, FinishedOutput, StepResult } from '../../engine/types.js';

/** Receives one request's outputs. Calls happen after the step that produced them has ended. */
export interface RequestSink {
  /** The request was scheduled for the first time; `atMs` is the start of that step. */
  onStarted?(cachedPromptTokens: number, atMs: number): void;
  /**
   * Tokens of one step, in order (one per step without speculative decoding), and how the request
   * finished if it did in that step. `atMs` is the end of the step.
   */
  onOutput(tokens: readonly number[], finished: FinishedOutput | null, atMs: number): void;
}

export interface StepTiming {
  startMs: number;
  endMs: number;
}

export interface EngineDriverOptions {
  /** Time compression: 10 → a step takes a tenth of its modelled duration. Default 1. */
  speed?: number;
  /** Called for every step after it ended and its outputs were delivered. */
  onStep?: (step: StepResult, timing: StepTiming) => void;
}

/** CPU time one macrotask may spend running overdue steps before yielding to I/O. */
const SLICE_MS = 4;
/** Waits shorter than this are not worth a timer: the step is delivered at once. */
const MIN_SLEEP_MS = 1;
/**
 * How far behind its wall-clock schedule the loop may fall before the schedule is reset to now
 * (after a long event-loop stall, catching up would release a burst of steps at once).
 */
const MAX_LAG_MS = 50;

const EMPTY: readonly number[] = [];

export class EngineDriver {
  readonly engine: EngineModel;
  readonly speed: number;
  private readonly onStep: EngineDriverOptions['onStep'];
  private readonly sinks = new Map<string, RequestSink>();
  private readonly t0 = performance.now();
  /** Wall-clock time at which the step in flight (or the last one) ends. */
  private cursor = performance.now();
  /** Modelled time at which the step in flight (or the last one) ends. */
  private simCursor = 0;
  /** A step that ran and whose end (wall clock) has not been reached yet, with both timings. */
  private pending: { step: StepResult; wall: StepTiming; sim: StepTiming } | null = null;
  private timer: NodeJS.Timeout | null = null;
  private immediate: NodeJS.Immediate | null = null;
  private active = false;
  private stopped = false;

  constructor(engine: EngineModel, opts: EngineDriverOptions = {}) {
    const speed = opts.speed ?? 1;
    if (!(speed > 0) || !Number.isFinite(speed)) throw new Error(`speed must be a positive number, got ${speed}`);
    this.engine = engine;
    this.speed = speed;
    this.onStep = opts.onStep;
  }

  /** Modelled time in milliseconds since the driver started. */
  now(): number {
    const p = this.pending;
    if (p) {
      const t = p.sim.startMs + (performance.now() - p.wall.startMs) * this.speed;
      return Math.min(Math.max(t, p.sim.startMs), p.sim.endMs);
    }
    // Busy between steps: the next step starts where the last one ended.
    if (this.active) return this.simCursor;
    return Math.max(this.simCursor, (performance.now() - this.t0) * this.speed);
  }

  /** Number of requests submitted and not yet finished or cancelled. */
  get inFlight(): number {
    return this.sinks.size;
  }

  /** Queue a request (engine.add throws on a refused request) and make sure the loop runs. */
  submit(req: EngineRequest, sink: RequestSink): void {
    if (this.stopped) throw new Error('engine driver is stopped');
    this.engine.add(req);
    this.sinks.set(req.id, sink);
    this.wake();
  }

  /** Abort a request in the engine; its sink hears nothing more. */
  cancel(id: string): boolean {
    this.sinks.delete(id);
    const known = this.engine.abort(id);
    // Freed blocks may let a waiting request in.
    if (known) this.wake();
    return known;
  }

  /** Stop stepping. Requests stay in the engine; their sinks are dropped. */
  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.immediate) clearImmediate(this.immediate);
    this.timer = null;
    this.immediate = null;
    this.pending = null;
    this.sinks.clear();
  }

  /** Step again if idle (a submitted request, or blocks freed or KV arrived outside a step). */
  wake(): void {
    if (this.active || this.stopped) return;
    // Leaving idle: modelled time catches up with the wall clock, and the first step starts now.
    this.simCursor = this.now();
    this.cursor = Math.max(this.cursor, performance.now());
    this.active = true;
    // Requests arriving in the same tick join the same first step.
    this.immediate = setImmediate(this.run);
  }

  private readonly run = (): void => {
    this.timer = null;
    this.immediate = null;
    if (this.stopped) return;
    const sliceEnd = performance.now() + SLICE_MS;
    for (;;) {
      if (this.pending) {
        const now = performance.now();
        const wait = this.pending.wall.endMs - now;
        if (wait >= MIN_SLEEP_MS) {
          this.timer = setTimeout(this.run, wait);
          return;
        }
        const { step, sim } = this.pending;
        this.pending = null;
        this.deliver(step, sim);
        if (this.stopped) return;
        if (performance.now() > sliceEnd) {
          this.immediate = setImmediate(this.run);
          return;
        }
      }
      const step = this.engine.step();
      if (!step) {
        this.active = false;
        return;
      }
      // After a stall the wall-clock schedule is reset rather than caught up in a burst.
      const now = performance.now();
      if (this.cursor < now - MAX_LAG_MS) this.cursor = now;
      const wall = { startMs: this.cursor, endMs: this.cursor + step.durationMs / this.speed };
      const sim = { startMs: this.simCursor, endMs: this.simCursor + step.durationMs };
      this.cursor = wall.endMs;
      this.simCursor = sim.endMs;
      this.pending = { step, wall, sim };
    }
  };

  private deliver(step: StepResult, sim: StepTiming): void {
    const { startMs, endMs } = sim;
    const sinks = this.sinks;
    for (const s of step.started) sinks.get(s.id)?.onStarted?.(s.cachedPromptTokens, startMs);
    // Tokens arrive grouped by request in schedule order; finishes come after all tokens.
    const tokens = step.tokens;
    const finishedById = step.finished.length > 0 ? new Map(step.finished.map((f) => [f.id, f])) : null;
    let i = 0;
    while (i < tokens.length) {
      const id = tokens[i]!.id;
      let j = i + 1;
      while (j < tokens.length && tokens[j]!.id === id) j++;
      const ids = new Array<number>(j - i);
      for (let k = i; k < j; k++) ids[k - i] = tokens[k]!.token;
      i = j;
      const fin = finishedById?.get(id) ?? null;
      if (fin) finishedById!.delete(id);
      const sink = sinks.get(id);
      if (!sink) continue;
      if (fin) sinks.delete(id);
      sink.onOutput(ids, fin, endMs);
    }
    if (finishedById) {
      // Finished without a token in this step (e.g. a sequence that outgrew the cache).
      for (const fin of finishedById.values()) {
        const sink = sinks.get(fin.id);
        if (!sink) continue;
        sinks.delete(fin.id);
        sink.onOutput(EMPTY, fin, endMs);
      }
    }
    this.onStep?.(step, { startMs, endMs });
  }
}
