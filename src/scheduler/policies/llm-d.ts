/**
 * Policy `llm-d-affinity`: the llm-d router's "sticky until saturated" configuration, the one its
 * optimized-baseline guide ships (llm-d/llm-d.github.io
 * `blog/2026-08-17_sticky-until-saturated-token-aware-routing.mdx`, "token-aware routing"): keep a
 * request on the endpoints that already hold its prefix unless their load exceeds a calibrated
 * limit, then route by load alone. Built from the same pipeline as kvgate's policies.
 *
 *   healthy → prefix-cache-affinity filter → token-load scorer (or active-request scorer)
 *           → max-score picker (random tie-break)
 *
 * Per worker, router-side (llm-d's `inflight-load-producer`, addEstimatedOutputTokens false):
 *   in-flight tokens   = Σ uncached prompt tokens of the requests sent there and not yet past
 *                        their first token (uncached = prompt tokens − matched blocks · block size)
 *   in-flight requests = the requests sent there and not yet ended
 *
 *   affinity filter: sticky = workers whose matched / prompt blocks ≥ affinityThreshold; none
 *     sticky → all. Estimated TTFT = in-flight tokens / peakPrefillThroughput; if the best sticky
 *     worker's exceeds the best other's by more than maxTTFTPenaltyMs → all (the saturation
 *     release: τ = peakPrefillThroughput × maxTTFTPenaltyMs = 286,704 tokens of lead at the
 *     defaults); else the sticky workers. With probability explorationProbability the gate is
 *     skipped.
 *   token-load score = 1 − min(in-flight tokens + this request's uncached tokens there,
 *     queueThresholdTokens) / queueThresholdTokens   (prefill-bound pools, the default)
 *   active-request score = 1 if in-flight requests ≤ idleThreshold, else (max − n) / max · maxBusyScore
 *     over the candidates   (decode-bound pools: loadScorer active-request)
 *
 * Prompt tokens are estimated from the text, bytesPerToken characters each (llm-d's
 * tokenizer-free `estimate` backend, used when no token-producer is configured, as in the guide),
 * and the prefix index is llm-d's approximate one (llm-d.ts, llmdApproxPrefix).
 *
 * Defaults as published in llm-d/llm-d-router @ ebab6879 (pkg/epp/framework/plugins/):
 * - `scheduling/filter/prefixcacheaffinity/plugin.go` (DefaultConfig, Filter): affinityThreshold
 *   0.80, explorationProbability 0, maxTTFTPenaltyMs 18000, ttftSource prefillThroughput,
 *   peakPrefillThroughput 15928 tokens/s (Qwen3-32B on 2×H100, TP 2, vLLM 0.19);
 * - `scheduling/scorer/tokenload/token_load.go`: queueThresholdTokens 4,194,304;
 * - `scheduling/scorer/activerequest/active_request.go`: idleThreshold 0, maxBusyScore 1;
 * - `requestcontrol/dataproducer/inflightload/producer.go` (uncachedInputTokens, ResponseBody):
 *   tokens released at the first streamed chunk, requests at the end;
 * - `requestcontrol/dataproducer/tokenizer/estimate.go`: 4 bytes per token;
 * - `requestcontrol/dataproducer/approximateprefix/README.md`: 64-token blocks (smaller are
 *   clamped up), 31,250 blocks per pod.
 * The plugin list (approx-prefix-cache-producer, inflight-load-producer,
 * prefix-cache-affinity-filter, token-load-scorer) is the guide's (llm-d/llm-d
 * `guides/optimized-baseline`), which the blog reports as the llm-d default since August 2026; the
 * router's built-in profile with no configuration (pkg/epp/config/loader/defaults.go) is still the
 * weighted blend modelled as `llm-d`. Not modelled: the latency-predictor TTFT source.
 */
import { z } from 'zod';
import { stateKey } from '../../util/state.js';
import type { WorkerState } from '../../fleet/worker-state.js';
import { healthyFilter } from '../filters/healthy.js';
import { maxScorePicker } from '../pickers/max-score.js';
import { PipelinePolicy } from '../pipeline.js';
import { prefixFractionScorer } from '../scorers/prefix-fraction.js';
import type { Filter, PolicyDefinition, RouteRequest, RoutingContext, Scorer } from '../types.js';
import type { PrefixMatch } from '../index/prefix-match.js';
import { choiceKnob, indexKnobs, numberKnob, retuneInPlace } from './knobs.js';
import { llmdApproxPrefix } from './llm-d.js';

