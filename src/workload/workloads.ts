/**
 * Built-in workloads: deterministic request streams from a seed, with size (requests) and rate
 * (requests/s) knobs. Arrival gaps are Gamma with shape `burstiness` (1 = Poisson), as vLLM's
 * serving benchmark draws them.
 *
 * - shared-prefix: many tenants, each with a long system prompt (1,500–2,500 tokens) reused by
 *   every request of the tenant, a short user turn (100–200) and a 100–300 token answer. With the
 *   default 256 tenants the system prompts total ~512k tokens — more than one H100 worker's KV
 *   cache (~452k tokens for llama-3.1-8b), so a cache-blind policy keeps evicting them while a
 *   prefix-aware one can partition them.
 * - multi-turn: conversations of 2–8 turns; each turn's prompt is the previous prompt, the previous
 *   answer (the exact tokens the engine generated: see answerToken) and a new user message. Closed
 *   loop (sessions.ts): the next turn is sent an exponential think time (mean 8 s) after the
 *   previous answer actually finished in the simulation.
 * - rag: a pool of 500 documents (1,000–3,000 tokens) under one shared instruction; each prompt
 *   combines 2–4 documents picked by popularity (Zipf 1.0) and a short question.
 * - bursty: very bursty arrivals (burstiness 0.2) of chat requests with 15% long-context requests
 *   (8k–24k prompt tokens) mixed in; bursts of long prompts exhaust KV on a worker that a
 *   cache-and-load-blind policy keeps sending them to, which preempts.
 * - mixed: the four above interleaved, each at a quarter of the rate.
 * - agentic: agent sessions of 4–16 turns over 6 shared tool specifications (2–4k tokens), closed
 *   loop with ~3 s of think (tool) time; see agentic() below.
 * - fewshot-bursts: on/off bursts of short classification-style queries over 3 long few-shot
 *   prefixes (5–7k tokens), alongside 20% long unique documents; see fewshotBursts() below.
 * - rollouts: RL rollouts in waves of 32 problems asking n = 4–16 sampled answers each
 *   (BenchRequest.sampleTokens), beside single-answer chat; see rollouts() below.
 * - chat-app: a chat product's sessions over 8 assistants' system prompts, mostly short, a few
 *   long; see chat-app.ts.
 *
 * For a closed-loop workload `rate` is the request rate once sessions overlap in steady state
 * (session starts × mean turns); a finite run ramps up and down around it, so the measured mean
 * arrival rate is lower. `size` counts every turn.
 *
 * Default rates of the first five put an 8×H100 llama-3.1-8b fleet at roughly 70–85% of what it
 * sustains under round-robin, found by replaying each workload at rising rates with the engine's
 * time model and taking the rate where round-robin's p99 TTFT starts to climb (queueing) as
 * capacity:
 *
 *   workload        capacity (RR)   default rate
 *   shared-prefix   ~185 req/s      140 req/s
 *   multi-turn      ~450 req/s      350 req/s   (short prompts: 300-token preamble + turns; figures from the
 *                                                open-loop version, see docs/simulation.md)
 *   rag             ~60 req/s       45 req/s
 *   bursty          ~40 req/s       35 req/s    (round-robin already preempts here; least-load barely)
 *   mixed           ~70 req/s       55 req/s
 *
 * agentic and fewshot-bursts default to ~75% of round-robin's capacity at SLO (`kvgate bench
 * --capacity`: ≥ 90% of requests within TTFT ≤ 1 s + 100 ms per 1k prompt tokens and TPOT ≤ 50 ms)
 * at their default sizes, seed 0: agentic 2.89 × 30 ≈ 87 req/s → 65; fewshot-bursts 2.09 × 30
 * ≈ 63 req/s → 48.
 *
 * Scale with the fleet: `--rate` for a workload, `--rate-scale` for anything.
 *
 * `repeatFraction` (`--repeat-fraction`, results JSON `repeat_fraction`): that fraction of the
 * source's requests exactly repeat an earlier request — same tenant, prompt, max_tokens and
 * output, a new arrival time — as the deterministic (temperature 0) traffic a response cache
 * answers. The repeated request is drawn uniformly from the last REPEAT_WINDOW requests of the
 * stream (so from the same tenant as that request); it replaces the request the workload would
 * have produced at that arrival (a session's first turn is replaced whole: a repeat is a single
 * request). The requests that are not replaced are those of the same workload without repeats.
 */
