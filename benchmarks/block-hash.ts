/**
 * `npm run bench -- block-hash`: chained block hashing (src/kv/block-hash.ts) as the engine model
 * and the ideal-hit pass run it over a prompt's blocks: one `hashBlock` call a block, each chained
 * to the hash the last one returned, against one `hashBlocksInto` call for the run, on the same
 * tokens, alternated so the machine's noise falls on both.
 */
import { benchArgs } from './args.js';
import { chainRoot, hashBlock, hashBlocksInto } from '../src/kv/block-hash.js';
import { median } from './harness.js';

const HELP = `npm run bench -- block-hash [options]

Hashes --blocks blocks of --block-size tokens as one chain, --passes times a run: by one hashBlock
call a block (each chained to the hash the last returned) and by one hashBlocksInto call. Prints ns
per token and the ratio.

Options:
  --blocks N      blocks in the chain (default 65536)
  --block-size N  tokens a block (default 16)
  --passes N      hashes of the whole chain a run (default 100)
  --rounds N      runs of each way, medians reported (default 5)
  -h, --help      this text
`;

/** ns a token of `passes` hashes of the chain over `tokens` into `out`, by one of the two ways. */
function runOnce(way: 'per-block' | 'run', tokens: Int32Array, out: Float64Array, bs: number, passes: number): number {
  const root = chainRoot(1);
  const n = out.length;
  const t0 = performance.now();
  for (let p = 0; p < passes; p++) {
    if (way === 'run') hashBlocksInto(out, 0, n, root, tokens, 0, bs);
    else {
      let parent = root;
      for (let b = 0; b < n; b++) out[b] = parent = hashBlock(parent, tokens, b * bs, bs);
    }
  }
  return ((performance.now() - t0) * 1e6) / (passes * n * bs);
}

function main(): void {
  const { values } = benchArgs('block-hash', { options: { blocks: { type: 'string' }, 'block-size': { type: 'string' }, passes: { type: 'string' }, rounds: { type: 'string' }, help: { type: 'boolean', short: 'h' } } });
  if (values.help) {
    process.stdout.write(HELP);
    return;
  }
  const blocks = Number(values.blocks ?? 65_536);
  const bs = Number(values['block-size'] ?? 16);
  const passes = Number(values.passes ?? 100);
  const rounds = Number(values.rounds ?? 5);
  for (const [name, v] of [['blocks', blocks], ['block-size', bs], ['passes', passes], ['rounds', rounds]] as const) {
    if (!Number.isInteger(v) || v < 1) {
      process.stderr.write(`block-hash: --${name} must be a whole number of at least 1, got ${v}\n${HELP}`);
      process.exitCode = 2;
      return;
    }
  }
  const tokens = new Int32Array(blocks * bs);
  for (let i = 0, x = 7; i < tokens.length; i++) tokens[i] = (x = (Math.imul(x, 1103515245) + 12345) >>> 0) % 128_000;
  const a = new Float64Array(blocks);
  const b = new Float64Array(blocks);
  const perBlock: number[] = [];
  const run: number[] = [];
  // Untimed first runs: both ways compiled before either is timed.
  runOnce('per-block', tokens, a, bs, 1);
  runOnce('run', tokens, b, bs, 1);
  for (let r = 0; r < rounds; r++) {
    perBlock.push(runOnce('per-block', tokens, a, bs, passes));
    run.push(runOnce('run', tokens, b, bs, passes));
  }
  for (let i = 0; i < blocks; i++) if (a[i] !== b[i]) throw new Error(`block ${i}: the two ways disagree (${a[i]} and ${b[i]})`);
  const ma = median(perBlock);
  const mb = median(run);
  console.log(`${blocks.toLocaleString('en-US')} blocks of ${bs} tokens, ${passes} passes a run, median of ${rounds} runs of each way:\n`);
  console.log('| way | ns a token |');
  console.log('|---|---:|');
  console.log(`| hashBlock, a call a block | ${ma.toFixed(2)} |`);
  console.log(`| hashBlocksInto, a call a run | ${mb.toFixed(2)} |`);
  console.log(`\nratio: ${(ma / mb).toFixed(2)}× (the same hashes)`);
}

main();
