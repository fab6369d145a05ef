/**
 * Policy `llm-d`: a baseline modelled on the llm-d router (llm-d/llm-d-router, formerly
 * llm-d-inference-scheduler; earlier the Gateway API Inference Extension EPP) with its default
 * scheduling profile, built from the same pipeline as kvgate's policies so a side-by-side
 * benchmark compares policies, not plumbing. Scorers as in its
 * `pkg/epp/framework/plugins/scheduling/scorer/{queuedepth,kvcacheutilization,prefix}/`:
 *
 *   healthy → queue-scorer · queueWeight + kv-cache-utilization-scorer · kvCacheWeight
 *             + prefix-cache-scorer · prefixWeight → max-score picker (random tie-break)
 *
 *   queue  = (max waiting − waiting) / (max − min) over the candidates; 1 if all equal
 *   kv     = 1 − KV usage
 *   prefix = matched blocks / prompt blocks
 *
 * With loraWeight > 0 (0 in the default profile) a lora-affinity-scorer joins them, as in the
 * profiles llm-d and the Gateway API Inference Extension configure for LoRA fleets (their
 * integration tests' EndpointPickerConfig lists it beside the three, weight 1 when unspecified):
 * per worker, from vllm:lora_requests_info, 1 if the request's model is a running adapter there,
 * 0.8 if fewer adapters run and wait than --max-loras, 0.6 if it is a waiting one, else 0
 * (gateway-api-inference-extension `pkg/epp/scheduling/framework/plugins/loraaffinityscorer/
 * lora_affinity.go`).
 *
 * The prefix scorer's index is approximate and learned only from its own picks: a per-pod LRU of
 * chained block hashes (seeded by model name) holding num_gpu_blocks entries per pod, over blocks
 * of blockSizeTokens tokens estimated at bytesPerToken characters each (so a block is
 * blockSizeTokens · bytesPerToken characters of prompt text). The metrics it reads are the last
 * scrape as is (no dispatches since), polled every scrapeIntervalMs.
 *
 * Defaults as published in llm-d/llm-d-inference-scheduler (now llm-d-router):
 * `pkg/epp/config/loader/defaults.go` (the default profile: queue-scorer 2,
 * kv-cache-utilization-scorer 2, prefix-cache-scorer 3), `pkg/epp/server/options.go`
 * (RefreshMetricsInterval 50 ms), `pkg/epp/framework/plugins/scheduling/picker/maxscore/picker.go`
 * (shuffled before the max: random tie-break). `llm-d-precise` (llm-d-precise.ts) is the
 * KV-event-fed profile; `llm-d-affinity` (llm-d-affinity.ts) the sticky-until-saturated
 * configuration llm-d's guides ship since August 2026, which calls this blend its legacy profile.
 */
import { z } from 'zod';
import { PROMPT_ADAPTER } from '../../kv/prompt-blocks.js';
import { seedFromString } from '../../util/rng.js';
import { stateKey } from '../../util/state.js';
import { healthyFilter } from '../filters/healthy.js';
import { PrefixIndex } from '../index/prefix-index.js';
import { PrefixMatcher, type PrefixMatch } from '../index/prefix-match.js';
import { maxScorePicker } from '../pickers/max-score.js';
import { PipelinePolicy } from '../pipeline.js';
import { prefixFractionScorer } from '../scorers/prefix-fraction.js';
import type { PolicyDefinition, RouteRequest, RoutingContext, Scorer } from '../types.js';
import type { WorkerState } from '../../fleet/worker-state.js';
import { indexKnobs, numberKnob, retuneInPlace } from './knobs.js';

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

export const llmdOptions = z.strictObject({
  blockSizeTokens: numberKnob(64, 'prefix block size, tokens (values below 64 count as 64)', { min: 1 }),
  bytesPerToken: numberKnob(4, 'characters of prompt text assumed per token', { min: 1 }),
  indexMaxBytes: indexKnobs.indexMaxBytes,
  maxWorkers: indexKnobs.maxWorkers,
  queueWeight: numberKnob(2, 'weight of queue-scorer (fewest waiting)'),
  kvCacheWeight: numberKnob(2, 'weight of kv-cache-utilization-scorer (1 − KV usage)'),
  prefixWeight: numberKnob(3, 'weight of prefix-cache-scorer (matched / prompt blocks)'),
  loraWeight: numberKnob(0, 'weight of lora-affinity-scorer (adapter running there 1, a free slot 0.8, waiting 0.6); 0: not in the profile, as by default'),
  scrapeIntervalMs: numberKnob(50, 'metrics refresh interval the policy asks for, ms', { min: 1 }),
});

export type LlmdOptions = z.output<typeof llmdOptions>;

/** What shapes llm-d's approximate prefix index. */
export type LlmdApproxOptions = Pick<LlmdOptions, 'blockSizeTokens' | 'bytesPerToken' | 'indexMaxBytes' | 'maxWorkers'>;

/** llm-d's approximate prefix index over a request's characters, learned from its own picks. */
export interface LlmdApproxPrefix {
  readonly index: PrefixIndex;
  /** Each worker's leading matched blocks of the request's text. */
  matches(req: RouteRequest, ws: readonly WorkerState[], ctx: RoutingContext): Map<WorkerState, PrefixMatch>;
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

function createLlmdPolicy(o: LlmdOptions): PipelinePolicy {
  const approx = llmdApproxPrefix(o);
  const index = approx.index;
  const prefixScorer = prefixFractionScorer(approx.matches);
  const scorers = [
    { scorer: llmdQueueScorer, weight: o.queueWeight },
    { scorer: llmdKvCacheScorer, weight: o.kvCacheWeight },
    { scorer: prefixScorer, weight: o.prefixWeight },
    { scorer: llmdLoraAffinityScorer, weight: o.loraWeight },
  ];
  return new PipelinePolicy({
    name: 'llm-d',
    filters: [healthyFilter],
    scorers,
    // The weights change in place; the block and index shape and the polling interval do not.
    retune(next) {
      if (!retuneInPlace(o, next, ['blockSizeTokens', 'bytesPerToken', 'indexMaxBytes', 'maxWorkers', 'scrapeIntervalMs'])) return false;
      [scorers[0]!.weight, scorers[1]!.weight, scorers[2]!.weight, scorers[3]!.weight] = [o.queueWeight, o.kvCacheWeight, o.prefixWeight, o.loraWeight];
      return true;
    },
    picker: maxScorePicker,
    scrapeIntervalMs: o.scrapeIntervalMs,
    prefixIndex: index,
    onDispatch(req, d, ctx) {
      approx.record(req, d.worker, ctx.now);
    },
  });
}

export const llmdPolicy: PolicyDefinition<typeof llmdOptions> = {
  name: 'llm-d',
  description: 'llm-d router built-in profile (the weighted blend): queue, kv-cache-utilization and approximate prefix-cache scorers (token blocks estimated from text), max-score picker, fast metrics polling.',
  options: llmdOptions,
  create: createLlmdPolicy,
};
