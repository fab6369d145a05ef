/**
 * Distributions for workload generation, all drawn from a seeded Rng so workloads are
 * reproducible.
 */
import type { Rng } from '../util/rng.js';

export function uniformInt(rng: Rng, lo: number, hi: number): number {
  return lo + Math.floor(rng() * (hi - lo + 1));
}

export function exponential(rng: Rng, mean: number): number {
  return -Math.log(1 - rng()) * mean;
}

function normal(rng: Rng): number {
  // Box–Muller; 1 - u keeps the log argument in (0, 1].
  const u = 1 - rng();
  const v = rng();
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
}

/** Gamma(shape, scale) by Marsaglia–Tsang, with the shape < 1 boost. */
function gamma(rng: Rng, shape: number, scale: number): number {
  if (shape < 1) {
    const u = 1 - rng();
    return gamma(rng, shape + 1, scale) * Math.pow(u, 1 / shape);
  }
  const d = shape - 1 / 3;
  const c = 1 / Math.sqrt(9 * d);
  for (;;) {
    let x: number;
    let v: number;
    do {
      x = normal(rng);
      v = 1 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const u = 1 - rng();
    if (Math.log(u) < 0.5 * x * x + d - d * v + d * Math.log(v)) return d * v * scale;
  }
}

/**
 * Gap to the next arrival for a process of `ratePerSec` requests per second whose gaps are Gamma
 * with shape `burstiness` (1 = Poisson; below 1 = burstier), as vLLM's serving benchmark draws them.
 * Returns milliseconds.
 */
export function arrivalGapMs(rng: Rng, ratePerSec: number, burstiness: number): number {
  const meanMs = 1000 / ratePerSec;
  return gamma(rng, burstiness, meanMs / burstiness);
}

/** Zipf-distributed index in [0, n) with exponent s, by inversion over a precomputed CDF. */
export class Zipf {
  private readonly cdf: Float64Array;
  constructor(n: number, s: number) {
    this.cdf = new Float64Array(n);
    let sum = 0;
    for (let i = 0; i < n; i++) sum += 1 / Math.pow(i + 1, s);
    let acc = 0;
    for (let i = 0; i < n; i++) {
      acc += 1 / Math.pow(i + 1, s) / sum;
      this.cdf[i] = acc;
    }
  }
  sample(rng: Rng): number {
    const u = rng();
    const c = this.cdf;
    let lo = 0;
    let hi = c.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (c[mid]! < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}
