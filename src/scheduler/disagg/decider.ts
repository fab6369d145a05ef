/**
 * The disaggregation decider: per request, prefill on a prefill worker and decode on a decode
 * worker ('disaggregated'), or do both on the decode worker ('local'). Pure: plain numbers in, a
 * choice and its reason out; the estimates come from select.ts.
 *
 * As llm-d's `prefix-based-pd-decider` (llm-d/llm-d-router
 * `pkg/epp/framework/plugins/scheduling/profilehandler/disagg/prefix_based_pd_decider.go`):
 * disaggregate when the prompt's tokens not cached on the chosen decode worker are at least
 * `nonCachedTokens`, optionally only for prompts of at least `minPromptTokens` (its `promptTokens`).
 * llm-d's own default threshold is 0, which disables the decider; its sample P/D configs
 * (`deploy/config/pd-epp-config.yaml`) set 16 and its README's example 512. kvgate's default is
 * 512: a suffix shorter than that costs the decode worker little to prefill itself, less than a
 * round trip to a prefill worker and a KV transfer.
 *
 * Unlike llm-d's, this decider is queue-aware: it does not send a prompt to a saturated prefill
 * pool (the best prefill worker has at least `saturatedQueueMs` of prefill queued ahead) when the
 * decode worker would have the prompt's KV sooner by prefilling it itself. A busy but unsaturated
 * prefill pool still gets the work: keeping long prefills out of the decode batch is the point of
 * disaggregation, worth a little extra time to first token.
 */

export type DisaggMode = 'disaggregated' | 'local';

/**
 * Why: `uncached` (disaggregated: the uncached suffix is long enough), `disabled` (threshold 0),
 * `short-prompt` (below minPromptTokens), `cached` (the decode worker has enough of the prompt),
 * `no-prefill-worker` (none can take it now), `prefill-saturated` (the decode worker is sooner).
 * The values label the decider's metric.
 */
export type DisaggReason = 'uncached' | 'disabled' | 'short-prompt' | 'cached' | 'no-prefill-worker' | 'prefill-saturated';

export const DISAGG_REASONS: readonly DisaggReason[] = ['uncached', 'disabled', 'short-prompt', 'cached', 'no-prefill-worker', 'prefill-saturated'];

export interface DeciderOptions {
  /** Uncached prompt tokens (on the decode candidate) from which a request is disaggregated; 0: never. */
  nonCachedTokens: number;
  /** Prompts shorter than this are never disaggregated; 0: no such gate. */
  minPromptTokens: number;
  /** Prefill queued ahead on the best prefill worker, ms, from which the prefill pool counts as saturated. */
  saturatedQueueMs: number;
}

/** What the prefill pool's best candidate offers this request. */
export interface PrefillEstimate {
  /** Prefill already queued ahead of this request there, ms. */
  queueMs: number;
  /** This prompt's own prefill there (its uncached tokens on that worker), ms. */
  prefillMs: number;
  /** Moving the prompt's KV to the decode worker, ms. */
  transferMs: number;
}

export interface DeciderInput {
  /** The prompt's length, tokens. */
  promptTokens: number;
  /** Of those, the tokens the best decode candidate does not have cached. */
  decodeUncachedTokens: number;
  /** When the decode candidate would have the prompt's KV by prefilling it itself: its queue ahead plus the uncached tokens, ms. */
  decodeLocalPrefillMs: number;
  /** The prefill pool's best candidate, or null when no prefill worker can take the request now. */
  prefill: PrefillEstimate | null;
}

export interface DisaggDecision {
  mode: DisaggMode;
  reason: DisaggReason;
}

/** Disaggregate or not, and why. */
export function decide(input: DeciderInput, o: DeciderOptions): DisaggDecision {
  if (o.nonCachedTokens <= 0) return { mode: 'local', reason: 'disabled' };
  if (o.minPromptTokens > 0 && input.promptTokens < o.minPromptTokens) return { mode: 'local', reason: 'short-prompt' };
  if (input.decodeUncachedTokens < o.nonCachedTokens) return { mode: 'local', reason: 'cached' };
  const p = input.prefill;
  if (p === null) return { mode: 'local', reason: 'no-prefill-worker' };
  if (p.queueMs >= o.saturatedQueueMs && input.decodeLocalPrefillMs < p.queueMs + p.prefillMs + p.transferMs) {
    return { mode: 'local', reason: 'prefill-saturated' };
  }
  return { mode: 'disaggregated', reason: 'uncached' };
}
