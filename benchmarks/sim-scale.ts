/**
 * The fleet simulation at fleet scale (`npm run bench -- sim-scale`): each target of
 * `kvgate bench`'s scale, run as the command a user types, with its wall time, peak resident
 * memory and the machine's load beside it, and whether it met the target (misses included).
 *
 * Cases (each a `kvgate bench` child process; peak RSS from the child's own resourceUsage):
 *   kvgate-1m     --workload mixed --workers 64 --size 1000000 --policy kvgate: < 60 s, < 2 GB
 *   rr-100k       --workload mixed --workers 16 --size 100000 --policy round-robin: < 8 s
 *   trace-10m     a 10,000,000-row BurstGPT-shaped CSV (written to the temp dir first, rows drawn
 *                 from a seeded generator: ~1 request/s, log-normal prompts of mean ~600 tokens and
 *                 answers of ~250, 1% failed rows), replayed on 16 workers with round-robin to its
 *                 end: < 2 GB, no time limit
 *   capacity      --capacity for 6 policies on one workload: the wall time with --jobs (cores)
 *                 against each policy's search alone (--jobs 1, one policy): ≤ 1.2 × the slowest
 *                 single search ÷ cores
 *
 * Options: --cases a,b (default all), --size-1m N, --size-100k N, --rows N (trace rows),
 * --capacity-size N (default 2000), --capacity-workload W (default mixed), --capacity-seconds S
 * (kvgate bench's, default its own), --jobs N (default the cores), --json, --write-docs FILE
 * (rewrite this command's `targets` table in a markdown file, doc-tables.ts). Smaller sizes say
 * what they ran: the targets are for the defaults.
 */
