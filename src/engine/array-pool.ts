/**
 * Typed arrays for the engine's requests, by power-of-two length, given back as requests end: a
 * request's block hashes, KV block ids and output tokens live from its arrival (or admission) to
 * its end. Arrays allocated per request, or plain arrays grown by push, would outlive
 * young-generation collections and be copied and promoted; these are allocated once and reused.
 */

type Pooled = Float64Array | Int32Array;

export class ArrayPool<A extends Pooled> {
  /** free[k]: arrays of length 2^k. */
  private readonly free: A[][] = [];
  /** Arrays kept per length at most: what a burst of ended requests gives back beyond it is dropped. */
  private static readonly KEEP = 256;

  constructor(private readonly make: (length: number) => A) {}

  /** An array of at least `n` entries (its contents are not cleared). */
  take(n: number): A {
    const k = Math.max(4, 32 - Math.clz32(Math.max(1, n) - 1));
    const a = this.free[k]?.pop();
    return a ?? this.make(2 ** k);
  }

  /** An array of at least `n` entries holding `a`'s first `used`; `a` is given back. */
  grow(a: A, used: number, n: number): A {
    const b = this.take(Math.max(n, 2 * a.length));
    if (used === a.length) b.set(a);
    else b.set(a.subarray(0, used));
    this.give(a);
    return b;
  }

  give(a: A): void {
    if (a.length === 0) return;
    const k = 31 - Math.clz32(a.length);
    const list = (this.free[k] ??= []);
    if (list.length < ArrayPool.KEEP) list.push(a);
  }
}

/** The hashes of a request that has none (caching off, or ended). */
export const EMPTY_HASHES: Float64Array = new Float64Array(0);

const NO_IDS: Int32Array = new Int32Array(0);

/**
 * Ids of a request kept in order, `ids[0 … length)` (its KV blocks, its output tokens), in an
 * array of the engine's pool, given back (release) when the request lets go of them.
 */
export class IdList {
  ids: Int32Array = NO_IDS;
  length = 0;

  constructor(private readonly pool: ArrayPool<Int32Array>) {}

  /** Room for `n` more ids without growing. */
  reserve(n: number): void {
    if (this.length + n > this.ids.length) this.ids = this.pool.grow(this.ids, this.length, this.length + n);
  }

  push(id: number): void {
    if (this.length === this.ids.length) this.reserve(1);
    this.ids[this.length++] = id;
  }

  /** The ids as a plain array (a copy). */
  toArray(): number[] {
    return Array.from(this.ids.subarray(0, this.length));
  }

  /** Give the array back to the pool: no ids (`keepLength`: none readable, but still counted). */
  release(keepLength = false): void {
    this.pool.give(this.ids);
    this.ids = NO_IDS;
    if (!keepLength) this.length = 0;
  }
}
