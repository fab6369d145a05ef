/**
 * `npm run bench -- tokenize`: what tokenizing chat prompts costs the gateway (the `estimate`
 * tokenizer), and what keeping the ids of long messages (ChatTokenCache, as the gateway does)
 * saves on a conversation and costs on prompts never seen before.
 *
 * The two ways are timed alternately on the same prompts, so the machine's noise falls on both.
 */
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { benchArgs } from './args.js';
import { renderChat, type ChatMessageLike } from '../src/tokenizer/chat-template.js';
import { ChatTokenCache } from '../src/tokenizer/chat-tokens.js';
import { estimateTokenizer } from '../src/tokenizer/estimate.js';
import { loadHfTokenizer } from '../src/tokenizer/hf.js';
import { createPromptTokenizer, type PromptTokenizer } from '../src/tokenizer/registry.js';
import { proseText } from './overhead/targets.js';

const HELP = `npm run bench -- tokenize [options]

Times the estimate tokenizer on chat prompts, tokenizing the rendered prompt whole ('whole') and
message by message with the ids of long messages kept ('kept', as the gateway does):
  prose        one 8,000-token message of made-up prose, µs per prompt and ns per token
  conversation a system message of 2,000 tokens, then turns of 300 tokens; every turn's request
               carries the whole history (as chat clients send it): µs per request, by turn
  unique       8,000-token prompts never seen before (every message missed): what keeping costs
  flood        a system message in two requests in a row once every 150 requests, among
               8,000-token messages each sent once (more ids between its visits than are kept):
               the kept ids in segments (the default) against one LRU list, µs per visit's first
               request and how often its system message was still kept

With --hf PATH it also times that Hugging Face tokenizer.json (Tokenizers.js, in JavaScript) on the
prose prompt, and what it does to the event loop while long prompts arrive (one every 25 ms,
--rounds of them), tokenized as the gateway's hf: tokenizers do with tokenizers.threads: 0 (on the
event loop) and 1 (on a worker thread): the loop's delay (what every other request waits), its busy
time per prompt, and each prompt's time from arrival to ids.

Options:
  --hf PATH     a tokenizer.json to time as well
  --turns N     turns of the conversation (default 20)
  --rounds N    repetitions, medians reported (default 30)
  -h, --help    this text
`;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1]!;
}

function timeUs(f: () => unknown): number {
  const t0 = process.hrtime.bigint();
  f();
  return Number(process.hrtime.bigint() - t0) / 1000;
}