import { spawn } from 'node:child_process';
import { createWriteStream, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { seededRng } from '../src/util/rng.js';
import { benchArgs } from './args.js';
import { writeGeneratedTables } from './doc-tables.js';

const { values } = benchArgs('sim-scale', {
  options: {
    cases: { type: 'string', default: 'kvgate-1m,rr-100k,trace-10m,capacity' },
    'size-1m': { type: 'string', default: '1000000' },
    'size-100k': { type: 'string', default: '100000' },
    rows: { type: 'string', default: '10000000' },
    'capacity-size': { type: 'string', default: '2000' },
    'capacity-workload': { type: 'string', default: 'mixed' },
    'capacity-seconds': { type: 'string' },
    jobs: { type: 'string' },
    json: { type: 'boolean', default: false },
    'write-docs': { type: 'string', multiple: true },
    help: { type: 'boolean', short: 'h', default: false },
  },
});

if (values.help) {
  process.stdout.write(
    'Usage: npm run bench -- sim-scale [--cases kvgate-1m,rr-100k,trace-10m,capacity] [--size-1m N] [--size-100k N]\n' +
      '       [--rows N] [--capacity-size N] [--capacity-workload W] [--capacity-seconds S] [--jobs N] [--json]\n' +
      '       [--write-docs FILE]   rewrite this command\'s generated table (targets) in FILE\n',
  );
  process.exit(0);
}

const CASES = values.cases.split(',');
const SIZE_1M = Number(values['size-1m']);
const SIZE_100K = Number(values['size-100k']);
const ROWS = Number(values.rows);
const CAP_SIZE = Number(values['capacity-size']);
const CAP_WORKLOAD = values['capacity-workload'];
const CAP_SECONDS = values['capacity-seconds'] !== undefined ? ['--capacity-seconds', values['capacity-seconds']] : [];
const CORES = availableParallelism();
const JOBS = Number(values.jobs ?? CORES);
const CAP_POLICIES = ['round-robin', 'least-load', 'llm-d', 'dynamo', 'sglang-cache-aware', 'kvgate'];
const CLI = resolve(dirname(fileURLToPath(import.meta.url)), '../src/cli.js');
const GB = 1024 ** 3;

const dir = mkdtempSync(join(tmpdir(), 'kvgate-sim-scale-'));
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
// Preloaded into each child: its peak RSS on stderr as it exits.
const rssHook = join(dir, 'rss.mjs');
writeFileSync(rssHook, "process.on('exit', () => process.stderr.write(`\\nsim-scale-maxrss-kb=${process.resourceUsage().maxRSS}\\n`));\n");

interface Run {
  wallS: number;
  rssBytes: number;
  code: number | null;
  load: [number, number];
  stderrTail: string;
}

function bench(args: string[]): Promise<Run> {
  return new Promise((done) => {
    const load0 = loadavg()[0]!;
    const t0 = performance.now();
    const child = spawn(process.execPath, ['--import', `file://${rssHook}`, CLI, 'bench', ...args, '--quiet'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (b: Buffer) => {
      err = (err + b.toString()).slice(-4000);
    });
    child.on('exit', (code) => {
      const m = /sim-scale-maxrss-kb=(\d+)/.exec(err);
      done({
        wallS: (performance.now() - t0) / 1000,
        rssBytes: m ? Number(m[1]) * 1024 : NaN,
        code,
        load: [load0, loadavg()[0]!],
        stderrTail: err.replace(/\nsim-scale-maxrss-kb=\d+\n/, '').trim().slice(-300),
      });
    });
  });
}

/** A BurstGPT-shaped CSV of `rows` rows (v1 columns), written as a stream. */
async function writeBurstGpt(path: string, rows: number): Promise<void> {
  const rng = seededRng(47);
  const out = createWriteStream(path);
  const logNormal = (mean: number, sigma: number) => Math.max(1, Math.round(mean * Math.exp(sigma * gauss() - (sigma * sigma) / 2)));
  const gauss = () => Math.sqrt(-2 * Math.log(1 - rng())) * Math.cos(2 * Math.PI * rng());
  out.write('Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n');
  let t = 0;
  let chunk = '';
  for (let i = 0; i < rows; i++) {
    t += -Math.log(1 - rng());
    const input = Math.min(logNormal(600, 1), 30_000);
    const output = rng() < 0.01 ? 0 : Math.min(logNormal(250, 0.8), 4000);
    chunk += `${t.toFixed(3)},ChatGPT,${input},${output},${input + output},Conversation log\n`;
    if (chunk.length > 1 << 20) {
      if (!out.write(chunk)) await new Promise<void>((r) => out.once('drain', () => r()));
      chunk = '';
    }
  }
  out.write(chunk);
  await new Promise<void>((r, j) => out.end((e?: Error | null) => (e ? j(e) : r())));
}

interface Row {
  target: string;
  ran: string;
  figure: string;
  limit: string;
  /** null: the case ran smaller than the target names, so the figure says nothing of the target. */
  met: boolean | null;
  load: string;
}

const rows: Row[] = [];
const fmtLoad = (r: Run) => `${r.load[0].toFixed(1)}→${r.load[1].toFixed(1)}`;
const failed = (r: Run) => (r.code === 0 ? '' : ` (exit ${r.code}: ${r.stderrTail})`);

async function main(): Promise<void> {
  if (CASES.includes('kvgate-1m')) {
    const r = await bench(['--workload', 'mixed', '--workers', '64', '--size', String(SIZE_1M), '--policy', 'kvgate', '--seed', '1']);
    const ran = `${SIZE_1M.toLocaleString('en-US')} × 64 kvgate`;
    const full = SIZE_1M >= 1_000_000;
    rows.push({ target: '1M × 64 kvgate: time', ran, figure: `${r.wallS.toFixed(1)} s${failed(r)}`, limit: '< 60 s', met: full ? r.code === 0 && r.wallS < 60 : null, load: fmtLoad(r) });
    rows.push({ target: '1M × 64 kvgate: peak RSS', ran, figure: `${(r.rssBytes / GB).toFixed(2)} GB`, limit: '< 2 GB', met: full ? r.code === 0 && r.rssBytes < 2 * GB : null, load: fmtLoad(r) });
  }
  if (CASES.includes('rr-100k')) {
    const r = await bench(['--workload', 'mixed', '--workers', '16', '--size', String(SIZE_100K), '--policy', 'round-robin', '--seed', '1']);
    rows.push({ target: '100k × 16 round-robin: time', ran: `${SIZE_100K.toLocaleString('en-US')} × 16`, figure: `${r.wallS.toFixed(1)} s, ${(r.rssBytes / GB).toFixed(2)} GB${failed(r)}`, limit: '< 8 s', met: SIZE_100K >= 100_000 ? r.code === 0 && r.wallS < 8 : null, load: fmtLoad(r) });
  }
  if (CASES.includes('trace-10m')) {
    const path = join(dir, 'burstgpt-shaped.csv');
    const t0 = performance.now();
    await writeBurstGpt(path, ROWS);
    const writeS = (performance.now() - t0) / 1000;
    const r = await bench(['--trace', path, '--workers', '16', '--policy', 'round-robin', '--seed', '1']);
    rmSync(path, { force: true });
    rows.push({
      target: '10M-row BurstGPT replay: peak RSS',
      ran: `${ROWS.toLocaleString('en-US')} rows (written in ${writeS.toFixed(0)} s)`,
      figure: `${(r.rssBytes / GB).toFixed(2)} GB in ${r.wallS.toFixed(0)} s${failed(r)}`,
      limit: '< 2 GB, completes',
      met: ROWS >= 10_000_000 ? r.code === 0 && r.rssBytes < 2 * GB : null,
      load: fmtLoad(r),
    });
  }
  if (CASES.includes('capacity')) {
    const base = ['--workload', CAP_WORKLOAD, '--size', String(CAP_SIZE), '--workers', '8', '--seed', '1', '--capacity', ...CAP_SECONDS];
    const singles: number[] = [];
    const load0 = loadavg()[0]!;
    for (const p of CAP_POLICIES) singles.push((await bench([...base, '--policy', p, '--jobs', '1'])).wallS);
    const slowest = Math.max(...singles);
    const all = await bench([...base, '--policy', CAP_POLICIES.join(','), '--jobs', String(JOBS)]);
    const bound = (1.2 * slowest) / CORES;
    rows.push({
      target: '--capacity, 6 policies: wall time',
      ran: `${CAP_WORKLOAD} ${CAP_SIZE} × 8, --jobs ${JOBS}, ${CORES} cores`,
      figure: `${all.wallS.toFixed(1)} s (serial sum ${singles.reduce((a, b) => a + b, 0).toFixed(1)} s, slowest ${slowest.toFixed(1)} s)${failed(all)}`,
      limit: `≤ ${bound.toFixed(1)} s (1.2 × slowest ÷ cores)`,
      met: all.code === 0 && all.wallS <= bound,
      load: `${load0.toFixed(1)}→${all.load[1].toFixed(1)}`,
    });
  }
  if (values.json) {
    process.stdout.write(JSON.stringify({ cores: CORES, rows }, null, 2) + '\n');
    return;
  }
  const head = ['target', 'ran', 'figure', 'limit', 'met', 'load (1-min, start→end)'];
  const cells = rows.map((r) => [r.target, r.ran, r.figure, r.limit, r.met === null ? 'not judged (smaller run)' : r.met ? 'yes' : 'MISSED', r.load]);
  const docs = values['write-docs'] ?? [];
  if (docs.length > 0) {
    const md = [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`, ...cells.map((c) => `| ${c.map((x) => x.replace(/\|/g, '\\|')).join(' | ')} |`)].join('\n');
    process.exitCode = writeGeneratedTables(docs, ['npm run bench -- sim-scale', ...process.argv.slice(2)].join(' '), { targets: md }, 'bench sim-scale');
  }
  const widths = head.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const line = (c: string[]) => c.map((x, i) => x.padEnd(widths[i]!)).join('  ');
  process.stdout.write(`${line(head)}\n${line(widths.map((w) => '-'.repeat(w)))}\n${cells.map(line).join('\n')}\n`);
}

void main();
