/**
 * `npm run bench -- epp`: what kvgate costs as an Endpoint Picker (`kvgate epp`), beside the
 * proxies in front of the same stand-in worker, in one run.
 *
 * Processes: the stand-in worker (nginx with the echo module where installed, else a Node one:
 * what the EPP scrapes and probes, and what the HTTP targets relay to); `kvgate epp` from this
 * checkout, its event loop pinned to a core of its own where there are two or more; and the
 * proxy side, in processes of their own (benchmarks/epp/load.ts: ext_proc streams as Envoy's
 * filter sends them, request headers, the body in 16 KiB chunks, the pick read, the body echo
 * read, a response passed through).
 *
 * Measured, per prompt size (chat requests of about 1,000 and 8,000 tokens, over eight workers
 * of one pool, the default routing policy):
 *   - decision latency: from the last body chunk sent to the request-headers response (the pick),
 *     as the proxy sees it, p50 and p99, at 200 req/s (open loop) and at saturation (closed
 *     loop, many streams over several connections and generator processes);
 *   - the EPP's CPU time per request (its process's user + system time from /proc over the
 *     measurement), and so decisions per second per core (1 s / CPU per request);
 *   - the generators' own CPU per request (they must not be the slower side: if the EPP is not
 *     near a core busy at saturation, the output says so);
 *   - beside it, the HTTP proxies at 200 req/s with wrk (or nothing, without wrk): nginx as a
 *     reverse proxy and `kvgate serve`, their latency added over the stand-in alone.
 * And an estimate, its method printed with it: kvgate as EPP behind a native proxy = nginx's
 * added latency + the EPP's decision latency (p50 + p50, p99 + p99).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { CorePlan, freePort, processCpuMs, quantile, stopChild, waitReady } from './harness.js';
import type { LoadResult, LoadSpec } from './epp/load.js';
import { proxyConf } from './overhead/nginx.js';
import { MODEL } from './overhead/responses.js';
import { proseText, setUpTools, startKvgate, startNginx, startStandIn, wrk, type Target } from './overhead/targets.js';

const HELP = `npm run bench -- epp [options]

The decision latency kvgate adds as an Endpoint Picker (kvgate epp, Envoy's ext_proc protocol):
from the last request-body chunk to the pick, p50 and p99, at 200 req/s and at saturation, for
1k- and 8k-token chat prompts; the EPP's CPU per request and decisions per second per core; the
load generators' own CPU; beside nginx and kvgate serve in front of the same stand-in worker.

Options:
  --seconds S        length of each measurement (default 5; a 2 s warm-up before each size)
  --rate R           the moderate rate, req/s (default 200)
  --streams N        concurrent streams at saturation (default 48)
  --generators G     load generator processes at saturation (default 2)
  --sizes LIST       prompt sizes in tokens (default 1000,8000)
  --workers N        workers in the EPP's pool (default 8)
  --no-proxies       skip the HTTP proxies (nginx, kvgate serve) and the estimate
  --no-pin           do not pin the EPP to a core of its own
  --json FILE        also write the results as JSON
  -h, --help         this text

Targets: p50 <= 150 us and p99 <= 1 ms for the 8k-token prompt at 200 req/s; >= 5,000
decisions/s per core with 1k-token prompts.
`;

const here = dirname(fileURLToPath(import.meta.url));
const cliPath = join(here, '..', 'src', 'cli.js');

interface Measured {
  requests: number;
  errors: number;
  firstError: string | null;
  rps: number;
  p50Us: number;
  p99Us: number;
  eppCpuUsPerReq: number;
  /** Cores the EPP kept busy over the measurement. */
  eppCores: number;
  genCpuUsPerReq: number;
}

/** Chat bodies of about `tokens` tokens: four shared system prompts (90%), each request's own question (10%). */
function bodies(tokens: number, count = 16): string[] {
  const systems = [0, 1, 2, 3].map((i) => proseText(Math.round(tokens * 0.9), 100 + i));
  return Array.from({ length: count }, (_, i) =>
    JSON.stringify({ model: MODEL, messages: [{ role: 'system', content: systems[i % 4] }, { role: 'user', content: proseText(Math.round(tokens * 0.1), 200 + i) }], max_tokens: 16 }),
  );
}

