/**
 * `npm run bench -- profile`: where kvgate's time per request goes, under the load bench overhead
 * uses (wrk, 64 connections, in front of the stand-in worker).
 *
 * Runs kvgate with `--cpu-prof` and `--trace-gc` and prints:
 *   - throughput and CPU time per request (user + system, /proc);
 *   - a per-stage breakdown in µs per request: every profile sample is charged to the innermost
 *     frame that belongs to a stage (socket writes, request log, metrics, tokenization, routing,
 *     validation, body read, the relay, the upstream client, Node's HTTP server, ...), so the
 *     stages add up to the profile's busy time;
 *   - GC: pauses by kind, total and longest;
 *   - the tail with and without periodic work: latency at ≈200 req/s (wrk, 4 connections with
 *     20 ms pauses) with the default scrape and health intervals, and with both set to an hour.
 * The profile is kept (its path is printed) for a flame graph in Chrome DevTools or speedscope.
 * A sampling profiler charges time the process spends descheduled to whatever was on its stack:
 * on a busy machine "socket writes" grows with the load generator's and the upstream's work.
 */
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { benchArgs } from './args.js';
import { median, treeCpuMs } from './harness.js';
import { setUpTools, startKvgate, startStandIn, wrk, type Target } from './overhead/targets.js';

const HELP = `npm run bench -- profile [options]

Profiles kvgate under load in front of a stand-in worker and prints where the time per request
goes (per stage), GC pauses, and the latency tail with and without periodic work.

Options:
  --seconds S       length of the profiled load in seconds (default 10)
  --policy NAME     kvgate's routing policy (default: the gateway's default, kvgate)
  --no-install      do not install wrk or nginx even as root
  -h, --help        this text
`;

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** Stages, innermost first: a sample is charged to the first frame (leaf to root) that matches. */
const STAGES: Array<[string, (f: string, url: string) => boolean]> = [
  ['socket writes (kernel)', (f, u) => u === '' && /^(writev|writeBuffer|writeString|writeUtf8String|writeLatin1String)$/.test(f)],
  ['request log (pino)', (_f, u) => u.includes('node_modules/pino') || u.includes('sonic-boom') || u.includes('/telemetry/logger') || u.includes('/telemetry/log-batcher')],
  ['metrics', (_f, u) => u.includes('prom-client') || u.includes('/telemetry/metrics') || u.includes('/telemetry/request-metrics')],
  ['tokenize', (_f, u) => u.includes('/src/tokenizer/')],
  ['route (scheduler)', (_f, u) => u.includes('/src/scheduler/') || u.includes('/src/kv/')],
  ['validate (zod)', (_f, u) => u.includes('node_modules/zod') || u.includes('/src/api/schemas')],
  ['JSON.parse', (f, u) => u === '' && f === 'parse'],
  ['read body', (_f, u) => u.includes('/src/api/body')],
  ['response cache', (_f, u) => u.includes('/src/cache/')],
  ['relay (kvgate)', (_f, u) => u.includes('/src/gateway/pipeline/relay')],
  ['upstream client (kvgate)', (_f, u) => u.includes('/src/http/')],
  ['upstream client (undici)', (_f, u) => u.includes('node_modules/undici') || u.startsWith('wasm')],
  ['fleet state', (_f, u) => u.includes('/src/fleet/')],
  ['request handler (kvgate)', (_f, u) => u.includes('/src/gateway/') || u.includes('/src/util/') || u.includes('/src/api/')],
  ['start-up (module loading)', (_f, u) => u.startsWith('node:internal/modules') || u.startsWith('node:internal/bootstrap')],
  ['HTTP server and streams (node)', (_f, u) => u.startsWith('node:')],
];

function breakdown(p: Profile): Map<string, number> {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const stageOf = new Map<number, string>();
  const classify = (id: number): string => {
    const known = stageOf.get(id);
    if (known) return known;
    let stage = 'other';
    const leaf = byId.get(id)!.callFrame.functionName;
    if (leaf === '(idle)') stage = 'idle';
    else if (leaf === '(garbage collector)') stage = 'GC';
    else if (leaf === '(program)') stage = 'V8 (program)';
    else {
      for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
        const { functionName, url } = byId.get(cur)!.callFrame;
        const hit = STAGES.find(([, m]) => m(functionName, url));
        if (hit) {
          stage = hit[0];
          break;
        }
      }
    }
    stageOf.set(id, stage);
    return stage;
  };
  const out = new Map<string, number>();
  for (let i = 0; i < p.samples.length; i++) {
    const s = classify(p.samples[i]!);
    out.set(s, (out.get(s) ?? 0) + (p.timeDeltas[i] ?? 0) / 1000);
  }
  return out;
}

/** `--trace-gc` lines: "... Scavenge 22.7 (33.3) -> 19.9 (36.3) MB, 15.81 / 0.02 ms ...". */
const GC_LINE = /(Scavenge|Mark-Compact|Mark-sweep|Minor Mark-Compact)[^,]*, ([\d.]+) \/ [\d.]+ ms/;

async function latencyP99(target: Target, seconds: number): Promise<{ p50: number; p99: number }> {
  const r = await wrk(target.url, 4, seconds, 20);
  return { p50: r.p50_us / 1000, p99: r.p99_us / 1000 };
}

