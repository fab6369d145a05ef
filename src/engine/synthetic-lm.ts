/**
 * The simulated model's "language": deterministic next-token distributions over the fixed
 * vocabulary of src/tokenizer/vocabulary.ts.
 *
 * A distribution is a pure function of the model's seed (derived from its name) and the last two
 * tokens of context: a sparse list of TOP_K (token, logprob) pairs, sorted most likely first,
 * derived by hashing. Sentence structure comes from the punctuation tokens: a period or comma now
 * and then, never two punctuation marks in a row, and after a period the end of sequence — about
 * one sentence in eight or nine ends the text, so a natural completion runs tens to a few hundred tokens.
 * In some contexts the period or EOS is the single most likely token, so greedy decoding ends
 * too — most of the time: greedy decoding is a walk over last-two-token states, and like a real
 * model's it can fall into a repetition loop, which max_tokens ends.
 *
 * A draft model (for speculative decoding) is a second LM built with `draftOf`: for a fraction
 * `fidelity` of contexts (decided by hashing the context) it predicts like its target, slightly
 * less confident but with the same ranking; elsewhere it has its own unrelated distribution. The
 * greedy acceptance rate is therefore about `fidelity`, and sampled acceptance (Σ min(p, q)) is a
 * little lower.
 */

import { seedFromString, seededRng } from '../util/rng.js';
import { COMMA_ID, EOS_TOKEN_ID, NEWLINE_ID, PERIOD_ID } from '../tokenizer/vocabulary.js';
import type { TokenContext, TokenSampler } from './types.js';

/** Candidates per distribution. */
export const TOP_K = 16;
/** Word tokens are ids 0..NUM_WORDS-1; punctuation follows. */
const NUM_WORDS = PERIOD_ID;
/** The most frequent words (the vocabulary lists common English words first). */
const COMMON_WORDS = 192;
const P_PERIOD = 0.06;
const P_COMMA = 0.05;
const P_EOS_AFTER_PERIOD = 0.04;
const P_NEWLINE_AFTER_PERIOD = 0.06;
/**
 * In a fraction of contexts a structural token is the single most likely one, so that greedy
 * decoding (temperature 0) also ends sentences and sequences instead of chaining words forever.
 */
const FINAL_CONTEXTS = 0.15;
const P_EOS_FINAL = 0.55;
const SENTENCE_END_CONTEXTS = 0.07;
const P_PERIOD_END = 0.5;

export interface Distribution {
  /** Candidate tokens, most likely first. */
  tokens: Int32Array;
  /** Natural-log probabilities of `tokens` (they sum to 1 over the list). */
  logprobs: Float64Array;
}

export interface SyntheticLm {
  readonly name: string;
  readonly seed: number;
  readonly eosTokenId: number;
  /** Next-token distribution after `context[0..len)` (len defaults to context.length). */
  distribution(context: ArrayLike<number>, len?: number): Distribution;
  /** Same, given only the last two tokens (-1 where the context is shorter). */
  distributionAfter(prev2: number, prev1: number): Distribution;
}

function mix(h: number, x: number): number {
  h = Math.imul(h ^ (x | 0), 0x9e3779b1);
  h ^= h >>> 15;
  h = Math.imul(h, 0x85ebca77);
  h ^= h >>> 13;
  return h >>> 0;
}

function fin(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x7feb352d);
  h ^= h >>> 15;
  h = Math.imul(h, 0x846ca68b);
  h ^= h >>> 16;
  return h >>> 0;
}

const U32 = 4294967296;

function isPunct(t: number): boolean {
  return t === PERIOD_ID || t === COMMA_ID || t === NEWLINE_ID;
}