import { LeadingPart } from '../kv/leading-part.js';
import { seededRng, type Rng } from '../util/rng.js';
import { chatApp } from './chat-app.js';
import { arrivalGapMs, exponential, uniformInt, Zipf } from './random.js';
import { sessionStart, takeRequests, type TurnSpec } from './sessions.js';
import { concatStream, concatTokens, fillStream, mix32 } from './tokens.js';
import type { BenchRequest, BenchSource } from './types.js';

export interface WorkloadOptions {
  /** Requests to generate. */
  size?: number;
  /** Fraction of requests, 0 ≤ f < 1, that exactly repeat an earlier request (default 0). */
  repeatFraction?: number;
  /** Mean arrival rate, requests per second. */
  rate?: number;
  seed?: number;
  /** Shape of the Gamma arrival gaps (1 = Poisson, < 1 burstier). */
  burstiness?: number;
}

interface WorkloadSpec {
  description: string;
  defaultSize: number;
  defaultRate: number;
  defaultBurstiness: number;
  /** An endless, time-ordered request stream; `burstiness` undefined means the workload's default. */
  generate(rng: Rng, seed: number, rate: number, burstiness: number | undefined): Iterator<BenchRequest>;
}

function stream(seed: number, n: number): Int32Array {
  const out = new Int32Array(n);
  fillStream(out, 0, seed, n);
  return out;
}

/** Lazily built, memoised token blocks (system prompts, documents) keyed by index. */
class Pool<T = Int32Array> {
  private readonly items = new Map<number, T>();
  constructor(private readonly make: (i: number) => T) {}
  get(i: number): T {
    let v = this.items.get(i);
    if (!v) {
      v = this.make(i);
      this.items.set(i, v);
    }
    return v;
  }
}

function* sharedPrefix(rng: Rng, seed: number, rate: number, burstiness: number, tenants = 512): Generator<BenchRequest> {
  const sys = new Pool((t) => new LeadingPart(stream(mix32(seed ^ 0x51ed270b, t), 1500 + (mix32(seed, t) % 1001))));
  const pick = new Zipf(tenants, 0.6);
  let t = 0;
  for (let n = 0; ; n++) {
    t += arrivalGapMs(rng, rate, burstiness);
    const tenant = pick.sample(rng);
    const outputSeed = mix32(seed ^ 0x7a3c11e9, n);
    const part = sys.get(tenant);
    const prompt = concatStream([part.tokens], outputSeed ^ 0x1, uniformInt(rng, 100, 200));
    yield {
      arrivalMs: t,
      promptTokens: prompt,
      promptPart: part,
      maxTokens: uniformInt(rng, 100, 300),
      outputSeed,
      tenant: `tenant-${tenant}`,
    };
  }
}

function* multiTurn(rng: Rng, seed: number, rate: number, burstiness: number): Generator<BenchRequest> {
  const meanTurns = 5; // turns are uniform on 2..8
  const system = new LeadingPart(stream(mix32(seed ^ 0x2f1b5c3d, 0), 300));
  let t = 0;
  for (let c = 0; ; c++) {
    t += arrivalGapMs(rng, rate / meanTurns, burstiness);
    const n = uniformInt(rng, 2, 8);
    const turns: TurnSpec[] = [];
    for (let k = 0; k < n; k++) {
      const outputSeed = mix32(mix32(seed ^ 0x6b43a9b5, c), k);
      const userLen = k === 0 ? uniformInt(rng, 100, 400) : uniformInt(rng, 50, 200);
      turns.push({
        user: () => stream(outputSeed ^ 0x2, userLen),
        maxTokens: uniformInt(rng, 100, 300),
        outputSeed,
        thinkMs: k === 0 ? 0 : exponential(rng, 8000),
      });
    }
    yield sessionStart({ id: `conv-${c}`, startMs: t, prefix: system, turns });
  }
}

