/**
 * Same seed, same figures (`npm run bench -- sim-identity`): runs a fixed set of `kvgate bench`
 * commands with `--json FILE --omit-wall-time` and either writes their JSON to a directory
 * (`--write DIR`, from the build to compare against) or checks this build's JSON against one
 * (`--check DIR`): byte for byte, one line per file, exit status 1 on any difference. A change
 * meant to make the simulator faster must leave every file identical.
 *
 * The set: mixed (1,000 requests), shared-prefix and multi-turn (500) on 8 workers, seed 7, with
 * every policy but aibrix (run at a fifth of the size, it is slow), then the engine's other paths:
 * KV events for every index with a host-memory tier, tenant salts, LoRA adapters, n sampled
 * answers, disaggregation, the speculative cascade, preemptions (bursty at 3×) and the response
 * cache, a capacity search (probes stopped early), gateway replicas with a dispatch delay,
 * admission with priority classes and with a queue, and long decodes under load. Options:
 * --only NAME,NAME (cases by file name), --jobs N (kvgate bench's, default 2).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { benchArgs } from './args.js';

const CLI = resolve(dirname(fileURLToPath(import.meta.url)), '../src/cli.js');

const POLICIES = 'round-robin,least-load,kvgate,llm-d,llm-d-precise,llm-d-legacy,dynamo,dynamo-approx,sglang-cache-aware,oracle,oracle-greedy,random';

/** Each case: its file name and the bench arguments beyond --workers 8 --seed 7. */
const CASES: Array<[string, string[]]> = [
  ...(
    [
      ['mixed', 1000],
      ['shared-prefix', 500],
      ['multi-turn', 500],
    ] as const
  ).flatMap(([w, n]): Array<[string, string[]]> => [
    [w, ['--workload', w, '--size', String(n), '--policy', POLICIES]],
    [`${w}-aibrix`, ['--workload', w, '--size', String(n / 5), '--policy', 'aibrix']],
  ]),
  ['x-offload', ['--workload', 'mixed', '--size', '600', '--policy', 'kvgate,dynamo', '--kv-events', '--cpu-offload-gib', '2']],
  ['x-salt', ['--workload', 'shared-prefix', '--size', '400', '--policy', 'kvgate,llm-d-precise', '--cache-isolation', 'tenant', '--tenants', '4']],
  ['x-lora', ['--workload', 'lora', '--size', '400', '--policy', 'kvgate,round-robin']],
  ['x-rollouts', ['--workload', 'rollouts', '--size', '150', '--policy', 'kvgate,least-load']],
  ['x-disagg', ['--workload', 'rag', '--size', '300', '--policy', 'kvgate', '--disagg', '3:5']],
  ['x-spec', ['--workload', 'mixed', '--size', '150', '--policy', 'kvgate', '--spec-mode', 'fixed:4', '--spec-acceptance', '0.7', '--model', 'llama-3.1-70b', '--tp', '2', '--draft-model', 'llama-3.1-8b']],
  ['x-bursty', ['--workload', 'bursty', '--size', '400', '--policy', 'least-load', '--rate-scale', '3']],
  ['x-agentic-cache', ['--workload', 'agentic', '--size', '600', '--policy', 'kvgate,round-robin', '--cache', 'on']],
  ['x-capacity', ['--workload', 'mixed', '--size', '150', '--policy', 'kvgate,round-robin,dynamo', '--capacity', '--capacity-seconds', '10', '--max-probes', '6']],
  ['x-replicas', ['--workload', 'multi-turn', '--size', '400', '--policy', 'kvgate,llm-d', '--replicas', '3', '--overhead-ms', '2']],
  ['x-admission', ['--workload', 'bursty', '--size', '300', '--policy', 'kvgate', '--rate-scale', '3', '--admission', 'on', '--priority-mix', 'critical=0.2,standard=0.5,sheddable=0.3']],
  ['x-admission-queue', ['--workload', 'bursty', '--size', '2000', '--policy', 'kvgate,least-load', '--rate-scale', '2', '--admission', 'on']],
  ['x-long-decode', ['--workload', 'rollouts', '--size', '100', '--policy', 'round-robin,kvgate', '--rate-scale', '4', '--declared-max-tokens', '4096']],
];

const { values } = benchArgs('sim-identity', {
  options: {
    write: { type: 'string' },
    check: { type: 'string' },
    only: { type: 'string' },
    jobs: { type: 'string', default: '2' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});

if (values.help) {
  process.stdout.write(
    'Usage: npm run bench -- sim-identity (--write DIR | --check DIR) [--only NAME,NAME] [--jobs N]\n' +
      '  --write DIR   run every case and write its JSON to DIR/NAME.json (the build to compare against)\n' +
      '  --check DIR   run every case and compare its JSON with DIR/NAME.json byte for byte\n' +
      `  cases: ${CASES.map(([n]) => n).join(', ')}\n`,
  );
  process.exit(0);
}

const { write, check } = values;
if ((write === undefined) === (check === undefined)) {
  process.stderr.write('sim-identity: give exactly one of --write DIR and --check DIR (--help)\n');
  process.exit(2);
}
const only = values.only?.split(',');
const jobs = values.jobs;
const dir = (write ?? check)!;
if (write !== undefined) mkdirSync(dir, { recursive: true });
const outDir = write ?? join(dir, '.check');
mkdirSync(outDir, { recursive: true });

let differ = 0;
for (const [name, args] of CASES) {
  if (only && !only.includes(name)) continue;
  const file = join(outDir, `${name}.json`);
  const started = performance.now();
  const r = spawnSync(process.execPath, [CLI, 'bench', '--workers', '8', '--seed', '7', '--omit-wall-time', '--quiet', '--jobs', jobs, ...args, '--json', file], { encoding: 'utf8' });
  const secs = ((performance.now() - started) / 1000).toFixed(1);
  if (r.status !== 0) {
    process.stdout.write(`${name}: kvgate bench failed (${r.status}): ${r.stderr.trim().split('\n').pop()}\n`);
    differ++;
    continue;
  }
  if (write !== undefined) {
    process.stdout.write(`${name}: written (${secs} s)\n`);
    continue;
  }
  const want = join(dir, `${name}.json`);
  if (!existsSync(want)) {
    process.stdout.write(`${name}: no ${want} to compare with\n`);
    differ++;
  } else if (readFileSync(want, 'utf8') === readFileSync(file, 'utf8')) {
    process.stdout.write(`${name}: identical (${secs} s)\n`);
  } else {
    process.stdout.write(`${name}: DIFFERS from ${want} (this build's: ${file})\n`);
    differ++;
  }
}
if (check !== undefined) process.stdout.write(differ === 0 ? 'every file identical\n' : `${differ} case(s) differ or failed\n`);
process.exitCode = differ === 0 ? 0 : 1;
