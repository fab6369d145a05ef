/**
 * Writes a trace of mice and elephants in Mooncake's format (`npm run bench -- elephants-trace
 * --out F`), for checking admission's queue order on traffic where the KV cache, not compute, runs
 * out first: unique short prompts (1–3k tokens, 100–600 output tokens, 30 req/s) and unique long
 * documents (24–32k tokens, 200–1,000 output tokens, 1 req/s), both Poisson, no prefix shared.
 * Replay it with `kvgate bench --trace F --admission on|off`; with `--capacity` the bench prints
 * what each prompt-length band met, and `--min-band-attainment 0.9` holds the documents to 90%.
 *
 * Options: --out FILE (required), --seed N (default 1), --seconds S (300).
 */
import { createWriteStream } from 'node:fs';
import { benchArgs } from './args.js';
import { seededRng } from '../src/util/rng.js';
import { exponential, uniformInt } from '../src/workload/random.js';

/** Mooncake's hash_ids name 512-token blocks. */
const BLOCK_TOKENS = 512;

const { values } = benchArgs('elephants-trace', {
  options: {
    out: { type: 'string' },
    seed: { type: 'string', default: '1' },
    seconds: { type: 'string', default: '300' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help || !values.out) {
  console.log(
    'npm run bench -- elephants-trace --out FILE [--seed N] [--seconds S]\n\n' +
      'Writes a Mooncake-format trace of unique short prompts (30 req/s) and unique 24-32k-token\n' +
      'documents (1 req/s) (see benchmarks/elephants-trace.ts); replay it with kvgate bench --trace FILE.',
  );
  process.exit(values.help ? 0 : 2);
}
const seed = Number(values.seed);
const seconds = Number(values.seconds);
if (!Number.isInteger(seed) || !(seconds > 0)) {
  console.error('--seed must be an integer and --seconds positive');
  process.exit(2);
}

interface Row {
  t: number;
  input: number;
  output: number;
}
const rng = seededRng(seed);
const rows: Row[] = [];
const arrivals = (perSecond: number, input: [number, number], output: [number, number]): void => {
  for (let t = exponential(rng, 1000 / perSecond); t < seconds * 1000; t += exponential(rng, 1000 / perSecond)) {
    rows.push({ t, input: uniformInt(rng, ...input), output: uniformInt(rng, ...output) });
  }
};
arrivals(30, [1000, 3000], [100, 600]);
arrivals(1, [24_000, 32_000], [200, 1000]);
rows.sort((a, b) => a.t - b.t);

const out = createWriteStream(values.out);
let nextId = 0;
for (const r of rows) {
  // Every prompt its own blocks: nothing is shared, so no cache hit hides the KV it holds.
  const ids = Array.from({ length: Math.ceil(r.input / BLOCK_TOKENS) }, () => nextId++);
  out.write(JSON.stringify({ timestamp: Math.round(r.t), input_length: r.input, output_length: r.output, hash_ids: ids }) + '\n');
}
out.end(() => console.log(`${rows.length} requests over ${seconds} s written to ${values.out}`));
