/**
 * The engine model's contract. One engine model, two drivers: the live simulated worker
 * (src/sim/worker/server.ts) paces `step()` in real time; the fleet simulation (src/sim/fleet-sim.ts)
 * advances virtual time by each step's duration. Neither driver knows how the engine works inside.
 */

import type { KvEvent } from '../kv/events.js';
import type { LeadingPart } from '../kv/leading-part.js';
import type { BlockKeys } from '../kv/prompt-blocks.js';

/** Why a sequence stopped. 'abort' is reported for requests removed with `abort()`. */
export type FinishReason = 'stop' | 'length' | 'abort';

/** A sequence's tokens generated so far: `ids[0 … length)` (the array may be longer). */
export interface OutputTokens {
  readonly ids: ArrayLike<number>;
  readonly length: number;
}

/** What the sampler sees when asked for the next token of a sequence. */
export interface TokenContext {
  readonly prompt: ArrayLike<number>;
  /** Tokens generated so far (not including the one being sampled). */
  readonly output: OutputTokens;
}

/** Produces the next output token. Called exactly once per generated token, in order. */
export type TokenSampler = (ctx: TokenContext) => number;

export interface EngineRequest {
  id: string;
  /** Prompt token ids (the tokenizer's output; already chat-templated for chat requests). */
  prompt: ArrayLike<number>;
  /** Tokens the prompt begins with, whose block hashes are shared with other prompts built on them. */
  promptPart?: LeadingPart;
  /** Output tokens to generate at most. */
  maxTokens: number;
  sampler: TokenSampler;
  /** Token that ends the sequence with reason 'stop' (unless ignoreEos). */
  eosTokenId?: number;
  ignoreEos?: boolean;
  /** Lower value = more important (vLLM's priority scheduling convention). Default 0. */
  priority?: number;
  /**
   * vLLM's `cache_salt`: mixed into the first block's hash, so requests with different salts
   * (or one salted and one not) share no cached block, however alike their prompts.
   */
  cacheSalt?: string;
  /**
   * The LoRA adapter the request runs with (vLLM's lora_request): every block it computes is keyed
   * by the adapter's name, so it shares cached blocks only with requests of the same adapter; its
   * BlockStored events carry the name.
   */
  lora?: string;
  /**
   * Compute the whole prompt even if a prefix of it is cached. vLLM V1 does this for requests that
   * ask for prompt logprobs (vllm/v1/core/kv_cache_manager.py, get_computed_blocks): the logprob of
   * a cached position was never computed. The prompt's blocks are still cached for later requests.
   */
  skipPrefixCache?: boolean;
  /**
   * Read at most this many prompt tokens from the prefix cache. SGLang caps its prefix match at a
   * request's logprob_start_len (python/sglang/srt/managers/schedule_batch.py,
   * Req._compute_max_prefix_len): a scored position's logits must be computed.
   */
  prefixCacheLimit?: number;
  /**
   * A prefill worker's half of a disaggregated request (vLLM's `kv_transfer_params:
   * {do_remote_decode: true}`, sent with max_tokens 1): when it finishes by length its blocks are
   * not freed but held for a decode worker to pull, until `releaseKv(id)` (NixlConnector's
   * request_finished returns delay_free_blocks for such a request and frees them when the decode
   * side reports the read done). FinishedOutput.kvHeld says they were held.
   */
  remoteDecode?: boolean;
  /**
   * A decode worker's half (vLLM's `do_remote_prefill: true`): the prompt's KV is pulled from a
   * prefill worker instead of computed. Admitted as any request is, but with blocks for the whole
   * prompt at once and without using the step's token budget; the step reports the pull
   * (StepResult.kvPulls, the prompt tokens not already in the local prefix cache) and the request
   * waits, holding its blocks, until the driver calls `kvArrived(id)` after the transfer time.
   * Then it recomputes only the last prompt token (to get the first token's logits) and decodes.
   */
  remotePrefill?: boolean;
}

/** A remote-prefill request admitted in a step, whose KV the driver now transfers. */
export interface KvPull {
  id: string;
  /** Prompt tokens to pull (the prompt less its local prefix-cache hit). */
  tokens: number;
}

/** One generated token, visible to the client when the step that produced it ends. */
export interface TokenOutput {
  id: string;
  token: number;
  /** Index of this token in the request's output (0 = first token). */
  index: number;
}