async function main(): Promise<number> {
  const { values } = benchArgs('tokenize', {
    options: {
      hf: { type: 'string' },
      turns: { type: 'string', default: '20' },
      rounds: { type: 'string', default: '30' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const turns = Number(values.turns);
  const rounds = Number(values.rounds);
  if (!(Number.isInteger(turns) && turns > 0 && turns <= 200) || !(Number.isInteger(rounds) && rounds > 0)) {
    process.stderr.write('bench tokenize: --turns takes a whole number from 1 to 200, --rounds a positive whole number\n');
    return 2;
  }
  const whole = (msgs: readonly ChatMessageLike[]): number[] => estimateTokenizer.encode(renderChat(msgs));
  const fresh = (): ChatTokenCache => new ChatTokenCache(estimateTokenizer, { maxTokens: 1 << 20, minChars: 256 });

  // prose
  const prose: ChatMessageLike[] = [{ role: 'user', content: proseText(8000) }];
  const proseTokens = whole(prose).length;
  const proseUs: number[] = [];
  for (let r = 0; r < rounds; r++) proseUs.push(timeUs(() => whole(prose)));
  const p50 = median(proseUs);

  // conversation: every round two new conversations of the same shape, one tokenized each way,
  // turn by turn (not one conversation both ways: the tokenizer remembers the text of pieces it
  // has not seen before, and whichever way went first would pay that for both)
  const byTurn = { whole: Array.from({ length: turns }, () => [] as number[]), kept: Array.from({ length: turns }, () => [] as number[]) };
  let lastTokens = 0;
  for (let r = 0; r < rounds; r++) {
    const cache = fresh();
    const convs = [0, 1].map((k): ChatMessageLike[] => [{ role: 'system', content: proseText(2000, 1000 + 2 * r + k) }]);
    for (let t = 0; t < turns; t++) {
      for (let k = 0; k < 2; k++) convs[k]!.push({ role: t % 2 === 0 ? 'user' : 'assistant', content: proseText(300, 100_000 + r * 10_000 + t * 2 + k) });
      const [a, b] = r % 2 === 0 ? [convs[0]!, convs[1]!] : [convs[1]!, convs[0]!];
      byTurn.whole[t]!.push(timeUs(() => whole(a)));
      byTurn.kept[t]!.push(timeUs(() => cache.encode(b)));
    }
    lastTokens = whole(convs[0]!).length;
  }
  const sumWhole = byTurn.whole.reduce((s, xs) => s + median(xs), 0);
  const sumKept = byTurn.kept.reduce((s, xs) => s + median(xs), 0);

  // unique prompts: each 8,000-token message seen once
  const uniqueWhole: number[] = [];
  const uniqueKept: number[] = [];
  const cache = fresh();
  for (let r = 0; r < rounds; r++) {
    const a: ChatMessageLike[] = [{ role: 'user', content: proseText(8000, 50_000 + 2 * r) }];
    const b: ChatMessageLike[] = [{ role: 'user', content: proseText(8000, 50_001 + 2 * r) }];
    // Alternate which goes first; each prompt is new to the cache.
    if (r % 2 === 0) {
      uniqueWhole.push(timeUs(() => whole(a)));
      uniqueKept.push(timeUs(() => cache.encode(b)));
    } else {
      uniqueKept.push(timeUs(() => cache.encode(a)));
      uniqueWhole.push(timeUs(() => whole(b)));
    }
  }

  // flood: a 2,000-token system message sent in two requests in a row (two questions) once every
  // FLOOD_EVERY requests, among 8,000-token messages each sent once: more ids between two of its
  // visits than the cache keeps. The first request of each visit is timed. The same requests go
  // to a cache with the segments (the default) and one plain LRU list (protectedShare 0),
  // alternating which goes first.
  const FLOOD_EVERY = 150;
  const floodCycles = Math.max(2, Math.ceil(rounds / 3));
  const segmented = fresh();
  const plain = new ChatTokenCache(estimateTokenizer, { maxTokens: 1 << 20, minChars: 256, protectedShare: 0 });
  const system = proseText(2000, 7_000);
  const flood = { segmented: [] as number[], plain: [] as number[], onceSegmented: [] as number[], oncePlain: [] as number[] };
  const hitsBefore = { segmented: 0, plain: 0 };
  for (let c = 0; c < floodCycles; c++) {
    const ask: ChatMessageLike[] = [{ role: 'system', content: system }, { role: 'user', content: proseText(300, 8_000 + c) }];
    const [h0, h1] = [segmented.hits, plain.hits];
    const [ts, tp] = c % 2 === 0 ? [timeUs(() => segmented.encode(ask)), timeUs(() => plain.encode(ask))] : [timeUs(() => plain.encode(ask)), timeUs(() => segmented.encode(ask))].reverse();
    // The first request of all only fills the caches.
    if (c > 0) {
      flood.segmented.push(ts!);
      flood.plain.push(tp!);
      hitsBefore.segmented += segmented.hits - h0;
      hitsBefore.plain += plain.hits - h1;
    }
    const again: ChatMessageLike[] = [{ role: 'system', content: system }, { role: 'user', content: proseText(300, 9_000 + c) }];
    segmented.encode(again);
    plain.encode(again);
    for (let i = 2; i < FLOOD_EVERY; i++) {
      const once: ChatMessageLike[] = [{ role: 'user', content: proseText(8000, 60_000 + c * FLOOD_EVERY + i) }];
      if (i % 2 === 0) {
        flood.onceSegmented.push(timeUs(() => segmented.encode(once)));
        flood.oncePlain.push(timeUs(() => plain.encode(once)));
      } else {
        flood.oncePlain.push(timeUs(() => plain.encode(once)));
        flood.onceSegmented.push(timeUs(() => segmented.encode(once)));
      }
    }
  }

  let hfLine = '';
  if (values.hf !== undefined) {
    let hf;
    try {
      hf = await loadHfTokenizer(values.hf);
    } catch (e) {
      process.stderr.write(`bench tokenize: ${(e as Error).message}\n`);
      return 2;
    }
    const text = renderChat(prose);
    const n = hf.encode(text).length;
    const us: number[] = [];
    for (let r = 0; r < Math.min(rounds, 10); r++) us.push(timeUs(() => hf.encode(text)));
    const m = median(us);
    hfLine = `hf (${values.hf}) on the same prose: ${n} tokens, ${m.toFixed(0)} µs per prompt, ${((m * 1000) / n).toFixed(0)} ns per token (${Math.min(rounds, 10)} rounds)\n\n`;
    hfLine += `the event loop while ${rounds} such prompts arrive, one every 25 ms:\n`;
    hfLine += `  where                 loop delay p50 / p99 / max ms   loop busy ms per prompt   prompt to ids p50 / p99 ms\n`;
    for (const threads of [0, 1]) {
      const t = await createPromptTokenizer(`hf:${values.hf}`, { threads });
      try {
        const r = await loopUnderLongPrompts(t, text, rounds, 25);
        const where = threads === 0 ? 'on the event loop' : 'on a thread';
        hfLine +=
          `  ${where.padEnd(20)} ${r.delayP50.toFixed(1).padStart(8)} / ${r.delayP99.toFixed(1).padStart(5)} / ${r.delayMax.toFixed(1).padStart(5)}` +
          `   ${r.busyPerPrompt.toFixed(2).padStart(22)}   ${r.latencyP50.toFixed(1).padStart(17)} / ${r.latencyP99.toFixed(1)}\n`;
      } finally {
        await t.close?.();
      }
    }
    hfLine += '\n';
  }

  const f = (x: number): string => x.toFixed(0).padStart(9);
  process.stdout.write(
    `bench tokenize: estimate tokenizer, medians of ${rounds} rounds\n\n` +
      `prose, ${proseTokens} tokens: ${p50.toFixed(0)} µs per prompt, ${((p50 * 1000) / proseTokens).toFixed(1)} ns per token\n\n` +
      hfLine +
      `conversation, ${turns} turns (the last request ${lastTokens} tokens), µs per request:\n` +
      `  turn       whole      kept\n` +
      [0, Math.floor(turns / 4), Math.floor(turns / 2), turns - 1]
        .filter((t, i, a) => a.indexOf(t) === i)
        .map((t) => `  ${String(t + 1).padStart(4)} ${f(median(byTurn.whole[t]!))} ${f(median(byTurn.kept[t]!))}`)
        .join('\n') +
      `\n  all turns ${f(sumWhole)} ${f(sumKept)}   kept / whole ${(sumKept / sumWhole).toFixed(3)}\n\n` +
      `unique 8,000-token prompts, µs per prompt: whole ${median(uniqueWhole).toFixed(0)}, kept ${median(uniqueKept).toFixed(0)}   kept / whole ${(median(uniqueKept) / median(uniqueWhole)).toFixed(3)}\n\n` +
      `flood, a 2,000-token system message in two requests in a row once every ${FLOOD_EVERY} requests, among 8,000-token messages each sent once (the first of ${floodCycles - 1} visits timed):\n` +
      `  kept ids                 system request µs   its message kept   a message sent once µs\n` +
      `  segmented (default) ${f(median(flood.segmented)).padStart(22)}   ${`${hitsBefore.segmented} of ${floodCycles - 1}`.padStart(16)}   ${f(median(flood.onceSegmented)).padStart(22)}\n` +
      `  one LRU list        ${f(median(flood.plain)).padStart(22)}   ${`${hitsBefore.plain} of ${floodCycles - 1}`.padStart(16)}   ${f(median(flood.oncePlain)).padStart(22)}\n` +
      `  segmented / one list ${(median(flood.segmented) / median(flood.plain)).toFixed(3).padStart(21)}\n`,
  );
  return 0;
}

/**
 * `count` prompts handed to `t` one every `everyMs` (not waiting for each other, as requests
 * arrive), while the event loop's delay and utilisation are recorded.
 */
async function loopUnderLongPrompts(
  t: PromptTokenizer,
  text: string,
  count: number,
  everyMs: number,
): Promise<{ delayP50: number; delayP99: number; delayMax: number; busyPerPrompt: number; latencyP50: number; latencyP99: number }> {
  await t.tokenize(text, { model: 'm' }); // warm: the thread's first prompt, the JIT
  const delay = monitorEventLoopDelay({ resolution: 1 });
  const latencies: number[] = [];
  const elu0 = performance.eventLoopUtilization();
  delay.enable();
  const done: Array<Promise<void>> = [];
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    done.push(t.tokenize(text, { model: 'm' }).then(() => void latencies.push(performance.now() - t0)));
    await new Promise((r) => setTimeout(r, everyMs));
  }
  await Promise.all(done);
  delay.disable();
  const elu = performance.eventLoopUtilization(elu0);
  latencies.sort((a, b) => a - b);
  const q = (p: number): number => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))]!;
  return {
    delayP50: delay.percentile(50) / 1e6,
    delayP99: delay.percentile(99) / 1e6,
    delayMax: delay.max / 1e6,
    busyPerPrompt: elu.active / count,
    latencyP50: q(0.5),
    latencyP99: q(0.99),
  };
}

main().then(
  (code) => (process.exitCode = code),
  (err: unknown) => {
    process.stderr.write(`bench tokenize: ${(err as Error).stack ?? String(err)}\n`);
    process.exitCode = 1;
  },
);