/**
 * agentic: agent sessions over a few long tool specifications. Each session picks one of `tools`
 * specifications (2–4k tokens), states a task (200–600 tokens) and runs 4–16 turns: the model
 * answers with a tool call or reasoning (50–300 tokens), the tool's result or the user's reply
 * (100–600 tokens) is appended, and the next turn is sent after the tool ran (0.5 s + exponential,
 * mean 2.5 s) — closed loop, so a slow answer delays the rest of the session.
 */
function* agentic(rng: Rng, seed: number, rate: number, burstiness: number, tools = 6): Generator<BenchRequest> {
  const specs = new Pool((i) => new LeadingPart(stream(mix32(seed ^ 0x3a9e1c55, i), 2000 + (mix32(seed ^ 0x7d2b, i) % 2001))));
  const meanTurns = 10; // uniform on 4..16
  let t = 0;
  for (let c = 0; ; c++) {
    t += arrivalGapMs(rng, rate / meanTurns, burstiness);
    const tool = uniformInt(rng, 0, tools - 1);
    const n = uniformInt(rng, 4, 16);
    const turns: TurnSpec[] = [];
    for (let k = 0; k < n; k++) {
      const outputSeed = mix32(mix32(seed ^ 0x51f0a3c7, c), k);
      const userLen = k === 0 ? uniformInt(rng, 200, 600) : uniformInt(rng, 100, 600);
      turns.push({
        user: () => stream(outputSeed ^ 0x6, userLen),
        maxTokens: uniformInt(rng, 50, 300),
        outputSeed,
        thinkMs: k === 0 ? 0 : 500 + exponential(rng, 2500),
      });
    }
    yield sessionStart({ id: `agent-${c}`, startMs: t, prefix: specs.get(tool), turns, tenant: `tools-${tool}` });
  }
}

/**
 * fewshot-bursts: `prefixes` very long few-shot prompts (5–7k tokens of worked examples), each
 * queried by its own on/off process — bursts lasting an exponential 3 s on average, 15 s apart on
 * average — with short questions (20–100 tokens) and tiny answers (1–8 tokens), as batch
 * classification jobs do; alongside, 20% of the requests are long unique documents (8–16k tokens)
 * with ordinary answers (100–400 tokens), Poisson (Gamma with `burstiness`).
 */
function* fewshotBursts(seed: number, rate: number, burstiness: number, prefixes = 3): Generator<BenchRequest> {
  const docShare = 0.2;
  const onMs = 3000;
  const offMs = 15000;
  const shots = new Pool((i) => new LeadingPart(stream(mix32(seed ^ 0x0f5e7a21, i), 5000 + (mix32(seed ^ 0x2d, i) % 2001))));
  // Mean rate of one prefix's queries while its burst is on.
  const onRate = (((1 - docShare) * rate) / prefixes) * ((onMs + offMs) / onMs);
  function* queries(i: number): Generator<BenchRequest> {
    const rng = seededRng(mix32(seed ^ 0x44e1b0d9, i));
    let t = exponential(rng, offMs);
    for (let n = 0; ; ) {
      const end = t + exponential(rng, onMs);
      for (;;) {
        t += arrivalGapMs(rng, onRate, burstiness);
        if (t >= end) break;
        const outputSeed = mix32(mix32(seed ^ 0x19c3f7e5, i), n++);
        yield {
          arrivalMs: t,
          promptTokens: concatStream([shots.get(i).tokens], outputSeed ^ 0x7, uniformInt(rng, 20, 100)),
          promptPart: shots.get(i),
          maxTokens: uniformInt(rng, 1, 8),
          outputSeed,
          tenant: `fewshot-${i}`,
        };
      }
      t = end + exponential(rng, offMs);
    }
  }
  function* documents(): Generator<BenchRequest> {
    const rng = seededRng(mix32(seed ^ 0x6d2f8b13, 0));
    let t = 0;
    for (let n = 0; ; n++) {
      t += arrivalGapMs(rng, docShare * rate, burstiness);
      const outputSeed = mix32(seed ^ 0x2c7d9e41, n);
      yield { arrivalMs: t, promptTokens: stream(outputSeed ^ 0x8, uniformInt(rng, 8000, 16000)), maxTokens: uniformInt(rng, 100, 400), outputSeed };
    }
  }
  yield* merge([...Array.from({ length: prefixes }, (_, i) => queries(i)), documents()]);
}

