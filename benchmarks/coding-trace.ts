/**
 * Writes a coding-assistant trace in kvgate's JSONL format (`npm run bench -- coding-trace --out F`),
 * for checking routing changes on traffic the built-in workloads do not model: closed-loop
 * sessions over large shared contexts with long answers. 10 repositories of 6–16k tokens
 * (Zipf-popular); each session works on one of them for 2–10 turns, every turn appending a 60–400
 * token message to the conversation (`"append": true`: the prompt grows by the simulated answer
 * and the message) after 2–20 s of think time, with answers of 150–900 tokens; a quarter of the
 * sessions are instead one-shot questions of 300–3,000 tokens. Sessions start in 20 s busy / 20 s
 * quiet phases (2.4 and 0.6 a second). Replay it with `kvgate bench --trace F --format jsonl`.
 *
 * Options: --out FILE (required), --seed N (default 1), --sessions N (700),
 * --max-repo-tokens N (16000).
 */
import { createWriteStream } from 'node:fs';
import { benchArgs } from './args.js';
import { seededRng, type Rng } from '../src/util/rng.js';
import { exponential, uniformInt, Zipf } from '../src/workload/random.js';

const REPOSITORIES = 10;
/** Token ids drawn for prompts: the estimate tokenizer's range, clear of special tokens. */
const ID_LO = 100;
const ID_HI = 31_000;

const { values } = benchArgs('coding-trace', {
  options: {
    out: { type: 'string' },
    seed: { type: 'string', default: '1' },
    sessions: { type: 'string', default: '700' },
    'max-repo-tokens': { type: 'string', default: '16000' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help || !values.out) {
  console.log(
    'npm run bench -- coding-trace --out FILE [--seed N] [--sessions N] [--max-repo-tokens N]\n\n' +
      'Writes a kvgate JSONL trace of coding-assistant sessions over shared repository contexts\n' +
      '(see benchmarks/coding-trace.ts); replay it with kvgate bench --trace FILE --format jsonl.',
  );
  process.exit(values.help ? 0 : 2);
}
const seed = Number(values.seed);
const sessions = Number(values.sessions);
const maxRepo = Number(values['max-repo-tokens']);
if (!Number.isInteger(seed) || !Number.isInteger(sessions) || sessions < 1 || !(maxRepo >= 6000)) {
  console.error('--seed must be an integer, --sessions a positive integer and --max-repo-tokens at least 6000');
  process.exit(2);
}

const rng: Rng = seededRng(seed);
const tokens = (n: number): number[] => Array.from({ length: n }, () => uniformInt(rng, ID_LO, ID_HI));
const repos = Array.from({ length: REPOSITORIES }, () => tokens(uniformInt(rng, 6000, maxRepo)));
// Zipf(1) popularity: repository i is worked on in proportion to 1 / (i + 1).
const popularity = new Zipf(REPOSITORIES, 1);

const out = createWriteStream(values.out);
let t = 0;
let rows = 0;
const write = (row: Record<string, unknown>): void => {
  out.write(JSON.stringify(row) + '\n');
  rows++;
};
for (let s = 0; s < sessions; s++) {
  const busy = Math.floor(t / 20_000) % 2 === 0;
  t += exponential(rng, 1000 / (busy ? 2.4 : 0.6));
  const at = Math.round(t);
  if (rng() < 0.25) {
    write({ timestamp_ms: at, prompt_tokens: tokens(uniformInt(rng, 300, 3000)), max_tokens: uniformInt(rng, 50, 400) });
    continue;
  }
  const session = `s${s}`;
  const repo = repos[popularity.sample(rng)]!;
  write({ timestamp_ms: at, session, prompt_tokens: [...repo, ...tokens(uniformInt(rng, 60, 400))], max_tokens: uniformInt(rng, 150, 900) });
  // Later turns: sent when the previous answer is done, plus the think time (closed loop).
  for (let k = uniformInt(rng, 2, 10) - 1; k > 0; k--) {
    write({
      timestamp_ms: at,
      session,
      append: true,
      think_ms: uniformInt(rng, 2000, 20_000),
      prompt_tokens: tokens(uniformInt(rng, 60, 400)),
      max_tokens: uniformInt(rng, 150, 900),
    });
  }
}
out.end(() => console.log(`${sessions} sessions, ${rows} requests written to ${values.out}`));
