/**
 * Policy `llm-d`: a baseline modelled on the llm-d router's default scheduling profile, built from
 * the same pipeline as kvgate's policies so a side-by-side benchmark compares policies, not
 * plumbing.
 */
import { seedFromString } from '../../util/rng.js';
import { stateKey } from '../../util/state.js';
import { healthyFilter } from '../filters/healthy.js';
import { PrefixIndex } from '../index/prefix-index.js';
import { PrefixMatcher } from '../index/prefix-match.js';
import { maxScorePicker } from '../pickers/max-score.js';
import { PipelinePolicy } from '../pipeline.js';
import type { PolicyDefinition, PolicyOptions, RouteRequest, Scorer } from '../types.js';
import { numberOption } from './options.js';

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

export const llmdPolicy: PolicyDefinition = {
  name: 'llm-d',
  description: 'llm-d router defaults: queue 2, kv-cache-utilization 2, approximate prefix-cache 3 (64-token blocks from text), max-score picker, 50 ms metrics.',
  create: createLlmdPolicy,
};
