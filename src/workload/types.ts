/**
 * What a trace loader or a workload generator hands to the fleet simulation: one request, in
 * arrival order. Sources are re-openable so the same trace can be replayed once per policy.
 */

export interface BenchRequest {
  /** Arrival time in ms from the start of the trace (non-decreasing along a source). */
  arrivalMs: number;
  /** Prompt token ids, as the engine will see them (already chat-templated). */
  promptTokens: ArrayLike<number>;
  /** The prompt's text when the source had one; otherwise synthesised from the tokens on demand. */
  promptText?: string;
  /** Output tokens the request generates (the sampler never stops early: ignore_eos). */
  maxTokens: number;
  /**
   * Seed of the request's output tokens (see answerTokens): a workload that quotes an earlier
   * answer in a later prompt knows exactly what the engine generated.
   */
  outputSeed: number;
  tenant?: string;
  priority?: number;
  session?: string;
}

export interface BenchSource {
  /** Short description for reports ("mooncake:path", "workload:shared-prefix"). */
  readonly name: string;
  /** A fresh pass over the requests, lazily produced. */
  open(): Iterable<BenchRequest>;
  /** The knobs that produced it (workload size, rate, burstiness, seed), for the results JSON. */
  readonly params?: Record<string, number | string>;
  /** Rows skipped as malformed during the most recent pass (loaders with skipBad). */
  readonly skipped: number;
}
