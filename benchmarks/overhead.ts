/**
 * `npm run bench:overhead`: what the gateway adds on top of calling a worker directly.
 *
 * Targets, all in front of the same zero-delay stand-in upstream (so only the proxy is measured):
 *   direct  — the upstream itself;
 *   nginx   — nginx as a plain reverse proxy, one worker process, upstream keep-alive
 *             (installed from Debian's packages if missing and running as root);
 *   naive   — node:http + fetch pass-through of a dozen lines (benchmarks/overhead/naive-proxy.ts);
 *   kvgate  — `kvgate serve` with its full request pipeline (validation, tokenization, routing
 *             policy, metrics, logs).
 * Each round runs every target in turn (rotating the order) through three measurements: latency at
 * a fixed moderate rate (non-streaming), time to first byte and total time of a 64-chunk SSE
 * response at the same rate, and maximum throughput with a fixed number of requests outstanding.
 * The load generator runs in its own process. Figures are medians over rounds; "added" is the
 * target's figure minus direct's in the same round.
 */
import { spawn, spawnSync, fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { MaxResult, RateResult, Spec } from './overhead/client.js';

const here = dirname(fileURLToPath(import.meta.url));
const cliPath = join(here, '..', 'src', 'cli.js');

const HELP = `npm run bench:overhead -- [options]

Measures the latency and throughput kvgate adds in front of a worker, against nginx and a naive
Node pass-through, all in front of a zero-delay stand-in upstream on 127.0.0.1.

Options:
  --rounds N        rounds; each runs every target once (default 3)
  --seconds S       length of each measurement in seconds (default 2)
  --rate R          requests per second for the latency measurements (default 300)
  --concurrency C   requests outstanding for the throughput measurement (default 32)
  --targets LIST    comma-separated subset of direct,naive,nginx,kvgate (default: all)
  --policy NAME     kvgate's routing policy (default: the gateway's default, kvgate)
  --json FILE       also write the results as JSON
  -h, --help        this text
`;

interface Target {
  name: string;
  url: string;
  stop(): Promise<void>;
}

function median(xs: number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

function quantile(xs: number[], q: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const a = srv.address();
      const port = typeof a === 'object' && a ? a.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

async function waitFor(url: string, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < end) {
    try {
      const r = await fetch(url);
      await r.arrayBuffer();
      if (r.status === 200) return;
      last = `status ${r.status}`;
    } catch (e) {
      last = (e as Error).message;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} not ready after ${timeoutMs} ms (${last})`);
}

function stopChild(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
    setTimeout(() => child.kill('SIGKILL'), 3000).unref();
  });
}

async function forkServer(script: string, env: Record<string, string>): Promise<{ child: ChildProcess; port: number }> {
  const child = fork(join(here, 'overhead', script), [], { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (m: { port: number }) => resolve(m.port));
    child.once('exit', (code) => reject(new Error(`${script} exited with ${code}`)));
  });
  return { child, port };
}

function ensureNginx(): string | null {
  const which = spawnSync('sh', ['-c', 'command -v nginx || ls /usr/sbin/nginx 2>/dev/null'], { encoding: 'utf8' });
  const found = which.stdout.trim().split('\n')[0];
  if (found) return found;
  if (process.getuid?.() === 0 && existsSync('/usr/bin/apt-get')) {
    process.stderr.write('installing nginx-light from Debian packages...\n');
    const r = spawnSync('sh', ['-c', 'DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null 2>&1)']);
    if (r.status === 0 && existsSync('/usr/sbin/nginx')) return '/usr/sbin/nginx';
  }
  return null;
}

async function startNginx(bin: string, upstreamPort: number): Promise<Target> {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-nginx-'));
  const port = await freePort();
  const conf = `worker_processes 1;
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  keepalive_requests 100000;
  upstream up { server 127.0.0.1:${upstreamPort}; keepalive 128; keepalive_requests 100000; }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`;
  writeFileSync(join(dir, 'nginx.conf'), conf);
  const child = spawn(bin, ['-c', join(dir, 'nginx.conf'), '-p', dir], { stdio: 'ignore' });
  const url = `http://127.0.0.1:${port}`;
  await waitFor(url + '/health', 10_000);
  return {
    name: 'nginx',
    url,
    stop: async () => {
      await stopChild(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function startKvgate(upstreamPort: number, policy?: string): Promise<Target> {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-bench-'));
  const port = await freePort();
  const config = {
    listen: { host: '127.0.0.1', port },
    pools: [{ name: 'default', model: 'bench-model', workers: [{ url: `http://127.0.0.1:${upstreamPort}` }] }],
    ...(policy ? { policy: { name: policy } } : {}),
  };
  writeFileSync(join(dir, 'kvgate.json'), JSON.stringify(config));
  const child = spawn(process.execPath, [cliPath, 'serve', '--config', join(dir, 'kvgate.json')], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  await waitFor(url + '/ready', 15_000);
  return {
    name: 'kvgate',
    url,
    stop: async () => {
      await stopChild(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function measure<T>(spec: Spec): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(here, 'overhead', 'client.js'), JSON.stringify(spec)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.on('exit', (code) => {
      if (code !== 0) return reject(new Error(`load client exited with ${code}`));
      resolve(JSON.parse(out) as T);
    });
  });
}

interface RoundFigures {
  p50: number;
  p99: number;
  ttfb50: number;
  ttfb99: number;
  streamTotal50: number;
  rps: number;
  streamRps: number;
  errors: number;
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      rounds: { type: 'string', default: '3' },
      seconds: { type: 'string', default: '2' },
      rate: { type: 'string', default: '300' },
      concurrency: { type: 'string', default: '32' },
      targets: { type: 'string', default: 'direct,naive,nginx,kvgate' },
      json: { type: 'string' },
      policy: { type: 'string' },
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
  const concurrency = Number(values.concurrency);
  if (![rounds, durationMs, rate, concurrency].every((x) => Number.isFinite(x) && x > 0)) {
    process.stderr.write('bench:overhead: --rounds, --seconds, --rate and --concurrency take positive numbers\n');
    return 2;
  }

  const wanted = new Set(values.targets!.split(',').map((s) => s.trim()));
  wanted.add('direct'); // every "added" figure is relative to it
  const upstream = await forkServer('upstream.js', {});
  const targets: Target[] = [
    { name: 'direct', url: `http://127.0.0.1:${upstream.port}`, stop: () => stopChild(upstream.child) },
  ];
  if (wanted.has('naive')) {
    const naive = await forkServer('naive-proxy.js', { UPSTREAM_URL: `http://127.0.0.1:${upstream.port}` });
    targets.push({ name: 'naive', url: `http://127.0.0.1:${naive.port}`, stop: () => stopChild(naive.child) });
  }
  let nginxNote = '';
  if (wanted.has('nginx')) {
    const bin = ensureNginx();
    if (bin) targets.push(await startNginx(bin, upstream.port));
    else nginxNote = 'nginx not available: install nginx (Debian: nginx-light) to include it';
  }
  if (wanted.has('kvgate')) targets.push(await startKvgate(upstream.port, values.policy));

  const figures = new Map<string, RoundFigures[]>(targets.map((t) => [t.name, []]));
  try {
    for (let r = 0; r < rounds; r++) {
      const order = targets.map((_, i) => targets[(i + r) % targets.length]!);
      for (const t of order) {
        process.stderr.write(`round ${r + 1}/${rounds}: ${t.name}\n`);
        const plain = await measure<RateResult>({ mode: 'rate', url: t.url, stream: false, rate, durationMs });
        const sse = await measure<RateResult>({ mode: 'rate', url: t.url, stream: true, rate, durationMs });
        const max = await measure<MaxResult>({ mode: 'max', url: t.url, stream: false, concurrency, durationMs });
        const maxSse = await measure<MaxResult>({ mode: 'max', url: t.url, stream: true, concurrency, durationMs });
        figures.get(t.name)!.push({
          p50: quantile(plain.latencies, 0.5),
          p99: quantile(plain.latencies, 0.99),
          ttfb50: quantile(sse.ttfb, 0.5),
          ttfb99: quantile(sse.ttfb, 0.99),
          streamTotal50: quantile(sse.latencies, 0.5),
          rps: max.rps,
          streamRps: maxSse.rps,
          errors: plain.errors + sse.errors + max.errors + maxSse.errors,
        });
      }
    }
  } finally {
    for (const t of targets) await t.stop();
  }

  const direct = figures.get('direct')!;
  const added = (name: string, key: keyof RoundFigures): number =>
    median(figures.get(name)!.map((f, i) => f[key] - direct[i]![key]));
  const med = (name: string, key: keyof RoundFigures): number => median(figures.get(name)!.map((f) => f[key]));
  const nginxRps = figures.has('nginx') ? med('nginx', 'rps') : NaN;
  const naiveRps = figures.has('naive') ? med('naive', 'rps') : NaN;

  const rows = targets.map((t) => ({
    target: t.name,
    p50_ms: med(t.name, 'p50'),
    p99_ms: med(t.name, 'p99'),
    added_p50_ms: t.name === 'direct' ? 0 : added(t.name, 'p50'),
    added_p99_ms: t.name === 'direct' ? 0 : added(t.name, 'p99'),
    sse_ttfb_p50_ms: med(t.name, 'ttfb50'),
    added_sse_ttfb_p50_ms: t.name === 'direct' ? 0 : added(t.name, 'ttfb50'),
    sse_total_p50_ms: med(t.name, 'streamTotal50'),
    max_rps: med(t.name, 'rps'),
    max_sse_rps: med(t.name, 'streamRps'),
    rps_vs_direct: med(t.name, 'rps') / med('direct', 'rps'),
    rps_vs_nginx: med(t.name, 'rps') / nginxRps,
    rps_vs_naive: med(t.name, 'rps') / naiveRps,
    errors: figures.get(t.name)!.reduce((s, f) => s + f.errors, 0),
  }));

  const f = (x: number, d = 2): string => (Number.isFinite(x) ? x.toFixed(d) : '—');
  const lines = [
    `| target | p50 ms | p99 ms | added p50 | added p99 | SSE TTFB p50 | added TTFB | SSE total p50 | max req/s | max SSE req/s | × direct | × nginx | × naive | errors |`,
    `|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|`,
    ...rows.map(
      (r) =>
        `| ${r.target} | ${f(r.p50_ms)} | ${f(r.p99_ms)} | ${f(r.added_p50_ms)} | ${f(r.added_p99_ms)} | ${f(r.sse_ttfb_p50_ms)} | ${f(r.added_sse_ttfb_p50_ms)} | ${f(r.sse_total_p50_ms)} | ${f(r.max_rps, 0)} | ${f(r.max_sse_rps, 0)} | ${f(r.rps_vs_direct)} | ${f(r.rps_vs_nginx)} | ${f(r.rps_vs_naive)} | ${r.errors} |`,
    ),
  ];
  process.stdout.write(
    `\nGateway overhead: ${rounds} rounds × ${values.seconds} s, ${rate} req/s for latency, ${concurrency} outstanding for throughput\n\n` +
      lines.join('\n') +
      '\n',
  );
  if (nginxNote) process.stdout.write(`\n${nginxNote}\n`);

  const k = rows.find((r) => r.target === 'kvgate');
  if (!k) return 0;
  const checks: Array<[string, boolean]> = [
    [`added p50 ${f(k.added_p50_ms)} ms ≤ 0.5 ms`, k.added_p50_ms <= 0.5],
    [`added p99 ${f(k.added_p99_ms)} ms ≤ 1.5 ms`, k.added_p99_ms <= 1.5],
    [`added SSE time to first byte ${f(k.added_sse_ttfb_p50_ms)} ms ≤ 0.6 ms`, k.added_sse_ttfb_p50_ms <= 0.6],
    [`max throughput ${f(k.rps_vs_nginx)}× nginx ≥ 0.3×`, k.rps_vs_nginx >= 0.3],
    [`max throughput ${f(k.rps_vs_naive)}× naive pass-through ≥ 2×`, k.rps_vs_naive >= 2],
  ];
  process.stdout.write('\nkvgate targets:\n' + checks.map(([s, ok]) => `  ${ok ? 'met ' : 'MISSED'}  ${s}`).join('\n') + '\n');
  if (values.json) writeFileSync(values.json, JSON.stringify({ rounds, durationMs, rate, concurrency, rows }, null, 2));
  return 0;
}

main().then(
  (code) => (process.exitCode = code),
  (err: unknown) => {
    process.stderr.write(`bench:overhead: ${(err as Error).stack ?? String(err)}\n`);
    process.exitCode = 1;
  },
);
