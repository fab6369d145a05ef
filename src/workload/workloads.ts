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
 *   answer (the exact tokens the engine generated: see answerToken) and a new user message. The
 *   next turn arrives after the answer's expected duration (25 ms/token + 0.5 s) plus an
 *   exponential think time (mean 8 s), in open loop (it does not wait for the real answer).
 * - rag: a pool of 500 documents (1,000–3,000 tokens) under one shared instruction; each prompt
 *   combines 2–4 documents picked by popularity (Zipf 1.0) and a short question.
 * - bursty: very bursty arrivals (burstiness 0.2) of chat requests with 15% long-context requests
 *   (8k–24k prompt tokens) mixed in; bursts of long prompts exhaust KV on a worker that a
 *   cache-and-load-blind policy keeps sending them to, which preempts.
 * - mixed: the four above interleaved, each at a quarter of the rate.
 *
 * Default rates put an 8×H100 llama-3.1-8b fleet at roughly 70–85% of what it sustains under
 * round-robin, found by replaying each workload at rising rates with the engine's time model and
 * taking the rate where round-robin's p99 TTFT starts to climb (queueing) as capacity:
 *
 *   workload        capacity (RR)   default rate
 *   shared-prefix   ~185 req/s      140 req/s
 *   multi-turn      ~450 req/s      350 req/s   (short prompts: 300-token preamble + turns)
 *   rag             ~60 req/s       45 req/s
 *   bursty          ~40 req/s       35 req/s    (round-robin already preempts here; least-load barely)
 *   mixed           ~70 req/s       55 req/s
 *
 * Scale with the fleet: `--rate` for a workload, `--rate-scale` for anything.
 */
import { seededRng, type Rng } from '../util/rng.js';
import { arrivalGapMs, exponential, uniformInt, Zipf } from './random.js';
import { answerToken, fillStream, mix32 } from './tokens.js';
import type { BenchRequest, BenchSource } from './types.js';

export interface WorkloadOptions {
  /** Requests to generate. */
  size?: number;
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

/** Concatenate token arrays into one Int32Array. */
function concat(parts: ArrayLike<number>[]): Int32Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Int32Array(n);
  let at = 0;
  for (const p of parts) {
    if (p instanceof Int32Array) out.set(p, at);
    else for (let i = 0; i < p.length; i++) out[at + i] = p[i]!;
    at += p.length;
  }
  return out;
}

function stream(seed: number, n: number): Int32Array {
  const out = new Int32Array(n);
  fillStream(out, 0, seed, n);
  return out;
}

/** Lazily built, memoised token blocks (system prompts, documents) keyed by index. */
class Pool {
  private readonly items = new Map<number, Int32Array>();
  constructor(private readonly make: (i: number) => Int32Array) {}
  get(i: number): Int32Array {
    let v = this.items.get(i);
    if (!v) {
      v = this.make(i);
      this.items.set(i, v);
    }
    return v;
  }
}

function* sharedPrefix(rng: Rng, seed: number, rate: number, burstiness: number, tenants = 512): Generator<BenchRequest> {
  const sys = new Pool((t) => stream(mix32(seed ^ 0x51ed270b, t), 1500 + (mix32(seed, t) % 1001)));
  const pick = new Zipf(tenants, 0.6);
  let t = 0;
  for (let n = 0; ; n++) {
    t += arrivalGapMs(rng, rate, burstiness);
    const tenant = pick.sample(rng);
    const outputSeed = mix32(seed ^ 0x7a3c11e9, n);
    const user = stream(outputSeed ^ 0x1, uniformInt(rng, 100, 200));
    yield {
      arrivalMs: t,
      promptTokens: concat([sys.get(tenant), user]),
      maxTokens: uniformInt(rng, 100, 300),
      outputSeed,
      tenant: `tenant-${tenant}`,
    };
  }
}

interface Conversation {
  id: number;
  nextAt: number;
  turnsLeft: number;
  prompt: Int32Array;
  lastOutputSeed: number;
  lastMaxTokens: number;
}

function* multiTurn(rng: Rng, seed: number, rate: number, burstiness: number): Generator<BenchRequest> {
  const meanTurns = 5; // turns are uniform on 2..8
  const startRate = rate / meanTurns;
  const system = stream(mix32(seed ^ 0x2f1b5c3d, 0), 300);
  // Conversations waiting for their next turn, earliest first (small: a linear scan is fine).
  const active: Conversation[] = [];
  let nextStart = arrivalGapMs(rng, startRate, burstiness);
  let convs = 0;
  for (let n = 0; ; n++) {
    let idx = -1;
    for (let i = 0; i < active.length; i++) if (idx < 0 || active[i]!.nextAt < active[idx]!.nextAt) idx = i;
    let c: Conversation;
    let prompt: Int32Array;
    const outputSeed = mix32(seed ^ 0x6b43a9b5, n);
    const user = stream(outputSeed ^ 0x2, uniformInt(rng, 50, 200));
    if (idx >= 0 && active[idx]!.nextAt <= nextStart) {
      c = active[idx]!;
      const answer = new Int32Array(c.lastMaxTokens);
      for (let i = 0; i < answer.length; i++) answer[i] = answerToken(c.lastOutputSeed, i);
      prompt = concat([c.prompt, answer, user]);
    } else {
      c = { id: convs++, nextAt: nextStart, turnsLeft: uniformInt(rng, 2, 8), prompt: system, lastOutputSeed: 0, lastMaxTokens: 0 };
      active.push(c);
      idx = active.length - 1;
      prompt = concat([system, stream(outputSeed ^ 0x3, uniformInt(rng, 100, 400))]);
      nextStart += arrivalGapMs(rng, startRate, burstiness);
    }
    const maxTokens = uniformInt(rng, 100, 300);
    const at = c.nextAt;
    c.prompt = prompt;
    c.lastOutputSeed = outputSeed;
    c.lastMaxTokens = maxTokens;
    c.turnsLeft--;
    c.nextAt = at + 500 + 25 * maxTokens + exponential(rng, 8000);
    if (c.turnsLeft <= 0) active.splice(idx, 1);
    yield { arrivalMs: at, promptTokens: prompt, maxTokens, outputSeed, session: `conv-${c.id}` };
  }
}

function* rag(rng: Rng, seed: number, rate: number, burstiness: number, docs = 500): Generator<BenchRequest> {
  const instruction = stream(mix32(seed ^ 0x0d3a7f21, 0), 150);
  const pool = new Pool((d) => stream(mix32(seed ^ 0x4c1b9e07, d), 1000 + (mix32(seed ^ 0x99, d) % 2001)));
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
    const question = stream(outputSeed ^ 0x4, uniformInt(rng, 30, 80));
    yield {
      arrivalMs: t,
      promptTokens: concat([instruction, ...chosen.map((d) => pool.get(d)), question]),
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
    description: 'conversations of 2–8 turns whose prompts grow by the previous answer and a new message',
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
};

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
  return {
    name: `workload:${name}`,
    params: { size, rate, burstiness: burstiness ?? burstinessLabel(name, spec), seed: seed >>> 0 },
    skipped: 0,
    *open() {
      const it = spec.generate(seededRng(mix32(seed, 0x77)), seed >>> 0, rate, burstiness);
      for (let i = 0; i < size; i++) {
        const r = it.next();
        if (r.done) return;
        yield r.value;
      }
    },
  };
}
