/**
 * The routing contract. A policy is a pipeline — filters remove workers that cannot take the
 * request, producers derive per-request data from the survivors, scorers rate them in [0,1],
 * weights combine the scores, a picker chooses — in the manner of the Gateway API Inference
 * Extension scheduler. Every named policy, kvgate's own and the peers' used as baselines, is a
 * configuration of this one shape, and the same code routes in the live gateway and in the fleet
 * simulation (the clock and the random source are injected).
 */
import type { z } from 'zod';
import type { WorkerState } from '../fleet/worker-state.js';
import type { Rng } from '../util/rng.js';
import type { RequestState } from '../util/state.js';
import type { PrefixIndex } from './index/prefix-index.js';

export interface RouteRequest {
  id: string;
  model: string;
  /** The prompt as the worker will see it (chat requests rendered through the template). */
  promptText: string;
  /**
   * Token ids from the gateway's tokenizer for this model. The live gateway computes them when
   * first read, so a policy that never reads them (round-robin, least-load) costs no tokenization,
   * and lets go of them at the answer's first token, when the request can no longer be retried:
   * after that (a policy's onComplete, a stage's onFinish) `length` still answers and reading an
   * id throws. Such a reader takes the length from promptTokenCount, and keeps in `state` at the
   * decision what else it needs.
   */
  promptTokens: ArrayLike<number>;
  /**
   * The prompt's length in tokens where it is known without the ids (the tokenizer's count());
   * readers that need only the length use it (`promptLength`) rather than promptTokens.
   */
  readonly promptTokenCount?: number;
  /** The most output tokens of one sequence (max_tokens, or the gateway's assumption). */
  maxTokens: number;
  /**
   * Sequences the request starts at its worker where that is more than one: a batch of prompts
   * (a completions `prompt` or embeddings `input` array) times `n`. vLLM runs each as a request
   * of its own, each holding its own output blocks. Unset: 1. The routing fields above describe
   * the first prompt, which a batch is routed on.
   */
  sequences?: number;
  /** Prompt tokens of every prompt of a batch. Unset: a single prompt (promptLength). */
  batchPromptTokens?: number;
  /** Session affinity hint (`user` field or `x-session-id` header). */
  sessionKey?: string;
  tenant?: string;
  /** Lower is more important (vLLM's convention). */
  priority?: number;
  /**
   * false: the client asked for the whole answer at once, so the gateway sees its first byte only
   * when the answer ends (no time to first token or per output token to learn from). Unset: streamed.
   */
  stream?: boolean;
  /**
   * Values the plugins derive for this request (block hashes at a block size, prefix matches,
   * estimates) and the hooks read back later, under typed keys: computed once, read by all. Lives
   * as long as the request, across retries.
   */
  state: RequestState;
}

export interface RoutingContext {
  /** Clock time of this decision, ms. */
  now: number;
  rng: Rng;
  /** Snapshots older than this are stale: policies fall back to their own accounting. */
  staleAfterMs: number;
}

export interface Filter {
  readonly name: string;
  /** Workers that can take the request. May return the input array unchanged. */
  filter(req: RouteRequest, workers: readonly WorkerState[], ctx: RoutingContext): readonly WorkerState[];
  /**
   * Asked when this filter removed every worker: a message if the request can never be served by
   * `workers` (the filter's input), which the pipeline answers with 400 context_length_exceeded;
   * null if some worker could take it later (503).
   */
  neverFits?(req: RouteRequest, workers: readonly WorkerState[], ctx: RoutingContext): string | null;
}

/**
 * Derives data from the request and the filtered candidates and writes it to `req.state` under
 * its own typed keys, for the scorers and the picker to read (llm-d's data producers). Runs after
 * the filters, before the scorers, once per routing decision.
 */
export interface Producer {
  readonly name: string;
  produce(req: RouteRequest, workers: readonly WorkerState[], ctx: RoutingContext): void;
}

export interface Scorer {
  readonly name: string;
  /** One score in [0,1] per worker, aligned with `workers` (higher is better). */
  score(req: RouteRequest, workers: readonly WorkerState[], ctx: RoutingContext): number[];
}

export interface ScoredWorker {
  worker: WorkerState;
  /** Weighted sum of the scorers' outputs. */
  score: number;
  /** Each scorer's raw [0,1] output, by scorer name. */
  parts: Record<string, number>;
}

/** A picker's choice and why it made it. */
export interface Pick {
  worker: ScoredWorker;
  /** Short machine-readable note, reported as RouteDecision.reason. */
  reason: string;
  /**
   * Fraction of the prompt the picker expects the worker to have cached, when it computed one;
   * else the pipeline's expectedPrefixHit hook or the 'prefix' scorer's output decides.
   */
  expectedPrefixHit?: number;
}

export interface Picker {
  readonly name: string;
  /** The chosen candidate, or null when there is none. */
  pick(req: RouteRequest, candidates: readonly ScoredWorker[], ctx: RoutingContext): Pick | null;
}

export interface RouteDecision {
  worker: WorkerState;
  policy: string;
  /** Fraction of the prompt's tokens the policy expects the worker to have cached (0..1). */
  expectedPrefixHit: number;
  /** Short machine-readable note on why (e.g. 'prefix', 'least-load', 'spill', 'session'). */
  reason: string;
  /** True when the decision ignored stale metrics and used in-flight accounting only. */
  usedStaleMetrics?: boolean;
}

export type RouteOutcome =
  | { ok: true; decision: RouteDecision }
  | {
      ok: false;
      /** 400: the request can never be served by this pool; 503: nothing can take it now. */
      status: 400 | 503;
      code: string;
      message: string;
    };

