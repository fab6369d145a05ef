/**
 * chat-app: the traffic of a chat product built on a few assistants, as its users send it.
 *
 * - 8 assistants (a support bot, a coding helper, …), each with its own system prompt of
 *   1,000–6,000 tokens (instructions, tool and policy text), picked with Zipf popularity (s = 0.8):
 *   a few assistants take most sessions, the long tail still has to be served.
 * - Sessions are mostly short and a few are long: 70% ask 1–3 questions, 30% run 6–24 turns and
 *   grow to 10–20k tokens of history.
 * - A user turn is a message of 20–300 tokens, or (1 turn in 10) a pasted document of
 *   1,000–4,000 tokens.
 * - Answers are mostly short (70%: 20–200 tokens) and sometimes long (30%: 300–1,000 tokens:
 *   code, a rewritten document).
 * - Closed loop (sessions.ts): a person reads the answer and types the next message, 2 s plus an
 *   exponential of mean 10 s after the answer finished.
 *
 * Every routing lever is in it at once and none dominates: shared prefixes of several sizes (the
 * case prefix-affinity routers are built for), sessions whose history outgrows their system prompt
 * (session affinity), pasted documents that stall a batch of decodes, and answer lengths that
 * differ by 50× on the same worker. `rate` is the request rate once sessions overlap (session
 * starts × mean turns), as for the other closed-loop workloads.
 */
import { LeadingPart } from '../kv/leading-part.js';
import type { Rng } from '../util/rng.js';
import { arrivalGapMs, exponential, uniformInt, Zipf } from './random.js';
import { sessionStart, type TurnSpec } from './sessions.js';
import { fillStream, mix32 } from './tokens.js';
import type { BenchRequest } from './types.js';

const ASSISTANTS = 8;
/** Share of sessions that are short (1–3 turns); the rest are long (6–24 turns). */
const SHORT_SHARE = 0.7;
/** Mean turns per session: 0.7 · 2 + 0.3 · 15. */
const MEAN_TURNS = SHORT_SHARE * 2 + (1 - SHORT_SHARE) * 15;

function tokens(seed: number, n: number): Int32Array {
  const out = new Int32Array(n);
  fillStream(out, 0, seed, n);
  return out;
}

export function* chatApp(rng: Rng, seed: number, rate: number, burstiness: number): Generator<BenchRequest> {
  const systems = new Map<number, LeadingPart>();
  const system = (a: number): LeadingPart => {
    let s = systems.get(a);
    if (!s) {
      s = new LeadingPart(tokens(mix32(seed ^ 0x5c4a11b3, a), 1000 + (mix32(seed ^ 0x3e, a) % 5001)));
      systems.set(a, s);
    }
    return s;
  };
  const pick = new Zipf(ASSISTANTS, 0.8);
  let t = 0;
  for (let c = 0; ; c++) {
    t += arrivalGapMs(rng, rate / MEAN_TURNS, burstiness);
    const assistant = pick.sample(rng);
    const n = rng() < SHORT_SHARE ? uniformInt(rng, 1, 3) : uniformInt(rng, 6, 24);
    const turns: TurnSpec[] = [];
    for (let k = 0; k < n; k++) {
      const outputSeed = mix32(mix32(seed ^ 0x6a09e667, c), k);
      const userLen = rng() < 0.1 ? uniformInt(rng, 1000, 4000) : uniformInt(rng, 20, 300);
      turns.push({
        user: () => tokens(outputSeed ^ 0xb, userLen),
        maxTokens: rng() < SHORT_SHARE ? uniformInt(rng, 20, 200) : uniformInt(rng, 300, 1000),
        outputSeed,
        thinkMs: k === 0 ? 0 : 2000 + exponential(rng, 10_000),
      });
    }
    yield sessionStart({ id: `chat-${c}`, startMs: t, prefix: system(assistant), turns, tenant: `assistant-${assistant}` });
  }
}
