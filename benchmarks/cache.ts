/**
 * `npm run bench -- cache`: the response cache's hit path against its miss path, per store.
 *
 * One zero-delay stand-in upstream (benchmarks/overhead/upstream.ts), and in front of it one
 * `kvgate serve` per store with the response cache on: in memory, and in a real redis-server this
 * benchmark starts on a free loopback port (skipped, saying so, if redis-server is missing). A
 * load generator in its own process (benchmarks/cache/client.ts) sends temperature-0 chat
 * requests at a fixed rate: the same request every time (hits), or a new one every time (misses:
 * lookup, relay to the upstream, store). Each round measures every store in both modes; figures
 * are medians over rounds of each measurement's p50 and p99:
 *   - client: latency as the load generator sees it (loopback HTTP included);
 *   - gateway: the gateway's own time per request, arrival to response written (its request log);
 *   - CPU: the gateway process's CPU time (user + system, /proc) per request of the measurement —
 *     less sensitive than tail latency to other processes competing for the machine's cores.
 * Targets, on the gateway's p99 of hits: in memory under 1 ms, Redis under 3 ms.
 *
 * Placement (2+ cores): the gateway's event-loop thread gets the last core, its helper threads, the
 * load generator and the upstream share the others (CorePlan.isolateEventLoop in harness.ts says
 * why; `--pin-process` pins the whole gateway to its core instead). Redis runs on the event loop's
 * core by default: a lookup is a ping-pong, Redis works while the event loop waits for it, so the
 * two share a core without competing — as a Redis on a host of its own would be ready when asked.
 * On the load generator's core its every wake-up waits behind the load generator instead
 * (`--redis-cpu load`: p99 ~4 ms on the 2-core development machine; `any` lets the scheduler choose).
 *
 * Prints one line per store.
 */
import { fork, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { benchArgs } from './args.js';
import type { CacheResult, CacheSpec } from './cache/client.js';
import { CorePlan, freePort, median, processCpuMs, quantile, stopChild, waitReady } from './harness.js';

const here = dirname(fileURLToPath(import.meta.url));
const cliPath = join(here, '..', 'src', 'cli.js');

const HELP = `npm run bench -- cache [options]

Latency of the response cache's hit path against its miss path, in memory and in Redis, through
kvgate serve in front of a zero-delay stand-in upstream, with a load generator in its own process.

Options:
  --rounds N      rounds; each measures every store, hits and misses (default 3)
  --seconds S     length of each measurement in seconds (default 3)
  --rate R        requests per second (default 300)
  --stores LIST   memory,redis (default both)
  --json FILE     also write the results as JSON
  --no-pin        do not pin anything (see benchmarks/harness.ts)
  --pin-process   pin the whole gateway process to its core (by default only its event-loop
                  thread has that core; its V8 and libuv helper threads go with the load)
  --redis-cpu W   where redis-server runs: gateway (default: the event loop's core, which
                  is idle while it waits for Redis), load (with the load generator) or any
  -h, --help      this text
`;


const TARGET_P99_MS: Record<string, number> = { memory: 1, redis: 3 };





async function startRedis(cores: CorePlan, where: string): Promise<{ url: string; stop(): Promise<void> } | null> {
  if (spawnSync('redis-server', ['--version']).status !== 0) return null;
  const port = await freePort();
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loglevel', 'warning'];
  const child = where === 'any' ? spawn('redis-server', args, { stdio: 'ignore' }) : cores.spawn(where === 'gateway' ? 'under-test' : 'load', 'redis-server', args, { stdio: 'ignore' });
  const end = Date.now() + 10_000;
  for (;;) {
    const ok = spawnSync('redis-cli', ['-p', String(port), 'ping'], { encoding: 'utf8' }).stdout?.trim() === 'PONG';
    if (ok) break;
    if (Date.now() > end) throw new Error('redis-server did not start');
    await new Promise((r) => setTimeout(r, 50));
  }
  return { url: `redis://127.0.0.1:${port}`, stop: () => stopChild(child) };
}

interface Gateway {
  store: string;
  pid: number | undefined;
  url: string;
  /** CPU time the gateway process has used so far, ms (null where /proc is not available). */
  cpuMs(): number | null;
  /** Gateway-side durations (ms) of requests by cache result, from its request log. */
  take(): Record<string, number[]>;
  stop(): Promise<void>;
}

async function startKvgate(cores: CorePlan, store: string, upstreamPort: number, redisUrl?: string): Promise<Gateway> {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-cache-bench-'));
  const port = await freePort();
  const config = {
    listen: { host: '127.0.0.1', port },
    pools: [{ name: 'default', model: 'bench-model', workers: [{ url: `http://127.0.0.1:${upstreamPort}` }] }],
    cache: { enabled: true, store, ...(redisUrl ? { redis: { url: redisUrl } } : {}) },
  };
  writeFileSync(join(dir, 'kvgate.json'), JSON.stringify(config));
  const child = cores.spawn('under-test', process.execPath, [cliPath, 'serve', '--config', join(dir, 'kvgate.json')], { stdio: ['ignore', 'pipe', 'inherit'] });
  let buf = '';
  let seen: Record<string, number[]> = {};
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (d: string) => {
    buf += d;
    let i: number;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (!line.includes('"msg":"request"')) continue;
      try {
        const o = JSON.parse(line) as { durationMs?: number; cache?: string };
        if (typeof o.durationMs === 'number') (seen[o.cache ?? 'none'] ??= []).push(o.durationMs);
      } catch {
        // not a log line
      }
    }
  });
  const url = `http://127.0.0.1:${port}`;
  await waitReady(url + '/ready', 15_000);
  return {
    store,
    pid: child.pid,
    url,
    cpuMs: () => processCpuMs(child.pid),
    take: () => {
      const s = seen;
      seen = {};
      return s;
    },
    stop: async () => {
      await stopChild(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}


function measure(cores: CorePlan, spec: CacheSpec): Promise<CacheResult> {
  return new Promise((resolve, reject) => {
    const child = cores.spawn('load', process.execPath, [join(here, 'cache', 'client.js'), JSON.stringify(spec)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out) as CacheResult) : reject(new Error(`load client exited with ${code}`))));
  });
}

