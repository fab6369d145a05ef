/**
 * `npm run bench -- stream-memory`: what `kvgate serve` holds for each long-prompt request while
 * its answer streams. The gateway runs in a child process in front of two `kvgate sim` workers;
 * N requests with prompts of K KB stream at once; after a full collection in the gateway
 * (benchmarks/stream-memory/gc-on-signal.ts), its own metrics give its buffers and typed arrays
 * (`kvgate_nodejs_external_memory_bytes`) and its JS heap in use, idle, with every answer
 * streaming and after they were cancelled. Two prompt shapes: one long user message sent once
 * (a pasted document with its question), and one long system message every request shares (a
 * document asked about), with a short question each. With `--baseline DIR` another build's
 * gateway is measured the same way, alternated with this one's.
 */
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { benchArgs } from './args.js';
import { existsSync } from 'node:fs';
import { writeGeneratedTables } from './doc-tables.js';
import { fetchMetrics, metric, MODEL, sleep, spawnGateway, spawnSims, type GatewayProcess } from './faults/harness.js';
import { median } from './harness.js';

const here = dirname(fileURLToPath(import.meta.url));
const PRELOAD = pathToFileURL(join(here, 'stream-memory', 'gc-on-signal.js')).href;

const HELP = `npm run bench -- stream-memory [options]

kvgate serve (a child process) in front of two kvgate sim workers: --streams answers streaming at
once for prompts of --prompt-kb KB, and what the gateway holds meanwhile, read from its own
metrics after a full garbage collection: its buffers and typed arrays and its JS heap in use,
idle, streaming and after the streams were cancelled, and per stream.

Options:
  --streams N        answers streaming at once (default 50)
  --prompt-kb K      each prompt's size in KB (default 200)
  --rounds N         measurements of each build and prompt shape, the median reported (default 2)
  --baseline DIR     also measure another build's gateway (a checkout with dist/ built)
  --write-docs FILE  rewrite this command's generated table (streams) in FILE (repeatable)
  -h, --help         this text
`;

type Shape = 'sent once' | 'shared document';

interface Reading {
  external: number;
  heap: number;
}

interface Measured {
  idle: Reading;
  streaming: Reading;
  after: Reading;
  /** Streams that had their response headers when the gateway was read. */
  open: number;
}

/** Memory the gateway reports after a full collection (two: what the first frees, a second finds settled). */
async function readMemory(gw: GatewayProcess): Promise<Reading> {
  for (let i = 0; i < 2; i++) {
    gw.proc.kill('SIGUSR2');
    // ArrayBuffers' memory is given back by V8's sweeper after the collection, not within it.
    await sleep(i === 0 ? 1000 : 500);
  }
  const text = await fetchMetrics(gw.url);
  const external = metric(text, 'kvgate_nodejs_external_memory_bytes');
  const heap = metric(text, 'kvgate_nodejs_heap_size_used_bytes');
  if (external === undefined || heap === undefined) throw new Error('the gateway reports no kvgate_nodejs_external_memory_bytes or kvgate_nodejs_heap_size_used_bytes');
  return { external, heap };
}

/** Text of about `kb` KB: words of a small vocabulary, in an order that does not repeat early. */
function documentText(kb: number): string {
  const words: string[] = [];
  let bytes = 0;
  for (let i = 0; bytes < kb * 1024; i++) {
    const w = `w${(i * 7919) % 5000}`;
    words.push(w);
    bytes += w.length + 1;
  }
  return words.join(' ');
}

function body(shape: Shape, text: string, i: number): string {
  const messages =
    shape === 'sent once'
      ? [{ role: 'user', content: `${text}\n\nQuestion ${i}: what is this about?` }]
      : [
          { role: 'system', content: text },
          { role: 'user', content: `Question ${i}: what is this about?` },
        ];
  // Long answers: every stream is still open when the gateway is read, and cancelled after.
  return JSON.stringify({ model: MODEL, stream: true, max_tokens: 20_000, messages });
}

async function measure(gw: GatewayProcess, shape: Shape, text: string, streams: number): Promise<Measured> {
  const idle = await readMemory(gw);
  const abort = new AbortController();
  let open = 0;
  let failed = '';
  const running = Array.from({ length: streams }, async (_, i) => {
    try {
      const r = await fetch(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body(shape, text, i), signal: abort.signal });
      if (r.status !== 200) failed ||= `status ${r.status}: ${(await r.text()).slice(0, 200)}`;
      else open++;
      const reader = r.body!.getReader();
      while (!(await reader.read()).done);
    } catch (e) {
      if (!abort.signal.aborted) failed ||= (e as Error).message;
    }
  });
  const deadline = Date.now() + 60_000;
  while (open < streams && !failed && Date.now() < deadline) await sleep(100);
  if (failed) throw new Error(`a stream failed: ${failed}`);
  const streaming = await readMemory(gw);
  const wereOpen = open;
  abort.abort();
  await Promise.all(running);
  // Cancelled streams end at the gateway once it sees the client go (and cancels the worker's).
  for (const end = Date.now() + 10_000; Date.now() < end; await sleep(100)) {
    if (metric(await fetchMetrics(gw.url), 'kvgate_inflight_requests') === 0) break;
  }
  const after = await readMemory(gw);
  return { idle, streaming, after, open: wereOpen };
}

