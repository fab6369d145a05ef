/**
 * Peer routers' policies, as baselines: each is a named configuration of the same filter →
 * scorer → picker pipeline with the defaults its project publishes (docs/REFERENCE §4), so a
 * side-by-side benchmark compares policies, not plumbing.
 */
import { seedFromString } from '../util/rng.js';
import { stateKey } from '../util/state.js';
import type { WorkerState } from '../fleet/worker-state.js';
import { CharRadixTree } from './index/char-radix-tree.js';
import { healthyFilter } from './filters.js';
import { kvFitFilter } from './kv-fit-filter.js';
import { numberOption } from './options.js';
import { maxScorePicker } from './pickers.js';
import { PipelinePolicy } from './pipeline.js';
import type { PolicyOptions } from './policy-registry.js';
import { PrefixIndex } from './index/prefix-index.js';
import { PrefixMatcher } from './index/prefix-match.js';
import type { Pick, Picker, RouteRequest, ScoredWorker, Scorer } from './types.js';

/** Random choice among the candidates minimising `key` (ties within 1e-9). */
function argminRandom<T>(items: readonly T[], key: (t: T) => number, rng: () => number): T | null {
  let best: T | null = null;
  let bestKey = Infinity;
  let ties = 0;
  for (const it of items) {
    const k = key(it);
    if (best === null || k < bestKey - 1e-9) {
      best = it;
      bestKey = k;
      ties = 1;
    } else if (Math.abs(k - bestKey) <= 1e-9 && rng() * ++ties < 1) best = it;
  }
  return best;
}

const pickOf = (c: ScoredWorker | null, reason: string): Pick | null => c && { worker: c, reason };

// ------------------------------------------------------------------ SGLang cache_aware

export interface SglangParams {
  /** Imbalance needs max − min in-flight above this (default 64)… */
  balanceAbsThreshold: number;
  /** …and max above this × min (default 1.5). */
  balanceRelThreshold: number;
  /** Matched characters / prompt characters above this → best match (default 0.3). */
  cacheThreshold: number;
  /** Every this many ms, trim each worker's tree (default 120 s)… */
  evictionIntervalMs: number;
  /** …to at most this many characters (default 2^26). */
  maxTreeSize: number;
}

/**
 * Modelled on SGLang's router `cache_aware` policy (sgl-project/sglang router, now
 * lightseekorg/smg `model_gateway/src/policies/cache_aware.rs`). Load is the router's own
 * in-flight count per worker. If the load is imbalanced (max − min > balance_abs_threshold and
 * max > balance_rel_threshold · min) the least loaded worker wins outright. Otherwise the prompt's
 * characters are matched against one approximate radix tree per worker: a match rate above
 * cache_threshold sends it to the best match, else to the least loaded. The prompt is inserted
 * into the chosen worker's tree; every eviction_interval each tree is trimmed LRU-first to
 * max_tree_size characters. Ties break at random.
 */
export function createSglangPolicy(o?: PolicyOptions): PipelinePolicy {
  const p: SglangParams = {
    balanceAbsThreshold: numberOption(o, 'balanceAbsThreshold', 64, 0),
    balanceRelThreshold: numberOption(o, 'balanceRelThreshold', 1.5, 0),
    cacheThreshold: numberOption(o, 'cacheThreshold', 0.3, 0),
    evictionIntervalMs: numberOption(o, 'evictionIntervalMs', 120_000, 0),
    maxTreeSize: numberOption(o, 'maxTreeSize', 2 ** 26, 0),
  };
  const trees = new Map<string, CharRadixTree>();
  const tree = (w: WorkerState) => {
    let t = trees.get(w.id);
    if (!t) trees.set(w.id, (t = new CharRadixTree()));
    return t;
  };
  let lastEviction = -Infinity;
  const picker: Picker = {
    name: 'sglang-cache-aware',
    pick(req, candidates, ctx) {
      if (candidates.length === 0) return null;
      const load = (c: ScoredWorker) => c.worker.inflightCount;
      let min = Infinity;
      let max = -Infinity;
      for (const c of candidates) {
        min = Math.min(min, load(c));
        max = Math.max(max, load(c));
      }
      if (max - min > p.balanceAbsThreshold && max > p.balanceRelThreshold * min) {
        return pickOf(argminRandom(candidates, load, ctx.rng), 'least-load');
      }
      const text = req.promptText;
      const matched = new Map<ScoredWorker, number>();
      for (const c of candidates) matched.set(c, tree(c.worker).match(text));
      const best = argminRandom(candidates, (c) => -matched.get(c)!, ctx.rng)!;
      const rate = text.length > 0 ? matched.get(best)! / text.length : 0;
      if (rate > p.cacheThreshold) return { worker: best, reason: 'prefix' };
      return pickOf(argminRandom(candidates, load, ctx.rng), 'least-load');
    },
  };
  return new PipelinePolicy({
    name: 'sglang-cache-aware',
    filters: [healthyFilter],
    scorers: [],
    picker,
    // The tree counts characters; report the matched share of the prompt as the expected hit.
    expectedPrefixHit: (req, picked) => {
      const t = trees.get(picked.worker.id);
      return t && req.promptText.length > 0 ? t.match(req.promptText) / req.promptText.length : 0;
    },
    onDispatch(req, d, ctx) {
      tree(d.worker).insert(req.promptText, ctx.now);
      if (ctx.now - lastEviction >= p.evictionIntervalMs) {
        lastEviction = ctx.now;
        for (const t of trees.values()) t.evict(p.maxTreeSize);
      }
    },
  });
}

