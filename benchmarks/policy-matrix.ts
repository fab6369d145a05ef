/**
 * `npm run bench -- policies`: kvgate's routing policy against round-robin, the peer routers'
 * policies and the oracle, on every built-in workload and on the public Mooncake and Azure traces,
 * at 8 and 16 simulated H100 workers serving Llama-3.1-8B. Every scenario is one `kvgate bench`
 * run (all policies on the identical request sequence); this script prints each policy's figures
 * and kvgate's ratios against the targets:
 *
 *   TTFT p99 ≤ 0.5 × round-robin's and ≤ 0.85 × the best peer's (sglang-cache-aware, llm-d,
 *   llm-d-precise, llm-d-legacy, dynamo, aibrix);
 *   goodput ≥ the best peer's; prefix hit rate ≥ 0.9 × oracle's; no preemptions on `bursty` where
 *   round-robin preempts.
 *
 * 16-worker scenarios double the arrival rate so the per-worker load matches the 8-worker ones.
 *
 * With --capacity it runs `kvgate bench --capacity` instead and prints each policy's capacity at
 * SLO (the highest rate at which ≥ 90% of requests meet TTFT ≤ 1 s + 100 ms per 1k prompt tokens
 * and TPOT ≤ 50 ms) and kvgate's capacity over round-robin's and over the best peer's. Closed-loop
 * workloads get more requests there (multi-turn 40,000, agentic 12,000 at 8 workers): fewer
 * sessions cannot send enough load to find the fleet's limit. --quick uses smaller sizes.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { benchArgs } from './args.js';
import { writeGeneratedTables } from './doc-tables.js';
import { PEERS } from './peers.js';

const here = dirname(fileURLToPath(import.meta.url));
const cli = join(here, '..', 'src', 'cli.js');
const TRACES = process.env.KVGATE_TRACES ?? join(here, '..', '..', '..', 'shared', 'traces');

const POLICIES = ['round-robin', ...PEERS, 'kvgate', 'oracle'];
/** Flags every `kvgate bench` run of the matrix gets (--declared-max-tokens). */
let shaping: string[] = [];

const HELP = `npm run bench -- policies [options]

Runs kvgate bench on every built-in workload and on the Mooncake and Azure traces, with the
policies ${POLICIES.join(', ')}, and prints kvgate's ratios against its targets.

Options:
  --capacity         capacity-first: each policy's capacity at SLO (kvgate bench --capacity, up to
                     14 probes per policy, 8-9 in practice) and kvgate's capacity ÷ round-robin's
                     and ÷ the best peer's (peers: ${PEERS.join(', ')} and round-robin); then one
                     more run of every policy at round-robin's capacity (the common load) for
                     kvgate's TTFT, TPOT, ITL and E2E p99 against the best peer's on each, its
                     prefix hit rate against the best peer's and the ideal, and preemptions.
                     Every probe of a built-in workload lasts at least 60 s of arrivals (kvgate
                     bench --capacity-seconds; rollouts 300 s), the common load replays round-robin's probe there,
                     and the table adds the work bound (the rate no policy can sustain beyond).
                     Wall time with --quick on a shared 2-core machine: 55 min at 8 workers
                     (shared-prefix 7 min, multi-turn 9, agentic 10, Azure 11; rollouts 6 more), 35 min for the
                     four scenarios at 16 workers
  --quick            smaller sizes before lengthening (shared-prefix, rag, bursty, mixed 2,000;
                     multi-turn 20,000; agentic 12,000; fewshot-bursts 3,000; rollouts 3,000;
                     Mooncake 1,500 at 8
                     workers; Azure the whole trace in either mode)
  --workers LIST     fleet sizes (default 8,16)
  --only LIST        scenario names to run (default: all; see the table's first column)
  --traces DIR       folder with mooncake_synthetic_trace.jsonl and AzureLLMInferenceTrace_conv.csv
                     (default ../shared/traces beside the checkout, or $KVGATE_TRACES)
  --slo-ttft MS      TTFT SLO for goodput (default 1000)
  --slo-tpot MS      TPOT SLO for goodput (default 50)
  --slo-ttft-per-1k MS  extra TTFT per 1,000 prompt tokens, capacity mode only (default 100)
  --seed N           seed of the generated workloads (default 0); traces replay as recorded
  --declared-max-tokens N
                     every request sends max_tokens = max(N, its output length) (kvgate bench
                     --declared-max-tokens): routers cannot read answer lengths from requests
  --min-band-attainment X
                     capacity mode: also hold every prompt-length band (< 2k, 2k–8k, ≥ 8k tokens)
                     to X (kvgate bench --min-band-attainment), so no policy's capacity rests on
                     letting its long prompts miss
  --json FILE        write every scenario's results as JSON
  --write-docs FILE  rewrite the tables this command generated in a markdown file: the blocks
                     between "<!-- generated by: npm run bench -- policies ARGS (TABLE) -->" and
                     "<!-- end generated -->" whose ARGS are this run's (repeatable). Tables:
                     capacity mode headline, capacity, common-load; otherwise verdict
  -h, --help         this text
`;

