/**
 * Prefill/decode disaggregation's Prometheus series, registered on the gateway's registry:
 *
 *   kvgate_disagg_decisions_total{model,mode,reason}    the decider's choices (mode disaggregated or
 *                                                       local; reason: scheduler/disagg/decider.ts,
 *                                                       or `request` for a request the two-step
 *                                                       relay does not take: not chat or completions,
 *                                                       several prompts or samples, prompt logprobs)
 *   kvgate_disagg_prefills_total{model,outcome}         prefill calls: ok, error, no_kv_params
 *                                                       (the worker answered without
 *                                                       kv_transfer_params: no KV connector), cancelled
 *   kvgate_disagg_fallbacks_total{model,reason}         disaggregated requests prefilled on their decode
 *                                                       worker after all: prefill_failed (every prefill
 *                                                       attempt failed), decode_retry (the decode worker
 *                                                       failed before its first byte; retried elsewhere)
 *   kvgate_disagg_transfer_tokens{model}                histogram: prompt tokens whose KV a prefill
 *                                                       worker handed over (its answer's prompt_tokens)
 *   kvgate_disagg_transfer_blocks{model}                histogram: KV blocks handed over (remote_block_ids)
 *   kvgate_disagg_prefill_seconds{model}                histogram: the prefill call, dispatch to answer
 *   kvgate_disagg_prefill_to_first_token_seconds{model} histogram: from the prefill's answer to the
 *                                                       decode worker's first streamed token (the KV
 *                                                       transfer and the decode worker's queue)
 */
import { Counter, Histogram, type Registry } from 'prom-client';

export class DisaggMetrics {
  readonly decisions: Counter<'model' | 'mode' | 'reason'>;
  readonly prefills: Counter<'model' | 'outcome'>;
  readonly fallbacks: Counter<'model' | 'reason'>;
  readonly transferTokens: Histogram<'model'>;
  readonly transferBlocks: Histogram<'model'>;
  readonly prefillSeconds: Histogram<'model'>;
  readonly prefillToFirstToken: Histogram<'model'>;

  constructor(registry: Registry) {
    const registers = [registry];
    this.decisions = new Counter({ name: 'kvgate_disagg_decisions_total', help: 'Requests of disaggregated models by the decider\'s choice (disaggregated or local) and its reason', labelNames: ['model', 'mode', 'reason'], registers });
    this.prefills = new Counter({ name: 'kvgate_disagg_prefills_total', help: 'Calls to prefill workers by outcome (ok, error, no_kv_params, cancelled)', labelNames: ['model', 'outcome'], registers });
    this.fallbacks = new Counter({ name: 'kvgate_disagg_fallbacks_total', help: 'Disaggregated requests prefilled on their decode worker after all (prefill_failed, decode_retry)', labelNames: ['model', 'reason'], registers });
    const sizes = [16, 64, 256, 1024, 4096, 16_384, 65_536, 262_144];
    this.transferTokens = new Histogram({ name: 'kvgate_disagg_transfer_tokens', help: 'Prompt tokens whose KV a prefill worker handed to a decode worker', labelNames: ['model'], buckets: sizes, registers });
    this.transferBlocks = new Histogram({ name: 'kvgate_disagg_transfer_blocks', help: 'KV blocks a prefill worker handed to a decode worker (remote_block_ids)', labelNames: ['model'], buckets: sizes.map((s) => s / 16), registers });
    const seconds = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
    this.prefillSeconds = new Histogram({ name: 'kvgate_disagg_prefill_seconds', help: 'Prefill calls, from dispatch to the prefill worker\'s answer', labelNames: ['model'], buckets: seconds, registers });
    this.prefillToFirstToken = new Histogram({
      name: 'kvgate_disagg_prefill_to_first_token_seconds',
      help: 'From a prefill worker\'s answer to the decode worker\'s first streamed token (KV transfer and decode queue)',
      labelNames: ['model'],
      buckets: seconds,
      registers,
    });
  }
}