/** llm-d's names in parentheses. */
export const llmdAffinityOptions = z.strictObject({
  affinityThreshold: numberKnob(0.8, 'a worker holding this share of the prompt’s blocks is sticky (affinityThreshold)', { max: 1 }),
  maxTTFTPenaltyMs: numberKnob(
    18_000,
    "release stickiness when the best sticky worker's estimated TTFT exceeds the best other's by more than this, ms (maxTTFTPenaltyMs; 0: always stick)",
  ),
  peakPrefillThroughput: numberKnob(15_928, 'prefill tokens/s the TTFT estimate assumes per worker (peakPrefillThroughput)', { min: 1 }),
  explorationProbability: numberKnob(0, 'probability of skipping the affinity gate (explorationProbability)', { max: 1 }),
  loadScorer: choiceKnob(
    ['token-load', 'active-request'],
    'token-load',
    'the load signal after the filter: uncached prefill tokens in flight (prefill-bound pools) or active requests (decode-bound)',
  ),
  queueThresholdTokens: numberKnob(4_194_304, 'token-load scorer: in-flight tokens at which the score reaches 0 (queueThresholdTokens)', {
    min: 1,
  }),
  idleThreshold: numberKnob(0, 'active-request scorer: requests at or below which a worker scores 1 (idleThreshold)'),
  maxBusyScore: numberKnob(1, 'active-request scorer: the best score of a busy worker (maxBusyScore)', { max: 1 }),
  blockSizeTokens: numberKnob(64, 'prefix block size, tokens (values below 64 count as 64)', { min: 1 }),
  bytesPerToken: numberKnob(4, 'characters of prompt text assumed per token', { min: 1 }),
  indexMaxBytes: indexKnobs.indexMaxBytes,
  maxWorkers: indexKnobs.maxWorkers,
});

export type LlmdAffinityOptions = z.output<typeof llmdAffinityOptions>;

/** One worker's in-flight load as the inflight-load-producer counts it. */
interface InFlight {
  tokens: number;
  requests: number;
}

/** What a dispatched request added, to be taken back. */
interface Charged {
  worker: string;
  tokens: number;
  prefillDone: boolean;
}

const LLMD_AFFINITY_CHARGED = stateKey<Charged>('llm-d-affinity.charged');

/** The prompt's length in tokens as llm-d's estimate backend counts them. */
const estimatedTokens = (req: RouteRequest, bytesPerToken: number): number => Math.ceil(req.promptText.length / bytesPerToken);

/**
 * Prompt tokens w would compute: the estimate less its matched blocks of `blockTokens` tokens
 * (producer.go, uncachedInputTokens).
 */
const uncachedTokens = (input: number, x: PrefixMatch, blockTokens: number): number => Math.max(0, input - x.blocks * blockTokens);

/** The `prefix-cache-affinity-filter` with the prefillThroughput TTFT source (plugin.go, Filter). */
function affinityFilter(
  o: LlmdAffinityOptions,
  matches: (req: RouteRequest, ws: readonly WorkerState[], ctx: RoutingContext) => Map<WorkerState, PrefixMatch>,
  inFlightTokens: (w: WorkerState) => number,
): Filter {
  const ttftMs = (w: WorkerState) => (inFlightTokens(w) / o.peakPrefillThroughput) * 1000;
  const best = (ws: readonly WorkerState[]) => Math.min(...ws.map(ttftMs));
  return {
    name: 'prefix-cache-affinity',
    filter(req, ws, ctx) {
      if (ws.length <= 1 || o.affinityThreshold <= 0) return ws as WorkerState[];
      if (o.explorationProbability > 0 && ctx.rng() < o.explorationProbability) return ws as WorkerState[];
      const m = matches(req, ws, ctx);
      const sticky: WorkerState[] = [];
      const other: WorkerState[] = [];
      for (const w of ws) {
        const x = m.get(w)!;
        (x.promptBlocks > 0 && x.blocks / x.promptBlocks >= o.affinityThreshold ? sticky : other).push(w);
      }
      if (sticky.length === 0) return ws as WorkerState[];
      if (o.maxTTFTPenaltyMs > 0 && other.length > 0 && best(sticky) - best(other) > o.maxTTFTPenaltyMs) return ws as WorkerState[];
      return sticky;
    },
  };
}