export interface FinishedOutput {
  id: string;
  reason: FinishReason;
  promptTokens: number;
  outputTokens: number;
  /** Prompt tokens whose KV came from the prefix cache when the request was first scheduled. */
  cachedPromptTokens: number;
  /** A remote-decode request whose blocks stay held for the decode worker (see EngineRequest.remoteDecode). */
  kvHeld?: boolean;
}

export interface StepResult {
  /** Modelled GPU time of this step, in milliseconds. */
  durationMs: number;
  /** Every token generated in this step (empty when the engine was built with emitTokens: false). */
  tokens: TokenOutput[];
  /** Ids of requests whose first output token was generated in this step (always filled). */
  firstTokens: string[];
  finished: FinishedOutput[];
  /** Ids of requests preempted (recompute) in this step. */
  preempted: string[];
  /** Requests scheduled for the first time in this step, with their prefix-cache hit. */
  started: Array<{ id: string; cachedPromptTokens: number }>;
  prefillTokens: number;
  decodeTokens: number;
  /** KV events produced by this step, when the engine was built with kvEvents: true. */
  kvEvents: KvEvent[];
  /** Remote-prefill requests admitted in this step: their blocks are allocated, their KV is due. */
  kvPulls: KvPull[];
}

/** Counters and gauges with vLLM's meanings (names in comments). */
export interface EngineStats {
  running: number; // vllm:num_requests_running
  waiting: number; // vllm:num_requests_waiting (including requests waiting for remote KV, as vLLM counts them)
  kvUsage: number; // vllm:kv_cache_usage_perc (0..1): blocks in use by running requests / total
  numGpuBlocks: number; // vllm:cache_config_info{num_gpu_blocks}
  blockSize: number; // vllm:cache_config_info{block_size}
  freeBlocks: number;
  /** Blocks holding a cached prefix that no running request uses (evictable). */
  cachedFreeBlocks: number;
  prefixQueries: number; // vllm:prefix_cache_queries (tokens)
  prefixHits: number; // vllm:prefix_cache_hits (tokens)
  /** With a host-memory tier: prompt tokens loaded from it instead of recomputed. */
  hostHits?: number;
  /** With a host-memory tier: its size and the blocks it holds. */
  hostBlocks?: number;
  hostCachedBlocks?: number;
  preemptions: number; // vllm:num_preemptions
  /**
   * Of those, requests preempted while still prefilling their prompt (simulation only: vLLM has
   * no such metric): admitted by their first chunk, they ran out of blocks before the prompt was in.
   */
  prefillPreemptions: number;
  promptTokens: number; // vllm:prompt_tokens
  generationTokens: number; // vllm:generation_tokens
  finished: Record<FinishReason, number>; // vllm:request_success{finished_reason}
  /** Present when the engine speculates. */
  specDecode?: SpecDecodeStats;
}

/** Why the engine refuses a request outright (vLLM answers these with HTTP 400). */
export interface AdmissionError {
  code: 'context_length_exceeded' | 'exceeds_kv_capacity';
  message: string;
}

export interface EngineConfig {
  blockSize: number;
  numGpuBlocks: number;
  /** Longest prompt + output the model accepts (max_model_len). */
  maxModelLen: number;
  maxNumSeqs: number;
  /** Per-step token budget shared by decodes and prefill chunks (max_num_batched_tokens). */
  maxNumBatchedTokens: number;
  enablePrefixCaching: boolean;
  /**
   * Host-memory offload tier (vLLM's CPU offloading connector): GPU blocks evicted from the prefix
   * cache are kept in `numBlocks` blocks of host memory (LRU) and loaded back at `loadMsPerBlock`
   * (one block's KV bytes over PCIe) instead of being recomputed. Absent: no tier.
   */
  cpuOffload?: { numBlocks: number; loadMsPerBlock: number };
  /** Seed of the block-hash chain (vLLM: random per process unless PYTHONHASHSEED is set). */
  hashSeed: number;
  /** Produce KvEvent records in StepResult (costs time; off in large benches). */
  kvEvents: boolean;
  /**
   * Report each generated token in StepResult.tokens. The fleet simulation turns this off and
   * works from firstTokens, finished and step durations, which is all its metrics need.
   * Default true.
   */
  emitTokens?: boolean;
  timeModel: TimeModel;
  /**
   * Most LoRA adapters in one batch (vLLM --max-loras, default 1): a waiting request whose adapter
   * would be one too many is passed over until a running adapter's requests are done. Applies only
   * to requests with a `lora`; unset, adapters are not limited.
   */
  maxLoras?: number;
  /** In-engine speculative decoding (vLLM's --speculative-config with a draft model); off when absent. */
  speculative?: EngineSpeculation;
}

