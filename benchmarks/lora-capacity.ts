/**
 * `npm run bench -- lora-capacity`: LoRA placement's capacity at SLO in the fleet simulation, the
 * companion of `npm run bench -- lora` (real-time workers, a few policies at one rate).
 *
 * For each `--max-loras` and seed, `kvgate bench --workload lora --capacity` finds each policy's
 * highest rate meeting the SLO: round-robin, least-load, llm-d (its default, sticky until
 * saturated), llm-d-legacy (the weighted blend), llm-d-legacy with the Gateway API Inference
 * Extension's lora-affinity-scorer at weight 1 (`llm-d-legacy.loraWeight=1`), kvgate without its
 * LoRA affinity (`kvgate.loraAffinity=false`) and kvgate. A variant with a knob set is a run of
 * its own (`--set` applies to every policy of its name in a run); each run replays the same
 * requests. Figures are multiples of the workload's default rate (its `rate_scale`), seeds side
 * by side, and kvgate ÷ the best of the others per seed.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { benchArgs } from './args.js';
import { writeGeneratedTables } from './doc-tables.js';

const here = dirname(fileURLToPath(import.meta.url));
const cli = join(here, '..', 'src', 'cli.js');

const HELP = `npm run bench -- lora-capacity [options]

Capacity at SLO of LoRA placement in the fleet simulation (kvgate bench --workload lora
--capacity): per --max-loras and seed, each policy's highest rate meeting the SLO, as a multiple
of the workload's default rate, and kvgate ÷ the best other policy.

Columns: round-robin, least-load, llm-d, llm-d-legacy, llm-d-legacy with the lora-affinity-scorer
(llm-d-legacy.loraWeight=1), kvgate without LoRA affinity (kvgate.loraAffinity=false), kvgate.

Options:
  --max-loras LIST   adapters one worker batches at once (vLLM --max-loras; default 1,2,4)
  --seeds LIST       seeds of the workload (default 1,2)
  --workers N        simulated workers (default 8)
  --size N           requests per run (default: kvgate bench's for the workload)
  --capacity-seconds S  shortest capacity probe, s of arrivals (kvgate bench's; default 60)
  --json FILE        also write every run's capacity figures as JSON
  --write-docs FILE  rewrite this command's generated table (lora-capacity) in FILE (repeatable)
  -h, --help         this text

Runs 3 kvgate bench capacity searches per --max-loras and seed (tens of minutes for the defaults
on 2 cores).
`;

/** A column: the policy kvgate bench runs, with the knobs that make it this variant. */
interface Column {
  label: string;
  policy: string;
  set: string[];
}

const COLUMNS: readonly Column[] = [
  { label: 'round-robin', policy: 'round-robin', set: [] },
  { label: 'least-load', policy: 'least-load', set: [] },
  { label: 'llm-d', policy: 'llm-d', set: [] },
  { label: 'llm-d-legacy', policy: 'llm-d-legacy', set: [] },
  { label: 'llm-d-legacy + lora-affinity-scorer', policy: 'llm-d-legacy', set: ['llm-d-legacy.loraWeight=1'] },
  { label: 'kvgate, `loraAffinity: false`', policy: 'kvgate', set: ['kvgate.loraAffinity=false'] },
  { label: 'kvgate', policy: 'kvgate', set: [] },
];

interface CapacityJson {
  policies: Array<{ name: string; capacity: { rate_scale: number | null; requests_per_s: number | null; converged: boolean } }>;
}

/** The columns grouped into runs: one run per distinct set of knobs, policies in column order. */
function runsOf(columns: readonly Column[]): Array<{ set: string[]; columns: Column[] }> {
  const runs = new Map<string, { set: string[]; columns: Column[] }>();
  for (const c of columns) {
    const key = c.set.join(' ');
    const run = runs.get(key) ?? { set: c.set, columns: [] };
    run.columns.push(c);
    runs.set(key, run);
  }
  return [...runs.values()];
}