function createLlmdAffinityPolicy(o: LlmdAffinityOptions): PipelinePolicy {
  const approx = llmdApproxPrefix(o);
  const blockTokens = Math.max(64, o.blockSizeTokens);
  const loads = new Map<string, InFlight>();
  const loadOf = (id: string): InFlight => {
    let l = loads.get(id);
    if (!l) loads.set(id, (l = { tokens: 0, requests: 0 }));
    return l;
  };
  const tokenLoad: Scorer = {
    name: 'token-load',
    score(req, ws, ctx) {
      const m = approx.matches(req, ws, ctx);
      const input = estimatedTokens(req, o.bytesPerToken);
      return ws.map((w) => {
        const tokens = (loads.get(w.id)?.tokens ?? 0) + uncachedTokens(input, m.get(w)!, blockTokens);
        return tokens <= 0 ? 1 : 1 - Math.min(tokens, o.queueThresholdTokens) / o.queueThresholdTokens;
      });
    },
  };
  const activeRequests: Scorer = {
    name: 'active-request',
    score(_req, ws) {
      const n = ws.map((w) => loads.get(w.id)?.requests ?? 0);
      const max = Math.max(0, ...n);
      return n.map((c) => (c <= o.idleThreshold ? 1 : ((max - c) / max) * o.maxBusyScore));
    },
  };
  const scorers = [
    { scorer: o.loadScorer === 'token-load' ? tokenLoad : activeRequests, weight: 1 },
    // Weight 0: only so the decision reports the picked worker's matched share of the prompt.
    { scorer: prefixFractionScorer(approx.matches), weight: 0 },
  ];
  const release = (c: Charged, prefillOnly: boolean) => {
    const l = loadOf(c.worker);
    if (!c.prefillDone) {
      l.tokens -= c.tokens;
      c.prefillDone = true;
    }
    if (!prefillOnly) l.requests--;
  };
  return new PipelinePolicy({
    name: 'llm-d-affinity',
    filters: [healthyFilter, affinityFilter(o, approx.matches, (w) => loads.get(w.id)?.tokens ?? 0)],
    scorers,
    picker: maxScorePicker,
    prefixIndex: approx.index,
    // The gate and scorer knobs change in place; the index shape and the load signal do not.
    retune: (next) =>
      retuneInPlace(o, next, ['loadScorer', 'blockSizeTokens', 'bytesPerToken', 'indexMaxBytes', 'maxWorkers']),
    onDispatch(req, d, ctx) {
      const w = d.worker;
      const x = approx.matches(req, [w], ctx).get(w)!;
      const c: Charged = { worker: w.id, tokens: uncachedTokens(estimatedTokens(req, o.bytesPerToken), x, blockTokens), prefillDone: false };
      const l = loadOf(w.id);
      l.tokens += c.tokens;
      l.requests++;
      req.state.set(LLMD_AFFINITY_CHARGED, c);
      approx.record(req, w, ctx.now);
    },
    onFirstToken(req) {
      const c = req.state.get(LLMD_AFFINITY_CHARGED);
      if (c) release(c, true);
    },
    onComplete(req) {
      const c = req.state.get(LLMD_AFFINITY_CHARGED);
      if (!c) return;
      req.state.delete(LLMD_AFFINITY_CHARGED);
      release(c, false);
    },
  });
}

export const llmdAffinityPolicy: PolicyDefinition<typeof llmdAffinityOptions> = {
  name: 'llm-d-affinity',
  description:
    "llm-d router's sticky-until-saturated configuration (optimized-baseline guide): prefix-cache-affinity filter released past a TTFT penalty, then the token-load (or active-request) scorer.",
  options: llmdAffinityOptions,
  create: createLlmdAffinityPolicy,
};
