/**
 * `kvgate bench --jobs N`: the policies of one bench on worker threads, at most N at a time, and
 * the run-wide figures on this thread meanwhile (with one policy too: they cost a pass over the
 * source's prompts, a fifth of a round-robin run).
 *
 * Each policy's runs (its plain run, its capacity probes, its runs without the cache or shared)
 * stay on one thread, in the order a serial bench makes them, on a fleet and a request stream
 * built from the same flags (bench-worker.ts): each policy's figures are the serial run's. Once
 * every policy has a thread, the threads left over run the capacity searches' next probes ahead
 * (a probe's figures are the same on any thread; the search takes the ones it would have run). This
 * thread computes the run-wide figures (ideal hit rate, work bound) meanwhile, and puts the
 * policies back in the order the flags name them.
 */
import { Worker } from 'node:worker_threads';
import { capacityRatios } from '../bench/capacity.js';
import { runBench, type BenchOptions, type BenchOutput, type ProbeFigures } from '../bench/run.js';
import { TraceError } from '../workload/loaders.js';

/** What a bench worker thread (bench-worker.ts) tells the main thread. */
export type BenchWorkerMessage =
  | { type: 'start'; label: string }
  | { type: 'progress'; arrivals: number }
  | { type: 'probe'; line: string }
  /** `probesAhead`: capacity probes this policy's search ran on lent threads. */
  | { type: 'done'; out: BenchOutput; probesAhead: number }
  /** A capacity probe run on a lent thread (bench-worker.ts): its figures. */
  | { type: 'figures'; figures: ProbeFigures }
  /** `trace`: a malformed trace row (TraceError), with its file and line. */
  | { type: 'error'; message: string; trace?: { file: string; line: number; reason: string } };

/** A status line on stderr for runs in parallel, redrawn at most every 200 ms. */
class ParallelProgress {
  private readonly running = new Map<string, { done: number; label: string }>();
  private finished = 0;
  private lastDraw = 0;
  private readonly started = performance.now();
  /** Requests done over the finished runs of the plain kind (for the ETA). */
  private doneRequests = 0;

  /** `total` requests per plain run (unknown for a trace without --limit). */
  constructor(
    private readonly runs: number,
    private readonly total: number | undefined,
    private readonly stream: NodeJS.WriteStream = process.stderr,
  ) {}

  start(policy: string, label: string): void {
    this.running.set(policy, { done: 0, label });
    this.draw(true);
  }

  update(policy: string, done: number): void {
    const r = this.running.get(policy);
    if (r) r.done = done;
    this.draw(false);
  }