async function main(): Promise<number> {
  const { values } = benchArgs('profile', {
    options: {
      seconds: { type: 'string', default: '10' },
      policy: { type: 'string' },
      'no-install': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const seconds = Number(values.seconds);
  if (!Number.isInteger(seconds) || seconds <= 0) {
    process.stderr.write('bench profile: --seconds takes a positive whole number\n');
    return 2;
  }
  const tools = setUpTools(!values['no-install']);
  if (!tools.useWrk) {
    process.stderr.write('bench profile: needs wrk (Debian: apt-get install wrk)\n');
    return 2;
  }
  const direct = await startStandIn(tools.cUpstream);
  const profDir = mkdtempSync(join(tmpdir(), 'kvgate-profile-'));
  const gc: Array<{ kind: string; ms: number }> = [];
  try {
    // 1. The profiled run.
    const gw = await startKvgate(direct.url, {
      policy: values.policy,
      nodeFlags: ['--cpu-prof', `--cpu-prof-dir=${profDir}`, '--cpu-prof-interval=100', '--trace-gc'],
      onLine: (line) => {
        const m = GC_LINE.exec(line);
        if (m) gc.push({ kind: m[1]!, ms: Number(m[2]) });
      },
    });
    let requests = 0;
    let rps = 0;
    let cpuUs = NaN;
    try {
      await wrk(gw.url, 64, 2, 0); // warm-up
      gc.length = 0;
      const c0 = treeCpuMs(gw.pids[0]) ?? NaN;
      const r = await wrk(gw.url, 64, seconds, 0);
      requests = r.requests;
      rps = r.requests / (r.duration_us / 1e6);
      cpuUs = (((treeCpuMs(gw.pids[0]) ?? NaN) - c0) * 1000) / r.requests;
    } finally {
      await gw.stop(); // the profile is written as the process exits
    }
    const file = readdirSync(profDir).find((f) => f.endsWith('.cpuprofile'));
    if (!file) throw new Error('kvgate wrote no CPU profile');
    const stages = breakdown(JSON.parse(readFileSync(join(profDir, file), 'utf8')) as Profile);
    // The profile covers start-up and the warm-up too: charge the stages per request of the whole
    // profile (warm-up requests included), so start-up ("other": module loading) stays separate.
    const total = [...stages.values()].reduce((a, b) => a + b, 0);
    const busy = total - (stages.get('idle') ?? 0);
    process.stdout.write(
      `\nbench profile: kvgate${values.policy ? ` (policy ${values.policy})` : ''} under wrk, 64 connections, ${seconds} s, stand-in worker ${tools.cUpstream ? 'nginx (C)' : 'Node'}\n` +
        `  ${Math.round(rps)} req/s, CPU ${cpuUs.toFixed(1)} µs per request (user + system, /proc)\n` +
        `  profile: ${join(profDir, file)} (${(total / 1000).toFixed(1)} s, busy ${((100 * busy) / total).toFixed(0)}%)\n\n` +
        `  stage (innermost frame wins)         ms      share of busy\n`,
    );
    for (const [name, ms] of [...stages].filter(([n]) => n !== 'idle').sort((a, b) => b[1] - a[1])) {
      process.stdout.write(`  ${name.padEnd(34)} ${ms.toFixed(0).padStart(7)}   ${((100 * ms) / busy).toFixed(1).padStart(5)}%\n`);
    }
    const pauses = gc.map((g) => g.ms);
    const kinds = [...new Set(gc.map((g) => g.kind))].map((k) => `${k} ${gc.filter((g) => g.kind === k).length}`).join(', ');
    process.stdout.write(
      `\n  GC during the measured ${seconds} s: ${gc.length} pauses (${kinds || 'none'}), ` +
        `total ${pauses.reduce((a, b) => a + b, 0).toFixed(1)} ms, median ${median(pauses).toFixed(2)} ms, longest ${Math.max(0, ...pauses).toFixed(2)} ms; ` +
        `${requests} requests\n`,
    );

    // 2. The tail with and without periodic work (scrapes, health probes).
    const hour = 3_600_000;
    const tails: Record<string, { p50: number; p99: number }[]> = { default: [], quiet: [] };
    for (let round = 0; round < 3; round++) {
      for (const mode of round % 2 === 0 ? ['default', 'quiet'] : ['quiet', 'default']) {
        const g = await startKvgate(direct.url, {
          policy: values.policy,
          config: mode === 'quiet' ? { scrape: { intervalMs: hour }, health: { intervalMs: hour } } : {},
        });
        try {
          await wrk(g.url, 64, 1, 0);
          tails[mode]!.push(await latencyP99(g, 5));
        } finally {
          await g.stop();
        }
      }
    }
    const med = (xs: { p50: number; p99: number }[], k: 'p50' | 'p99') => median(xs.map((x) => x[k])).toFixed(2);
    process.stdout.write(
      `\n  latency at ≈200 req/s (wrk, 4 connections × 20 ms pauses, medians of 3 runs of 5 s):\n` +
        `    default scrape and health intervals: p50 ${med(tails.default!, 'p50')} ms, p99 ${med(tails.default!, 'p99')} ms\n` +
        `    scrapes and health probes hourly:    p50 ${med(tails.quiet!, 'p50')} ms, p99 ${med(tails.quiet!, 'p99')} ms\n`,
    );
  } finally {
    await direct.stop();
  }
  return 0;
}

main().then(
  (code) => (process.exitCode = code),
  (err: unknown) => {
    process.stderr.write(`bench profile: ${(err as Error).stack ?? String(err)}\n`);
    process.exitCode = 1;
  },
);
