/**
 * `npm run bench -- long-prompts --hf PATH`: what long prompts tokenized by an `hf:` tokenizer do to
 * every other request, with `tokenizers.threads: 0` (on the event loop) and with tokenizer threads.
 *
 * Each round starts kvgate twice, one configuration after the other (not both at once: a
 * tokenizer thread takes a core of its own, which the other gateway would then compete for), in
 * front of the stand-in worker, under two wrk loads at once: short requests ('Say hello.', paced
 * like peers-bench's latency test) and long prompts (made-up prose, one connection). It prints the
 * short requests' latency and count, and the long prompts' latency, per configuration.
 */
import { existsSync } from 'node:fs';
import { benchArgs } from './args.js';
import { median } from './harness.js';
import { promptBody, setUpTools, startKvgate, startStandIn, wrk, BODY, type WrkResult } from './overhead/targets.js';

const HELP = `npm run bench -- long-prompts --hf PATH [options]

Short requests beside a stream of long prompts, through kvgate with an hf: tokenizer: with the
prompts tokenized on the event loop (tokenizers.threads: 0) and on tokenizer threads.

Options:
  --hf PATH          the tokenizer.json (required; e.g. a Llama model's)
  --threads N        tokenizer threads of the second configuration (default 1)
  --rounds N         rounds, each running both configurations (default 3)
  --seconds S        measurement per configuration and round (default 8; 2 s of warm-up before it)
  --prompt-tokens N  the long prompts' length (default 8000)
  --long-delay-ms D  pause of the long-prompt connection before each request (default 40)
  --no-install       do not install wrk or nginx even as root
  -h, --help         this text
`;

interface Side {
  short: WrkResult;
  long: WrkResult;
}

async function main(): Promise<number> {
  const { values } = benchArgs('long-prompts', {
    options: {
      hf: { type: 'string' },
      threads: { type: 'string', default: '1' },
      rounds: { type: 'string', default: '3' },
      seconds: { type: 'string', default: '8' },
      'prompt-tokens': { type: 'string', default: '8000' },
      'long-delay-ms': { type: 'string', default: '40' },
      'no-install': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const [threads, rounds, seconds, promptTokens, longDelay] = [values.threads, values.rounds, values.seconds, values['prompt-tokens'], values['long-delay-ms']].map(Number) as [number, number, number, number, number];
  if (![threads, rounds, seconds].every((x) => Number.isInteger(x) && x > 0) || !(Number.isInteger(longDelay) && longDelay >= 0)) {
    process.stderr.write('bench long-prompts: --threads, --rounds and --seconds take positive whole numbers, --long-delay-ms a whole number ≥ 0\n');
    return 2;
  }
  if (!(Number.isInteger(promptTokens) && promptTokens > 0 && promptTokens <= 20_000)) {
    process.stderr.write('bench long-prompts: --prompt-tokens takes a whole number of tokens from 1 to 20000\n');
    return 2;
  }
  if (values.hf === undefined || !existsSync(values.hf)) {
    process.stderr.write(`bench long-prompts: --hf PATH is required: an existing tokenizer.json${values.hf === undefined ? '' : ` (${values.hf} not found)`}\n`);
    return 2;
  }
  const tools = setUpTools(!values['no-install']);
  if (!tools.useWrk) {
    process.stderr.write('bench long-prompts: needs wrk (Debian: apt-get install wrk)\n');
    return 2;
  }
  const longBody = promptBody(promptTokens);
  const configs = [0, threads].map((n) => ({ tokenizers: { default: `hf:${values.hf}`, threads: n } }));
  const direct = await startStandIn(tools.cUpstream);
  const results: Side[][] = [[], []];
  try {
    for (let r = 0; r < rounds; r++) {
      for (let k = 0; k < 2; k++) {
        const gw = await startKvgate(direct.url, { name: `threads-${configs[k]!.tokenizers.threads}`, config: configs[k]! });
        try {
          const both = (s: number): Promise<[WrkResult, WrkResult]> => Promise.all([wrk(gw.url, 4, s, 20, BODY), wrk(gw.url, 1, s, longDelay, longBody)]);
          await both(2);
          const [short, long] = await both(seconds);
          results[k]!.push({ short, long });
          process.stderr.write(`round ${r + 1}/${rounds}, threads ${configs[k]!.tokenizers.threads}: short p50 ${(short.p50_us / 1000).toFixed(2)} p99 ${(short.p99_us / 1000).toFixed(2)} ms\n`);
        } finally {
          await gw.stop();
        }
      }
    }
  } finally {
    await direct.stop();
  }
  const ms = (us: number): string => (us / 1000).toFixed(2);
  const row = (label: string, xs: Side[]): string =>
    xs.map((x, i) => `| ${label} | ${i + 1} | ${x.short.requests} | ${ms(x.short.p50_us)} | ${ms(x.short.p99_us)} | ${x.long.requests} | ${ms(x.long.p50_us)} | ${ms(x.long.p99_us)} |`).join('\n');
  const p99s = (xs: Side[]): number => median(xs.map((x) => x.short.p99_us));
  const p50s = (xs: Side[]): number => median(xs.map((x) => x.short.p50_us));
  process.stdout.write(
    `\nbench long-prompts: ${rounds} round(s) × ${seconds} s; short requests 4 connections × 20 ms pauses, ` +
      `${promptTokens}-token prompts 1 connection × ${longDelay} ms pauses; hf:${values.hf}\n\n` +
      '| tokenized | round | short req | short p50 ms | short p99 ms | long req | long p50 ms | long p99 ms |\n|---|---:|---:|---:|---:|---:|---:|---:|\n' +
      row('on the event loop', results[0]!) +
      '\n' +
      row(`on ${threads} thread${threads > 1 ? 's' : ''}`, results[1]!) +
      `\n\nshort requests, medians: p50 ${ms(p50s(results[0]!))} → ${ms(p50s(results[1]!))} ms (×${(p50s(results[1]!) / p50s(results[0]!)).toFixed(2)}), ` +
      `p99 ${ms(p99s(results[0]!))} → ${ms(p99s(results[1]!))} ms (×${(p99s(results[1]!) / p99s(results[0]!)).toFixed(2)})\n`,
  );
  return 0;
}

main().then(
  (code) => (process.exitCode = code),
  (err: unknown) => {
    process.stderr.write(`bench long-prompts: ${(err as Error).stack ?? String(err)}\n`);
    process.exitCode = 1;
  },
);
