/**
 * Speed classes: which workers share what a policy learns of their speed.
 *
 * The kvgate policy learns prefill and decode speed per speed class (WorkerState.speedClass), not
 * per worker (see scheduler/policies/kvgate/learners/prefill-rate.ts for why). A worker that declares its `hardware` is in
 * its pool's class for that label. An unlabelled pool used to be one class, and a pool of two GPU
 * kinds was then learned as one speed: its slower workers were sent more than they could serve
 * (4 H100s and 4 A10Gs, shared-prefix, seed 83: 0.27× llm-d-precise's capacity at the SLO).
 *
 * Workers of one kind running one model report the same KV capacity (vLLM's num_gpu_blocks), so
 * an unlabelled pool is split by it: its workers' capacities are sorted and cut wherever one is
 * more than CAPACITY_RATIO above the smallest of its band, each band a class of its own. A pool
 * whose capacities all fall in one band stays one class, keyed by the pool as before. Two kinds
 * with the same memory (an A100 80 GB and an H100) report alike and stay together: only a label
 * tells those apart, and a label naming a known GPU also gives its speed before any is learned.
 * One kind with two memory settings becomes two classes that learn the same speed, each from its
 * own answers.
 *
 * The operator is told once per pool that is split, and once per labelled class whose workers'
 * capacities are far apart (a label that may be wrong).
 */
import type { WorkerState } from './worker-state.js';

/** Capacities further apart than this ratio are taken for different hardware. */
export const CAPACITY_RATIO = 1.25;

type Warn = (fields: Record<string, unknown>, msg: string) => void;

interface Extreme {
  worker: string;
  numGpuBlocks: number;
}

export class SpeedClasses {
  /** The capacity each worker was last classed by (undefined: none known). */
  private readonly classedBy = new WeakMap<WorkerState, number | undefined>();
  /** The fleet's size when each pool was last classed (a reload that removes a worker changes it). */
  private readonly fleetSizeAt = new Map<string, number>();
  private readonly warned = new Set<string>();

  constructor(private readonly warn: Warn = () => {}) {}

  /**
   * After a scrape of `w`: re-derive its pool's classes if its KV capacity is not the one it was
   * classed by, or the fleet changed size since. Nothing to do, and no allocation, otherwise.
   */
  update(w: WorkerState, workers: readonly WorkerState[]): void {
    const blocks = w.knownGpuBlocks;
    if (this.classedBy.has(w) && this.classedBy.get(w) === blocks && this.fleetSizeAt.get(w.pool) === workers.length) return;
    this.assign(w.pool, workers);
  }

  /** Set the speed class of every worker of `pool` in `workers`. */
  assign(pool: string, workers: readonly WorkerState[]): void {
    const bands: Array<{ min: number; members: WorkerState[] }> = [];
    const labelled = new Map<string, WorkerState[]>();
    const sized: WorkerState[] = [];
    this.fleetSizeAt.set(pool, workers.length);
    for (const w of workers) {
      if (w.pool !== pool || w.retired) continue;
      this.classedBy.set(w, w.knownGpuBlocks);
      if (w.hardware !== null) {
        const same = labelled.get(w.hardware);
        if (same) same.push(w);
        else labelled.set(w.hardware, [w]);
      } else if (w.knownGpuBlocks === undefined) w.speedClass = pool;
      else sized.push(w);
    }
    sized.sort((a, b) => a.knownGpuBlocks! - b.knownGpuBlocks!);
    for (const w of sized) {
      const last = bands.at(-1);
      if (last !== undefined && w.knownGpuBlocks! <= CAPACITY_RATIO * last.min) last.members.push(w);
      else bands.push({ min: w.knownGpuBlocks!, members: [w] });
    }
    for (const band of bands) {
      for (const w of band.members) w.speedClass = bands.length === 1 ? pool : `${pool}\u0001${band.min}`;
    }
    if (bands.length > 1 && !this.warned.has(pool)) {
      this.warned.add(pool);
      this.warn(
        { pool, ...extremes(sized), classes: bands.map((b) => ({ numGpuBlocks: b.min, workers: b.members.map((w) => w.id) })) },
        "workers of one pool report KV capacities far apart: the kvgate policy learns each capacity's speed separately; if they run on different GPUs, set each one's `hardware` (a known GPU's name also gives its speed before any is learned)",
      );
    }
    for (const [hardware, same] of labelled) {
      const key = same[0]!.speedClass;
      const sizedSame = same.filter((w) => w.knownGpuBlocks !== undefined);
      const e = extremes(sizedSame);
      if (this.warned.has(key) || e === null || e.largest.numGpuBlocks <= CAPACITY_RATIO * e.smallest.numGpuBlocks) continue;
      this.warned.add(key);
      this.warn(
        { pool, hardware, ...e },
        'workers declaring the same `hardware` report KV capacities far apart: if they run on different GPUs, give each kind its own label',
      );
    }
  }
}

function extremes(workers: readonly WorkerState[]): { smallest: Extreme; largest: Extreme } | null {
  let smallest: Extreme | null = null;
  let largest: Extreme | null = null;
  for (const w of workers) {
    const blocks = w.knownGpuBlocks!;
    if (smallest === null || blocks < smallest.numGpuBlocks) smallest = { worker: w.id, numGpuBlocks: blocks };
    if (largest === null || blocks > largest.numGpuBlocks) largest = { worker: w.id, numGpuBlocks: blocks };
  }
  return smallest === null || largest === null ? null : { smallest, largest };
}

/** A speed class as /admin/workers shows it: `main`, `main · h100`, `main · 30000 blocks`. */
export function describeSpeedClass(key: string): string {
  const labelled = key.indexOf('\u0000');
  if (labelled >= 0) return `${key.slice(0, labelled)} · ${key.slice(labelled + 1)}`;
  const sized = key.indexOf('\u0001');
  return sized >= 0 ? `${key.slice(0, sized)} · ${key.slice(sized + 1)} blocks` : key;
}