/**
 * rollouts: reinforcement-learning rollouts beside interactive chat. Half the requests are a
 * trainer's, sent in waves as a trainer sends a batch of problems at once: 32 problems within
 * 200 ms, a wave every 32 / (rate / 2) seconds. Each is a problem (100–800 tokens) under one of 4
 * shared instruction templates (400–800 tokens) asking for n = 4, 8 or 16 sampled answers
 * (BenchRequest.sampleTokens) of 100–4,000 tokens each (100 + exponential, mean 900: reasoning
 * traces, long-tailed), with max_tokens 4,096 declared. A wave's last answer is what the trainer
 * waits for. The other half are chat requests with a single answer (300–1,500-token prompts,
 * 100–400-token answers), Poisson (Gamma with `burstiness`). A router that counts a request of
 * 16 answers as one sequence piles a wave's large requests onto few workers.
 */
function* rollouts(seed: number, rate: number, burstiness: number, templates = 4, wave = 32): Generator<BenchRequest> {
  const instructions = new Pool((i) => new LeadingPart(stream(mix32(seed ^ 0x2b7e1516, i), 400 + (mix32(seed ^ 0x28ae, i) % 401))));
  const NS = [4, 8, 16];
  function* trainer(): Generator<BenchRequest> {
    const rng = seededRng(mix32(seed ^ 0x7e3779b9, 1));
    const everyMs = (1000 * wave) / (rate / 2);
    for (let c = 0, start = everyMs / 2; ; start += everyMs) {
      const at = Array.from({ length: wave }, () => start + 200 * rng()).sort((a, b) => a - b);
      for (const t of at) {
        const outputSeed = mix32(seed ^ 0x1c6ef372, c++);
        const tpl = uniformInt(rng, 0, templates - 1);
        const n = NS[uniformInt(rng, 0, NS.length - 1)]!;
        const samples = Array.from({ length: n }, () => Math.min(4000, 100 + Math.round(exponential(rng, 900))));
        yield {
          arrivalMs: t,
          promptTokens: concatStream([instructions.get(tpl).tokens], outputSeed ^ 0x9, uniformInt(rng, 100, 800)),
          promptPart: instructions.get(tpl),
          maxTokens: Math.max(...samples),
          sampleTokens: samples,
          declaredMaxTokens: 4096,
          outputSeed,
          tenant: 'trainer',
        };
      }
    }
  }
  function* chat(): Generator<BenchRequest> {
    const rng = seededRng(mix32(seed ^ 0x3c6ef372, 2));
    let t = 0;
    for (let c = 0; ; c++) {
      t += arrivalGapMs(rng, rate / 2, burstiness);
      const outputSeed = mix32(seed ^ 0x5be0cd19, c);
      yield { arrivalMs: t, promptTokens: stream(outputSeed ^ 0xa, uniformInt(rng, 300, 1500)), maxTokens: uniformInt(rng, 100, 400), outputSeed, tenant: 'chat' };
    }
  }
  yield* merge([trainer(), chat()]);
}

