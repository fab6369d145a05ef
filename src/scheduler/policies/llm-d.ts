/**
 * Policy `llm-d`: the llm-d router's default configuration, "sticky until saturated" (token-aware
 * routing): keep a request on the endpoints that already hold its prefix unless their load exceeds
 * a calibrated limit, then route by load alone. Built from the same pipeline as kvgate's policies.
 * `llm-d-legacy` (llm-d-legacy.ts) is the weighted blend it replaced; `llm-d-precise`
 * (llm-d-precise.ts) is this profile on a prefix index fed by the engines' KV events.
 *
 *   healthy → prefix-cache-affinity filter → token-load scorer (prefill-bound pools)
 *                                          or active-request scorer (decode-bound pools)
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
 *     queueThresholdTokens) / queueThresholdTokens
 *   active-request score = 1 if in-flight requests ≤ idleThreshold, else (max − n) / max · maxBusyScore
 *     over the candidates
 *
 * Which scorer: llm-d leaves it to the operator, who identifies the pool's bottleneck and deploys
 * the matching configuration (the blog's "Main Result" table: prefill compute — long prompts
 * relative to outputs — gets `token-load-scorer`; decode slots — short prompts, long outputs —
 * gets `active-request-scorer`). With loadScorer `auto` (the default) kvgate makes that call
 * from the traffic as that rule states it: token-load while the prompt tokens of the requests
 * seen are at least their output tokens (the answers' lengths once requests finish, their
 * max_tokens before any has), active-request otherwise. `token-load` or `active-request` fixes it.
 *
 * Here (llm-d.ts) prompt tokens are estimated from the text, bytesPerToken characters each
 * (llm-d's tokenizer-free `estimate` backend, used when no token-producer is configured, as in
 * the guide), and the prefix index is llm-d's approximate one (llm-d-plugins.ts).
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
 * prefix-cache-affinity-filter, token-load-scorer; no no-hit-lru-scorer, no queue or KV scorer) is
 * llm-d/llm-d's `guides/optimized-baseline/router/optimized-baseline.values.yaml`, which
 * llm-d/llm-d.github.io @ 9a8058f7 `blog/2026-08-17_sticky-until-saturated-token-aware-routing.mdx`
 * reports as llm-d's default since August 2026 (and its P/D guides' decode profiles as
 * active-request alone). Not modelled: the latency-predictor TTFT source.
 */
import { z } from 'zod';
import { stateKey } from '../../util/state.js';
import type { WorkerState } from '../../fleet/worker-state.js';
import type { PrefixIndex } from '../index/prefix-index.js';
import type { PrefixMatch } from '../index/prefix-match.js';
import { healthyFilter } from '../filters/healthy.js';
import { maxScorePicker } from '../pickers/max-score.js';
import { PipelinePolicy } from '../pipeline.js';
import { prefixFractionScorer } from '../scorers/prefix-fraction.js';
import type { Filter, PolicyDefinition, RouteRequest, RoutingContext, Scorer } from '../types.js';
import { choiceKnob, numberKnob, retuneInPlace } from './knobs.js';
import { llmdApproxKnobs, llmdApproxPrefix, type LlmdMatches } from './llm-d-plugins.js';

/** The sticky-until-saturated knobs, llm-d's names in parentheses (shared with llm-d-precise). */
export const llmdStickyKnobs = {
  affinityThreshold: numberKnob(0.8, 'a worker holding this share of the prompt’s blocks is sticky (affinityThreshold)', { max: 1 }),
  maxTTFTPenaltyMs: numberKnob(
    18_000,
    "release stickiness when the best sticky worker's estimated TTFT exceeds the best other's by more than this, ms (maxTTFTPenaltyMs; 0: always stick)",
  ),
  peakPrefillThroughput: numberKnob(15_928, 'prefill tokens/s the TTFT estimate assumes per worker (peakPrefillThroughput)', { min: 1 }),
  explorationProbability: numberKnob(0, 'probability of skipping the affinity gate (explorationProbability)', { max: 1 }),
  loadScorer: choiceKnob(
    ['auto', 'token-load', 'active-request'],
    'auto',
    'the load signal after the filter: uncached prefill tokens in flight (prefill-bound pools), active requests (decode-bound), or auto: token-load while the traffic’s prompt tokens are at least its output tokens',
  ),
  queueThresholdTokens: numberKnob(4_194_304, 'token-load scorer: in-flight tokens at which the score reaches 0 (queueThresholdTokens)', {
    min: 1,
  }),
  idleThreshold: numberKnob(0, 'active-request scorer: requests at or below which a worker scores 1 (idleThreshold)'),
  maxBusyScore: numberKnob(1, 'active-request scorer: the best score of a busy worker (maxBusyScore)', { max: 1 }),
};

