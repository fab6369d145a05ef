/**
 * The cascade's Prometheus series, registered on the gateway's registry:
 *
 *   kvgate_spec_requests_total{model,path,reason}   requests of a cascade model, by the path they
 *                                                   took: cascade, or plain (and why)
 *   kvgate_spec_rounds_total{model}                 draft→verify rounds
 *   kvgate_spec_rounds_per_request{model}           histogram
 *   kvgate_spec_k{model}                            histogram of the k chosen per round
 *   kvgate_spec_draft_tokens_total{model,class}     draft tokens proposed
 *   kvgate_spec_accepted_tokens_total{model,class}  draft tokens accepted
 *   kvgate_spec_acceptance_rate{model,class}        gauge: the controller's estimate of α, the
 *                                                   per-token acceptance probability (see
 *                                                   acceptance.ts: not accepted/proposed)
 *   kvgate_spec_tokens_total{model,source}          tokens served to clients, source=draft (an
 *                                                   accepted draft token) or target (correction,
 *                                                   bonus, or target-only continuation)
 *   kvgate_spec_fallbacks_total{model,reason}       requests that left the cascade mid-way
 *                                                   (draft_error: continued on the target alone;
 *                                                   draft_timeout: the same after a draft call
 *                                                   missed its deadline; draft_suspected: the same
 *                                                   because another request found the draft worker
 *                                                   hung; target_error: restarted on the plain path
 *                                                   before any byte, or ended with an error event)
 *   kvgate_spec_draft_timeouts_total{model,worker}  draft calls that missed their deadline
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { AcceptanceTracker } from './acceptance.js';

export class SpecMetrics {
  readonly requests: Counter<'model' | 'path' | 'reason'>;
  readonly rounds: Counter<'model'>;
  readonly roundsPerRequest: Histogram<'model'>;
  readonly k: Histogram<'model'>;
  readonly draftTokens: Counter<'model' | 'class'>;
  readonly acceptedTokens: Counter<'model' | 'class'>;
  readonly tokens: Counter<'model' | 'source'>;
  readonly fallbacks: Counter<'model' | 'reason'>;
  readonly draftTimeouts: Counter<'model' | 'worker'>;

  constructor(registry: Registry, tracker: AcceptanceTracker) {
    const registers = [registry];
    this.requests = new Counter({ name: 'kvgate_spec_requests_total', help: 'Requests of cascade models by path taken (cascade or plain) and reason', labelNames: ['model', 'path', 'reason'], registers });
    this.rounds = new Counter({ name: 'kvgate_spec_rounds_total', help: 'Cascade rounds (one draft call and one verification each)', labelNames: ['model'], registers });
    this.roundsPerRequest = new Histogram({
      name: 'kvgate_spec_rounds_per_request',
      help: 'Cascade rounds per request',
      labelNames: ['model'],
      buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
      registers,
    });
    this.k = new Histogram({ name: 'kvgate_spec_k', help: 'Draft tokens asked for per round (k)', labelNames: ['model'], buckets: [0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16], registers });
    this.draftTokens = new Counter({ name: 'kvgate_spec_draft_tokens_total', help: 'Draft tokens proposed', labelNames: ['model', 'class'], registers });
    this.acceptedTokens = new Counter({ name: 'kvgate_spec_accepted_tokens_total', help: 'Draft tokens accepted by verification', labelNames: ['model', 'class'], registers });
    this.tokens = new Counter({ name: 'kvgate_spec_tokens_total', help: 'Tokens served by cascades, by who produced them (draft: accepted draft token; target: correction, bonus or target-only)', labelNames: ['model', 'source'], registers });
    this.fallbacks = new Counter({ name: 'kvgate_spec_fallbacks_total', help: 'Cascade requests that left the cascade mid-way, by reason', labelNames: ['model', 'reason'], registers });
    this.draftTimeouts = new Counter({ name: 'kvgate_spec_draft_timeouts_total', help: 'Draft calls that missed their deadline (the request went on without the draft; the worker was suspected hung)', labelNames: ['model', 'worker'], registers });
    new Gauge({
      name: 'kvgate_spec_acceptance_rate',
      help: 'Estimated per-token acceptance probability of draft tokens (alpha), by model and prompt class',
      labelNames: ['model', 'class'],
      registers,
      collect() {
        this.reset();
        for (const e of tracker.entries()) this.labels(e.model, e.cls).set(e.alpha);
      },
    });
  }
}
