/**
 * `npm run bench -- overhead`: what the gateway's request path costs, beside nginx and a bare Node hop.
 *
 * Targets, all in front of the same stand-in worker (so only the proxy is measured):
 *   direct   — the stand-in itself: nginx with the echo module (C, a few µs per request) where
 *              nginx and Debian's libnginx-mod-http-echo are installed, else a Node stand-in
 *              (slower than nginx: then every ratio flatters the proxies, and the output says so);
 *   nginx    — nginx as a plain reverse proxy, one worker process, upstream keep-alive;
 *   nodehop  — a bare node:http pass-through (benchmarks/overhead/nodehop.ts): the floor for any
 *              Node.js gateway;
 *   undicihop — kvgate's own HTTP stack and nothing else: node:http in, undici dispatch out
 *              (benchmarks/overhead/undicihop.ts); kvgate minus this is what its pipeline costs;
 *   poolhop   — the same hop with kvgate's own relay client (src/http/upstream-pool.ts) for undici;
 *   partshop  — poolhop plus kvgate's parts for a chat request called in one straight line
 *              (benchmarks/overhead/partshop.ts: validation, tokenizing, the kvgate policy, metrics,
 *              a request line): what kvgate's path would cost if its structure were free;
 *   kvgate   — `kvgate serve` with its full pipeline (validation, tokenization, the routing
 *              policy, metrics, request logs on).
 * Load: wrk (C) where installed, the Node client otherwise (which caps near 25k req/s and so
 * flatters every ratio above that). Each round runs every target in turn, order rotated:
 *   lat  — latency at a moderate rate: 4 connections, each waiting 20 ms before each request
 *          (≈200 req/s): p50 / p99, and the CPU per request at that rate (an idle process on a
 *          cold core spends several times what it spends per request when saturated);
 *   sse  — a 64-event stream at 200 req/s (Node client): time to first body byte and total;
 *   tp   — maximum throughput, 64 connections in a closed loop: req/s, and the target's CPU time
 *          per request (its processes' user + system time, from /proc).
 * A 2 s warm-up per target per round is discarded (the JIT). Figures are medians over rounds;
 * "added" is the target's figure minus direct's in the same round.
 */
import { writeFileSync } from 'node:fs';
import { benchArgs } from './args.js';
import { median, quantile, treeCpuMs } from './harness.js';
import type { MaxResult, RateResult } from './overhead/client.js';
import { proxyConf } from './overhead/nginx.js';
import { forkServer, nodeClient, setUpTools, startKvgate, startNginx, startStandIn, wrk, type Target } from './overhead/targets.js';

const HELP = `npm run bench -- overhead [options]

What kvgate's request path costs in front of a worker, beside nginx and a bare node:http
pass-through (nodehop), all in front of the same stand-in worker on 127.0.0.1. Uses wrk and an
nginx stand-in worker (C) where installed (Debian: apt-get install wrk nginx libnginx-mod-http-echo;
installed automatically when running as root), Node fallbacks otherwise.

Options:
  --rounds N        rounds; each runs every target once (default 3)
  --seconds S       length of each measurement in seconds (default 5)
  --targets LIST    comma-separated subset of direct,nginx,nodehop,undicihop,poolhop,partshop,
                    kvgate (default: all; undicihop is node:http + undici alone, poolhop node:http
                    + kvgate's own relay client alone, partshop poolhop + kvgate's parts for a
                    chat request in one straight line: no context, stages, timers or retries)
  --policy NAME     kvgate's routing policy (default: the gateway's default, kvgate)
  --ablate          also run kvgate with parts of its pipeline off, to show what each costs:
                    kvgate-rr (policy round-robin: no tokenization, no prefix index),
                    kvgate-nolog (request logs off), kvgate-noadmission (KV-pressure
                    admission off), kvgate-bare (all three off, and outlier detection)
  --no-install      do not install missing tools even as root
  --json FILE       also write the results as JSON
  -h, --help        this text
`;