  /** One policy's every run is done. */
  end(policy: string): void {
    this.running.delete(policy);
    this.finished++;
    if (this.total !== undefined) this.doneRequests += this.total;
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

  private draw(force: boolean): void {
    const now = performance.now();
    if (!force && now - this.lastDraw < 200) return;
    this.lastDraw = now;
    const secs = (now - this.started) / 1000;
    const parts = [...this.running.values()].map((r) => (this.total ? `${r.label} ${Math.floor((100 * Math.min(r.done, this.total)) / this.total)}%` : `${r.label} ${r.done}`));
    let eta = '';
    if (this.total) {
      // Requests of the policies' plain runs done so far, against all of them (probes not counted).
      let done = this.doneRequests;
      for (const r of this.running.values()) done += Math.min(r.done, this.total);
      const all = this.total * this.runs;
      if (done > 0 && done < all) eta = `, ETA ${Math.round((secs * (all - done)) / done)} s`;
    }
    this.stream.write(`\r${this.finished}/${this.runs} policies done; ${parts.join(', ')} (${secs.toFixed(1)} s${eta})\x1b[K`);
  }
}

/**
 * runBench(opts) with its policies on up to `jobs` worker threads, each rebuilding the bench from
 * `argv` (the command's flags, as parsed into `opts`). `progressTotal`: draw a status line, with
 * this many requests per run (null: none). `stats` counts the capacity probes run ahead.
 */
export async function runBenchParallel(
  argv: readonly string[],
  opts: BenchOptions,
  jobs: number,
  progressTotal: number | undefined | null,
  stats?: { probesAhead: number },
): Promise<BenchOutput> {
  const names = opts.policies;
  const progress = progressTotal === null ? null : new ParallelProgress(names.length, progressTotal);
  const outputs = new Map<string, BenchOutput>();
  const queue = [...names];
  const workerUrl = new URL('./bench-worker.js', import.meta.url);
  const threads = new Set<Worker>();
  // Once every policy has a thread, the lanes left over are lent to the running capacity searches,
  // shared evenly, to run their next probes ahead (bench-worker.ts).
  // A policy's thread reads its share from shared memory: it runs the simulation without yielding
  // to its event loop for long stretches, so a message could wait for minutes.
  const lent = new Map<Worker, Int32Array>();
  const lend = (): void => {
    if (!opts.capacity || queue.length > 0 || threads.size === 0) return;
    const spare = Math.max(0, jobs - threads.size);
    let i = 0;
    for (const w of threads) Atomics.store(lent.get(w)!, 0, Math.floor(spare / threads.size) + (i++ < spare % threads.size ? 1 : 0));
  };
  let failed = false;
  const runOne = (policy: string): Promise<void> =>
    new Promise((resolve, reject) => {
      const lanes = new Int32Array(new SharedArrayBuffer(4));
      const w = new Worker(workerUrl, { workerData: { argv: [...argv], policy, lanes } });
      threads.add(w);
      lent.set(w, lanes);
      lend();
      w.once('exit', () => {
        threads.delete(w);
        lent.delete(w);
        lend();
      });
      let settled = false;
      w.on('message', (m: BenchWorkerMessage) => {
        switch (m.type) {
          case 'start':
            progress?.start(policy, m.label);
            break;
          case 'progress':
            progress?.update(policy, m.arrivals);
            break;
          case 'probe':
            if (progress) progress.note(m.line);
            else if (opts.onProbe) process.stderr.write(`${m.line}\n`);
            break;
          case 'done':
            outputs.set(policy, m.out);
            if (stats) stats.probesAhead += m.probesAhead;
            progress?.end(policy);
            settled = true;
            resolve();
            break;
          case 'figures':
            break;
          case 'error':
            settled = true;
            reject(m.trace ? new TraceError(m.trace.file, m.trace.line, m.trace.reason) : new Error(m.message));
            break;
        }
      });
      w.on('error', (e) => {
        if (!settled) reject(e);
        settled = true;
      });
      w.on('exit', (code) => {
        if (!settled) reject(new Error(`the thread running ${policy} exited with code ${code}`));
        settled = true;
      });
    });
  const lanes = Array.from({ length: Math.min(jobs, names.length) }, async () => {
    for (let p = queue.shift(); p !== undefined && !failed; p = queue.shift()) await runOne(p);
  });
  // The run-wide figures on this thread while the policies run on theirs.
  const wide = runBench({ ...opts, policies: [], onPolicyStart: undefined, onProgress: undefined, onPolicyDone: undefined, onProbe: undefined });
  // Its failure (a bad trace row) is read below, after the policies' (the same row fails them).
  wide.catch(() => undefined);
  try {
    await Promise.all(lanes);
  } catch (e) {
    // One policy failed: the others' threads stop with it.
    failed = true;
    for (const w of threads) void w.terminate();
    throw e;
  } finally {
    progress?.clear();
  }
  const out = await wide;
  const parts = names.map((n) => outputs.get(n)!);
  const r = out.results;
  r.policies = parts.flatMap((p) => p.results.policies);
  r.offered_rps = parts[0]!.results.offered_rps;
  if (r.capacity) Object.assign(r.capacity, capacityRatios(r.policies.map((p) => ({ name: p.name, rate_scale: p.capacity?.rate_scale ?? null }))));
  out.curves = parts.flatMap((p) => p.curves);
  return out;
}
