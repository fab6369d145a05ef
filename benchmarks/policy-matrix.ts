/**
 * `npm run bench:policies`: kvgate's routing policy against round-robin, the peer routers'
 * policies and the oracle, on every built-in workload and on the public Mooncake and Azure traces,
 * at 8 and 16 simulated H100 workers serving Llama-3.1-8B. Every scenario is one `kvgate bench`
 * run (all policies on the identical request sequence); this script prints each policy's figures
 * and kvgate's ratios against the targets:
 *
 *   TTFT p99 ≤ 0.5 × round-robin's and ≤ 0.85 × the best peer's (sglang-cache-aware, llm-d, dynamo);
 *   goodput ≥ the best peer's; prefix hit rate ≥ 0.9 × oracle's; no preemptions on `bursty` where
 *   round-robin preempts.
 *
 * 16-worker scenarios double the arrival rate so the per-worker load matches the 8-worker ones.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));
const cli = join(here, '..', 'src', 'cli.js');
const TRACES = process.env.KVGATE_TRACES ?? join(here, '..', '..', '..', 'shared', 'traces');

const PEERS = ['sglang-cache-aware', 'llm-d', 'dynamo'];
const POLICIES = ['round-robin', ...PEERS, 'kvgate', 'oracle'];

const HELP = `npm run bench:policies -- [options]

Runs kvgate bench on every built-in workload and on the Mooncake and Azure traces, with the
policies ${POLICIES.join(', ')}, and prints kvgate's ratios against its targets.

Options:
  --workers LIST     fleet sizes (default 8,16)
  --only LIST        scenario names to run (default: all; see the table's first column)
  --traces DIR       folder with mooncake_synthetic_trace.jsonl and AzureLLMInferenceTrace_conv.csv
                     (default ../shared/traces beside the checkout, or $KVGATE_TRACES)
  --slo-ttft MS      TTFT SLO for goodput (default 1000)
  --slo-tpot MS      TPOT SLO for goodput (default 50)
  --json FILE        write every scenario's results as JSON
  -h, --help         this text
`;

interface Scenario {
  name: string;
  args: string[];
}

function scenarios(workers: number, traces: string): Scenario[] {
  const scale = workers / 8;
  const out: Scenario[] = ['shared-prefix', 'multi-turn', 'rag', 'bursty', 'mixed'].map((w) => ({
    name: w,
    args: ['--workload', w, '--size', String(5000 * scale), '--rate-scale', String(scale)],
  }));
  const mooncake = join(traces, 'mooncake_synthetic_trace.jsonl');
  const azure = join(traces, 'AzureLLMInferenceTrace_conv.csv');
  // Rates chosen so the trace keeps the fleet 60–90% busy under round-robin (see README).
  if (existsSync(mooncake)) out.push({ name: 'mooncake', args: ['--trace', mooncake, '--rate-scale', String(1.5 * scale)] });
  if (existsSync(azure)) {
    out.push({
      name: 'azure',
      args: ['--trace', azure, '--azure-shared-prefix', '0.5', '--rate-scale', String(10 * scale), '--limit', String(8000 * scale)],
    });
  }
  return out;
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
  const { values } = parseArgs({
    options: {
      workers: { type: 'string', default: '8,16' },
      only: { type: 'string' },
      traces: { type: 'string', default: TRACES },
      'slo-ttft': { type: 'string', default: '1000' },
      'slo-tpot': { type: 'string', default: '50' },
      json: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const only = values.only ? new Set(values.only.split(',')) : null;
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-matrix-'));
  const all: Array<{ scenario: string; workers: number; policies: PolicyRow[] }> = [];
  const detail: string[] = [];
  const verdict: string[] = [
    '| scenario | workers | kvgate TTFT p99 ms | × round-robin (≤ 0.5) | × best peer (≤ 0.85) | oracle p99 | goodput ÷ best peer (≥ 1) | hit ÷ oracle (≥ 0.9) | preemptions kvgate / RR |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  try {
    for (const workers of values.workers!.split(',').map(Number)) {
      for (const s of scenarios(workers, values.traces!)) {
        if (only && !only.has(s.name)) continue;
        const out = join(dir, `${s.name}-${workers}.json`);
        process.stderr.write(`${s.name}, ${workers} workers...\n`);
        const r = spawnSync(
          process.execPath,
          [cli, 'bench', ...s.args, '--workers', String(workers), '--policy', POLICIES.join(','), '--slo-ttft', values['slo-ttft']!, '--slo-tpot', values['slo-tpot']!, '--json', out, '--quiet'],
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
  return 0;
}

process.exitCode = main();