/** A model's own distribution: hashed word candidates plus sentence punctuation. */
function baseDistribution(seed: number, prev2: number, prev1: number): Distribution {
  const key = fin(mix(mix(seed, prev2 + 1), prev1 + 1));
  // Reserve probability mass for structural tokens, by what came just before.
  let pEos = 0;
  let pNewline = 0;
  let pPeriod = 0;
  let pComma = 0;
  const structure = fin(key ^ 0x2545f491) / U32;
  if (prev1 === PERIOD_ID) {
    pEos = structure < FINAL_CONTEXTS ? P_EOS_FINAL : P_EOS_AFTER_PERIOD;
    pNewline = P_NEWLINE_AFTER_PERIOD;
  } else if (prev1 >= 0 && !isPunct(prev1)) {
    // Phrases end more often after a rare word than after a function word.
    const rare = prev1 >= COMMON_WORDS ? 1.3 : 0.8;
    pPeriod = structure < SENTENCE_END_CONTEXTS ? P_PERIOD_END : P_PERIOD * rare;
    pComma = P_COMMA * rare;
  }
  const nStruct = (pEos > 0 ? 1 : 0) + (pNewline > 0 ? 1 : 0) + (pPeriod > 0 ? 1 : 0) + (pComma > 0 ? 1 : 0);
  const nWords = TOP_K - nStruct;
  const wordMass = 1 - pEos - pNewline - pPeriod - pComma;

  // Word candidates: distinct ids by hashing, each from the common words or from anywhere (a
  // coin flip per candidate, so even the most likely word ranges over the whole vocabulary).
  // Zipf-like weights whose steepness varies by context (some contexts are near-certain).
  const tokens = new Int32Array(TOP_K);
  const probs = new Float64Array(TOP_K);
  const steep = 0.25 + 1.1 * (fin(key ^ 0x51ed27) / U32);
  let sum = 0;
  let h = key;
  for (let i = 0; i < nWords; i++) {
    let t: number;
    do {
      h = fin(h + 0x6a09e667);
      t = (h & 0x80000000) === 0 ? h % COMMON_WORDS : h % NUM_WORDS;
    } while (tokens.subarray(0, i).includes(t));
    tokens[i] = t;
    const w = Math.exp(-steep * i * (0.85 + 0.3 * (fin(h ^ 0x3c6ef372) / U32)));
    probs[i] = w;
    sum += w;
  }
  for (let i = 0; i < nWords; i++) probs[i] = (probs[i]! / sum) * wordMass;
  let j = nWords;
  if (pEos > 0) { tokens[j] = EOS_TOKEN_ID; probs[j++] = pEos; }
  if (pNewline > 0) { tokens[j] = NEWLINE_ID; probs[j++] = pNewline; }
  if (pPeriod > 0) { tokens[j] = PERIOD_ID; probs[j++] = pPeriod; }
  if (pComma > 0) { tokens[j] = COMMA_ID; probs[j++] = pComma; }
  return sortToLog(tokens, probs);
}

/** Sort candidates by probability (descending, ties by token id) and convert to logprobs. */
function sortToLog(tokens: Int32Array, probs: Float64Array): Distribution {
  const n = tokens.length;
  const order = Array.from({ length: n }, (_, i) => i);
  order.sort((a, b) => probs[b]! - probs[a]! || tokens[a]! - tokens[b]!);
  const outT = new Int32Array(n);
  const outL = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    outT[i] = tokens[order[i]!]!;
    outL[i] = Math.log(probs[order[i]!]!);
  }
  return { tokens: outT, logprobs: outL };
}

/** Flatten a distribution (logprobs × factor, renormalised): same ranking, less confident. */
function soften(d: Distribution, factor: number): Distribution {
  const n = d.tokens.length;
  const probs = new Float64Array(n);
  let sum = 0;
  for (let i = 0; i < n; i++) sum += probs[i] = Math.exp(d.logprobs[i]! * factor);
  const logprobs = new Float64Array(n);
  for (let i = 0; i < n; i++) logprobs[i] = Math.log(probs[i]! / sum);
  return { tokens: d.tokens, logprobs };
}

function lastTwo(context: ArrayLike<number>, len: number): [number, number] {
  return [len >= 2 ? context[len - 2]! : -1, len >= 1 ? context[len - 1]! : -1];
}

export interface SyntheticLmOptions {
  /** Make this a draft model of the named target model. */
  draftOf?: string;
  /** Fraction of contexts in which the draft predicts like its target (default 0.75). */
  fidelity?: number;
}

