/**
 * A fixed-size log-linear histogram of non-negative samples with weights, for latency
 * distributions that must not grow with the number of samples (inter-token gaps: one sample per
 * engine step, hundreds of millions in a day-long replay).
 *
 * Layout (as HdrHistogram's, on the float's own bits): each power of two [2^e, 2^(e+1)) is split
 * into 2^SUB_BITS equal sub-buckets, read straight from the top SUB_BITS bits of the IEEE-754
 * mantissa, for exponents e in [EXP_MIN, EXP_MAX]; zero (and anything at or below 2^EXP_MIN) has
 * a bucket of its own, anything at or above 2^(EXP_MAX+1) is clamped into the last bucket.
 *
 * Resolution: a sub-bucket is 2^-SUB_BITS = 1/1024 of its lower bound wide, and a percentile reads
 * its bucket's midpoint, so each order statistic is within 2^-(SUB_BITS+1) ≈ 0.049% of the exact
 * one (relative), and so is a percentile interpolated between two of them. The exact minimum,
 * maximum, sum and total weight are kept beside the buckets: p0, p100 and the mean are exact.
 * Size: (EXP_MAX − EXP_MIN + 1) · 1024 buckets of 8 bytes, 472 KiB, whatever the sample count.
 */

const SUB_BITS = 10;
const SUB = 1 << SUB_BITS;
/** 2^-20 ms ≈ 1 ns: below this a latency is taken as 0. */
const EXP_MIN = -20;
/** 2^38 ms ≈ 8.7 years of virtual time. */
const EXP_MAX = 38;
const BUCKETS = (EXP_MAX - EXP_MIN + 1) * SUB;
/** Largest relative error of a percentile read from the histogram. */
export const HISTOGRAM_RELATIVE_ERROR = 2 ** -(SUB_BITS + 1);

const f64 = new Float64Array(1);
const u32 = new Uint32Array(f64.buffer);
// The high word of a little-endian double holds the sign, exponent and top 20 mantissa bits.
const HI = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1 ? 1 : 0;

/** Bucket of v > 2^EXP_MIN: (exponent − EXP_MIN) · SUB + top SUB_BITS of the mantissa. */
function bucketOf(v: number): number {
  f64[0] = v;
  const hi = u32[HI]!;
  const e = ((hi >>> 20) & 0x7ff) - 1023;
  if (e > EXP_MAX) return BUCKETS - 1;
  return (e - EXP_MIN) * SUB + ((hi >>> (20 - SUB_BITS)) & (SUB - 1));
}

/** Midpoint of bucket b. */
function midpointOf(b: number): number {
  const e = Math.floor(b / SUB) + EXP_MIN;
  const m = b % SUB;
  return 2 ** e * (1 + (m + 0.5) / SUB);
}

export class LatencyHistogram {
  private readonly counts = new Float64Array(BUCKETS);
  /** Weight of the samples at or below 2^EXP_MIN (read as 0). */
  private zeros = 0;
  total = 0;
  sum = 0;
  min = Infinity;
  max = -Infinity;

  /** Record `v` (≥ 0), counted `weight` times. */
  add(v: number, weight = 1): void {
    if (!(weight > 0)) return;
    this.total += weight;
    this.sum += v * weight;
    if (v < this.min) this.min = v;
    if (v > this.max) this.max = v;
    if (v <= 2 ** EXP_MIN) this.zeros += weight;
    else this.counts[bucketOf(v)]! += weight;
  }

  /** Add every sample of `other`. */
  merge(other: LatencyHistogram): void {
    if (other.total === 0) return;
    for (let i = 0; i < BUCKETS; i++) this.counts[i]! += other.counts[i]!;
    this.zeros += other.zeros;
    this.total += other.total;
    this.sum += other.sum;
    if (other.min < this.min) this.min = other.min;
    if (other.max > this.max) this.max = other.max;
  }

  /** Mean of the samples (exact), null when empty. */
  mean(): number | null {
    return this.total > 0 ? this.sum / this.total : null;
  }

  /**
   * Percentiles `ps` (0–100), interpolated as numpy's default does between the order statistics
   * of the samples expanded by weight (each read as its bucket's midpoint, within [min, max]);
   * null when empty. One pass over the buckets for all of them.
   */
  percentiles(ps: readonly number[]): (number | null)[] {
    if (this.total === 0) return ps.map(() => null);
    // The ranks to read, in increasing order, each once.
    const ranks: number[] = [];
    for (const p of ps) {
      const pos = (p / 100) * (this.total - 1);
      const lo = Math.floor(pos);
      ranks.push(lo, Math.min(lo + 1, this.total - 1));
    }
    const order = ranks.map((r, i) => [r, i] as const).sort((a, b) => a[0] - b[0]);
    const at = new Array<number>(ranks.length);
    let cum = this.zeros;
    let b = -1;
    for (const [r, i] of order) {
      if (r < this.zeros) {
        at[i] = Math.max(0, this.min);
        continue;
      }
      while (cum <= r && b < BUCKETS - 1) cum += this.counts[++b]!;
      at[i] = Math.min(this.max, Math.max(this.min, midpointOf(b)));
    }
    // The extremes are kept exactly.
    return ps.map((p, k) => {
      if (p <= 0) return this.min;
      if (p >= 100) return this.max;
      const pos = (p / 100) * (this.total - 1);
      const a = at[2 * k]!;
      const c = at[2 * k + 1]!;
      return a + (c - a) * (pos - Math.floor(pos));
    });
  }
}