function generate(spec: LoadSpec): Promise<LoadResult> {
  // Through a file: 8k-token bodies are more than one command-line argument may hold.
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-epp-load-'));
  const file = join(dir, 'spec.json');
  writeFileSync(file, JSON.stringify(spec));
  return new Promise<LoadResult>((resolve, reject) => {
    const child = spawn(process.execPath, [join(here, 'epp', 'load.js'), file], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out) as LoadResult) : reject(new Error(`load generator exited with ${code}`))));
  }).finally(() => rmSync(dir, { recursive: true, force: true }));
}

/** One measurement: `specs` run side by side, the EPP's CPU read around them. */
async function measure(eppPid: number, specs: LoadSpec[]): Promise<Measured> {
  const cpu0 = processCpuMs(eppPid);
  const t0 = Date.now();
  const results = await Promise.all(specs.map(generate));
  const wallMs = Date.now() - t0;
  const cpuMs = (processCpuMs(eppPid) ?? NaN) - (cpu0 ?? NaN);
  const lat = results.flatMap((r) => r.latencyUs);
  const requests = lat.length;
  const errors = results.reduce((s, r) => s + r.errors, 0);
  return {
    requests,
    errors,
    firstError: results.find((r) => r.firstError !== null)?.firstError ?? null,
    rps: requests / (Math.max(...results.map((r) => r.wallMs)) / 1000),
    p50Us: quantile(lat, 0.5),
    p99Us: quantile(lat, 0.99),
    eppCpuUsPerReq: (cpuMs * 1000) / requests,
    eppCores: cpuMs / wallMs,
    genCpuUsPerReq: results.reduce((s, r) => s + r.cpuUs, 0) / requests,
  };
}

