/**
 * Float64Arrays for the engine's requests' block hashes, by power-of-two length, given back as
 * requests end. A request's hashes live from its arrival to its end: arrays allocated per request
 * would outlive young-generation collections and be copied and promoted; these are allocated once
 * and reused.
 */

/** The hashes of a request that has none (caching off, or ended). */
export const EMPTY_HASHES = new Float64Array(0);

export class HashArrays {
  /** free[k]: arrays of length 2^k. */
  private readonly free: Float64Array[][] = [];
  /** Arrays kept per length at most: what a burst of ended requests gives back beyond it is dropped. */
  private static readonly KEEP = 256;

  /** An array of at least `n` entries (its contents are not cleared). */
  take(n: number): Float64Array {
    const k = Math.max(4, 32 - Math.clz32(Math.max(1, n) - 1));
    const a = this.free[k]?.pop();
    return a ?? new Float64Array(2 ** k);
  }

  /** An array of at least `n` entries holding `a`'s first `used`; `a` is given back. */
  grow(a: Float64Array, used: number, n: number): Float64Array {
    const b = this.take(Math.max(n, 2 * a.length));
    b.set(a.subarray(0, used));
    this.give(a);
    return b;
  }

  give(a: Float64Array): void {
    if (a.length === 0) return;
    const k = 31 - Math.clz32(a.length);
    const list = (this.free[k] ??= []);
    if (list.length < HashArrays.KEEP) list.push(a);
  }
}