export function createSyntheticLm(name: string, opts: SyntheticLmOptions = {}): SyntheticLm {
  const seed = seedFromString(name);
  let after: (prev2: number, prev1: number) => Distribution;
  if (opts.draftOf !== undefined) {
    const target = createSyntheticLm(opts.draftOf);
    const fidelity = opts.fidelity ?? 0.75;
    if (!(fidelity >= 0 && fidelity <= 1)) throw new Error(`fidelity must be in [0, 1], got ${fidelity}`);
    const agreeSeed = seedFromString(`${name}\u0000agree\u0000${opts.draftOf}`);
    after = (prev2, prev1) => {
      const u = fin(mix(mix(agreeSeed, prev2 + 1), prev1 + 1)) / U32;
      return u < fidelity ? soften(target.distributionAfter(prev2, prev1), 0.85) : baseDistribution(seed, prev2, prev1);
    };
  } else {
    after = (prev2, prev1) => baseDistribution(seed, prev2, prev1);
  }
  return {
    name,
    seed,
    eosTokenId: EOS_TOKEN_ID,
    distributionAfter: after,
    distribution(context, len = context.length) {
      const [a, b] = lastTwo(context, len);
      return after(a, b);
    },
  };
}

/**
 * Per-token acceptance of speculative sampling for one context at `temperature`: the probability
 * that a token drawn from the draft's q survives Leviathan et al.'s test, Σ_x min(p(x), q(x)) over
 * the temperature-scaled distributions (at temperature 0: 1 if both argmaxes agree, else 0).
 */
function tokenAcceptance(p: Distribution, q: Distribution, temperature: number): number {
  if (temperature === 0) return p.tokens[0] === q.tokens[0] ? 1 : 0;
  const pp = scaled(p, temperature);
  const qq = scaled(q, temperature);
  let sum = 0;
  for (const [t, pv] of pp) {
    const qv = qq.get(t);
    if (qv !== undefined) sum += Math.min(pv, qv);
  }
  return sum;
}

/** token → probability after temperature scaling. */
function scaled(d: Distribution, temperature: number): Map<number, number> {
  const m = new Map<number, number>();
  let z = 0;
  for (let i = 0; i < d.tokens.length; i++) z += Math.exp(d.logprobs[i]! / temperature);
  for (let i = 0; i < d.tokens.length; i++) m.set(d.tokens[i]!, Math.exp(d.logprobs[i]! / temperature) / z);
  return m;
}

/**
 * Mean acceptance of `draft` against `target` along a sampled walk of the target (the contexts a
 * generation actually visits), `steps` tokens long, at `temperature`.
 */
export function measureAcceptance(target: SyntheticLm, draft: SyntheticLm, temperature: number, steps = 4000, seed = 1): number {
  const rng = seededRng(seed);
  let a = -1;
  let b = -1;
  let sum = 0;
  for (let i = 0; i < steps; i++) {
    const p = target.distributionAfter(a, b);
    sum += tokenAcceptance(p, draft.distributionAfter(a, b), temperature);
    // Walk on with a sample of the target at temperature 1 (restart after EOS).
    let r = rng();
    let next = p.tokens[p.tokens.length - 1]!;
    for (let k = 0; k < p.tokens.length; k++) {
      r -= Math.exp(p.logprobs[k]!);
      if (r < 0) {
        next = p.tokens[k]!;
        break;
      }
    }
    if (next === EOS_TOKEN_ID) [a, b] = [-1, -1];
    else [a, b] = [b, next];
  }
  return sum / steps;
}

/**
 * The `fidelity` that makes a draft of `target` named `draftName` reach mean acceptance `alpha`
 * at `temperature` (default 1): acceptance is linear in fidelity (agreeing contexts accept at a1,
 * the others at a0), so two measurements pin it. Throws if alpha is out of the reachable range.
 */
export function fidelityForAcceptance(target: string, draftName: string, alpha: number, temperature = 1): number {
  const t = createSyntheticLm(target);
  const a1 = measureAcceptance(t, createSyntheticLm(draftName, { draftOf: target, fidelity: 1 }), temperature);
  const a0 = measureAcceptance(t, createSyntheticLm(draftName, { draftOf: target, fidelity: 0 }), temperature);
  if (!(alpha >= a0 - 1e-9 && alpha <= a1 + 1e-9)) {
    throw new Error(`acceptance ${alpha} is out of reach for a synthetic draft at temperature ${temperature}: it ranges from ${a0.toFixed(3)} to ${a1.toFixed(3)}`);
  }
  return Math.min(1, Math.max(0, (alpha - a0) / (a1 - a0)));
}

export interface SampledLogprob {
  token: number;
  logprob: number;
  top: Array<{ token: number; logprob: number }>;
}