// ------------------------------------------------------------------ llm-d

/** The prompt text's UTF-16 code units, llm-d's stand-in for tokens. */
const LLMD_CHARS = stateKey<Uint16Array>('llm-d.chars');
/** The request seen through its character codes as tokens. */
const LLMD_CHAR_REQUEST = stateKey<RouteRequest>('llm-d.char-request');

/** Text → "tokens" the way llm-d's approximate prefix scorer does without a tokenizer. */
function charCodes(req: RouteRequest): Uint16Array {
  let c = req.state.get(LLMD_CHARS);
  if (!c) {
    const s = req.promptText;
    c = new Uint16Array(s.length);
    for (let i = 0; i < s.length; i++) c[i] = s.charCodeAt(i);
    req.state.set(LLMD_CHARS, c);
  }
  return c;
}

/**
 * Modelled on the llm-d router (llm-d/llm-d-router; earlier the Gateway API Inference Extension
 * EPP) with its default scorer weights: queue-scorer 2 (waiting requests, min-max normalised,
 * all equal → 1), kv-cache-utilization-scorer 2 (1 − kv usage), prefix-cache-scorer 3 (matched
 * blocks / prompt blocks), max-score picker with random tie-break. The prefix scorer's index is
 * approximate and learned only from its own picks: a per-pod LRU of chained block hashes (seeded
 * by model name) over blocks of 64 tokens, tokens estimated at ~4 bytes each — so 256 characters
 * of prompt text per block — holding num_gpu_blocks entries per pod (fallback 31,250). The
 * metrics it reads are the last scrape as is, polled every 50 ms.
 */
export function createLlmdPolicy(o?: PolicyOptions): PipelinePolicy {
  const blockTokens = Math.max(64, numberOption(o, 'blockSizeTokens', 64, 1));
  const bytesPerToken = numberOption(o, 'bytesPerToken', 4, 1);
  const blockChars = Math.round(blockTokens * bytesPerToken);
  const index = new PrefixIndex({
    maxBytes: numberOption(o, 'indexMaxBytes', 256 * 1024 * 1024, 1024),
    maxWorkers: numberOption(o, 'maxWorkers', 1024, 1),
    predictedTtlMs: 0,
  });
  const matchers = new Map<string, PrefixMatcher>();
  const matcherFor = (model: string) => {
    let m = matchers.get(model);
    if (!m) matchers.set(model, (m = new PrefixMatcher(index, { seed: seedFromString(model), blockSize: blockChars })));
    return m;
  };
  const asChars = (req: RouteRequest): RouteRequest => {
    let r = req.state.get(LLMD_CHAR_REQUEST);
    if (!r) {
      // The same request seen through character codes; shares the state so hashes are computed once.
      r = { ...req, promptTokens: charCodes(req) };
      req.state.set(LLMD_CHAR_REQUEST, r);
    }
    return r;
  };
  const queueScorer: Scorer = {
    name: 'queue',
    score(_req, ws) {
      const q = ws.map((w) => w.snapshot?.waiting ?? 0);
      const min = Math.min(...q);
      const max = Math.max(...q);
      return q.map((v) => (max > min ? (max - v) / (max - min) : 1));
    },
  };
  const kvScorer: Scorer = {
    name: 'kv-cache-utilization',
    score: (_req, ws) => ws.map((w) => 1 - (w.snapshot?.kvUsage ?? 0)),
  };
  const prefixScorer: Scorer = {
    name: 'prefix',
    score(req, ws, ctx) {
      const m = matcherFor(req.model).matches(asChars(req), ws, ctx);
      return ws.map((w) => {
        const x = m.get(w)!;
        return x.promptBlocks > 0 ? x.blocks / x.promptBlocks : 0;
      });
    },
  };
  return new PipelinePolicy({
    name: 'llm-d',
    filters: [healthyFilter],
    scorers: [
      { scorer: queueScorer, weight: numberOption(o, 'queueWeight', 2, 0) },
      { scorer: kvScorer, weight: numberOption(o, 'kvCacheWeight', 2, 0) },
      { scorer: prefixScorer, weight: numberOption(o, 'prefixWeight', 3, 0) },
    ],
    picker: maxScorePicker,
    scrapeIntervalMs: numberOption(o, 'scrapeIntervalMs', 50, 1),
    prefixIndex: index,
    onDispatch(req, d, ctx) {
      matcherFor(req.model).record(asChars(req), d.worker, ctx.now);
    },
  });
}

// ------------------------------------------------------------------ NVIDIA Dynamo