interface Figures {
  p50: number;
  p99: number;
  /** Gateway CPU ms per request (NaN when unknown). */
  cpu: number;
}

async function main(): Promise<number> {
  const { values } = benchArgs('cache', {
    options: {
      rounds: { type: 'string', default: '3' },
      seconds: { type: 'string', default: '3' },
      rate: { type: 'string', default: '300' },
      stores: { type: 'string', default: 'memory,redis' },
      json: { type: 'string' },
      'no-pin': { type: 'boolean', default: false },
      'pin-process': { type: 'boolean', default: false },
      'redis-cpu': { type: 'string', default: 'gateway' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const rounds = Number(values.rounds);
  const durationMs = Number(values.seconds) * 1000;
  const rate = Number(values.rate);
  if (![rounds, durationMs, rate].every((x) => Number.isFinite(x) && x > 0)) {
    process.stderr.write('bench cache: --rounds, --seconds and --rate take positive numbers\n');
    return 2;
  }
  if (!['gateway', 'load', 'any'].includes(values['redis-cpu'])) {
    process.stderr.write(`bench cache: --redis-cpu takes gateway, load or any, got '${values['redis-cpu']}'\n`);
    return 2;
  }
  const wanted = values.stores.split(',').map((s) => s.trim());
  for (const s of wanted) {
    if (s !== 'memory' && s !== 'redis') {
      process.stderr.write(`bench cache: unknown store '${s}' (memory, redis)\n`);
      return 2;
    }
  }

  const cores = new CorePlan(!values['no-pin']);
  const upstream = fork(join(here, 'overhead', 'upstream.js'), [], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  cores.pin('load', upstream.pid);
  cores.pin('load', process.pid);
  const upstreamPort = await new Promise<number>((resolve, reject) => {
    upstream.once('message', (m: { port: number }) => resolve(m.port));
    upstream.once('exit', (code) => reject(new Error(`upstream exited with ${code}`)));
  });
  const gateways: Gateway[] = [];
  let redis: Awaited<ReturnType<typeof startRedis>> = null;
  const notes: string[] = [];
  try {
    if (wanted.includes('memory')) gateways.push(await startKvgate(cores, 'memory', upstreamPort));
    if (wanted.includes('redis')) {
      redis = await startRedis(cores, values['redis-cpu']);
      if (redis) gateways.push(await startKvgate(cores, 'redis', upstreamPort, redis.url));
      else notes.push('redis: skipped (redis-server is not installed; Debian: apt-get install redis-server)');
    }
    const loadBefore = loadavg()[0]!;
    const client: Record<string, Record<'hit' | 'miss', Figures[]>> = {};
    const gateway: Record<string, Record<'hit' | 'miss', Figures[]>> = {};
    const checks: Record<string, Record<string, number>> = {};
    for (let round = 0; round < rounds; round++) {
      for (const g of round % 2 === 0 ? gateways : [...gateways].reverse()) {
        for (const mode of ['hit', 'miss'] as const) {
          if (!values['pin-process']) cores.isolateEventLoop(g.pid);
          g.take();
          const cpu0 = g.cpuMs();
          const r = await measure(cores, { url: g.url, mode, rate, durationMs });
          const cpu1 = g.cpuMs();
          // The client's warm-up requests (20) count too.
          const cpuPer = cpu0 !== null && cpu1 !== null ? (cpu1 - cpu0) / (r.sent + 20) : NaN;
          await new Promise((res) => setTimeout(res, 300)); // the gateway's log lines are written in batches
          const logged = g.take();
          const key = `${g.store}:${mode}`;
          checks[key] ??= {};
          for (const [h, n] of Object.entries(r.headers)) checks[key][h] = (checks[key][h] ?? 0) + n;
          checks[key].errors = (checks[key].errors ?? 0) + r.errors;
          ((client[g.store] ??= { hit: [], miss: [] })[mode]).push({ p50: quantile(r.latencies, 0.5), p99: quantile(r.latencies, 0.99), cpu: cpuPer });
          // Gateway side: the measured requests only (the client's warm-up and first 10% left out).
          const own = logged[mode] ?? [];
          const kept = own.slice(Math.floor(own.length / 10));
          ((gateway[g.store] ??= { hit: [], miss: [] })[mode]).push({ p50: quantile(kept, 0.5), p99: quantile(kept, 0.99), cpu: cpuPer });
        }
      }
    }
    const f = (x: number) => x.toFixed(2);
    const results: Record<string, unknown> = {};
    const loadAfter = loadavg()[0]!;
    // Other processes on the machine show up in every tail figure: say how busy it was.
    process.stdout.write(
      `\nbench cache: ${rate} req/s, ${rounds} round(s) × ${values.seconds} s per measurement, medians over rounds (ms); ` +
        `machine load average ${loadBefore.toFixed(1)} → ${loadAfter.toFixed(1)} on ${cores.cores} cores; ${cores.describe(!values['pin-process'])}; redis-server: ${values['redis-cpu'] === 'any' ? 'not pinned' : `with the ${values['redis-cpu']}`}\n`,
    );
    for (const g of gateways) {
      const s = g.store;
      const med = (xs: Figures[], k: keyof Figures) => median(xs.map((x) => x[k]));
      const gh = { p50: med(gateway[s]!.hit, 'p50'), p99: med(gateway[s]!.hit, 'p99'), cpu: med(gateway[s]!.hit, 'cpu') };
      const gm = { p50: med(gateway[s]!.miss, 'p50'), p99: med(gateway[s]!.miss, 'p99'), cpu: med(gateway[s]!.miss, 'cpu') };
      const ch = { p50: med(client[s]!.hit, 'p50'), p99: med(client[s]!.hit, 'p99') };
      const cm = { p50: med(client[s]!.miss, 'p50'), p99: med(client[s]!.miss, 'p99') };
      const target = TARGET_P99_MS[s]!;
      const met = gh.p99 < target;
      const hitCheck = checks[`${s}:hit`]!;
      const missCheck = checks[`${s}:miss`]!;
      process.stdout.write(
        `${s.padEnd(6)}  hit: gateway p50 ${f(gh.p50)} p99 ${f(gh.p99)}, client p50 ${f(ch.p50)} p99 ${f(ch.p99)}, CPU ${f(gh.cpu)}/req` +
          `  |  miss: gateway p50 ${f(gm.p50)} p99 ${f(gm.p99)}, client p50 ${f(cm.p50)} p99 ${f(cm.p99)}, CPU ${f(gm.cpu)}/req` +
          `  |  hit p99 target < ${target} ms at the gateway: ${met ? 'met' : 'MISSED'}` +
          `  (answers: hit ${hitCheck.hit ?? 0}/${Object.values(hitCheck).reduce((a, b) => a + b, 0) - (hitCheck.errors ?? 0)}, miss ${missCheck.miss ?? 0}, errors ${(hitCheck.errors ?? 0) + (missCheck.errors ?? 0)})\n`,
      );
      results[s] = { hit: { gateway: gh, client: ch }, miss: { gateway: gm, client: cm }, target_hit_p99_ms: target, met, answers: { hit: hitCheck, miss: missCheck } };
    }
    for (const n of notes) process.stdout.write(`${n}\n`);
    if (values.json) {
      const out = { rate, rounds, seconds: Number(values.seconds), load_average: [loadBefore, loadAfter], pinning: cores.describe(!values['pin-process']), redis_cpu: values['redis-cpu'], results };
      writeFileSync(values.json, JSON.stringify(out, null, 2) + '\n');
    }
    return 0;
  } finally {
    for (const g of gateways) await g.stop();
    await redis?.stop();
    await stopChild(upstream);
  }
}

main().then(
  (code) => (process.exitCode = code),
  (e: Error) => {
    process.stderr.write(`bench cache: ${e.stack ?? e.message}\n`);
    process.exitCode = 1;
  },
);