function* rag(rng: Rng, seed: number, rate: number, burstiness: number, docs = 500): Generator<BenchRequest> {
  const instruction = stream(mix32(seed ^ 0x0d3a7f21, 0), 150);
  const pool = new Pool((d) => stream(mix32(seed ^ 0x4c1b9e07, d), 1000 + (mix32(seed ^ 0x99, d) % 2001)));
  // A prompt begins with the instruction and its first document: the block hashes of that pair
  // are computed once for every prompt that begins with it (kv/leading-part.ts).
  const leading = new Pool((d) => new LeadingPart(concatTokens([instruction, pool.get(d)])));
  const pick = new Zipf(docs, 1.0);
  let t = 0;
  for (let n = 0; ; n++) {
    t += arrivalGapMs(rng, rate, burstiness);
    const k = uniformInt(rng, 2, 4);
    const chosen: number[] = [];
    while (chosen.length < k) {
      const d = pick.sample(rng);
      if (!chosen.includes(d)) chosen.push(d);
    }
    const outputSeed = mix32(seed ^ 0x1f83d9ab, n);
    const first = leading.get(chosen[0]!);
    const prompt = concatStream([first.tokens, ...chosen.slice(1).map((d) => pool.get(d))], outputSeed ^ 0x4, uniformInt(rng, 30, 80));
    yield {
      arrivalMs: t,
      promptTokens: prompt,
      promptPart: first,
      maxTokens: uniformInt(rng, 50, 200),
      outputSeed,
    };
  }
}

function* bursty(rng: Rng, seed: number, rate: number, burstiness: number): Generator<BenchRequest> {
  let t = 0;
  for (let n = 0; ; n++) {
    t += arrivalGapMs(rng, rate, burstiness);
    const outputSeed = mix32(seed ^ 0x3b9aca07, n);
    const long = rng() < 0.15;
    const promptLen = long ? uniformInt(rng, 8000, 24000) : uniformInt(rng, 200, 1500);
    const maxTokens = long ? uniformInt(rng, 300, 1000) : uniformInt(rng, 100, 400);
    yield { arrivalMs: t, promptTokens: stream(outputSeed ^ 0x5, promptLen), maxTokens, outputSeed };
  }
}

/**
 * Requests for `adapters` LoRA adapters of one base model, drawn with Zipf weights (a few popular
 * adapters, a long tail), each with its own 500–1,500-token system prompt and a 50–200-token
 * question, answers of 50–300 tokens.
 */
/** The adapters of the `lora` workload. */
export const LORA_WORKLOAD_ADAPTERS: readonly string[] = Array.from({ length: 16 }, (_, a) => `lora-${a}`);

function* lora(rng: Rng, seed: number, rate: number, burstiness: number, adapters = LORA_WORKLOAD_ADAPTERS.length): Generator<BenchRequest> {
  const system = new Pool((a) => new LeadingPart(stream(mix32(seed ^ 0x10a4d1c3, a), 500 + (mix32(seed ^ 0x2f, a) % 1001))));
  const pick = new Zipf(adapters, 1.0);
  let t = 0;
  for (let n = 0; ; n++) {
    t += arrivalGapMs(rng, rate, burstiness);
    const a = pick.sample(rng);
    const outputSeed = mix32(seed ^ 0x7e0a11d5, n);
    const prompt = concatStream([system.get(a).tokens], outputSeed ^ 0x6, uniformInt(rng, 50, 200));
    yield { arrivalMs: t, promptTokens: prompt, promptPart: system.get(a), maxTokens: uniformInt(rng, 50, 300), outputSeed, adapter: LORA_WORKLOAD_ADAPTERS[a]! };
  }
}

/** Merge time-ordered streams by arrival (ties: the earlier stream first). */
function* merge(streams: Iterator<BenchRequest>[]): Generator<BenchRequest> {
  const heads = streams.map((s) => s.next().value as BenchRequest);
  for (;;) {
    let best = 0;
    for (let i = 1; i < heads.length; i++) if (heads[i]!.arrivalMs < heads[best]!.arrivalMs) best = i;
    yield heads[best]!;
    heads[best] = streams[best]!.next().value as BenchRequest;
  }
}