const mb = (x: number): string => (x / 1e6).toFixed(1);

async function main(): Promise<number> {
  const { values } = benchArgs('stream-memory', {
    options: {
      streams: { type: 'string', default: '50' },
      'prompt-kb': { type: 'string', default: '200' },
      rounds: { type: 'string', default: '2' },
      baseline: { type: 'string' },
      'write-docs': { type: 'string', multiple: true },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const [streams, kb, rounds] = [values.streams, values['prompt-kb'], values.rounds].map(Number) as [number, number, number];
  if (![streams, kb, rounds].every((x) => Number.isInteger(x) && x > 0) || streams > 500 || kb > 2000) {
    process.stderr.write(`bench stream-memory: --streams (at most 500), --prompt-kb (at most 2000) and --rounds take positive whole numbers\n\n${HELP}`);
    return 2;
  }
  const builds: Array<{ name: string; cli?: string }> = [{ name: 'this build' }];
  if (values.baseline !== undefined) {
    const cli = resolve(values.baseline, 'dist', 'src', 'cli.js');
    if (!existsSync(cli)) {
      process.stderr.write(`bench stream-memory: no ${cli} (build the baseline first)\n`);
      return 2;
    }
    builds.unshift({ name: 'baseline', cli });
  }
  const text = documentText(kb);
  const promptBytes = Buffer.byteLength(body('sent once', text, 0));
  // Fast workers, so that long prompts are prefilled in moments; every prompt begins with the same
  // text, so after the first the workers' prefix caches hold it.
  const sims = await spawnSims(2, ['--speed', '5']);
  const shapes: Shape[] = ['sent once', 'shared document'];
  const results = new Map<string, Measured[]>();
  try {
    for (let round = 0; round < rounds; round++) {
      for (const shape of shapes) {
        for (const b of builds) {
          process.stderr.write(`stream-memory: round ${round + 1}, ${b.name}, ${shape}...\n`);
          // A gateway of its own for each measurement: nothing kept from the one before.
          const gw = await spawnGateway(
            sims.map((s) => s.url),
            { scrape: { intervalMs: 1_000 } },
            { flags: ['--expose-gc', `--import=${PRELOAD}`], ...(b.cli ? { cli: b.cli } : {}) },
          );
          try {
            const key = `${b.name}\u0000${shape}`;
            const m = await measure(gw, shape, text, streams);
            if (m.open < streams) throw new Error(`only ${m.open} of ${streams} streams were open when the gateway was read`);
            results.set(key, [...(results.get(key) ?? []), m]);
          } finally {
            await gw.kill();
          }
        }
      }
    }
  } finally {
    await Promise.all(sims.map((s) => s.stop()));
  }
  const rows = [
    `${streams} answers streaming at once through \`kvgate serve\` (two \`kvgate sim\` workers), prompts of ${kb} KB (${(promptBytes / 1024).toFixed(0)} KB of JSON a request), median of ${rounds} gateways per row, each read after a full collection:`,
    '',
    '| build | prompt | buffers and typed arrays, MB: idle / streaming / after | per stream | per stream ÷ request bytes | JS heap in use, MB: idle / streaming | per stream |',
    '|---|---|---|---:|---:|---|---:|',
  ];
  for (const shape of shapes) {
    for (const b of builds) {
      const ms = results.get(`${b.name}\u0000${shape}`)!;
      const med = (f: (m: Measured) => number): number => median(ms.map(f));
      const extPer = med((m) => (m.streaming.external - m.idle.external) / streams);
      const heapPer = med((m) => (m.streaming.heap - m.idle.heap) / streams);
      rows.push(
        `| ${b.name} | ${shape} | ${mb(med((m) => m.idle.external))} / ${mb(med((m) => m.streaming.external))} / ${mb(med((m) => m.after.external))} | ${(extPer / 1024).toFixed(0)} KB | ${(extPer / promptBytes).toFixed(2)} | ${mb(med((m) => m.idle.heap))} / ${mb(med((m) => m.streaming.heap))} | ${(heapPer / 1024).toFixed(0)} KB |`,
      );
    }
  }
  for (const line of rows) process.stdout.write(`${line}\n`);
  const docs = values['write-docs'] ?? [];
  if (docs.length > 0) return writeGeneratedTables(docs, ['npm run bench -- stream-memory', ...process.argv.slice(2)].join(' '), { streams: rows.join('\n') }, 'bench stream-memory');
  return 0;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    process.stderr.write(`bench stream-memory: ${(e as Error).stack ?? String(e)}\n`);
    process.exitCode = 1;
  },
);
