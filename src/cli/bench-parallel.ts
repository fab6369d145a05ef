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
 *
 * One policy without --capacity swaps the two: the policy runs on this thread, which has loaded
 * the simulator already, and the run-wide figures on a worker thread, whose start-up (loading the
 * modules again, a quarter of a second) then overlaps the run instead of preceding it.
 */
import { Worker } from 'node:worker_threads';
import { capacityRatios, capacitySettings, type CapacityProbe } from '../bench/capacity.js';
import { runBench, type BenchOptions, type BenchOutput, type ProbeFigures } from '../bench/run.js';
import { TraceError } from '../workload/loaders.js';
import { ParallelProgress } from './parallel-progress.js';

/** What a bench worker thread (bench-worker.ts) tells the main thread. */
export type BenchWorkerMessage =
  | { type: 'start'; label: string }
  | { type: 'progress'; arrivals: number }
  /** A capacity probe the policy's search judged: its figures, and the line that reports them. */
  | { type: 'probe'; line: string; probe: CapacityProbe }
  /** `probesAhead`: capacity probes this policy's search ran on lent threads. */
  | { type: 'done'; out: BenchOutput; probesAhead: number }
  /** A capacity probe run on a lent thread (bench-worker.ts): its figures. */
  | { type: 'figures'; figures: ProbeFigures }
  /** `trace`: a malformed trace row (TraceError), with its file and line. */
  | { type: 'error'; message: string; trace?: { file: string; line: number; reason: string } };

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
  if (names.length === 1 && !opts.capacity) return runPolicyHere(argv, opts);
  const progress = progressTotal === null ? null : new ParallelProgress(names.length, progressTotal, jobs, opts.capacity ? capacitySettings(opts.capacity) : null);
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
            progress?.probe(policy, m.probe);
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
  return merged(await wide, names.map((n) => outputs.get(n)!));
}

/** The run-wide output with the policies' parts in it, in the order given. */
function merged(out: BenchOutput, parts: BenchOutput[]): BenchOutput {
  const r = out.results;
  r.policies = parts.flatMap((p) => p.results.policies);
  r.offered_rps = parts[0]!.results.offered_rps;
  if (r.capacity) Object.assign(r.capacity, capacityRatios(r.policies.map((p) => ({ name: p.name, rate_scale: p.capacity?.rate_scale ?? null }))));
  out.curves = parts.flatMap((p) => p.curves);
  return out;
}

/**
 * The one policy of `opts` on this thread (its progress drawn by `opts`' own callbacks, as in a
 * serial bench) and the run-wide figures on a worker thread meanwhile.
 */
async function runPolicyHere(argv: readonly string[], opts: BenchOptions): Promise<BenchOutput> {
  const w = new Worker(new URL('./bench-worker.js', import.meta.url), { workerData: { argv: [...argv], policy: opts.policies[0], wide: true } });
  const wide = new Promise<BenchOutput>((resolve, reject) => {
    w.on('message', (m: BenchWorkerMessage) => {
      if (m.type === 'done') resolve(m.out);
      else if (m.type === 'error') reject(m.trace ? new TraceError(m.trace.file, m.trace.line, m.trace.reason) : new Error(m.message));
    });
    w.on('error', reject);
    // After 'done' this rejects a settled promise: nothing happens.
    w.on('exit', (code) => reject(new Error(`the thread computing the run-wide figures exited with code ${code}`)));
  });
  // Its failure (a bad trace row) is read after the policy's (the same row fails it).
  wide.catch(() => undefined);
  let part: BenchOutput;
  try {
    part = await runBench({ ...opts, runWide: false });
  } catch (e) {
    void w.terminate();
    throw e;
  }
  return merged(await wide, [part]);
}
