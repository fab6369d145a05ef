/**
 * The llm-d router's plugins that more than one of its profiles uses (llm-d.ts, llm-d-legacy.ts,
 * llm-d-precise.ts), each as llm-d/llm-d-router @ ebab6879 writes it:
 *
 * - `queue-scorer` (`pkg/epp/framework/plugins/scheduling/scorer/queuedepth/`);
 * - `kv-cache-utilization-scorer` (`.../scorer/kvcacheutilization/`);
 * - `lora-affinity-scorer` (gateway-api-inference-extension
 *   `pkg/epp/scheduling/framework/plugins/loraaffinityscorer/lora_affinity.go`);
 * - `no-hit-lru-scorer` (`.../scorer/nohitlru/no_hit_lru.go`);
 * - `approx-prefix-cache-producer` (`pkg/epp/framework/plugins/requestcontrol/dataproducer/
 *   approximateprefix/README.md`: blocks of max(64, blockSizeTokens) tokens estimated at
 *   bytesPerToken characters each, `.../dataproducer/tokenizer/estimate.go`: 4 bytes per token).
 */
import { PROMPT_ADAPTER } from '../../kv/prompt-blocks.js';
import { seedFromString } from '../../util/rng.js';
import { stateKey } from '../../util/state.js';
import { PrefixIndex } from '../index/prefix-index.js';
import { PrefixMatcher, type PrefixMatch } from '../index/prefix-match.js';
import type { RouteRequest, RoutingContext, Scorer } from '../types.js';
import type { WorkerState } from '../../fleet/worker-state.js';
import { indexKnobs, numberKnob } from './knobs.js';

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
 * llm-d's `queue-scorer`: (max waiting − waiting) / (max − min) over the candidates, 1 when all are
 * equal; the last scrape as is.
 */
export const llmdQueueScorer: Scorer = {
  name: 'queue',
  score(_req, ws) {
    const q = ws.map((w) => w.snapshot?.waiting ?? 0);
    const min = Math.min(...q);
    const max = Math.max(...q);
    return q.map((v) => (max > min ? (max - v) / (max - min) : 1));
  },
};

/**
 * The `lora-affinity-scorer`: the request's model (its adapter, or the base model) running there
 * 1, room for one more adapter 0.8, waiting there 0.6, else 0; the last scrape as is.
 */
export const llmdLoraAffinityScorer: Scorer = {
  name: 'lora-affinity',
  score(req, ws) {
    const target = req.state.get(PROMPT_ADAPTER) ?? req.model;
    return ws.map((w) => {
      const l = w.snapshot?.lora;
      if (l === undefined) return 0;
      if (l.running.includes(target)) return 1;
      if (l.running.length + l.waiting.length < l.maxLoras) return 0.8;
      return l.waiting.includes(target) ? 0.6 : 0;
    });
  },
};

/** llm-d's `kv-cache-utilization-scorer`: 1 − KV usage, from the last scrape as is. */
export const llmdKvCacheScorer: Scorer = {
  name: 'kv-cache-utilization',
  score: (_req, ws) => ws.map((w) => 1 - (w.snapshot?.kvUsage ?? 0)),
};

/** The approximate prefix index's knobs, shared by the profiles that use it. */
export const llmdApproxKnobs = {
  blockSizeTokens: numberKnob(64, 'prefix block size, tokens (values below 64 count as 64)', { min: 1 }),
  bytesPerToken: numberKnob(4, 'characters of prompt text assumed per token', { min: 1 }),
  indexMaxBytes: indexKnobs.indexMaxBytes,
  maxWorkers: indexKnobs.maxWorkers,
};

/** What shapes llm-d's approximate prefix index. */
export interface LlmdApproxOptions {
  blockSizeTokens: number;
  bytesPerToken: number;
  indexMaxBytes: number;
  maxWorkers: number;
}

/** Each worker's leading matched blocks of the request's prompt. */
export type LlmdMatches = (req: RouteRequest, ws: readonly WorkerState[], ctx: RoutingContext) => Map<WorkerState, PrefixMatch>;

/** llm-d's approximate prefix index over a request's characters, learned from its own picks. */
export interface LlmdApproxPrefix {
  readonly index: PrefixIndex;
  matches: LlmdMatches;
  /** The request was sent to w: its blocks are w's now. */
  record(req: RouteRequest, w: WorkerState, now: number): void;
}

/**
 * llm-d's `approx-prefix-cache-producer` (also the index behind its `prefix-cache-scorer`):
 * chained block hashes seeded by the model name over blocks of max(64, blockSizeTokens) tokens,
 * estimated at bytesPerToken characters each, one LRU per pod, entered at dispatch.
 */
export function llmdApproxPrefix(o: LlmdApproxOptions): LlmdApproxPrefix {
  const blockChars = Math.round(Math.max(64, o.blockSizeTokens) * o.bytesPerToken);
  const index = new PrefixIndex({
    maxBytes: o.indexMaxBytes,
    maxWorkers: o.maxWorkers,
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
  return {
    index,
    matches: (req, ws, ctx) => matcherFor(req.model).matches(asChars(req), ws, ctx),
    record: (req, w, now) => matcherFor(req.model).record(asChars(req), w, now),
  };
}

/** Whether the request found no cached block anywhere, as the no-hit-lru-scorer judged it. */
const LLMD_COLD = stateKey<boolean>('llm-d.no-hit-lru.cold');

/** The `no-hit-lru-scorer`, with the hook that moves a cold request's worker to the LRU's front. */
export interface NoHitLru {
  readonly scorer: Scorer;
  /** PreRequest: the request went to `w`; if it was cold, w is now the most recently used. */
  dispatched(req: RouteRequest, w: WorkerState): void;
}

/**
 * llm-d's `no-hit-lru-scorer` (no_hit_lru.go): a request no candidate holds a block of is cold;
 * warm requests score 0.5 everywhere. A cold request ranks the candidates by when each last took
 * a cold request: never-used ones first, in candidate order, score 1 − i / (N − 1); a used one,
 * at position p from the oldest in the LRU of all workers that took cold requests, scores
 * max(0, 1 − (neverUsed + p) / (N − 1)); a lone candidate scores 1. The LRU holds lruSize workers
 * (default 1024).
 */
export function noHitLruScorer(matches: LlmdMatches, lruSize = 1024): NoHitLru {
  // Insertion order is recency: the first key is the least recently used.
  const lru = new Map<string, true>();
  const scorer: Scorer = {
    name: 'no-hit-lru',
    score(req, ws, ctx) {
      const m = matches(req, ws, ctx);
      const cold = ws.every((w) => (m.get(w)?.blocks ?? 0) === 0);
      req.state.set(LLMD_COLD, cold);
      if (!cold) return ws.map(() => 0.5);
      const n = ws.length;
      if (n === 1) return [1];
      const position = new Map<string, number>();
      let p = 0;
      for (const id of lru.keys()) position.set(id, p++);
      const neverUsed = ws.filter((w) => !position.has(w.id)).length;
      let i = 0;
      return ws.map((w) => {
        const pos = position.get(w.id);
        const rank = pos === undefined ? i++ : neverUsed + pos;
        return Math.max(0, 1 - rank / (n - 1));
      });
    },
  };
  return {
    scorer,
    dispatched(req, w) {
      if (req.state.get(LLMD_COLD) !== true) return;
      req.state.delete(LLMD_COLD);
      lru.delete(w.id);
      lru.set(w.id, true);
      if (lru.size > lruSize) lru.delete(lru.keys().next().value!);
    },
  };
}
