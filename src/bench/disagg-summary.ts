/**
 * A disaggregated run's own figures (FleetSim's `disagg` result) as the bench's JSON reports them:
 * the decider's choices, the KV moved over the link, and the handoff from prefill to first token.
 */
import type { SimDisaggResult } from '../sim/disagg-sim.js';
import type { DisaggReason } from '../scheduler/disagg/decider.js';

export interface DisaggRunSummary {
  prefill_workers: number;
  decode_workers: number;
  /** Requests whose prefill ran on a prefill worker. */
  disaggregated: number;
  decisions: Record<DisaggReason, number>;
  transfers: number;
  /** KV bytes moved over the link, over all ranks, GB (10^9 bytes). */
  transfer_gb: number;
  transfer_ms: { p50: number | null; p99: number | null; mean: number | null };
  /** From a prefill's end to the decode worker's first token, ms. */
  handoff_ms: { p50: number | null; p99: number | null };
}

const r3 = (x: number | null): number | null => (x === null ? null : Math.round(x * 1000) / 1000);

export function summarizeDisagg(d: SimDisaggResult): DisaggRunSummary {
  const [t50, t99] = d.transferMs.percentiles([50, 99]);
  const [h50, h99] = d.handoffMs.percentiles([50, 99]);
  return {
    prefill_workers: d.prefillWorkers,
    decode_workers: d.decodeWorkers,
    disaggregated: d.disaggregated,
    decisions: { ...d.decisions },
    transfers: d.transfers,
    transfer_gb: Math.round(d.transferBytes / 1e6) / 1000,
    transfer_ms: { p50: r3(t50 ?? null), p99: r3(t99 ?? null), mean: r3(d.transferMs.mean()) },
    handoff_ms: { p50: r3(h50 ?? null), p99: r3(h99 ?? null) },
  };
}