interface Scenario {
  name: string;
  args: string[];
  /** Shortest capacity probe, s of arrivals (kvgate bench --capacity-seconds; default 60). */
  capacitySeconds?: number;
}

/** Requests per scenario at 8 workers: [ordinary, capacity, capacity --quick]. */
const SIZES: Record<string, [number, number, number]> = {
  'shared-prefix': [5000, 5000, 2000],
  'multi-turn': [5000, 40000, 20000],
  rag: [5000, 5000, 2000],
  bursty: [5000, 5000, 2000],
  mixed: [5000, 5000, 2000],
  agentic: [12000, 12000, 12000],
  'fewshot-bursts': [8000, 8000, 3000],
  rollouts: [4000, 4000, 3000],
  mooncake: [3993, 3993, 1500],
  azure: [8000, 20000, 20000],
};

function scenarios(workers: number, traces: string, mode: 0 | 1 | 2): Scenario[] {
  const scale = workers / 8;
  const size = (name: string) => String(Math.round(SIZES[name]![mode] * scale));
  const out: Scenario[] = ['shared-prefix', 'multi-turn', 'rag', 'bursty', 'mixed', 'agentic', 'fewshot-bursts', 'rollouts'].map((w) => ({
    name: w,
    args: ['--workload', w, '--size', size(w), '--rate-scale', String(scale)],
  }));
  // rollouts' answers run for minutes: a one-minute probe would end before its fleet is loaded.
  out.find((x) => x.name === 'rollouts')!.capacitySeconds = 300;
  const mooncake = join(traces, 'mooncake_synthetic_trace.jsonl');
  const azure = join(traces, 'AzureLLMInferenceTrace_conv.csv');
  // Rates chosen so the trace keeps the fleet 60–90% busy under round-robin (docs/benchmarks.md).
  if (existsSync(mooncake)) {
    out.push({ name: 'mooncake', args: ['--trace', mooncake, '--rate-scale', String(1.5 * scale), ...(mode === 2 ? ['--limit', size('mooncake')] : [])] });
  }
  if (existsSync(azure)) {
    out.push({
      name: 'azure',
      args: ['--trace', azure, '--azure-shared-prefix', '0.5', '--rate-scale', String(10 * scale), '--limit', size('azure')],
    });
  }
  return out;
}

interface CapacityJson {
  work_bound: { requests_per_s: number } | null;
  capacity: { best_peer: string | null; vs_round_robin: Record<string, number | null>; vs_best_peer: Record<string, number | null> };
  policies: Array<{
    name: string;
    capacity: {
      rate_scale: number | null;
      requests_per_s: number | null;
      work_bound_rps?: number | null;
      attainment: number | null;
      worst_band_attainment?: number | null;
      converged: boolean;
      bracket: [number | null, number | null];
      probes: Array<{ rate_scale: number; requests?: number }>;
    };
  }>;
}

