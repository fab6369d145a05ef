/**
 * `npm run bench -- NAME [arguments]`: the one entry point of the development benchmarks. Runs
 * dist/benchmarks/<file>.js for NAME in a child process with the arguments after NAME, and exits
 * with its status. `npm run bench -- --help` lists them; `npm run bench -- NAME --help` gives a
 * benchmark's own options (where it has any).
 *
 * These are not `kvgate bench` (src/cli/bench.ts, the shipped fleet simulation); several of them
 * run it.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

interface Bench {
  /** The compiled script under dist/benchmarks/, without .js. */
  file: string;
  /** One line for the listing. */
  about: string;
}

/** Every benchmark, by the name given to `npm run bench --`. */
const BENCHES: Readonly<Record<string, Bench>> = {
  policies: { file: 'policy-matrix', about: 'routing policies on every built-in workload and the public traces (kvgate bench runs)' },
  'light-load': { file: 'light-load', about: "kvgate ÷ the best peer on TTFT p50/p99, TPOT p99 and E2E p99 at a quarter and half of kvgate's capacity, every built-in workload" },
  chart: { file: 'capacity-chart', about: 'kvgate bench --capacity, its attainment-vs-rate chart saved as a PNG (--out FILE.png)' },
  spec: { file: 'spec', about: 'the speculative cascade under load in the fleet simulation, per acceptance rate' },
  'spec-guard': { file: 'spec-guard', about: 'adaptive speculation against target-only at every α on saturated, moderate, light and long-context loads, per target engine' },
  cascade: { file: 'cascade', about: 'the speculative cascade against target-only generation, live through a gateway' },
  overhead: { file: 'overhead', about: "the gateway's request path beside nginx and a bare Node hop (CPU and latency)" },
  epp: { file: 'epp', about: 'kvgate as an Endpoint Picker: decision latency, CPU per request, decisions/s per core, beside nginx and kvgate serve' },
  ab: { file: 'ab', about: "this checkout's gateway against another build, side by side (--baseline DIR)" },
  profile: { file: 'profile', about: "where kvgate's CPU time per request goes, by stage, with GC pauses" },
  route: { file: 'route-decision', about: 'time to route one 8,000-token prompt over 16 warm workers, per policy' },
  'route-ab': { file: 'route-ab', about: "this checkout's routing decision against another build's (--baseline DIR)" },
  'block-hash': { file: 'block-hash', about: 'chained block hashing: a hashBlock call a block against one hashBlocksInto call a run' },
  'insertion-front': { file: 'insertion-front', about: 'the oldest entry off an LRU Map: keys().next() from the table start against a kept iterator (InsertionFront)' },
  tokenize: { file: 'tokenize', about: 'the cost of tokenizing chat prompts, with and without the chat token cache' },
  'long-prompts': { file: 'long-prompts', about: 'long hf: tokenized prompts beside short requests, with and without tokenizer threads (--hf PATH)' },
  cache: { file: 'cache', about: "the response cache's hit path against its miss path, per store (memory, Redis)" },
  lora: { file: 'lora', about: 'many LoRA adapters on workers that batch few: kvgate with and without LoRA affinity, llm-d, llm-d-legacy with it' },
  'lora-capacity': { file: 'lora-capacity', about: "LoRA placement's capacity at SLO in the fleet simulation, per --max-loras: kvgate with and without its LoRA affinity, llm-d's profiles, load alone" },
  disagg: { file: 'disagg', about: 'prefill/decode disaggregation against aggregated serving: every split of 4 workers, capacity at a TPOT-tight SLO' },
  'admission-peers': { file: 'admission-peers', about: "kvgate's admission against llm-d's flow control under one burst with a priority mix: critical TTFT p99 and goodput, sheddable goodput, shed" },
  faults: { file: 'faults', about: 'the fault matrix: every request answered, OK or with a documented error' },
  'stream-memory': { file: 'stream-memory', about: 'what kvgate serve holds for each long-prompt request while its answer streams (buffers, typed arrays, JS heap)' },
  soak: { file: 'soak', about: "minutes of mixed traffic through kvgate serve: flat memory, in-flight back to 0" },
  calibration: { file: 'calibration', about: "the time model's calibration against published measurements (markdown)" },
  'sim-scale': { file: 'sim-scale', about: 'kvgate bench at fleet scale: 1M × 64 kvgate, 100k × 16, a 10M-row trace, --capacity in parallel (targets, misses)' },
  'sim-identity': { file: 'sim-identity', about: 'same seed, same figures: kvgate bench JSON of every policy and engine path, written (--write DIR) or compared (--check DIR)' },
  'kv-events': { file: 'kv-events', about: "KV-cache event blocks one core decodes and maps into the prefix index, against what a simulated fleet publishes" },
  'engine-step': { file: 'engine-step', about: 'steps/s and tokens/s of the engine model itself ([running] [steps])' },
  'kv-tight-trace': { file: 'kv-tight-trace', about: 'write a KV-tight document trace (Mooncake format, --out FILE)' },
  'elephants-trace': { file: 'elephants-trace', about: 'write a trace of short prompts and long documents (Mooncake format, --out FILE)' },
  'coding-trace': { file: 'coding-trace', about: 'write a coding-assistant session trace (kvgate JSONL, --out FILE)' },
  'product-mix-trace': { file: 'product-mix-trace', about: 'write a product-mix trace: chat, cached documents, long generations (Mooncake format, --out FILE)' },
};

function usage(): string {
  const width = Math.max(...Object.keys(BENCHES).map((n) => n.length));
  const lines = Object.entries(BENCHES).map(([name, b]) => `  ${name.padEnd(width)}  ${b.about}`);
  return `Usage: npm run bench -- NAME [arguments]   (NAME --help: the benchmark's options)\n\n${lines.join('\n')}\n`;
}

function main(argv: string[]): void {
  const [name, ...args] = argv;
  if (name === undefined || name === '-h' || name === '--help') {
    process.stdout.write(usage());
    process.exitCode = name === undefined ? 2 : 0;
    return;
  }
  const bench = Object.hasOwn(BENCHES, name) ? BENCHES[name] : undefined;
  if (!bench) {
    process.stderr.write(`bench: unknown benchmark '${name}'\n\n${usage()}`);
    process.exitCode = 2;
    return;
  }
  const script = join(dirname(fileURLToPath(import.meta.url)), `${bench.file}.js`);
  if (!existsSync(script)) {
    process.stderr.write(`bench: ${script} not found (build first: npx tsc -p tsconfig.json)\n`);
    process.exitCode = 1;
    return;
  }
  const child = spawn(process.execPath, [...process.execArgv, script, ...args], { stdio: 'inherit' });
  // Ctrl-C reaches the child through the terminal's process group; a signal sent to this process
  // alone is passed on, and the child's own exit decides ours.
  const forward = (sig: NodeJS.Signals) => () => child.kill(sig);
  const onInt = forward('SIGINT');
  const onTerm = forward('SIGTERM');
  process.on('SIGINT', onInt);
  process.on('SIGTERM', onTerm);
  child.on('exit', (code, signal) => {
    process.off('SIGINT', onInt);
    process.off('SIGTERM', onTerm);
    process.exitCode = code ?? (signal ? 128 + signalNumber(signal) : 1);
  });
}

function signalNumber(sig: NodeJS.Signals): number {
  return sig === 'SIGINT' ? 2 : sig === 'SIGTERM' ? 15 : sig === 'SIGKILL' ? 9 : 1;
}

main(process.argv.slice(2));
