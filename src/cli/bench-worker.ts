/**
 * One policy of a `kvgate bench --jobs N` run, on a worker thread (bench-parallel.ts): the bench
 * rebuilt from the same flags, run for that policy only, its progress and probes posted back.
 *
 * With --capacity, threads the main thread lends this one (`lanes`, in memory it shares: how many
 * it may use besides its own) run the capacity search's next probes ahead, each on a thread of its own
 * started from this file with `probe` set: the probe's figures posted back, nothing else.
 */
import { parentPort, Worker, workerData } from 'node:worker_threads';
import { runBench, runProbe, type ProbeFigures, type RemoteProbe } from '../bench/run.js';
import { TraceError } from '../workload/loaders.js';
import { benchFromFlags, parseFlags } from './bench.js';
import type { BenchWorkerMessage } from './bench-parallel.js';

const post = (m: BenchWorkerMessage): void => parentPort!.postMessage(m);

interface Task {
  argv: string[];
  policy: string;
  /** Threads lent to this policy's capacity search besides its own (written by the main thread). */
  lanes?: Int32Array;
  /** Run only this capacity probe (a thread lent to a search). */
  probe?: { rateScale: number; isolated: boolean | undefined };
  /** Compute only the run-wide figures (the policy runs on the main thread: bench-parallel.ts). */
  wide?: boolean;
}

/** Probes of this policy's search running ahead on lent threads, against the lanes lent. */
class LentLanes {
  private running = 0;
  /** Probes started on lent threads. */
  started = 0;

  constructor(private readonly task: Task) {}

  start(rateScale: number, isolated: boolean | undefined): RemoteProbe | null {
    const lanes = this.task.lanes ? Atomics.load(this.task.lanes, 0) : 0;
    if (this.running >= lanes) return null;
    this.running++;
    this.started++;
    const w = new Worker(new URL(import.meta.url), { workerData: { argv: this.task.argv, policy: this.task.policy, probe: { rateScale, isolated } } satisfies Task });
    let done = false;
    const finish = (): void => {
      if (!done) this.running--;
      done = true;
    };
    const figures = new Promise<ProbeFigures>((resolve, reject) => {
      w.on('message', (m: BenchWorkerMessage) => {
        if (m.type === 'figures') resolve(m.figures);
        else if (m.type === 'error') reject(new Error(m.message));
      });
      w.on('error', reject);
      w.on('exit', (code) => {
        finish();
        reject(new Error(`the thread probing ×${rateScale} exited with code ${code}`));
      });
    });
    // A probe stopped unneeded is never awaited.
    figures.catch(() => undefined);
    return {
      figures,
      cancel: () => {
        finish();
        void w.terminate();
      },
    };
  }
}

async function main(): Promise<void> {
  const task = workerData as Task;
  const { opts } = benchFromFlags(parseFlags(task.argv));
  if (task.probe) {
    post({ type: 'figures', figures: await runProbe(opts, task.policy, task.probe.rateScale, task.probe.isolated) });
    return;
  }
  if (task.wide) {
    post({ type: 'done', out: await runBench({ ...opts, policies: [] }), probesAhead: 0 });
    return;
  }
  const lent = new LentLanes(task);
  let lastPost = 0;
  const out = await runBench({
    ...opts,
    policies: [task.policy],
    runWide: false,
    onPolicyStart: (name, scale) => post({ type: 'start', label: opts.capacity ? `${name} ×${+scale.toFixed(4)}` : name }),
    onProgress: (_name, arrivals) => {
      const now = performance.now();
      if (now - lastPost < 100) return;
      lastPost = now;
      post({ type: 'progress', arrivals });
    },
    onProbe: opts.capacity
      ? (name, p) => {
          const worst = p.worst_band_attainment !== undefined ? `, worst prompt band ${(p.worst_band_attainment * 100).toFixed(1)}%` : '';
          post({ type: 'probe', probe: p, line: `${name}: rate ×${+p.rate_scale.toFixed(4)} (${p.requests_per_s.toFixed(1)} req/s offered): attainment ${(p.attainment * 100).toFixed(1)}%${worst}` });
        }
      : undefined,
    ...(opts.capacity ? { remoteProbe: (_policy: string, scale: number, isolated: boolean | undefined) => lent.start(scale, isolated) } : {}),
  });
  post({ type: 'done', out, probesAhead: lent.started });
}

main().catch((e: unknown) => {
  const message = e instanceof Error ? e.message : String(e);
  if (e instanceof TraceError) post({ type: 'error', message, trace: { file: e.file, line: e.line, reason: message.slice(`${e.file}:${e.line}: `.length) } });
  else post({ type: 'error', message });
});