/** --ablate: kvgate with parts of its pipeline switched off (config merged over the benchmark's). */
const ABLATIONS: Record<string, Record<string, unknown>> = {
  'kvgate-rr': { policy: { name: 'round-robin' } },
  'kvgate-nolog': { log: { level: 'warn' } },
  'kvgate-noadmission': { admission: { enabled: false } },
  'kvgate-bare': { policy: { name: 'round-robin' }, log: { level: 'warn' }, admission: { enabled: false }, outlier: { enabled: false } },
};

const LAT_CONNECTIONS = 4;
const LAT_DELAY_MS = 20;
const TP_CONNECTIONS = 64;
const SSE_RATE = 200;
const WARMUP_S = 2;

const cpuOf = (t: Target): number => t.pids.reduce((s, p) => s + (treeCpuMs(p) ?? NaN), 0);

interface Round {
  p50: number;
  p99: number;
  ttfb50: number;
  streamTotal50: number;
  rps: number;
  cpuUs: number;
  /** CPU per request at the paced (≈200 req/s) load, µs: what a request costs an idle process. */
  pacedCpuUs: number;
  errors: number;
}

async function measureTarget(t: Target, useWrk: boolean, seconds: number): Promise<Round> {
  const durationMs = seconds * 1000;
  if (useWrk) await wrk(t.url, TP_CONNECTIONS, WARMUP_S, 0);
  else await nodeClient<MaxResult>({ mode: 'max', url: t.url, stream: false, concurrency: TP_CONNECTIONS, durationMs: WARMUP_S * 1000 });
  let p50: number, p99: number, rps: number, cpuUs: number, pacedCpuUs: number, errors: number;
  if (useWrk) {
    const p0 = cpuOf(t);
    const lat = await wrk(t.url, LAT_CONNECTIONS, seconds, LAT_DELAY_MS);
    pacedCpuUs = ((cpuOf(t) - p0) * 1000) / Math.max(1, lat.requests);
    const c0 = cpuOf(t);
    const tp = await wrk(t.url, TP_CONNECTIONS, seconds, 0);
    cpuUs = ((cpuOf(t) - c0) * 1000) / Math.max(1, tp.requests);
    p50 = lat.p50_us / 1000;
    p99 = lat.p99_us / 1000;
    rps = tp.requests / (tp.duration_us / 1e6);
    errors = lat.errors + tp.errors;
  } else {
    const p0 = cpuOf(t);
    const lat = await nodeClient<RateResult>({ mode: 'rate', url: t.url, stream: false, rate: SSE_RATE, durationMs });
    pacedCpuUs = ((cpuOf(t) - p0) * 1000) / Math.max(1, lat.latencies.length);
    const c0 = cpuOf(t);
    const tp = await nodeClient<MaxResult>({ mode: 'max', url: t.url, stream: false, concurrency: TP_CONNECTIONS, durationMs });
    cpuUs = ((cpuOf(t) - c0) * 1000) / Math.max(1, tp.completed);
    p50 = quantile(lat.latencies, 0.5);
    p99 = quantile(lat.latencies, 0.99);
    rps = tp.rps;
    errors = lat.errors + tp.errors;
  }
  const sse = await nodeClient<RateResult>({ mode: 'rate', url: t.url, stream: true, rate: SSE_RATE, durationMs });
  return { p50, p99, ttfb50: quantile(sse.ttfb, 0.5), streamTotal50: quantile(sse.latencies, 0.5), rps, cpuUs, pacedCpuUs, errors: errors + sse.errors };
}

