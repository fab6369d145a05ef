/** Ascending arrays of numbers: binary search, insert and remove in place. */

/** The first index whose value is ≥ x (a.length if none). */
export function lowerBound(a: readonly number[], x: number): number {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid]! < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The first index whose value is > x (a.length if none). */
export function upperBound(a: readonly number[], x: number): number {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid]! <= x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** How many values lie in [lo, hi). */
export function countInRange(a: readonly number[], lo: number, hi: number): number {
  return hi > lo ? lowerBound(a, hi) - lowerBound(a, lo) : 0;
}

/** Insert x, keeping the order. */
export function insertSorted(a: number[], x: number): void {
  a.splice(lowerBound(a, x), 0, x);
}

/** Remove one occurrence of x; false if there is none. */
export function removeSorted(a: number[], x: number): boolean {
  const i = lowerBound(a, x);
  if (i >= a.length || a[i] !== x) return false;
  a.splice(i, 1);
  return true;
}

/**
 * The last `capacity` values pushed, kept both in arrival order (a ring: the oldest is replaced)
 * and ascending, so counts in a range and quantiles are binary searches.
 */
export class RecentWindow {
  /** The values, ascending. */
  readonly sorted: number[] = [];
  private readonly ring: number[] = [];
  private next = 0;

  constructor(readonly capacity: number) {}

  get size(): number {
    return this.ring.length;
  }

  push(x: number): void {
    if (this.ring.length < this.capacity) this.ring.push(x);
    else {
      removeSorted(this.sorted, this.ring[this.next]!);
      this.ring[this.next] = x;
      this.next = (this.next + 1) % this.capacity;
    }
    insertSorted(this.sorted, x);
  }

  /** The value at quantile q (0: the least, 1: the greatest; the nearest rank), NaN when empty. */
  quantile(q: number): number {
    const n = this.sorted.length;
    if (n === 0) return NaN;
    return this.sorted[Math.min(n - 1, Math.max(0, Math.ceil(q * n) - 1))]!;
  }
}