export const llmdOptions = z.strictObject({ ...llmdStickyKnobs, ...llmdApproxKnobs });

export type LlmdOptions = z.output<typeof llmdOptions>;
type StickyOptions = Pick<
  LlmdOptions,
  | 'affinityThreshold'
  | 'maxTTFTPenaltyMs'
  | 'peakPrefillThroughput'
  | 'explorationProbability'
  | 'loadScorer'
  | 'queueThresholdTokens'
  | 'idleThreshold'
  | 'maxBusyScore'
>;

/** Where a sticky profile's prefix knowledge comes from, and how it counts a prompt. */
export interface StickyPrefixSource {
  readonly index: PrefixIndex;
  matches: LlmdMatches;
  /** The prompt tokens w would compute for req, given its match there (producer.go, uncachedInputTokens). */
  uncached(req: RouteRequest, x: PrefixMatch): number;
  /** The request's prompt length in tokens as the profile counts them. */
  inputTokens(req: RouteRequest): number;
  /** The affinity share of a match (matched / prompt blocks, or tier-weighted). */
  share(x: PrefixMatch): number;
  /** The request was sent to w (an index learned from its own picks enters it here). */
  record?(req: RouteRequest, w: WorkerState, now: number): void;
  prepare?(req: RouteRequest, ws: readonly WorkerState[]): void;
  usesKvEvents?: boolean;
}

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
  prompt: number;
  maxTokens: number;
}

const LLMD_CHARGED = stateKey<Charged>('llm-d.charged');

/** The `prefix-cache-affinity-filter` with the prefillThroughput TTFT source (plugin.go, Filter). */
function affinityFilter(o: StickyOptions, src: StickyPrefixSource, inFlightTokens: (w: WorkerState) => number): Filter {
  const ttftMs = (w: WorkerState) => (inFlightTokens(w) / o.peakPrefillThroughput) * 1000;
  const best = (ws: readonly WorkerState[]) => Math.min(...ws.map(ttftMs));
  return {
    name: 'prefix-cache-affinity',
    filter(req, ws, ctx) {
      if (ws.length <= 1 || o.affinityThreshold <= 0) return ws as WorkerState[];
      if (o.explorationProbability > 0 && ctx.rng() < o.explorationProbability) return ws as WorkerState[];
      const m = src.matches(req, ws, ctx);
      const sticky: WorkerState[] = [];
      const other: WorkerState[] = [];
      for (const w of ws) (src.share(m.get(w)!) >= o.affinityThreshold ? sticky : other).push(w);
      if (sticky.length === 0) return ws as WorkerState[];
      if (o.maxTTFTPenaltyMs > 0 && other.length > 0 && best(sticky) - best(other) > o.maxTTFTPenaltyMs) return ws as WorkerState[];
      return sticky;
    },
  };
}

/**
 * The operator's choice of load signal as llm-d's blog states the rule: prefill-bound (token-load)
 * while prompts carry at least as many tokens as outputs. Counted over the finished requests, or
 * over the dispatched ones (their max_tokens) until one finishes.
 */
class BottleneckChoice {
  private dispatchedPrompt = 0;
  private dispatchedOutput = 0;
  private finishedPrompt = 0;
  private finishedOutput = 0;

  dispatched(prompt: number, maxTokens: number): void {
    this.dispatchedPrompt += prompt;
    this.dispatchedOutput += maxTokens;
  }

  finished(prompt: number, output: number): void {
    this.finishedPrompt += prompt;
    this.finishedOutput += output;
  }

  prefillBound(): boolean {
    return this.finishedPrompt + this.finishedOutput > 0
      ? this.finishedPrompt >= this.finishedOutput
      : this.dispatchedPrompt >= this.dispatchedOutput;
  }
}

