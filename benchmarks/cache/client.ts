/**
 * Load generator for the cache benchmark, in its own process. Reads one spec (JSON) from argv,
 * sends requests open loop at a fixed rate and prints one JSON result line: per-request latency
 * (ms, warm-up excluded) and how many answers carried each x-kvgate-cache value.
 *
 *   hit:  the same temperature-0 request every time (filled before the clock starts);
 *   miss: a request never sent before every time (a counter and a run id in the prompt), so each
 *         one is looked up, missed, relayed and stored.
 */
import { randomUUID } from 'node:crypto';
import { Pool } from 'undici';

export interface CacheSpec {
  url: string;
  mode: 'hit' | 'miss';
  rate: number;
  durationMs: number;
}

export interface CacheResult {
  sent: number;
  errors: number;
  latencies: number[];
  headers: Record<string, number>;
}

const PATH = '/v1/chat/completions';
const run = randomUUID();

function body(i: number | null): string {
  return JSON.stringify({
    model: 'bench-model',
    messages: [
      { role: 'system', content: 'Answer in one sentence from the context.' },
      { role: 'user', content: i === null ? 'Context: caches keep answers. Question: what do caches keep?' : `Context: caches keep answers. Question ${run}-${i}: what do caches keep?` },
    ],
    max_tokens: 64,
    temperature: 0,
  });
}

async function once(pool: Pool, payload: string): Promise<{ ms: number; ok: boolean; cache: string }> {
  const t0 = performance.now();
  const res = await pool.request({ path: PATH, method: 'POST', headers: { 'content-type': 'application/json' }, body: payload });
  for await (const _ of res.body) {
    // drain
  }
  return { ms: performance.now() - t0, ok: res.statusCode === 200, cache: String(res.headers['x-kvgate-cache'] ?? 'none') };
}

async function main(spec: CacheSpec): Promise<CacheResult> {
  const pool = new Pool(spec.url, { connections: 32, keepAliveTimeout: 30_000 });
  const fixed = body(null);
  // Fill the entry (and warm the connections) before measuring.
  for (let i = 0; i < 20; i++) await once(pool, spec.mode === 'hit' ? fixed : body(-1 - i));
  const n = Math.max(10, Math.round((spec.rate * spec.durationMs) / 1000));
  const warm = Math.floor(n / 10);
  const interval = 1000 / spec.rate;
  const latencies: number[] = [];
  const headers: Record<string, number> = {};
  let errors = 0;
  const pending: Promise<void>[] = [];
  const start = performance.now();
  for (let i = 0; i < n; i++) {
    const wait = start + i * interval - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    pending.push(
      once(pool, spec.mode === 'hit' ? fixed : body(i)).then(
        (r) => {
          if (!r.ok) errors++;
          else if (i >= warm) latencies.push(r.ms);
          headers[r.cache] = (headers[r.cache] ?? 0) + 1;
        },
        () => void errors++,
      ),
    );
  }
  await Promise.all(pending);
  await pool.close();
  return { sent: n, errors, latencies, headers };
}

const spec = JSON.parse(process.argv[2] ?? '{}') as CacheSpec;
process.stdout.write(JSON.stringify(await main(spec)) + '\n');
