/**
 * Writes a product-mix trace in Mooncake's format (`npm run bench -- product-mix-trace --out F`),
 * for checking a policy's tails at light load on traffic nobody's defaults were set on. Three
 * kinds of request, arriving burstily together (Gamma gaps of shape 0.5):
 *
 * - 60% chat: one of 6 system prompts (2,048 tokens), a 200–2,000-token message, an answer of
 *   20–1,500 tokens (log-normal, median ~150);
 * - 25% document questions: a document from a library of 400 (6–20k tokens, Zipf popularity of
 *   exponent --doc-zipf, 1.1 by default: the popular ones stay cached somewhere; at 2.1 one
 *   document takes about half the questions), a question under 512 tokens, 100–300-token answers;
 * - 15% long generations (reports, code): one of 3 templates (1,024 tokens), a 500–3,000-token
 *   brief, 800–2,500-token answers, whose E2E is the tail.
 *
 * Short answers that a long prefill stalls, long answers that crowd each other, and hot documents
 * worth keeping where they are cached pull a router three ways at once. Replay it with
 * `kvgate bench --trace F` (`--rate-scale X` for X × the base rate).
 *
 * Options: --out FILE (required), --seed N (default 7), --requests N (6000), --rate R (base rate,
 * requests/s; default 10), --doc-zipf S (1.1).
 */
import { createWriteStream } from 'node:fs';
import { benchArgs } from './args.js';
import { seededRng, type Rng } from '../src/util/rng.js';
import { arrivalGapMs, uniformInt, Zipf } from '../src/workload/random.js';

/** Mooncake's hash_ids name 512-token blocks. */
const BLOCK_TOKENS = 512;

const { values } = benchArgs('product-mix-trace', {
  options: {
    out: { type: 'string' },
    seed: { type: 'string', default: '7' },
    requests: { type: 'string', default: '6000' },
    rate: { type: 'string', default: '10' },
    'doc-zipf': { type: 'string', default: '1.1' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help || !values.out) {
  console.log(
    'npm run bench -- product-mix-trace --out FILE [--seed N] [--requests N] [--rate R] [--doc-zipf S]\n\n' +
      'Writes a Mooncake-format trace of chat over shared system prompts, questions on cached\n' +
      'documents and long generations (see benchmarks/product-mix-trace.ts); replay it with\n' +
      'kvgate bench --trace FILE [--rate-scale X].',
  );
  process.exit(values.help ? 0 : 2);
}
const seed = Number(values.seed);
const requests = Number(values.requests);
const rate = Number(values.rate);
const docZipf = Number(values['doc-zipf']);
if (!Number.isInteger(seed) || !Number.isInteger(requests) || requests < 1 || !(rate > 0) || !(docZipf >= 0)) {
  console.error('--seed and --requests must be integers (--requests ≥ 1), --rate positive, --doc-zipf ≥ 0');
  process.exit(2);
}

const rng = seededRng(seed);
let nextId = 0;
const blocks = (n: number): number[] => Array.from({ length: n }, () => nextId++);
const systems = Array.from({ length: 6 }, () => blocks(4));
const templates = Array.from({ length: 3 }, () => blocks(2));
const library: Array<number[] | undefined> = new Array<number[] | undefined>(400);
const popularity = new Zipf(library.length, docZipf);

/** Log-normal of median e^mu (Box–Muller). */
function logNormal(r: Rng, mu: number, sigma: number): number {
  const z = Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());
  return Math.exp(mu + sigma * z);
}

const out = createWriteStream(values.out);
let t = 0;
for (let i = 0; i < requests; i++) {
  t += arrivalGapMs(rng, rate, 0.5);
  const kind = rng();
  let input: number;
  let output: number;
  let ids: number[];
  if (kind < 0.6) {
    const message = uniformInt(rng, 200, 2000);
    input = 4 * BLOCK_TOKENS + message;
    ids = [...systems[uniformInt(rng, 0, systems.length - 1)]!, ...blocks(Math.ceil(message / BLOCK_TOKENS))];
    output = Math.min(1500, Math.max(20, Math.round(logNormal(rng, 5, 0.7))));
  } else if (kind < 0.85) {
    const d = popularity.sample(rng);
    const doc = (library[d] ??= blocks(uniformInt(rng, 12, 40)));
    // The question fits in the block after the document's.
    input = doc.length * BLOCK_TOKENS + uniformInt(rng, 50, 300);
    ids = [...doc, ...blocks(1)];
    output = uniformInt(rng, 100, 300);
  } else {
    const brief = uniformInt(rng, 500, 3000);
    input = 2 * BLOCK_TOKENS + brief;
    ids = [...templates[uniformInt(rng, 0, templates.length - 1)]!, ...blocks(Math.ceil(brief / BLOCK_TOKENS))];
    output = uniformInt(rng, 800, 2500);
  }
  out.write(JSON.stringify({ timestamp: Math.round(t), input_length: input, output_length: output, hash_ids: ids }) + '\n');
}
out.end(() => console.log(`${requests} requests over ${(t / 1000).toFixed(0)} s written to ${values.out}`));
