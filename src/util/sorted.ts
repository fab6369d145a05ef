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