/**
 * In-engine speculative decoding. Each decoding sequence's step becomes k draft-model decode
 * steps plus one target forward pass over k + 1 tokens (priced like a prefill chunk of k + 1
 * tokens by the target's time model), and yields 1 + A tokens, A the accepted draft tokens: each
 * position accepted with probability α while the ones before were. Output tokens still come from
 * the request's sampler, one call per token, so what is generated is what plain decoding would
 * generate — speculation is lossless; only the step count, step time and counters change.
 */
export interface EngineSpeculation {
  /** Draft tokens per step (vLLM's num_speculative_tokens). */
  k: number;
  /** α for a sequence at this moment (fixed, per request, or shifting over time). */
  acceptance: (requestId: string) => number;
  /** Prices the draft model's decode steps on the same GPUs. */
  draftTimeModel: TimeModel;
  /** Uniform draws in [0, 1) for the acceptance of draft tokens. */
  rng: () => number;
}

/** vLLM's spec-decode counters (vllm/v1/spec_decode/metrics.py). */
export interface SpecDecodeStats {
  numDrafts: number; // vllm:spec_decode_num_drafts
  numDraftTokens: number; // vllm:spec_decode_num_draft_tokens
  numAcceptedTokens: number; // vllm:spec_decode_num_accepted_tokens
  /** Accepted tokens by position (vllm:spec_decode_num_accepted_tokens_per_pos{position}). */
  acceptedPerPos: number[];
}

/** Shape of one engine step, as the time model prices it. */
export interface StepShape {
  /** Prefill chunks: new tokens computed and the context length at the end of the chunk. */
  prefill: Array<{ newTokens: number; contextLen: number }>;
  /** Number of sequences decoding one token this step. */
  decodeSeqs: number;
  /** Sum over decoding sequences of their context length (KV read per step). */
  decodeContextTokens: number;
}

export interface TimeModel {
  stepMs(shape: StepShape): number;
}

/** The engine model. Implemented by src/engine/engine.ts. */
export interface EngineModel {
  readonly config: EngineConfig;
  /** Why this request can never run here, or null if it can be queued. */
  check(prompt: number, maxTokens: number): AdmissionError | null;
  /** Queue a request. Throws if check() would refuse it or the id is in use. */
  add(req: EngineRequest): void;
  /**
   * Remove a request wherever it is (waiting, running, waiting for remote KV, or finished with its
   * KV held for a decode worker); frees its blocks. Returns false if unknown.
   */
  abort(id: string): boolean;
  /**
   * The KV of a remote-prefill request has arrived (its transfer time has passed): it becomes
   * schedulable. Returns false if no request with that id is waiting for KV. Step again after it.
   */
  kvArrived(id: string): boolean;
  /**
   * A decode worker has pulled the KV a finished remote-decode request holds: free its blocks
   * (they stay in the prefix cache). Returns false if the id holds nothing. Step again after it.
   */
  releaseKv(id: string): boolean;
  /** True if any request is waiting or running. */
  hasWork(): boolean;
  /**
   * Plan and execute one step. Returns null if there is nothing to do, or nothing can be done
   * until blocks are freed (by a finish, abort, kvArrived or releaseKv).
   */
  step(): StepResult | null;
  stats(): EngineStats;
  /**
   * Exact prefix-cache probe, for the `oracle` policy and for tests: how many leading prompt
   * tokens would be served from cache if the prompt were scheduled now, under the adapter and
   * cache_salt in `keys` (none: the base model's unsalted blocks).
   */
  cachedPrefixTokens(prompt: ArrayLike<number>, keys?: BlockKeys): number;
  /** Drop every cached block that no running request uses (emits AllBlocksCleared if empty). */
  resetPrefixCache(): void;
  /** The LoRA adapters of the running and of the waiting requests (vllm:lora_requests_info). */
  adapterState?(): { running: string[]; waiting: string[] };
}
