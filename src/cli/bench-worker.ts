/**
 * One policy of a `kvgate bench --jobs N` run, on a worker thread (bench-parallel.ts): the bench
 * rebuilt from the same flags, run for that policy only, its progress and probes posted back.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { runBench } from '../bench/run.js';
import { TraceError } from '../workload/loaders.js';
import { benchFromFlags, parseFlags } from './bench.js';
import type { BenchWorkerMessage } from './bench-parallel.js';

const post = (m: BenchWorkerMessage): void => parentPort!.postMessage(m);

async function main(): Promise<void> {
  const { argv, policy } = workerData as { argv: string[]; policy: string };
  const { opts } = benchFromFlags(parseFlags(argv));
  let lastPost = 0;
  const out = await runBench({
    ...opts,
    policies: [policy],
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
          post({ type: 'probe', line: `${name}: rate ×${+p.rate_scale.toFixed(4)} (${p.requests_per_s.toFixed(1)} req/s offered): attainment ${(p.attainment * 100).toFixed(1)}%${worst}` });
        }
      : undefined,
  });
  post({ type: 'done', out });
}

main().catch((e: unknown) => {
  const message = e instanceof Error ? e.message : String(e);
  if (e instanceof TraceError) post({ type: 'error', message, trace: { file: e.file, line: e.line, reason: message.slice(`${e.file}:${e.line}: `.length) } });
  else post({ type: 'error', message });
});
