/**
 * How long a prompt's KV takes over a link: a fixed latency per transfer plus the bytes at the
 * link's bandwidth. The one formula of the simulation's link model (src/engine/kv-link.ts) and of
 * the live disaggregation decider (src/gateway/pipeline/disagg-stage.ts), kept here because the
 * live path does not load the engine model.
 */

/** Time to move `bytes` over a link of `bytesPerSecond` and `latencyMs` per transfer, ms; nothing for 0 bytes. */
export function linkTransferMs(bytes: number, bytesPerSecond: number, latencyMs: number): number {
  if (bytes === 0) return 0;
  return latencyMs + (bytes / bytesPerSecond) * 1000;
}
