/**
 * A pool that mixes hardware without saying so. The kvgate policy learns prefill and decode speed
 * per speed class (WorkerState.speedClass: the pool, or its workers of one declared `hardware`); a
 * pool of two GPU kinds left unlabelled is learned as one, and its slower workers are sent more
 * than they can serve (README, "On mixed fleets"). Workers of one kind running one model report the
 * same KV capacity (vLLM's num_gpu_blocks), so workers of one speed class whose reports differ by
 * more than a quarter are very likely different hardware: the operator is told once per class,
 * naming the workers and their capacities. (Two kinds with the same memory, an A100 80 GB and an
 * H100, report alike; only a label tells those apart.)
 */
import type { WorkerState } from './worker-state.js';

/** Capacities further apart than this ratio are taken for different hardware. */
const CAPACITY_RATIO = 1.25;

export class MixedHardwareHint {
  private readonly warned = new Set<string>();

  constructor(private readonly warn: (fields: Record<string, unknown>, msg: string) => void) {}

  /**
   * After a successful scrape of `w`: if the workers of its speed class that have reported a KV
   * capacity differ by more than CAPACITY_RATIO, warn (once per speed class).
   */
  check(w: WorkerState, workers: readonly WorkerState[]): void {
    if (this.warned.has(w.speedClass) || w.snapshot?.numGpuBlocks === undefined) return;
    let min: { worker: string; numGpuBlocks: number } | null = null;
    let max: { worker: string; numGpuBlocks: number } | null = null;
    for (const o of workers) {
      const blocks = o.snapshot?.numGpuBlocks;
      if (o.speedClass !== w.speedClass || blocks === undefined) continue;
      if (min === null || blocks < min.numGpuBlocks) min = { worker: o.id, numGpuBlocks: blocks };
      if (max === null || blocks > max.numGpuBlocks) max = { worker: o.id, numGpuBlocks: blocks };
    }
    if (min === null || max === null || max.numGpuBlocks <= CAPACITY_RATIO * min.numGpuBlocks) return;
    this.warned.add(w.speedClass);
    this.warn(
      { pool: w.pool, hardware: w.hardware ?? undefined, smallest: min, largest: max },
      "workers of one pool report KV capacities far apart: if they run on different hardware, set each one's `hardware` so the kvgate policy learns each kind's speed",
    );
  }
}