async function startEpp(plan: CorePlan, standIn: string, workers: number): Promise<{ address: string; pid: number; stop(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-epp-bench-'));
  const [port, health, metrics] = [await freePort(), await freePort(), await freePort()];
  const config = {
    pools: [{ name: 'default', model: MODEL, workers: Array.from({ length: workers }, (_, i) => ({ id: `w${i}`, url: standIn })) }],
    epp: { listen: { host: '127.0.0.1', port }, healthPort: health, metricsPort: metrics },
    shutdown: { drainDelayMs: 0 },
  };
  writeFileSync(join(dir, 'kvgate.json'), JSON.stringify(config));
  // Request logs on (the default), drained through a pipe as a log shipper would.
  const child = plan.spawn('under-test', process.execPath, [cliPath, 'epp', '--config', join(dir, 'kvgate.json')], { stdio: ['ignore', 'pipe', 'inherit'] });
  child.stdout!.resume();
  await waitReady(`http://127.0.0.1:${metrics}/ready`, 15_000);
  return {
    address: `127.0.0.1:${port}`,
    pid: child.pid!,
    stop: async () => {
      await stopChild(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Latency added over the stand-in at ~200 req/s (wrk: 4 connections, 20 ms between requests), p50 and p99, µs. */
async function proxiesAdded(targets: Target[], direct: Target, body: string, seconds: number): Promise<Map<string, { p50: number; p99: number }>> {
  const out = new Map<string, { p50: number; p99: number }>();
  const base = await wrk(direct.url, 4, seconds, 20, body);
  for (const t of targets) {
    await wrk(t.url, 4, 2, 20, body); // warm-up
    const r = await wrk(t.url, 4, seconds, 20, body);
    out.set(t.name, { p50: r.p50_us - base.p50_us, p99: r.p99_us - base.p99_us });
  }
  return out;
}

const us = (x: number): string => (Number.isFinite(x) ? `${Math.round(x).toLocaleString('en-US')} µs` : 'n/a');
const verdict = (ok: boolean): string => (ok ? 'met' : 'MISSED');

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      seconds: { type: 'string', default: '5' },
      rate: { type: 'string', default: '200' },
      streams: { type: 'string', default: '48' },
      generators: { type: 'string', default: '2' },
      sizes: { type: 'string', default: '1000,8000' },
      workers: { type: 'string', default: '8' },
      'no-proxies': { type: 'boolean', default: false },
      'no-pin': { type: 'boolean', default: false },
      json: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return;
  }
  const seconds = Number(values.seconds);
  const rate = Number(values.rate);
  const streams = Number(values.streams);
  const generators = Math.max(1, Number(values.generators));
  const sizes = values.sizes.split(',').map(Number);
  const tools = setUpTools(true);
  const plan = new CorePlan(!values['no-pin']);
  // Everything started is stopped, whatever fails on the way (a child left running keeps this process alive).
  const started: Array<{ stop(): Promise<void> }> = [];
  const report: Record<string, unknown> = { notes: tools.notes, cores: plan.cores, pinned: plan.enabled, loadBefore: loadavg()[0] };
  try {
    const standIn = await startStandIn(tools.cUpstream);
    started.push(standIn);
    const epp = await startEpp(plan, standIn.url, Number(values.workers));
    started.push(epp);
    const proxies: Target[] = [];
    if (!values['no-proxies'] && tools.useWrk) {
      if (tools.nginxOk) proxies.push(await startNginx('nginx', (dir, port) => proxyConf(dir, port, Number(new URL(standIn.url).port)), '/metrics'));
      const gatewayOpts = { name: 'kvgate serve', config: { pools: [{ name: 'default', model: MODEL, workers: Array.from({ length: Number(values.workers) }, (_, i) => ({ id: `w${i}`, url: standIn.url })) }] } };
      // A busy machine can take longer than startKvgate's 15 s to start a gateway: one more try.
      proxies.push(await startKvgate(standIn.url, gatewayOpts).catch(() => startKvgate(standIn.url, gatewayOpts)));
      started.push(...proxies);
    }
    // Latencies are wall-clock: on a machine running other work they measure the queue for a core
    // as much as the EPP (CPU per request much less so). The load is printed so a reader can tell.
    process.stdout.write(`machine: ${plan.cores} cores, load average ${loadavg()[0]!.toFixed(1)} at the start${plan.enabled ? ', the EPP pinned to a core of its own' : ''}\n`);
    for (const size of sizes) {
      const b = bodies(size);
      const spec = (o: Partial<LoadSpec>): LoadSpec => ({ address: epp.address, bodies: b, seconds, connections: 2, ...o });
      process.stderr.write(`epp: ${size}-token prompts: warm-up, ${rate} req/s, saturation${proxies.length > 0 ? ', proxies' : ''}...\n`);
      const warm = await measure(epp.pid, [spec({ seconds: 2, concurrency: 8 })]); // the JIT, the prefix index
      if (warm.requests === 0) throw new Error(`the EPP answered no request in the warm-up: ${warm.firstError ?? 'no error'}`);
      plan.isolateEventLoop(epp.pid);
      const atRate = await measure(epp.pid, [spec({ rate })]);
      const perGen = Math.max(1, Math.round(streams / generators));
      const saturated = await measure(epp.pid, Array.from({ length: generators }, () => spec({ concurrency: perGen })));
      const added = proxies.length > 0 ? await proxiesAdded(proxies, standIn, b[0]!, seconds) : new Map<string, { p50: number; p99: number }>();
      report[String(size)] = { bodyBytes: b[0]!.length, atRate, saturated, proxiesAdded: Object.fromEntries(added) };
      printSize(size, b[0]!.length, rate, atRate, saturated, added, streams, generators);
    }
    printTargets(report, sizes, rate);
    report.loadAfter = loadavg()[0];
    process.stdout.write(`machine: load average ${loadavg()[0]!.toFixed(1)} at the end (${plan.cores} cores)\n`);
  } finally {
    for (const t of started.reverse()) await t.stop();
  }
  for (const n of tools.notes) process.stdout.write(`note: ${n}\n`);
  if (values.json) writeFileSync(values.json, JSON.stringify(report, null, 2));
}

function printSize(size: number, bytes: number, rate: number, atRate: Measured, sat: Measured, added: Map<string, { p50: number; p99: number }>, streams: number, gens: number): void {
  const w = (s: string) => process.stdout.write(s + '\n');
  w(`\n## ${size.toLocaleString('en-US')}-token prompt (${bytes.toLocaleString('en-US')} bytes of JSON)`);
  w('| load | req/s | decision p50 | decision p99 | EPP CPU / req | decisions/s per core | EPP cores busy | generator CPU / req | errors |');
  w('|---|---:|---:|---:|---:|---:|---:|---:|---:|');
  const row = (name: string, m: Measured) =>
    w(`| ${name} | ${Math.round(m.rps)} | ${us(m.p50Us)} | ${us(m.p99Us)} | ${us(m.eppCpuUsPerReq)} | ${Math.round(1e6 / m.eppCpuUsPerReq).toLocaleString('en-US')} | ${m.eppCores.toFixed(2)} | ${us(m.genCpuUsPerReq)} | ${m.errors}${m.firstError ? ` (${m.firstError})` : ''} |`);
  row(`${rate} req/s (open loop)`, atRate);
  row(`saturation (${streams} streams, ${gens} generators)`, sat);
  if (sat.eppCores < 0.85) w(`note: at saturation the EPP kept ${sat.eppCores.toFixed(2)} of a core busy: the generators or the machine limited it; decisions/s per core is from its CPU time per request.`);
  if (added.size > 0) {
    w('\n| HTTP proxy at ~200 req/s (wrk), added over the stand-in | p50 | p99 |');
    w('|---|---:|---:|');
    for (const [name, a] of added) w(`| ${name} | ${us(a.p50)} | ${us(a.p99)} |`);
    const nginx = added.get('nginx');
    if (nginx) w(`| kvgate as EPP behind a native proxy (estimate) | ${us(nginx.p50 + atRate.p50Us)} | ${us(nginx.p99 + atRate.p99Us)} |`);
  }
}

function printTargets(report: Record<string, unknown>, sizes: number[], rate: number): void {
  const w = (s: string) => process.stdout.write(s + '\n');
  w('\n## Targets');
  const big = report['8000'] as { atRate: Measured } | undefined;
  const small = report['1000'] as { saturated: Measured } | undefined;
  if (big) {
    w(`- 8k-token prompt at ${rate} req/s: p50 ${us(big.atRate.p50Us)} (target <= 150 µs): ${verdict(big.atRate.p50Us <= 150)}`);
    w(`- 8k-token prompt at ${rate} req/s: p99 ${us(big.atRate.p99Us)} (target <= 1,000 µs): ${verdict(big.atRate.p99Us <= 1000)}`);
  }
  if (small) {
    const perCore = 1e6 / small.saturated.eppCpuUsPerReq;
    w(`- 1k-token prompts: ${Math.round(perCore).toLocaleString('en-US')} decisions/s per core (target >= 5,000): ${verdict(perCore >= 5000)}`);
  }
  if (!big && !small) w(`- sizes ${sizes.join(', ')}: the targets are for 1000 and 8000`);
  w(
    '\nEstimate "kvgate as EPP behind a native proxy": nginx\'s added latency over the stand-in (measured above, wrk at ~200 req/s) plus the EPP\'s ' +
      'decision latency at the same rate (p50 + p50, p99 + p99: tails seldom coincide, so the p99 sum is on the high side). It leaves out what the ' +
      "proxy's ext_proc filter itself costs (Envoy encoding the body to the EPP and decoding it back, on its own threads), which no Envoy here measures.",
  );
}

main().catch((e: Error) => {
  process.stderr.write(`bench epp: ${e.stack ?? e.message}\n`);
  process.exitCode = 1;
});