/** A sticky-until-saturated policy named `name` over the prefix source `src`. */
export function stickyUntilSaturated(
  name: string,
  o: StickyOptions,
  src: StickyPrefixSource,
  fixed: readonly string[],
): PipelinePolicy {
  const loads = new Map<string, InFlight>();
  const loadOf = (id: string): InFlight => {
    let l = loads.get(id);
    if (!l) loads.set(id, (l = { tokens: 0, requests: 0 }));
    return l;
  };
  const choice = new BottleneckChoice();
  const tokenLoad = (req: RouteRequest, ws: readonly WorkerState[], ctx: RoutingContext): number[] => {
    const m = src.matches(req, ws, ctx);
    return ws.map((w) => {
      const tokens = (loads.get(w.id)?.tokens ?? 0) + src.uncached(req, m.get(w)!);
      return tokens <= 0 ? 1 : 1 - Math.min(tokens, o.queueThresholdTokens) / o.queueThresholdTokens;
    });
  };
  const activeRequests = (ws: readonly WorkerState[]): number[] => {
    const n = ws.map((w) => loads.get(w.id)?.requests ?? 0);
    const max = Math.max(0, ...n);
    return n.map((c) => (c <= o.idleThreshold ? 1 : ((max - c) / max) * o.maxBusyScore));
  };
  const usesTokenLoad = () => o.loadScorer === 'token-load' || (o.loadScorer === 'auto' && choice.prefillBound());
  const load: Scorer = {
    name: 'load',
    score: (req, ws, ctx) => (usesTokenLoad() ? tokenLoad(req, ws, ctx) : activeRequests(ws)),
  };
  const scorers = [
    { scorer: load, weight: 1 },
    // Weight 0: only so the decision reports the picked worker's matched share of the prompt.
    { scorer: prefixFractionScorer(src.matches), weight: 0 },
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
    name,
    ...(src.prepare ? { prepare: src.prepare } : {}),
    filters: [healthyFilter, affinityFilter(o, src, (w) => loads.get(w.id)?.tokens ?? 0)],
    scorers,
    picker: maxScorePicker,
    prefixIndex: src.index,
    ...(src.usesKvEvents ? { usesKvEvents: true } : {}),
    // The gate and scorer knobs change in place; the index shape does not.
    retune: (next) => retuneInPlace(o as Record<string, unknown>, next, fixed),
    onDispatch(req, d, ctx) {
      const w = d.worker;
      const x = src.matches(req, [w], ctx).get(w)!;
      const prompt = src.inputTokens(req);
      const c: Charged = { worker: w.id, tokens: src.uncached(req, x), prefillDone: false, prompt, maxTokens: req.maxTokens };
      const l = loadOf(w.id);
      l.tokens += c.tokens;
      l.requests++;
      choice.dispatched(prompt, req.maxTokens);
      req.state.set(LLMD_CHARGED, c);
      src.record?.(req, w, ctx.now);
    },
    onFirstToken(req) {
      const c = req.state.get(LLMD_CHARGED);
      if (c) release(c, true);
    },
    onComplete(req, _w, _ok, _ctx, outputTokens) {
      const c = req.state.get(LLMD_CHARGED);
      if (!c) return;
      req.state.delete(LLMD_CHARGED);
      release(c, false);
      choice.finished(c.prompt, outputTokens ?? c.maxTokens);
    },
  });
}

function createLlmdPolicy(o: LlmdOptions): PipelinePolicy {
  const approx = llmdApproxPrefix(o);
  const blockTokens = Math.max(64, o.blockSizeTokens);
  const inputTokens = (req: RouteRequest) => Math.ceil(req.promptText.length / o.bytesPerToken);
  return stickyUntilSaturated(
    'llm-d',
    o,
    {
      index: approx.index,
      matches: approx.matches,
      inputTokens,
      uncached: (req, x) => Math.max(0, inputTokens(req) - x.blocks * blockTokens),
      share: (x) => (x.promptBlocks > 0 ? x.blocks / x.promptBlocks : 0),
      record: approx.record,
    },
    ['blockSizeTokens', 'bytesPerToken', 'indexMaxBytes', 'maxWorkers'],
  );
}

export const llmdPolicy: PolicyDefinition<typeof llmdOptions> = {
  name: 'llm-d',
  description:
    "llm-d router's default, sticky until saturated: prefix-cache-affinity filter (≥ 0.8 of the prompt) released past an 18 s TTFT penalty, then token-load (prefill-bound) or active-request (decode-bound) scorer.",
  options: llmdOptions,
  create: createLlmdPolicy,
};