export interface Policy {
  readonly name: string;
  /**
   * Metrics refresh interval this policy was published with, when it differs from the gateway's
   * default (e.g. llm-d polls every 50 ms). The fleet simulation gives each policy its own.
   */
  readonly scrapeIntervalMs?: number;
  /** The prefix index the policy routes with, for KV-event subscribers and /admin/workers. */
  readonly prefixIndex?: PrefixIndex;
  /** The policy reads WorkerState.oracle: a simulation should attach its engines' probes. */
  readonly usesOracle?: boolean;
  /**
   * The policy's prefix index is meant to be fed by the workers' KV-cache events (as Dynamo's
   * default `use_kv_events` and llm-d's precise prefix-cache scorer are): the fleet simulation
   * feeds it its engines' events through the gateway's mapper (fleet/kv-events-mapper.ts); the
   * gateway feeds it from the workers configured with `kvEvents`. Without events its index stays
   * empty, as the peer's would.
   */
  readonly usesKvEvents?: boolean;
  /**
   * False for a policy that never reads RouteRequest.promptTokens (round-robin, least-load): the
   * gateway then tokenizes only if something else asks (and counts tokens where only the length
   * is wanted). Default true: the gateway tokenizes every prompt up front.
   */
  readonly readsPromptTokens?: boolean;
  /**
   * Per-request work that depends only on the prompt and the candidates, not on the fleet's
   * state (the prompt's block hashes): the gateway runs it where it tokenizes, before the
   * request waits for admission or a decision, so the decision itself only looks things up.
   * Optional; `route` must work without it.
   */
  prepare?(req: RouteRequest, workers: readonly WorkerState[]): void;
  route(req: RouteRequest, workers: readonly WorkerState[], ctx: RoutingContext): RouteOutcome;
  /** The request was dispatched to the decided worker (its reservation is already charged). */
  onDispatch?(req: RouteRequest, decision: RouteDecision, ctx: RoutingContext): void;
  /** The first token came back from `worker`. */
  onFirstToken?(req: RouteRequest, worker: WorkerState, ctx: RoutingContext): void;
  /**
   * The request ended at `worker` (ok=false: failed or cancelled); `outputTokens`: the answer's
   * length, when the relay could count it (a finished answer).
   */
  onComplete?(req: RouteRequest, worker: WorkerState, ok: boolean, ctx: RoutingContext, outputTokens?: number): void;
  /**
   * The prefill throughput the policy assumes for the worker, tokens/s (measured, or its configured
   * default). Outlier detection judges a silent worker against the prefill it was sent with it.
   */
  prefillRate?(worker: WorkerState): number;
  /** Extra per-worker fields for /admin/workers (e.g. a learned prefill rate). */
  describeWorker?(worker: WorkerState): Record<string, unknown>;
  /**
   * Take new options (a config reload; already parsed by the policy's schema) for the next
   * decision, keeping what the policy has learned (its prefix index, learned rates, sessions).
   * Returns false if these options cannot be changed in place (a different index size): the
   * gateway then keeps the old ones and says a restart is needed. Absent: never in place.
   */
  retune?(options: PolicyOptions): boolean;
  /**
   * A worker has left the fleet for good (removed from the config and drained): drop what the
   * policy learned about it, so a long-running gateway whose workers come and go keeps nothing of
   * the departed, and a new worker that later takes the same id starts fresh.
   */
  forgetWorker?(worker: WorkerState): void;
}

/** A named set of a policy's knobs, listed together (`kvgate bench --list`, the policy's README). */
export interface KnobGroup {
  /** Short name, e.g. `weights`. */
  readonly name: string;
  /** What the group's knobs set, one line. */
  readonly title: string;
  readonly knobs: readonly string[];
}

/** Options a policy is created from, as written in the config (`policy.options`). */
export type PolicyOptions = Record<string, unknown>;

/** A named policy: what `policy.name` in the config and `kvgate bench --policy` refer to. */
export interface PolicyDefinition<O extends z.ZodObject = z.ZodObject> {
  readonly name: string;
  /** One line for listings (`kvgate bench --list`). */
  readonly description: string;
  /**
   * The policy's options with their defaults (policies/knobs.ts): the one place they are
   * declared, checked at config load and by createPolicy.
   */
  readonly options: O;
  /** The options in named groups, as listings show them (optional; in declaration order otherwise). */
  readonly knobGroups?: readonly KnobGroup[];
  /** A fresh policy from parsed options. */
  create(options: z.output<O>): Policy;
}

/** The prompt's length in tokens, without tokenizing it where the count is cheaper. */
export function promptLength(req: RouteRequest): number {
  return req.promptTokenCount ?? req.promptTokens.length;
}

/** Prompt tokens of the whole request: every prompt of a batch (RouteRequest.batchPromptTokens). */
export function requestPromptTokens(req: RouteRequest): number {
  return req.batchPromptTokens ?? promptLength(req);
}

/** Sequences the request starts at its worker (RouteRequest.sequences). */
export function requestSequences(req: RouteRequest): number {
  return req.sequences ?? 1;
}

/**
 * Prompt tokens the whole request leaves a worker to compute, given `cachedTokens` of its first
 * prompt (`prompt` tokens long) already cached there. A batch's other prompts are taken to be
 * cached in the same proportion: they usually share the first's prefix (a few-shot header, a
 * system prompt), and only the first is matched against the index.
 */
export function uncachedRequestTokens(req: RouteRequest, prompt: number, cachedTokens: number): number {
  const uncached = Math.max(0, prompt - cachedTokens);
  const all = req.batchPromptTokens;
  if (all === undefined) return uncached;
  return prompt > 0 ? Math.round(all * (uncached / prompt)) : all;
}