interface PolicyRow {
  name: string;
  completed: number;
  rejected: number;
  preemptions: number;
  ttft_ms: { p50: number; p99: number };
  goodput_rps: number;
  prefix_hit_rate: number;
}

const f = (x: number, d = 0): string => (Number.isFinite(x) ? x.toFixed(d) : '—');

function main(): number {
  const { values } = benchArgs('policies', {
    options: {
      workers: { type: 'string', default: '8,16' },
      only: { type: 'string' },
      traces: { type: 'string', default: TRACES },
      'slo-ttft': { type: 'string', default: '1000' },
      'slo-tpot': { type: 'string', default: '50' },
      'slo-ttft-per-1k': { type: 'string', default: '100' },
      capacity: { type: 'boolean', default: false },
      quick: { type: 'boolean', default: false },
      seed: { type: 'string', default: '0' },
      'declared-max-tokens': { type: 'string' },
      'min-band-attainment': { type: 'string' },
      json: { type: 'string' },
      'write-docs': { type: 'string', multiple: true },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  docs = values['write-docs'] ?? [];
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const only = values.only ? new Set(values.only.split(',')) : null;
  if (!/^\d+$/.test(values.seed)) {
    process.stderr.write(`bench policies: --seed must be a non-negative integer, got ${JSON.stringify(values.seed)}\n`);
    return 2;
  }
  const declared = values['declared-max-tokens'];
  if (declared !== undefined && !/^[1-9]\d*$/.test(declared)) {
    process.stderr.write(`bench policies: --declared-max-tokens must be a positive integer, got ${JSON.stringify(declared)}\n`);
    return 2;
  }
  shaping = declared !== undefined ? ['--declared-max-tokens', declared] : [];
  const floor = values['min-band-attainment'];
  if (floor !== undefined && !(Number(floor) > 0 && Number(floor) <= 1)) {
    process.stderr.write(`bench policies: --min-band-attainment must be a fraction in (0, 1], got ${JSON.stringify(floor)}\n`);
    return 2;
  }
  if (floor !== undefined && !values.capacity) {
    process.stderr.write('bench policies: --min-band-attainment applies to --capacity only\n');
    return 2;
  }
  if (values.capacity) return capacityMatrix(values, only);
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-matrix-'));
  const all: Array<{ scenario: string; workers: number; policies: PolicyRow[] }> = [];
  const detail: string[] = [];
  const verdict: string[] = [
    '| scenario | workers | kvgate TTFT p99 ms | × round-robin (≤ 0.5) | × best peer (≤ 0.85) | oracle p99 | goodput ÷ best peer (≥ 1) | hit ÷ oracle (≥ 0.9) | preemptions kvgate / RR |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  try {
    for (const workers of values.workers.split(',').map(Number)) {
      for (const s of scenarios(workers, values.traces, values.quick ? 2 : 0)) {
        if (only && !only.has(s.name)) continue;
        const out = join(dir, `${s.name}-${workers}.json`);
        process.stderr.write(`${s.name}, ${workers} workers...\n`);
        const r = spawnSync(
          process.execPath,
          [cli, 'bench', ...s.args, ...shaping, '--seed', values.seed, '--workers', String(workers), '--policy', POLICIES.join(','), '--slo-ttft', values['slo-ttft'], '--slo-tpot', values['slo-tpot'], '--json', out, '--quiet'],
          { stdio: ['ignore', 'ignore', 'inherit'] },
        );
        if (r.status !== 0) throw new Error(`kvgate bench failed for ${s.name} (exit ${r.status})`);
        const res = JSON.parse(readFileSync(out, 'utf8')) as { policies: PolicyRow[] };
        all.push({ scenario: s.name, workers, policies: res.policies });
        const by = new Map(res.policies.map((p) => [p.name, p]));
        const k = by.get('kvgate')!;
        const rr = by.get('round-robin')!;
        const oracle = by.get('oracle')!;
        const peers = PEERS.map((n) => by.get(n)!);
        const bestP99 = Math.min(...peers.map((p) => p.ttft_ms.p99));
        const bestPeer = peers.find((p) => p.ttft_ms.p99 === bestP99)!;
        const bestGoodput = Math.max(...peers.map((p) => p.goodput_rps));
        verdict.push(
          `| ${s.name} | ${workers} | ${f(k.ttft_ms.p99)} | ${f(k.ttft_ms.p99 / rr.ttft_ms.p99, 2)} | ${f(k.ttft_ms.p99 / bestP99, 2)} (${bestPeer.name}) | ${f(oracle.ttft_ms.p99)} | ${f(k.goodput_rps / bestGoodput, 3)} | ${f(k.prefix_hit_rate / oracle.prefix_hit_rate, 2)} | ${k.preemptions} / ${rr.preemptions} |`,
        );
        detail.push(`\n${s.name}, ${workers} workers (\`kvgate bench ${s.args.join(' ')} --workers ${workers}\`)\n`);
        detail.push('| policy | TTFT p50 ms | TTFT p99 ms | goodput req/s | prefix hit | preemptions | rejected |');
        detail.push('|---|---:|---:|---:|---:|---:|---:|');
        for (const p of res.policies) {
          detail.push(
            `| ${p.name} | ${f(p.ttft_ms.p50)} | ${f(p.ttft_ms.p99)} | ${f(p.goodput_rps, 2)} | ${f(p.prefix_hit_rate * 100, 1)}% | ${p.preemptions} | ${p.rejected} |`,
          );
        }
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  process.stdout.write(`\nkvgate against its targets (SLO: TTFT ≤ ${values['slo-ttft']} ms, TPOT ≤ ${values['slo-tpot']} ms)\n\n${verdict.join('\n')}\n`);
  process.stdout.write(`\nPer scenario\n${detail.join('\n')}\n`);
  if (values.json) writeFileSync(values.json, JSON.stringify(all, null, 2));
  return writeDocs({ verdict: verdict.join('\n') });
}

/** --capacity: each policy's capacity at SLO per scenario and fleet size. */
function capacityMatrix(
  values: { workers?: string; traces?: string; quick?: boolean; seed?: string; 'slo-ttft'?: string; 'slo-tpot'?: string; 'slo-ttft-per-1k'?: string; 'min-band-attainment'?: string; json?: string },
  only: Set<string> | null,
): number {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-matrix-'));
  const all: Array<{ scenario: string; workers: number; args: string[]; wall_s: number; results: CapacityJson; at_round_robin_capacity: LoadJson | null }> = [];
  const common: string[] = [
    '| scenario | workers | kvgate capacity ÷ best peer (≥ 1) | ÷ round-robin | TTFT p99 ÷ best peer (≤ 1) | TPOT p99 ÷ best (≤ 1.1) | ITL p99 ÷ best (≤ 1.1) | ITL p99.9 ÷ best | E2E p99 ÷ best (≤ 1.1) | prefix hit ÷ best peer (≥ 0.9) | hit / ideal | preemptions kvgate / RR |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  const verdict: string[] = [
    '| scenario | workers | round-robin req/s | best peer req/s | kvgate req/s | oracle req/s | work bound req/s | kvgate ÷ RR | kvgate ÷ best peer | best peer ÷ bound | wall s |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  const headline: string[] = [
    '| scenario | workers | round-robin | best peer | kvgate | **kvgate ÷ best peer** | ÷ round-robin | TTFT p99 ÷ best | TPOT p99 ÷ best | ITL p99 ÷ best | E2E p99 ÷ best | prefix hit / ideal (÷ best peer) | preemptions kvgate / RR |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  const detail: string[] = [];
  const mark = (c: CapacityJson['policies'][number]['capacity']) => (c.rate_scale === null ? '—' : `${f(c.requests_per_s ?? NaN, 1)}${c.converged ? '' : c.bracket[1] === null ? ' (≥)' : ' (?)'}`);
  try {
    for (const workers of values.workers!.split(',').map(Number)) {
      for (const s of scenarios(workers, values.traces!, values.quick ? 2 : 1)) {
        if (only && !only.has(s.name)) continue;
        const out = join(dir, `${s.name}-${workers}.json`);
        process.stderr.write(`${s.name}, ${workers} workers (capacity)...\n`);
        const t0 = performance.now();
        const slo = ['--slo-ttft', values['slo-ttft']!, '--slo-ttft-per-1k', values['slo-ttft-per-1k']!, '--slo-tpot', values['slo-tpot']!];
        const floor = values['min-band-attainment'] !== undefined ? ['--min-band-attainment', values['min-band-attainment']] : [];
        const probe = s.capacitySeconds !== undefined ? ['--capacity-seconds', String(s.capacitySeconds)] : [];
        const args = [...s.args, ...shaping, '--seed', values.seed!, '--workers', String(workers), '--policy', POLICIES.join(','), '--capacity', ...probe, ...slo, ...floor, '--json', out, '--quiet'];
        const r = spawnSync(process.execPath, [cli, 'bench', ...args], { stdio: ['ignore', 'ignore', 'inherit'] });
        if (r.status !== 0) throw new Error(`kvgate bench failed for ${s.name} (exit ${r.status})`);
        const wall = (performance.now() - t0) / 1000;
        const res = JSON.parse(readFileSync(out, 'utf8')) as CapacityJson;
        const by = new Map(res.policies.map((p) => [p.name, p.capacity]));
        const peer = res.capacity.best_peer;
        // The common load: every policy again at round-robin's capacity, same requests.
        const rrCap = by.get('round-robin');
        const rrScale = rrCap?.rate_scale ?? null;
        let load: LoadJson | null = null;
        if (rrScale !== null) {
          process.stderr.write(`${s.name}, ${workers} workers (at round-robin's capacity, ×${rrScale})...\n`);
          const loadOut = join(dir, `${s.name}-${workers}-load.json`);
          // The requests of round-robin's probe there: as many as lasted the probe's minimum time.
          const probed = rrCap!.probes.find((p) => p.rate_scale === rrScale)?.requests;
          const loadArgs = [...withAtLeast(withRateScale(s.args, rrScale), probed), ...shaping, '--seed', values.seed!, '--workers', String(workers), '--policy', POLICIES.join(','), ...slo, '--json', loadOut, '--quiet'];
          const lr = spawnSync(process.execPath, [cli, 'bench', ...loadArgs], { stdio: ['ignore', 'ignore', 'inherit'] });
          if (lr.status !== 0) throw new Error(`kvgate bench failed for ${s.name} at round-robin's capacity (exit ${lr.status})`);
          load = JSON.parse(readFileSync(loadOut, 'utf8')) as LoadJson;
          common.push(commonLoadRow(s.name, workers, res, load));
          const label = s.capacitySeconds !== undefined ? `${s.name} (${s.capacitySeconds} s probes)` : s.name;
          headline.push(headlineRow(label, workers, res, load, mark));
        }
        all.push({ scenario: s.name, workers, args: s.args, wall_s: Math.round((performance.now() - t0) / 1000), results: res, at_round_robin_capacity: load });
        verdict.push(
          `| ${s.name} | ${workers} | ${mark(by.get('round-robin')!)} | ${peer ? `${mark(by.get(peer)!)} (${peer})` : '—'} | ${mark(by.get('kvgate')!)} | ${mark(by.get('oracle')!)} | ` +
            `${f(res.work_bound?.requests_per_s ?? NaN, 1)} | ${f(res.capacity.vs_round_robin.kvgate ?? NaN, 2)} | ${f(res.capacity.vs_best_peer.kvgate ?? NaN, 2)} | ` +
            `${peer ? f((by.get(peer)!.requests_per_s ?? NaN) / (by.get(peer)!.work_bound_rps ?? NaN), 2) : '—'} | ${f(wall)} |`,
        );
        detail.push(`\n${s.name}, ${workers} workers (\`kvgate bench ${s.args.join(' ')} --workers ${workers} --capacity\`)\n`);
        detail.push('| policy | capacity × rate | capacity req/s | attainment there | worst prompt band there | probes | ÷ round-robin | ÷ best peer |');
        detail.push('|---|---:|---:|---:|---:|---:|---:|---:|');
        for (const p of res.policies) {
          const c = p.capacity;
          detail.push(
            `| ${p.name} | ${c.rate_scale === null ? '—' : f(c.rate_scale, 3)}${c.converged ? '' : ' (not converged)'} | ${f(c.requests_per_s ?? NaN, 1)} | ` +
              `${c.attainment === null ? '—' : `${f(c.attainment * 100, 1)}%`} | ${c.worst_band_attainment == null ? '—' : `${f(c.worst_band_attainment * 100, 1)}%`} | ${c.probes.length} | ${f(res.capacity.vs_round_robin[p.name] ?? NaN, 2)} | ${f(res.capacity.vs_best_peer[p.name] ?? NaN, 2)} |`,
          );
        }
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  process.stdout.write(
    `\nCapacity at SLO: highest offered rate with ≥ 90% of requests within TTFT ≤ ${values['slo-ttft']} ms + ${values['slo-ttft-per-1k']} ms/1k prompt tokens, TPOT ≤ ${values['slo-tpot']} ms` +
      (values['min-band-attainment'] !== undefined ? `, and ≥ ${f(Number(values['min-band-attainment']) * 100)}% of every prompt-length band` : '') +
      ` (≥: no probe missed the target; ?: probe budget ran out); every probe of a built-in workload lasts ≥ 60 s of arrivals;` +
      ` work bound: the rate no policy can sustain beyond (the requests' least GPU time, src/bench/work-bound.ts), of the run's requests;` +
      ` best peer ÷ bound: its capacity over the bound of the requests replayed there\n\n${verdict.join('\n')}\n`,
  );
  process.stdout.write(
    `\nkvgate capacity-first, seed ${values.seed}${shaping.length > 0 ? `, max_tokens declared ${shaping[1]}` : ''}: capacity ratios, then every latency at the common load (each policy at round-robin's capacity)` +
      ` against the best peer on that metric (peers: ${PEERS.join(', ')}); hit / ideal: kvgate's prefix hit rate and the trace's inherent reuse\n\n${common.join('\n')}\n`,
  );
  process.stdout.write(`\nPer scenario\n${detail.join('\n')}\n`);
  if (values.json) writeFileSync(values.json, JSON.stringify(all, null, 2));
  return writeDocs({ headline: headline.join('\n'), capacity: verdict.join('\n'), 'common-load': common.join('\n') });
}

/** Markdown files whose generated tables this run rewrites (--write-docs). */
let docs: string[] = [];

/** Rewrite this command's generated tables in every --write-docs file; 2 when a file has none of them. */
function writeDocs(tables: Record<string, string>): number {
  return writeGeneratedTables(docs, ['npm run bench -- policies', ...process.argv.slice(2)].join(' '), tables, 'bench policies');
}

interface LoadJson {
  ideal_hit_rate: number;
  policies: Array<{
    name: string;
    preemptions: number;
    prefix_hit_rate: number;
    ttft_ms: { p99: number };
    tpot_ms: { p99: number };
    itl_ms: { p99: number };
    itl_tail_ms: { p99_9: number };
    e2e_ms: { p99: number };
  }>;
}

/** The scenario's arguments with its --rate-scale replaced by `scale`. */
function withRateScale(args: readonly string[], scale: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--rate-scale') i++;
    else out.push(args[i]!);
  }
  return [...out, '--rate-scale', String(scale)];
}

/** The scenario's arguments with its --size raised to `n` (a built-in workload; a trace keeps its --limit). */
function withAtLeast(args: readonly string[], n: number | undefined): string[] {
  const out = [...args];
  const i = out.indexOf('--size');
  if (n !== undefined && i >= 0 && n > Number(out[i + 1])) out[i + 1] = String(n);
  return out;
}

/** One row of the headline table: capacities in req/s, then kvgate against the best peer on each latency at the common load. */
function headlineRow(
  name: string,
  workers: number,
  cap: CapacityJson,
  load: LoadJson,
  mark: (c: CapacityJson['policies'][number]['capacity']) => string,
): string {
  const capOf = new Map(cap.policies.map((p) => [p.name, p.capacity]));
  const { k, rr, peers, ratio } = kvgateAgainstPeers(load);
  const bestHit = Math.max(...peers.map((p) => p.prefix_hit_rate));
  const peer = cap.capacity.best_peer;
  return (
    `| ${name} | ${workers} | ${mark(capOf.get('round-robin')!)} | ${peer ? `${mark(capOf.get(peer)!)} (${peer})` : '—'} | ${mark(capOf.get('kvgate')!)} | ` +
    `**${f(cap.capacity.vs_best_peer.kvgate ?? NaN, 2)}** | ${f(cap.capacity.vs_round_robin.kvgate ?? NaN, 2)} | ` +
    `${ratio((p) => p.ttft_ms.p99)} | ${ratio((p) => p.tpot_ms.p99)} | ${ratio((p) => p.itl_ms.p99)} | ${ratio((p) => p.e2e_ms.p99)} | ` +
    `${f(k.prefix_hit_rate * 100, 1)}% / ${f(load.ideal_hit_rate * 100, 1)}% (${bestHit > 0 ? f(k.prefix_hit_rate / bestHit, 2) : '—'}) | ${k.preemptions} / ${rr.preemptions} |`
  );
}

/** One row of the capacity-first table: capacity ratios, then kvgate against the best peer on each metric at the common load. */
function commonLoadRow(name: string, workers: number, cap: CapacityJson, load: LoadJson): string {
  const { k, rr, peers, ratio } = kvgateAgainstPeers(load);
  const bestHit = Math.max(...peers.map((p) => p.prefix_hit_rate));
  const hitRatio = bestHit > 0 ? f(k.prefix_hit_rate / bestHit, 2) : '—';
  const peer = cap.capacity.best_peer;
  return (
    `| ${name} | ${workers} | ${f(cap.capacity.vs_best_peer.kvgate ?? NaN, 2)}${peer ? ` (${peer})` : ''} | ${f(cap.capacity.vs_round_robin.kvgate ?? NaN, 2)} | ` +
    `${ratio((p) => p.ttft_ms.p99)} | ${ratio((p) => p.tpot_ms.p99)} | ${ratio((p) => p.itl_ms.p99)} | ${ratio((p) => p.itl_tail_ms.p99_9)} | ${ratio((p) => p.e2e_ms.p99)} | ` +
    `${hitRatio} | ${f(k.prefix_hit_rate * 100, 1)}% / ${f(load.ideal_hit_rate * 100, 1)}% | ${k.preemptions} / ${rr.preemptions} |`
  );
}

process.exitCode = main();

/** kvgate's, round-robin's and the peers' rows of a load run, and kvgate ÷ the best peer on a metric (lower is better), naming it. */
function kvgateAgainstPeers(load: LoadJson): {
  k: LoadJson['policies'][number];
  rr: LoadJson['policies'][number];
  peers: LoadJson['policies'][number][];
  ratio: (get: (p: LoadJson['policies'][number]) => number) => string;
} {
  const by = new Map(load.policies.map((p) => [p.name, p]));
  const k = by.get('kvgate')!;
  const peers = PEERS.map((n) => by.get(n)).filter((p): p is LoadJson['policies'][number] => p !== undefined);
  const ratio = (get: (p: LoadJson['policies'][number]) => number): string => {
    const best = Math.min(...peers.map(get));
    return `${f(get(k) / best, 2)} (${peers.find((p) => get(p) === best)!.name})`;
  };
  return { k, rr: by.get('round-robin')!, peers, ratio };
}
