/**
 * A series sampled at a fixed interval (a worker's KV usage once a simulated second), kept in
 * bounded memory however long the run: the first `cap` samples as taken; past them, sums of
 * `width` consecutive samples, `width` doubling each time `cap` sums are held. A trace of a
 * hundred days sampled every second is 8.6M samples a worker; what the bench reads of it is the
 * mean, the maximum (both kept exactly, over every sample) and at most a few hundred averaged
 * points for the chart.
 */

/** Samples kept as taken, by default: 18 hours of a run sampled every second, 512 KiB. */
const SAMPLES_KEPT = 1 << 16;

export class SampledSeries {
  /** Samples as taken while `width` is 1; then each entry the sum of `width` samples. */
  private readonly sums: number[] = [];
  private width = 1;
  /** Samples in the last entry (1..width). */
  private lastCount = 0;
  private count = 0;
  private sum = 0;
  private maxValue = 0;

  constructor(private readonly cap = SAMPLES_KEPT) {
    if (!(cap >= 2 && cap % 2 === 0)) throw new Error(`SampledSeries: cap must be even and at least 2, got ${cap}`);
  }

  push(v: number): void {
    this.count++;
    this.sum += v;
    if (v > this.maxValue) this.maxValue = v;
    const sums = this.sums;
    if (sums.length > 0 && this.lastCount < this.width) {
      sums[sums.length - 1]! += v;
      this.lastCount++;
      return;
    }
    // Every entry is full: a new one, after halving the entries if they are at the cap.
    if (sums.length === this.cap) {
      for (let i = 0; i < this.cap / 2; i++) sums[i] = sums[2 * i]! + sums[2 * i + 1]!;
      sums.length = this.cap / 2;
      this.width *= 2;
    }
    sums.push(v);
    this.lastCount = 1;
  }

  /** Samples taken. */
  get length(): number {
    return this.count;
  }

  /** Mean of every sample, 0 when none was taken. */
  get mean(): number {
    return this.count > 0 ? this.sum / this.count : 0;
  }

  /** Largest sample, 0 when none was taken (or none above 0). */
  get max(): number {
    return this.maxValue;
  }

  /**
   * At most `max` points, each the mean of `factor` consecutive samples (the last of fewer),
   * rounded to 4 decimals. While every sample is held, `factor` is the smallest that fits
   * (downsample); past that, the smallest multiple of the entries' width.
   */
  points(max: number): { factor: number; points: number[] } {
    if (this.width === 1) return downsample(this.sums, max);
    const n = this.sums.length;
    const g = Math.max(1, Math.ceil(n / max));
    const points: number[] = [];
    for (let i = 0; i < n; i += g) {
      let s = 0;
      let k = 0;
      for (let j = i; j < Math.min(n, i + g); j++) {
        s += this.sums[j]!;
        k += j === n - 1 ? this.lastCount : this.width;
      }
      points.push(Math.round((s / k) * 10000) / 10000);
    }
    return { factor: g * this.width, points };
  }
}

/** Average consecutive samples so a series has at most `max` points. */
export function downsample(series: readonly number[], max: number): { factor: number; points: number[] } {
  const factor = Math.max(1, Math.ceil(series.length / max));
  const points: number[] = [];
  for (let i = 0; i < series.length; i += factor) {
    let s = 0;
    let k = 0;
    for (let j = i; j < Math.min(series.length, i + factor); j++, k++) s += series[j]!;
    points.push(Math.round((s / k) * 10000) / 10000);
  }
  return { factor, points };
}