/**
 * Modelled on NVIDIA Dynamo's KV router (ai-dynamo/dynamo `docs/components/router/`) in
 * approximate mode: cost = prefill_load_scale · max(active prefill blocks + prompt blocks −
 * overlap blocks, 0) + active decode blocks; the lowest cost wins (temperature 0, ties at random).
 * Active prefill blocks are the router's own not-yet-first-token prompt tokens at the worker,
 * active decode blocks the prompt blocks of its active sequences, both counted router-side.
 * Overlap comes from its own index of what it routed, each entry living 120 s since last use.
 */
/** Prompt blocks the request added to its worker's active blocks at dispatch. */
const DYNAMO_ACTIVE_BLOCKS = stateKey<number>('dynamo.active-blocks');

export function createDynamoPolicy(o?: PolicyOptions): PipelinePolicy {
  const scale = numberOption(o, 'prefillLoadScale', 1, 0);
  const index = new PrefixIndex({
    maxBytes: numberOption(o, 'indexMaxBytes', 256 * 1024 * 1024, 1024),
    maxWorkers: numberOption(o, 'maxWorkers', 1024, 1),
    predictedTtlMs: 0,
    approxTtlMs: numberOption(o, 'cacheWindowMs', 120_000, 0),
  });
  const matcher = new PrefixMatcher(index);
  /** Prompt blocks of the sequences active at each worker (router-side accounting). */
  const activeBlocks = new Map<string, number>();
  const cost = (req: RouteRequest, w: WorkerState, overlap: number) => {
    const bs = w.blockSize;
    const promptBlocks = Math.ceil(req.promptTokens.length / bs);
    const prefill = Math.ceil(w.inflightPrefillTokens / bs);
    return scale * Math.max(prefill + promptBlocks - overlap, 0) + (activeBlocks.get(w.id) ?? 0);
  };
  const picker: Picker = {
    name: 'dynamo',
    pick(req, candidates, ctx) {
      const m = matcher.matches(req, candidates.map((c) => c.worker), ctx);
      const best = argminRandom(candidates, (c) => cost(req, c.worker, m.get(c.worker)!.blocks), ctx.rng);
      if (!best) return null;
      const x = m.get(best.worker)!;
      return {
        worker: best,
        reason: x.blocks > 0 ? 'prefix' : 'load',
        expectedPrefixHit: req.promptTokens.length > 0 ? x.tokens / req.promptTokens.length : 0,
      };
    },
  };
  return new PipelinePolicy({
    name: 'dynamo',
    filters: [healthyFilter],
    scorers: [],
    picker,
    prefixIndex: index,
    onDispatch(req, d, ctx) {
      matcher.record(req, d.worker, ctx.now);
      const b = Math.ceil(req.promptTokens.length / d.worker.blockSize);
      activeBlocks.set(d.worker.id, (activeBlocks.get(d.worker.id) ?? 0) + b);
      req.state.set(DYNAMO_ACTIVE_BLOCKS, b);
    },
    onComplete(req, w) {
      const b = req.state.get(DYNAMO_ACTIVE_BLOCKS) ?? 0;
      activeBlocks.set(w.id, Math.max(0, (activeBlocks.get(w.id) ?? 0) - b));
    },
  });
}

// ------------------------------------------------------------------ oracle

/**
 * Not a real router: reads each simulated engine's exact cache and queue (WorkerState.oracle,
 * available only in the fleet simulation) and picks the worker with the lowest estimated TTFT =
 * (pending prefill tokens + this prompt's uncached tokens) / prefill rate + a decode-interference
 * term. An upper bound for what cache-aware routing could achieve. Workers without a probe count
 * as holding nothing, with the gateway's own in-flight prefill as their queue.
 */
export function createOraclePolicy(o?: PolicyOptions): PipelinePolicy {
  const rate = numberOption(o, 'prefillTokensPerSec', 10_000, 1);
  const decodeMs = numberOption(o, 'decodeMsPerRunning', 0.5, 0);
  const est = (req: RouteRequest, w: WorkerState) => {
    const prompt = req.promptTokens.length;
    const probe = w.oracle;
    const cached = probe ? Math.min(prompt, probe.cachedPrefixTokens(req.promptTokens)) : 0;
    const pending = probe ? probe.pendingPrefillTokens() : w.inflightPrefillTokens;
    const running = probe ? probe.running() : w.inflightCount;
    return { cached, ttft: (1000 * (pending + prompt - cached)) / rate + decodeMs * running };
  };
  const picker: Picker = {
    name: 'oracle',
    pick(req, candidates, ctx) {
      const e = new Map(candidates.map((c) => [c, est(req, c.worker)]));
      const best = argminRandom(candidates, (c) => e.get(c)!.ttft, ctx.rng);
      if (!best) return null;
      const x = e.get(best)!;
      return {
        worker: best,
        reason: x.cached > 0 ? 'prefix' : 'load',
        expectedPrefixHit: req.promptTokens.length > 0 ? x.cached / req.promptTokens.length : 0,
      };
    },
  };
  return new PipelinePolicy({
    name: 'oracle-greedy',
    filters: [healthyFilter, kvFitFilter(null, { whenNoneFits: 'all', overfullSlackBlocks: 0 })],
    scorers: [],
    picker,
    usesOracle: true,
  });
}