export interface SamplerOptions {
  /** Seed of the sampling RNG. Without one the seed derives from the prompt and parameters. */
  seed?: number;
  /** 0 = greedy argmax. Default 1. */
  temperature?: number;
  /** Nucleus sampling threshold in (0, 1]. Default 1. */
  topP?: number;
  /** How many alternatives to record per generated token (OpenAI top_logprobs). Default 0. */
  topLogprobs?: number;
  /** Record the logprob of each sampled token. Default true. */
  recordLogprobs?: boolean;
}

export interface RecordingSampler {
  sampler: TokenSampler;
  /** One entry per generated token, in order (empty when recordLogprobs is false). */
  logprobs: SampledLogprob[];
}

/** Last two tokens of prompt + output without concatenating them. */
function contextTail(ctx: TokenContext): [number, number] {
  const out = ctx.output.ids;
  const o = ctx.output.length;
  if (o >= 2) return [out[o - 2]!, out[o - 1]!];
  const p = ctx.prompt;
  const pl = p.length;
  if (o === 1) return [pl >= 1 ? p[pl - 1]! : -1, out[0]!];
  return lastTwo(p, pl);
}

function hashPrompt(prompt: ArrayLike<number>, salt: number): number {
  let h = salt ^ prompt.length;
  for (let i = 0; i < prompt.length; i++) h = mix(h, prompt[i]!);
  return fin(h);
}

/**
 * A sampler over `lm` for one request. Logprobs reported are the model's own (before temperature
 * and top-p), as vLLM reports them by default.
 */
export function createSampler(lm: SyntheticLm, opts: SamplerOptions = {}): RecordingSampler {
  const temperature = opts.temperature ?? 1;
  const topP = opts.topP ?? 1;
  const topN = Math.max(0, Math.min(opts.topLogprobs ?? 0, TOP_K));
  const record = opts.recordLogprobs !== false;
  if (!(temperature >= 0)) throw new Error(`temperature must be >= 0, got ${temperature}`);
  if (!(topP > 0 && topP <= 1)) throw new Error(`topP must be in (0, 1], got ${topP}`);
  const logprobs: SampledLogprob[] = [];
  let rng: (() => number) | null = null;
  const weights = new Float64Array(TOP_K);

  const sampler: TokenSampler = (ctx) => {
    const [a, b] = contextTail(ctx);
    const d = lm.distributionAfter(a, b);
    let pick = 0;
    if (temperature > 0) {
      if (!rng) {
        const paramSalt = seedFromString(`${temperature}/${topP}`);
        rng = seededRng(opts.seed !== undefined ? mix(opts.seed >>> 0, paramSalt) : hashPrompt(ctx.prompt, paramSalt));
      }
      const n = d.tokens.length;
      // Temperature-scaled weights, then the smallest prefix (by probability) reaching topP.
      let sum = 0;
      for (let i = 0; i < n; i++) sum += weights[i] = Math.exp(d.logprobs[i]! / temperature);
      let keep = n;
      if (topP < 1) {
        let acc = 0;
        for (let i = 0; i < n; i++) {
          acc += weights[i]! / sum;
          if (acc >= topP) {
            keep = i + 1;
            break;
          }
        }
        sum = 0;
        for (let i = 0; i < keep; i++) sum += weights[i]!;
      }
      let r = rng() * sum;
      pick = keep - 1;
      for (let i = 0; i < keep; i++) {
        r -= weights[i]!;
        if (r < 0) {
          pick = i;
          break;
        }
      }
    }
    const token = d.tokens[pick]!;
    if (record) {
      const top: Array<{ token: number; logprob: number }> = [];
      for (let i = 0; i < topN; i++) top.push({ token: d.tokens[i]!, logprob: d.logprobs[i]! });
      logprobs.push({ token, logprob: d.logprobs[pick]!, top });
    }
    return token;
  };
  return { sampler, logprobs };
}

/** Cheap sampler for benches: cycles through `tokens`. */
export function fixedSampler(tokens: readonly number[]): TokenSampler {
  if (tokens.length === 0) throw new Error('fixedSampler needs at least one token');
  return (ctx) => tokens[ctx.output.length % tokens.length]!;
}

/** Cheap sampler for benches: a word token hashed from (id, position); never EOS. */
export function hashSampler(id: string): TokenSampler {
  const seed = seedFromString(id);
  return (ctx) => fin(mix(seed, ctx.output.length)) % NUM_WORDS;
}