const SPECS: Record<string, WorkloadSpec> = {
  'shared-prefix': {
    description: '512 tenants with ~2k-token system prompts, 100–200 token user turns, 100–300 token answers',
    defaultSize: 5000,
    defaultRate: 140,
    defaultBurstiness: 1,
    generate: (rng, seed, rate, b) => sharedPrefix(rng, seed, rate, b ?? SPECS['shared-prefix']!.defaultBurstiness),
  },
  'multi-turn': {
    description: 'conversations of 2–8 turns whose prompts grow by the previous answer and a new message; closed loop, 8 s mean think time',
    defaultSize: 5000,
    defaultRate: 350,
    defaultBurstiness: 1,
    generate: (rng, seed, rate, b) => multiTurn(rng, seed, rate, b ?? SPECS['multi-turn']!.defaultBurstiness),
  },
  rag: {
    description: '2–4 of 500 shared documents (1–3k tokens, Zipf popularity) plus a question per prompt',
    defaultSize: 5000,
    defaultRate: 45,
    defaultBurstiness: 1,
    generate: (rng, seed, rate, b) => rag(rng, seed, rate, b ?? SPECS['rag']!.defaultBurstiness),
  },
  bursty: {
    description: 'very bursty arrivals (burstiness 0.2) with 15% long-context (8k–24k token) requests',
    defaultSize: 5000,
    defaultRate: 35,
    defaultBurstiness: 0.2,
    generate: (rng, seed, rate, b) => bursty(rng, seed, rate, b ?? SPECS['bursty']!.defaultBurstiness),
  },
  mixed: {
    description: 'shared-prefix, multi-turn, rag and bursty interleaved, a quarter of the rate each',
    defaultSize: 5000,
    defaultRate: 55,
    defaultBurstiness: 1,
    generate: (_rng, seed, rate, b) => {
      const parts = ['shared-prefix', 'multi-turn', 'rag', 'bursty'].map((name, i) => {
        const spec = SPECS[name]!;
        const sub = mix32(seed, 1000 + i);
        // Each part keeps its own burstiness unless the caller set one.
        return spec.generate(seededRng(sub), sub, rate / 4, b);
      });
      return merge(parts);
    },
  },
  agentic: {
    description: 'agent sessions of 4–16 turns over 6 shared 2–4k-token tool specs; prompts grow by each answer and tool result; closed loop, ~3 s think time',
    defaultSize: 12000,
    defaultRate: 65,
    defaultBurstiness: 1,
    generate: (rng, seed, rate, b) => agentic(rng, seed, rate, b ?? SPECS['agentic']!.defaultBurstiness),
  },
  rollouts: {
    description: 'RL rollouts in waves of 32 problems, each asking n = 4–16 sampled answers of 100–4,000 tokens, beside as many single-answer chat requests',
    defaultSize: 4000,
    defaultRate: 9,
    defaultBurstiness: 1,
    generate: (_rng, seed, rate, b) => rollouts(seed, rate, b ?? 1),
  },
  'fewshot-bursts': {
    description: 'on/off bursts of short questions with 1–8 token answers on 3 shared 5–7k-token few-shot prefixes, plus 20% long unique documents',
    defaultSize: 8000,
    defaultRate: 48,
    defaultBurstiness: 1,
    generate: (_rng, seed, rate, b) => fewshotBursts(seed, rate, b ?? SPECS['fewshot-bursts']!.defaultBurstiness),
  },
  'chat-app': {
    description: 'a chat product: 8 assistants with 1–6k-token system prompts (Zipf), 70% of sessions 1–3 turns and 30% 6–24, pasted documents, short and long answers; closed loop, ~12 s think time',
    defaultSize: 5000,
    defaultRate: 40,
    defaultBurstiness: 1,
    generate: (rng, seed, rate, b) => chatApp(rng, seed, rate, b ?? SPECS['chat-app']!.defaultBurstiness),
  },
  lora: {
    description: '16 LoRA adapters of one model (Zipf popularity), each with its own 500–1,500-token system prompt; 50–200 token questions, 50–300 token answers (with --max-loras, default 1)',
    defaultSize: 5000,
    defaultRate: 40,
    defaultBurstiness: 1,
    generate: (rng, seed, rate, b) => lora(rng, seed, rate, b ?? SPECS['lora']!.defaultBurstiness),
  },
};

