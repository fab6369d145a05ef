/**
 * Writes a KV-tight document trace in Mooncake's format (`npm run bench -- kv-tight-trace --out F`),
 * for checking routing changes on traffic the built-in workloads do not model: 20 documents of
 * 4–28k tokens (Zipf-popular) asked about in 10 s on / 10 s off bursts (30 req/s, then 3), half of
 * the requests a new question on a document, 15% a follow-up that grows an earlier document
 * conversation, the rest short chat; outputs of 30–800 tokens. Replay it with
 * `kvgate bench --trace F`; on small-memory fleets (`--gpu a10g`) shorter documents
 * (`--max-doc-tokens 8192`) keep every prompt within a worker's KV cache.
 *
 * Options: --out FILE (required), --seed N (default 1), --seconds S (600),
 * --max-doc-tokens N (28672).
 */
import { createWriteStream } from 'node:fs';
import { benchArgs } from './args.js';
import { seededRng, type Rng } from '../src/util/rng.js';
import { exponential, uniformInt, Zipf } from '../src/workload/random.js';

/** Mooncake's hash_ids name 512-token blocks. */
const BLOCK_TOKENS = 512;
const DOCUMENTS = 20;

const { values } = benchArgs('kv-tight-trace', {
  options: {
    out: { type: 'string' },
    seed: { type: 'string', default: '1' },
    seconds: { type: 'string', default: '600' },
    'max-doc-tokens': { type: 'string', default: String(56 * BLOCK_TOKENS) },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help || !values.out) {
  console.log(
    'npm run bench -- kv-tight-trace --out FILE [--seed N] [--seconds S] [--max-doc-tokens N]\n\n' +
      'Writes a Mooncake-format trace of bursty questions on popular long documents, growing\n' +
      'follow-ups and short chat (see benchmarks/kv-tight-trace.ts); replay it with kvgate bench --trace FILE.',
  );
  process.exit(values.help ? 0 : 2);
}
const seed = Number(values.seed);
const seconds = Number(values.seconds);
const maxDocBlocks = Math.floor(Number(values['max-doc-tokens']) / BLOCK_TOKENS);
if (!Number.isInteger(seed) || !(seconds > 0) || !(maxDocBlocks >= 8)) {
  console.error('--seed must be an integer, --seconds positive and --max-doc-tokens at least 4096');
  process.exit(2);
}

const rng: Rng = seededRng(seed);
let nextId = 0;
const fresh = (n: number): number[] => Array.from({ length: n }, () => nextId++);
const docs = Array.from({ length: DOCUMENTS }, () => fresh(uniformInt(rng, 8, maxDocBlocks)));
// Zipf(1) popularity: document i is asked about in proportion to 1 / (i + 1).
const popularity = new Zipf(docs.length, 1);
const pickDoc = (): number[] => docs[popularity.sample(rng)]!;

const out = createWriteStream(values.out);
/** Document conversations a follow-up may continue (the oldest dropped past 400). */
const conversations: number[][] = [];
let t = 0;
let rows = 0;
while (t < seconds * 1000) {
  const on = Math.floor(t / 10_000) % 2 === 0;
  t += exponential(rng, 1000 / (on ? 30 : 3));
  const u = rng();
  let ids: number[];
  let output: number;
  if (u < 0.5) {
    ids = [...pickDoc(), ...fresh(uniformInt(rng, 1, 3))];
    output = uniformInt(rng, 30, 600);
    conversations.push([...ids, ...fresh(1)]);
  } else if (u < 0.65 && conversations.length > 0) {
    const c = conversations.splice(Math.floor(rng() * conversations.length), 1)[0]!;
    ids = [...c, ...fresh(1)];
    output = uniformInt(rng, 50, 800);
    conversations.push([...ids, ...fresh(1)]);
  } else {
    ids = fresh(uniformInt(rng, 1, 3));
    output = uniformInt(rng, 100, 500);
  }
  if (conversations.length > 400) conversations.shift();
  // The last block is partly filled, as a real prompt's would be.
  const input = ids.length * BLOCK_TOKENS - uniformInt(rng, 0, 400);
  out.write(JSON.stringify({ timestamp: Math.round(t), input_length: input, output_length: output, hash_ids: ids }) + '\n');
  rows++;
}
out.end(() => console.log(`${rows} requests over ${seconds} s written to ${values.out}`));
