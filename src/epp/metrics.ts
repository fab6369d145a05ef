/** The EPP's own Prometheus series, beside the gateway's in the same registry (served on epp.metricsPort). */
import { Counter, Histogram, type Registry } from 'prom-client';

export interface EppMetrics {
  /** ext_proc streams by how they ended: picked, immediate, cancelled, protocol_error, no_body. */
  streams: Counter<'outcome'>;
  /** From the request's last body chunk (or its headers, with no body) to the header response, seconds. */
  decisionSeconds: Histogram;
  /** ImmediateResponses by status and dropped reason (cache hits: reason `cache-hit`). */
  immediate: Counter<'status' | 'reason'>;
  /** Responses the proxy says another endpoint served than the one picked. */
  servedElsewhere: Counter;
}

export function createEppMetrics(registry: Registry): EppMetrics {
  const registers = [registry];
  return {
    streams: new Counter({ name: 'kvgate_epp_streams_total', help: 'ext_proc streams by how they ended', labelNames: ['outcome'], registers }),
    decisionSeconds: new Histogram({
      name: 'kvgate_epp_decision_seconds',
      help: "Time from a request's last body chunk to kvgate's header response (the pick), seconds",
      // Fine below a millisecond, where a decision should land (the bench reads its percentiles off these).
      buckets: [0.000025, 0.00005, 0.000075, 0.0001, 0.00015, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.0025, 0.005, 0.01, 0.05, 0.25, 1],
      registers,
    }),
    immediate: new Counter({ name: 'kvgate_epp_immediate_responses_total', help: 'Requests answered with an ImmediateResponse, by status and reason', labelNames: ['status', 'reason'], registers }),
    servedElsewhere: new Counter({ name: 'kvgate_epp_served_elsewhere_total', help: 'Responses served by another endpoint than the one picked (the proxy retried)', registers }),
  };
}
