/**
 * Outcomes (ok / failed) over a sliding time window, counted in a ring of buckets: constant work
 * and memory per outcome whatever the request rate, where a list of every outcome in a 30 s
 * window grows with the traffic and costs a shift per request to prune. The window slides a
 * bucket at a time (windowMs / buckets), so an outcome leaves it between windowMs − one bucket
 * and windowMs after it was recorded.
 */
export class OutcomeWindow {
  private readonly bucketMs: number;
  /** Bucket number (time / bucketMs) each slot counts, or -1 when unused. */
  private readonly epoch: Float64Array;
  private readonly total: Uint32Array;
  private readonly failed: Uint32Array;

  constructor(
    windowMs: number,
    private readonly buckets = 10,
  ) {
    this.bucketMs = windowMs / buckets;
    this.epoch = new Float64Array(buckets).fill(-1);
    this.total = new Uint32Array(buckets);
    this.failed = new Uint32Array(buckets);
  }

  record(now: number, failed: boolean): void {
    const e = Math.floor(now / this.bucketMs);
    const i = e % this.buckets;
    if (this.epoch[i] !== e) {
      this.epoch[i] = e;
      this.total[i] = 0;
      this.failed[i] = 0;
    }
    this.total[i]!++;
    if (failed) this.failed[i]!++;
  }

  /** Forget every outcome. */
  clear(): void {
    this.epoch.fill(-1);
    this.total.fill(0);
    this.failed.fill(0);
  }

  /** Outcomes and failures in the window ending at `now`. */
  counts(now: number): { total: number; failed: number } {
    const oldest = Math.floor(now / this.bucketMs) - this.buckets + 1;
    let total = 0;
    let failed = 0;
    for (let i = 0; i < this.buckets; i++) {
      const e = this.epoch[i]!;
      if (e >= 0 && e >= oldest) {
        total += this.total[i]!;
        failed += this.failed[i]!;
      }
    }
    return { total, failed };
  }
}