async function main(): Promise<number> {
  const { values } = benchArgs('overhead', {
    options: {
      rounds: { type: 'string', default: '3' },
      seconds: { type: 'string', default: '5' },
      targets: { type: 'string', default: 'direct,nginx,nodehop,undicihop,poolhop,partshop,kvgate' },
      json: { type: 'string' },
      policy: { type: 'string' },
      ablate: { type: 'boolean', default: false },
      'no-install': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const rounds = Number(values.rounds);
  const seconds = Number(values.seconds);
  if (![rounds, seconds].every((x) => Number.isInteger(x) && x > 0)) {
    process.stderr.write('bench overhead: --rounds and --seconds take positive whole numbers\n');
    return 2;
  }
  const known = ['direct', 'nginx', 'nodehop', 'undicihop', 'poolhop', 'partshop', 'kvgate'];
  const wanted = new Set(values.targets.split(',').map((s) => s.trim()));
  for (const w of wanted) {
    if (!known.includes(w)) {
      process.stderr.write(`bench overhead: unknown target '${w}' (${known.join(', ')})\n`);
      return 2;
    }
  }
  wanted.add('direct'); // every "added" figure is relative to it
  const install = !values['no-install'];
  const notes: string[] = [];
  const tools = setUpTools(install);
  const { useWrk, cUpstream, nginxOk } = tools;
  notes.push(...tools.notes);
  const direct = await startStandIn(cUpstream);
  const targets: Target[] = [direct];
  try {
    if (wanted.has('nginx')) {
      if (nginxOk) targets.push(await startNginx('nginx', (dir, port) => proxyConf(dir, port, Number(new URL(direct.url).port)), '/metrics'));
      else notes.push('nginx not installed: no nginx row');
    }
    if (wanted.has('nodehop')) targets.push(await forkServer('nodehop', 'nodehop.js', { UPSTREAM_URL: direct.url }));
    if (wanted.has('undicihop')) targets.push(await forkServer('undicihop', 'undicihop.js', { UPSTREAM_URL: direct.url }));
    if (wanted.has('poolhop')) targets.push(await forkServer('poolhop', 'undicihop.js', { UPSTREAM_URL: direct.url, HOP_CLIENT: 'kvgate' }));
    if (wanted.has('partshop')) targets.push(await forkServer('partshop', 'partshop.js', { UPSTREAM_URL: direct.url }, true));
    if (wanted.has('kvgate')) targets.push(await startKvgate(direct.url, { policy: values.policy }));
    if (values.ablate) {
      for (const [name, config] of Object.entries(ABLATIONS)) targets.push(await startKvgate(direct.url, { name, policy: values.policy, config }));
    }

    const figures = new Map<string, Round[]>(targets.map((t) => [t.name, []]));
    for (let r = 0; r < rounds; r++) {
      const order = targets.map((_, i) => targets[(i + r) % targets.length]!);
      for (const t of order) {
        process.stderr.write(`round ${r + 1}/${rounds}: ${t.name}\n`);
        figures.get(t.name)!.push(await measureTarget(t, useWrk, seconds));
      }
    }
    return report(values, rounds, seconds, useWrk, cUpstream, targets, figures, notes);
  } finally {
    for (const t of targets) await t.stop();
  }
}

function report(
  values: { json?: string },
  rounds: number,
  seconds: number,
  useWrk: boolean,
  cUpstream: boolean,
  targets: Target[],
  figures: Map<string, Round[]>,
  notes: string[],
): number {
  const base = figures.get('direct')!;
  const med = (name: string, k: keyof Round): number => median(figures.get(name)!.map((f) => f[k]));
  const added = (name: string, k: keyof Round): number => (name === 'direct' ? 0 : median(figures.get(name)!.map((f, i) => f[k] - base[i]![k])));
  const ratio = (name: string, other: string): number => (figures.has(other) ? med(name, 'rps') / med(other, 'rps') : NaN);
  const rows = targets.map((t) => ({
    target: t.name,
    p50_ms: med(t.name, 'p50'),
    p99_ms: med(t.name, 'p99'),
    added_p50_ms: added(t.name, 'p50'),
    added_p99_ms: added(t.name, 'p99'),
    sse_ttfb_p50_ms: med(t.name, 'ttfb50'),
    added_sse_ttfb_p50_ms: added(t.name, 'ttfb50'),
    sse_total_p50_ms: med(t.name, 'streamTotal50'),
    max_rps: med(t.name, 'rps'),
    cpu_us_per_request: med(t.name, 'cpuUs'),
    cpu_us_per_request_paced: med(t.name, 'pacedCpuUs'),
    rps_vs_direct: ratio(t.name, 'direct'),
    rps_vs_nginx: ratio(t.name, 'nginx'),
    rps_vs_nodehop: ratio(t.name, 'nodehop'),
    rps_vs_undicihop: ratio(t.name, 'undicihop'),
    errors: figures.get(t.name)!.reduce((s, f) => s + f.errors, 0),
  }));
  const f = (x: number, d = 2): string => (Number.isFinite(x) ? x.toFixed(d) : '—');
  const lines = [
    '| target | p50 ms | p99 ms | added p50 | added p99 | SSE TTFB p50 | added TTFB | SSE total p50 | max req/s | CPU µs/req | CPU µs/req ≈200 req/s | × direct | × nginx | × nodehop | × undicihop | errors |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map(
      (r) =>
        `| ${r.target} | ${f(r.p50_ms)} | ${f(r.p99_ms)} | ${f(r.added_p50_ms)} | ${f(r.added_p99_ms)} | ${f(r.sse_ttfb_p50_ms)} | ${f(r.added_sse_ttfb_p50_ms)} | ${f(r.sse_total_p50_ms)} | ${f(r.max_rps, 0)} | ${f(r.cpu_us_per_request, 0)} | ${f(r.cpu_us_per_request_paced, 0)} | ${f(r.rps_vs_direct)} | ${f(r.rps_vs_nginx)} | ${f(r.rps_vs_nodehop)} | ${f(r.rps_vs_undicihop)} | ${r.errors} |`,
    ),
  ];
  process.stdout.write(
    `\nbench overhead: ${rounds} round(s) × ${seconds} s; load ${useWrk ? 'wrk' : 'Node client'}, stand-in worker ${cUpstream ? 'nginx (C)' : 'Node'}; ` +
      `latency at ${LAT_CONNECTIONS} connections × ${LAT_DELAY_MS} ms pauses (≈200 req/s), SSE at ${SSE_RATE} req/s, throughput at ${TP_CONNECTIONS} connections\n\n` +
      lines.join('\n') +
      '\n' +
      notes.map((n) => `\nnote: ${n}`).join('') +
      (notes.length ? '\n' : ''),
  );
  const k = rows.find((r) => r.target === 'kvgate');
  if (k) {
    const checks: Array<[string, boolean]> = [
      [`added p50 ${f(k.added_p50_ms)} ms ≤ 0.5 ms`, k.added_p50_ms <= 0.5],
      [`added p99 ${f(k.added_p99_ms)} ms ≤ 1.0 ms`, k.added_p99_ms <= 1.0],
      [`added SSE time to first byte ${f(k.added_sse_ttfb_p50_ms)} ms ≤ 0.5 ms`, k.added_sse_ttfb_p50_ms <= 0.5],
      [`max throughput ${f(k.rps_vs_nodehop)}× the bare Node hop ≥ 1.5×`, k.rps_vs_nodehop >= 1.5],
      [`CPU ${f(k.cpu_us_per_request, 0)} µs per request ≤ 60 µs`, k.cpu_us_per_request <= 60],
    ];
    process.stdout.write('\nkvgate targets:\n' + checks.map(([s, ok]) => `  ${ok ? 'met   ' : 'MISSED'}  ${s}`).join('\n') + '\n');
  }
  if (values.json) writeFileSync(values.json, JSON.stringify({ rounds, seconds, wrk: useWrk, c_upstream: cUpstream, rows, notes }, null, 2));
  return 0;
}

main().then(
  (code) => (process.exitCode = code),
  (err: unknown) => {
    process.stderr.write(`bench overhead: ${(err as Error).stack ?? String(err)}\n`);
    process.exitCode = 1;
  },
);