function capacities(args: string[], run: { set: string[]; columns: Column[] }, out: string): Map<string, number | null> {
  const policies = run.columns.map((c) => c.policy).join(',');
  const setArgs = run.set.flatMap((s) => ['--set', s]);
  const r = spawnSync(process.execPath, [cli, 'bench', ...args, '--policy', policies, ...setArgs, '--capacity', '--json', out, '--quiet'], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  if (r.status !== 0) throw new Error(`kvgate bench ${args.join(' ')} --policy ${policies} ${setArgs.join(' ')} failed (exit ${r.status})`);
  const res = JSON.parse(readFileSync(out, 'utf8')) as CapacityJson;
  const by = new Map<string, number | null>();
  for (const c of run.columns) {
    const p = res.policies.find((x) => x.name === c.policy);
    if (!p) throw new Error(`kvgate bench returned no figures for ${c.policy}`);
    // A search that never bracketed its capacity is shown as a lower bound below.
    by.set(c.label, p.capacity.rate_scale);
  }
  return by;
}

const fmt = (v: number | null | undefined): string => (v == null ? '—' : v.toFixed(3));

function main(): number {
  const { values } = benchArgs('lora-capacity', {
    options: {
      'max-loras': { type: 'string', default: '1,2,4' },
      seeds: { type: 'string', default: '1,2' },
      workers: { type: 'string', default: '8' },
      size: { type: 'string' },
      'capacity-seconds': { type: 'string' },
      json: { type: 'string' },
      'write-docs': { type: 'string', multiple: true },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const list = (name: string, v: string, min = 1): number[] | null => {
    const xs = v.split(',').map((x) => Number(x.trim()));
    if (xs.some((x) => !Number.isInteger(x) || x < min)) {
      process.stderr.write(`bench lora-capacity: --${name} must be integers ≥ ${min} separated by commas, got '${v}'\n`);
      return null;
    }
    return xs;
  };
  /** An option of one value: passed on to kvgate bench as given once it is a positive integer. */
  const one = (name: string, v: string | undefined): string[] | null => {
    if (v === undefined) return [];
    const xs = list(name, v);
    if (xs && xs.length !== 1) process.stderr.write(`bench lora-capacity: --${name} takes one number\n`);
    return xs && xs.length === 1 ? [`--${name}`, String(xs[0])] : null;
  };
  const maxLoras = list('max-loras', values['max-loras']);
  const seeds = list('seeds', values.seeds, 0);
  const workers = one('workers', values.workers);
  const size = one('size', values.size);
  const probeSeconds = one('capacity-seconds', values['capacity-seconds']);
  if (!maxLoras || !seeds || !workers || !size || !probeSeconds) return 2;
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-lora-capacity-'));
  const rows: string[] = [
    `| \`--max-loras\` | ${COLUMNS.map((c) => c.label).join(' | ')} | kvgate ÷ best other |`,
    `|---:|${COLUMNS.map(() => '---:|').join('')}---:|`,
  ];
  const all: Array<{ max_loras: number; seed: number; rate_scale: Record<string, number | null> }> = [];
  try {
    for (const m of maxLoras) {
      const cells = new Map<string, Array<number | null>>(COLUMNS.map((c) => [c.label, []]));
      const ratios: string[] = [];
      for (const seed of seeds) {
        const args = ['--workload', 'lora', '--max-loras', String(m), '--seed', String(seed), ...workers, ...size, ...probeSeconds];
        const got = new Map<string, number | null>();
        for (const [i, run] of runsOf(COLUMNS).entries()) {
          process.stderr.write(`--max-loras ${m}, seed ${seed}: ${run.columns.map((c) => c.label).join(', ')}...\n`);
          for (const [k, v] of capacities(args, run, join(dir, `${m}-${seed}-${i}.json`))) got.set(k, v);
        }
        for (const c of COLUMNS) cells.get(c.label)!.push(got.get(c.label) ?? null);
        const kv = got.get('kvgate') ?? null;
        const others = COLUMNS.filter((c) => c.policy !== 'kvgate').map((c) => got.get(c.label) ?? null).filter((v): v is number => v !== null);
        const best = others.length ? Math.max(...others) : null;
        ratios.push(kv !== null && best !== null && best > 0 ? `${(kv / best).toFixed(2)}×` : '—');
        all.push({ max_loras: m, seed, rate_scale: Object.fromEntries(got) });
      }
      rows.push(`| ${m} | ${COLUMNS.map((c) => cells.get(c.label)!.map(fmt).join(' / ')).join(' | ')} | ${ratios.join(' / ')} |`);
    }
  } catch (e) {
    process.stderr.write(`bench lora-capacity: ${(e as Error).message}\n`);
    return 1;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const table = rows.join('\n');
  process.stdout.write(`\nCapacity at SLO, multiples of the lora workload's default rate (seeds ${seeds.join(' / ')}), ${values.workers} workers:\n\n${table}\n`);
  if (values.json) writeFileSync(values.json, JSON.stringify({ seeds, workers: Number(values.workers), runs: all }, null, 2));
  return writeGeneratedTables(values['write-docs'] ?? [], ['npm run bench -- lora-capacity', ...process.argv.slice(2)].join(' '), { 'lora-capacity': table }, 'bench lora-capacity');
}

process.exitCode = main();
