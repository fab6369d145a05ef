/**
 * KV pressure: how full a model's fleet is, as best the gateway knows at this instant.
 *
 * Per worker, blocks in use = the larger of
 *   - the last scrape's `kv_cache_usage_perc` × capacity, plus the blocks reserved by requests
 *     the gateway dispatched since that scrape (prompt blocks not expected to be cached + output
 *     blocks, reserved by the router at pick time: a burst inside one scrape interval is seen),
 *     less what the requests that ended since held when it was taken
 *     (WorkerState.freeBlocksNow);
 *   - the most blocks the requests the gateway has in flight there will hold at once as they
 *     decode to their ends (its own accounting, which includes the output those requests will
 *     still write, which a scrape cannot show; WorkerState.peakInflightBlocks). Not the sum of
 *     their final sizes: they end at different steps.
 * A stale or missing scrape leaves only the second. The fleet's usage is Σ used / Σ capacity over
 * the workers that can take requests (healthy, circuit closed, not draining), plus blocks of requests admitted
 * but not yet routed (`pendingBlocks`), which no worker has been charged for yet.
 *
 * Plain code over a structural view of the workers (fleet/worker-state.ts's WorkerState meets
 * it), with the time passed in: the gateway and the fleet simulation share it.
 */

/** What admission reads of a worker (WorkerState has these). */
export interface KvWorkerView {
  /** Healthy, circuit closed, not draining. */
  readonly routable: boolean;
  readonly numGpuBlocks: number;
  readonly blockSize: number;
  /** The most blocks the requests in flight at the worker will hold at once (see above). */
  peakInflightBlocks(now: number): number;
  /** Uncached prompt tokens of the requests in flight there that have no first token yet. */
  readonly inflightPrefillTokens: number;
  /**
   * Capacity minus (scraped usage + reservations since the scrape − what ended since held at it);
   * capacity minus in-flight reservations when stale.
   */
  freeBlocksNow(now: number, staleAfterMs: number): number;
  /** Requests the gateway has in flight there, by id. */
  readonly inflight: { has(id: string): boolean };
  /** Recent milliseconds per output token of the answers decoding there, if known (fleet/decode-pace.ts). */
  recentTpotMs(now: number): number | undefined;
}

export interface FleetKv {
  /** Σ capacity of the routable workers, blocks. */
  totalBlocks: number;
  /** Σ estimated used blocks of the routable workers. */
  usedBlocks: number;
  /** The largest estimated free space on one routable worker, blocks. */
  maxFreeBlocks: number;
  /** Routable workers. */
  workers: number;
  /** Block size of the first routable worker (blocks are counted in it). */
  blockSize: number;
}

export function workerUsedBlocks(w: KvWorkerView, now: number, staleAfterMs: number): number {
  return usedBlocks(w.numGpuBlocks, w.freeBlocksNow(now, staleAfterMs), w.peakInflightBlocks(now));
}

/**
 * Blocks in use at a worker of `total` blocks, as above: the larger of what its free blocks leave
 * (scraped, or exact in the simulation's oracle) and the gateway's in-flight reservations there.
 * The kvgate policy's preemption term reads it with the sum of the reservations (inflightBlocks),
 * the upper bound its weight was set against.
 */
export function usedBlocks(total: number, freeBlocks: number, inflightBlocks: number): number {
  return Math.min(total, Math.max(total - freeBlocks, inflightBlocks));
}

export function fleetKv(workers: readonly KvWorkerView[], now: number, staleAfterMs: number): FleetKv {
  let total = 0;
  let used = 0;
  let maxFree = 0;
  let n = 0;
  let blockSize = 16;
  for (const w of workers) {
    if (!w.routable) continue;
    if (n === 0) blockSize = w.blockSize;
    n++;
    const cap = w.numGpuBlocks;
    const u = workerUsedBlocks(w, now, staleAfterMs);
    total += cap;
    used += u;
    if (cap - u > maxFree) maxFree = cap - u;
  }
  return { totalBlocks: total, usedBlocks: used, maxFreeBlocks: maxFree, workers: n, blockSize };
}

/**
 * Blocks a request will hold: its prompt (less what is expected cached) plus its reserved output,
 * `outputTokens` for each of its `sequences` (a batch's prompts × n, each writing its own).
 */
export function requestBlocks(promptTokens: number, cachedTokens: number, outputTokens: number, blockSize: number, sequences = 1): number {
  const uncached = Math.max(0, promptTokens - cachedTokens);
  return Math.ceil(uncached / blockSize) + sequences * Math.ceil(outputTokens / blockSize);
}
