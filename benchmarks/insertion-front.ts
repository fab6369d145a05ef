/**
 * `npm run bench -- insertion-front`: taking the oldest entry off a Map used as an LRU list, by
 * `map.keys().next()` from the table's start and by InsertionFront's kept iterator
 * (src/util/insertion-front.ts), on the same operations, alternated so the machine's noise
 * falls on both.
 */
import { benchArgs } from './args.js';
import { InsertionFront } from '../src/util/insertion-front.js';
import { writeGeneratedTables } from './doc-tables.js';
import { median } from './harness.js';

const HELP = `npm run bench -- insertion-front [options]

A Map of --size entries, --ops operations: a new key (the oldest taken off once the Map is full)
or, with probability --refresh, a recent key used again (deleted and set: now the newest).
Prints µs per operation for keys().next() and for InsertionFront, and their ratio, per refresh
share (0, 0.5, 0.9 unless --refresh is given).

Options:
  --size N      entries kept (default 10000)
  --ops N       operations per run (default 1000000)
  --refresh P   share of operations that reuse a recent key
  --rounds N    runs of each way, medians reported (default 3)
  --write-docs FILE  rewrite this command's generated table (lru) in FILE (repeatable)
  -h, --help    this text
`;

type Trim = (m: Map<number, number>) => void;

function run(size: number, ops: number, refresh: number, trim: (m: Map<number, number>) => Trim): number {
  const m = new Map<number, number>();
  const take = trim(m);
  let x = 1;
  let next = 0;
  const t0 = performance.now();
  for (let i = 0; i < ops; i++) {
    x = (Math.imul(x, 1103515245) + 12345) & 0x7fffffff;
    if (m.size > 0 && (x % 1000) / 1000 < refresh) {
      const k = next - 1 - (x % Math.min(m.size, size >> 1));
      const v = m.get(k);
      if (v !== undefined) {
        m.delete(k);
        m.set(k, v);
      }
      continue;
    }
    if (m.size >= size) take(m);
    m.set(next, next++);
  }
  return ((performance.now() - t0) * 1000) / ops;
}

const fromStart = (): Trim => (m) => void m.delete(m.keys().next().value!);
const kept = (m: Map<number, number>): Trim => {
  const front = new InsertionFront(m);
  return () => void front.shift();
};

function main(): void {
  const { values } = benchArgs('insertion-front', { options: { size: { type: 'string' }, ops: { type: 'string' }, refresh: { type: 'string' }, rounds: { type: 'string' }, 'write-docs': { type: 'string', multiple: true }, help: { type: 'boolean', short: 'h' } } });
  if (values.help) {
    process.stdout.write(HELP);
    return;
  }
  const size = Number(values.size ?? 10_000);
  const ops = Number(values.ops ?? 1_000_000);
  const rounds = Number(values.rounds ?? 3);
  const shares = values.refresh !== undefined ? [Number(values.refresh)] : [0, 0.5, 0.9];
  for (const [name, v] of [['size', size], ['ops', ops], ['rounds', rounds], ...shares.map((s) => ['refresh', s] as const)] as const) {
    if (!Number.isFinite(v) || v < 0 || (name !== 'refresh' && (!Number.isInteger(v) || v < 1)) || (name === 'refresh' && v >= 1)) {
      process.stderr.write(`insertion-front: bad --${name} ${v}\n${HELP}`);
      process.exitCode = 2;
      return;
    }
  }
  const rows = [
    `A \`Map\` of ${size.toLocaleString('en-US')} entries, ${ops.toLocaleString('en-US')} operations, median of ${rounds} runs of each way:`,
    '',
    '| share of operations that reuse a recent key | `keys().next()` µs/op | kept iterator µs/op | ratio |',
    '|---:|---:|---:|---:|',
  ];
  for (const line of rows) console.log(line);
  for (const share of shares) {
    const a: number[] = [];
    const b: number[] = [];
    for (let r = 0; r < rounds; r++) {
      a.push(run(size, ops, share, fromStart));
      b.push(run(size, ops, share, kept));
    }
    const ma = median(a);
    const mb = median(b);
    const row = `| ${share} | ${ma.toFixed(2)} | ${mb.toFixed(2)} | ${(ma / mb).toFixed(1)}× |`;
    console.log(row);
    rows.push(row);
  }
  const docs = values['write-docs'] ?? [];
  if (docs.length > 0) process.exitCode = writeGeneratedTables(docs, ['npm run bench -- insertion-front', ...process.argv.slice(2)].join(' '), { lru: rows.join('\n') }, 'bench insertion-front');
}

main();
