/**
 * Load generator for the overhead benchmark, run in its own process so it does not share an event
 * loop with any server it measures. Reads one measurement spec (JSON) from argv, prints one JSON
 * result line on stdout.
 *
 *   rate: open-loop arrivals at a fixed rate; per-request latency (non-streaming) or time to first
 *         body byte and total time (streaming). The first 10% of requests are warm-up.
 *   max:  closed loop with `concurrency` requests always outstanding; completed requests per second.
 */
import { Pool } from 'undici';

export interface RateSpec {
  mode: 'rate';
  url: string;
  stream: boolean;
  rate: number;
  durationMs: number;
}
export interface MaxSpec {
  mode: 'max';
  url: string;
  stream: boolean;
  concurrency: number;
  durationMs: number;
}
export type Spec = RateSpec | MaxSpec;

export interface RateResult {
  sent: number;
  errors: number;
  /** Milliseconds: total latency (non-streaming), or [ttfb, total] for streams. */
  latencies: number[];
  ttfb: number[];
}
export interface MaxResult {
  completed: number;
  errors: number;
  rps: number;
}

const PATH = '/v1/chat/completions';
function body(stream: boolean): string {
  return JSON.stringify({
    model: 'bench-model',
    messages: [{ role: 'user', content: 'Say something short about caches.' }],
    max_tokens: 64,
    stream,
  });
}

async function once(pool: Pool, payload: string): Promise<{ ttfb: number; total: number; ok: boolean }> {
  const t0 = performance.now();
  const res = await pool.request({
    path: PATH,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: payload,
  });
  let ttfb = -1;
  for await (const _chunk of res.body) {
    if (ttfb < 0) ttfb = performance.now() - t0;
  }
  const total = performance.now() - t0;
  return { ttfb, total, ok: res.statusCode === 200 };
}

async function runRate(spec: RateSpec): Promise<RateResult> {
  const pool = new Pool(spec.url, { connections: 64, keepAliveTimeout: 30_000 });
  const payload = body(spec.stream);
  const n = Math.max(10, Math.round((spec.rate * spec.durationMs) / 1000));
  const warm = Math.floor(n / 10);
  const interval = 1000 / spec.rate;
  const latencies: number[] = [];
  const ttfb: number[] = [];
  let errors = 0;
  const pending: Promise<void>[] = [];
  const start = performance.now();
  for (let i = 0; i < n; i++) {
    const due = start + i * interval;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    pending.push(
      once(pool, payload).then(
        (r) => {
          if (!r.ok) errors++;
          else if (i >= warm) {
            latencies.push(r.total);
            ttfb.push(r.ttfb);
          }
        },
        () => {
          errors++;
        },
      ),
    );
  }
  await Promise.all(pending);
  await pool.close();
  return { sent: n, errors, latencies, ttfb };
}

async function runMax(spec: MaxSpec): Promise<MaxResult> {
  const pool = new Pool(spec.url, { connections: spec.concurrency, keepAliveTimeout: 30_000 });
  const payload = body(spec.stream);
  // Warm the connections up before the clock starts.
  await Promise.all(Array.from({ length: spec.concurrency }, () => once(pool, payload).catch(() => undefined)));
  let completed = 0;
  let errors = 0;
  const end = performance.now() + spec.durationMs;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: spec.concurrency }, async () => {
      while (performance.now() < end) {
        try {
          const r = await once(pool, payload);
          if (r.ok) completed++;
          else errors++;
        } catch {
          errors++;
        }
      }
    }),
  );
  const elapsed = performance.now() - start;
  await pool.close();
  return { completed, errors, rps: (completed * 1000) / elapsed };
}

const spec = JSON.parse(process.argv[2] ?? '{}') as Spec;
const result = spec.mode === 'rate' ? await runRate(spec) : await runMax(spec);
process.stdout.write(JSON.stringify(result) + '\n');
