/**
 * What a trace loader or a workload generator hands to the fleet simulation: one request, in
 * arrival order. Sources are re-openable so the same trace can be replayed once per policy.
 *
 * Sessions are closed loops: a source yields the first turn of each session (in arrival order,
 * among the open-loop requests) and that request carries `next`, which the simulation calls when
 * the turn has finished (or was refused) to get the following turn, due a think time later. The
 * content of every turn is fixed by the source (never by the simulation), so every policy sees
 * the same requests; only when they arrive depends on how fast the fleet answers.
 */
import type { LeadingPart } from '../kv/leading-part.js';

export interface BenchRequest {
  /** Arrival time in ms from the start of the trace (non-decreasing along a source). */
  arrivalMs: number;
  /** Prompt token ids, as the engine will see them (already chat-templated). */
  promptTokens: ArrayLike<number>;
  /**
   * Tokens the prompt begins with (a system prompt, a session's previous prompt), shared with
   * other prompts: their block hashes are computed once for all of them (kv/leading-part.ts).
   */
  promptPart?: LeadingPart;
  /** The prompt's text when the source had one; otherwise synthesised from the tokens on demand. */
  promptText?: string;
  /** Output tokens the request generates (the sampler never stops early: ignore_eos). */
  maxTokens: number;
  /**
   * The max_tokens the client sends, when it is more than the request generates (a fixed cap, as
   * most clients send, the answer ending at its EOS first): what the gateway, its router and its
   * admission see. Absent: max_tokens is exactly the output length (maxTokens), which tells the
   * router what no live client does.
   */
  declaredMaxTokens?: number;
  /**
   * Parallel sampling (`n` > 1): the output length of each of the request's answers, the longest
   * `maxTokens` long; the first answer's tokens come from `outputSeed`. The engine runs each as a sequence of its own, the prompt's blocks shared
   * through its prefix cache, as vLLM runs a request's n children. The request's first token is
   * the first any answer produces, its end the last answer's. Absent: one answer.
   */
  sampleTokens?: readonly number[];
  /**
   * Seed of the request's output tokens (see answerTokens): a workload that quotes an earlier
   * answer in a later prompt knows exactly what the engine generated.
   */
  outputSeed: number;
  tenant?: string;
  /**
   * The LoRA adapter the request names: its engine request runs with it (blocks keyed by it, at
   * most --max-loras adapters per batch) and the router hashes its prompt in the adapter's chain,
   * as the live gateway does.
   */
  adapter?: string;
  priority?: number;
  session?: string;
  /**
   * Requests of this request's session from this one on, itself included (absent: 1). Lets
   * `--size` / `--limit` count a session's later turns when its first turn is taken, so the set
   * of requests does not depend on the order the simulation produces them in.
   */
  turns?: number;
  /**
   * Closed loop: the session's next turn, given the virtual time at which this request finished
   * (or was rejected or shed); its arrivalMs is that time plus the think time. Undefined (or a
   * call returning undefined) ends the session.
   */
  next?: (doneMs: number) => BenchRequest | undefined;
}

export interface BenchSource {
  /** Short description for reports ("mooncake:path", "workload:shared-prefix"). */
  readonly name: string;
  /** A fresh pass over the requests, lazily produced. */
  open(): Iterable<BenchRequest>;
  /**
   * The same stream not cut at its size: open()'s requests, then more (built-in workloads, which
   * generate without end). A capacity probe at a high rate takes from it to last long enough.
   */
  openUnbounded?(): Iterable<BenchRequest>;
  /** Requests open() yields, a session's turns counted (built-in workloads: their size). */
  readonly size?: number;
  /** The knobs that produced it (workload size, rate, burstiness, seed), for the results JSON. */
  readonly params?: Record<string, number | string>;
  /** Rows skipped as malformed during the most recent pass (loaders with skipBad). */
  readonly skipped: number;
}