/** Requests a repeat is drawn from: the most recent this many. */
const REPEAT_WINDOW = 2000;

/** Replace `fraction` of a stream's requests by exact repeats of recent earlier ones (see above). */
function* withRepeats(src: Iterator<BenchRequest>, fraction: number, seed: number, window = REPEAT_WINDOW): Generator<BenchRequest> {
  const rng = seededRng(mix32(seed, 0x7e9ea7));
  const recent: BenchRequest[] = [];
  let next = 0;
  for (;;) {
    const x = src.next();
    if (x.done) return;
    const r = x.value;
    if (recent.length > 0 && rng() < fraction) {
      const e = recent[Math.floor(rng() * recent.length)]!;
      const rep: BenchRequest = { arrivalMs: r.arrivalMs, promptTokens: e.promptTokens, maxTokens: e.maxTokens, outputSeed: e.outputSeed };
      if (e.promptPart !== undefined) rep.promptPart = e.promptPart;
      if (e.promptText !== undefined) rep.promptText = e.promptText;
      if (e.tenant !== undefined) rep.tenant = e.tenant;
      if (e.priority !== undefined) rep.priority = e.priority;
      yield rep;
      continue;
    }
    if (recent.length < window) recent.push(r);
    else recent[next++ % window] = r;
    yield r;
  }
}

export function workloadNames(): string[] {
  return Object.keys(SPECS);
}

/** `mixed` keeps each part's own burstiness unless one is given. */
function burstinessLabel(name: string, spec: WorkloadSpec): number | string {
  return name === 'mixed' ? 'per part' : spec.defaultBurstiness;
}

export function describeWorkloads(): Array<{ name: string; description: string; size: number; rate: number; burstiness: number | string }> {
  return Object.entries(SPECS).map(([name, s]) => ({
    name,
    description: s.description,
    size: s.defaultSize,
    rate: s.defaultRate,
    burstiness: burstinessLabel(name, s),
  }));
}

export function workloadSource(name: string, opts: WorkloadOptions = {}): BenchSource {
  const spec = SPECS[name];
  if (!spec) throw new Error(`unknown workload '${name}' (known: ${workloadNames().join(', ')})`);
  const size = opts.size ?? spec.defaultSize;
  const rate = opts.rate ?? spec.defaultRate;
  const seed = opts.seed ?? 0;
  const burstiness = opts.burstiness;
  if (!Number.isInteger(size) || size < 0) throw new Error(`workload size must be a non-negative integer, got ${size}`);
  if (!(rate > 0) || !Number.isFinite(rate)) throw new Error(`workload rate must be a positive number, got ${rate}`);
  if (burstiness !== undefined && (!(burstiness > 0) || !Number.isFinite(burstiness))) throw new Error(`burstiness must be a positive number, got ${burstiness}`);
  const repeat = opts.repeatFraction ?? 0;
  if (!(repeat >= 0 && repeat < 1)) throw new Error(`repeat fraction must be in [0, 1), got ${repeat}`);
  const params: Record<string, number | string> = { size, rate, burstiness: burstiness ?? burstinessLabel(name, spec), seed: seed >>> 0 };
  if (repeat > 0) params.repeat_fraction = repeat;
  return {
    name: `workload:${name}`,
    params,
    skipped: 0,
    size,
    open() {
      // `size` counts every turn of a session when its first turn is taken (see sessions.ts).
      return takeRequests(this.openUnbounded!(), size);
    },
    openUnbounded() {
      const gen = spec.generate(seededRng(mix32(seed, 0x77)), seed >>> 0, rate, burstiness);
      const it = repeat > 0 ? withRepeats(gen, repeat, seed >>> 0) : gen;
      return { [Symbol.iterator]: () => it };
    },
  };
}
