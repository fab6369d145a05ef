/**
 * A map from 53-bit hashes (kv/block-hash.ts) to 53-bit hashes, each entry with a small tag, kept
 * in insertion order (setLast puts a key at the end, moving it there if present), in typed arrays.
 *
 * The KV-event mapper keeps one per worker, from the engine's block hashes to kvgate's, and looks
 * every stored and removed block up in it; the dynamo peer counts each worker's active blocks in
 * one. A JS Map keyed by such hashes boxes each one (they are
 * past the small-integer range) and hashes the box on every lookup; here a lookup is a probe of an
 * Int32Array table (linear probing, at most half full) and a read of the entry's key.
 *
 * Entries live in parallel arrays, linked in insertion order; freed entries are reused. Deletion
 * shifts later keys of the probe run back, so no tombstones build up.
 */
const NONE = -1;

function home(key: number, shift: number): number {
  return Math.imul((key >>> 0) ^ ((key / 4294967296) >>> 0), 0x9e3779b1) >>> shift;
}

export class OrderedMap53 {
  private keys: Float64Array;
  private vals: Float64Array;
  private tags: Uint8Array;
  private prev: Int32Array;
  private next: Int32Array;
  /** Entry + 1 per slot, 0 for an empty slot. */
  private table: Int32Array;
  private tMask: number;
  private tShift: number;
  private head = NONE;
  private tail = NONE;
  /** First free entry (linked through `next`), else NONE. */
  private free = NONE;
  /** Entries ever used: the arrays' high-water mark. */
  private top = 0;
  size = 0;

  constructor(capacity = 1024) {
    let n = 16;
    while (n < capacity) n *= 2;
    this.keys = new Float64Array(n);
    this.vals = new Float64Array(n);
    this.tags = new Uint8Array(n);
    this.prev = new Int32Array(n);
    this.next = new Int32Array(n);
    this.table = new Int32Array(2 * n);
    this.tMask = 2 * n - 1;
    this.tShift = 32 - Math.log2(2 * n);
  }

  /** The entry holding `key`, or NONE. */
  private find(key: number): number {
    const table = this.table;
    for (let i = home(key, this.tShift); ; i = (i + 1) & this.tMask) {
      const t = table[i]!;
      if (t === 0) return NONE;
      if (this.keys[t - 1] === key) return t - 1;
    }
  }

  has(key: number): boolean {
    return this.find(key) !== NONE;
  }

  get(key: number): number | undefined {
    const e = this.find(key);
    return e === NONE ? undefined : this.vals[e];
  }

  /** The key's tag, 0 when absent. */
  tag(key: number): number {
    const e = this.find(key);
    return e === NONE ? 0 : this.tags[e]!;
  }

  /** Change the tag of a key that is present (false if absent); its place in the order stays. */
  setTag(key: number, tag: number): boolean {
    const e = this.find(key);
    if (e === NONE) return false;
    this.tags[e] = tag;
    return true;
  }

  /** Map `key` to `val`, as a Map's set does: a present key keeps its place and its tag. */
  set(key: number, val: number): void {
    const e = this.find(key);
    if (e === NONE) this.setLast(key, val, 0);
    else this.vals[e] = val;
  }

  /** Map `key` to `val` with `tag`, as the newest entry (moved to the end if it was present). */
  setLast(key: number, val: number, tag: number): void {
    let e = this.find(key);
    if (e === NONE) {
      e = this.alloc();
      this.keys[e] = key;
      this.place(e);
      this.size++;
    } else this.unlink(e);
    this.vals[e] = val;
    this.tags[e] = tag;
    this.prev[e] = this.tail;
    this.next[e] = NONE;
    if (this.tail !== NONE) this.next[this.tail] = e;
    else this.head = e;
    this.tail = e;
  }

  delete(key: number): boolean {
    const table = this.table;
    const mask = this.tMask;
    let i = home(key, this.tShift);
    for (; ; i = (i + 1) & mask) {
      const t = table[i]!;
      if (t === 0) return false;
      if (this.keys[t - 1] === key) break;
    }
    const e = table[i]! - 1;
    // Backward-shift deletion: move each later key of the run into the hole unless its home lies
    // cyclically in (hole, j].
    let hole = i;
    for (let j = (i + 1) & mask; table[j] !== 0; j = (j + 1) & mask) {
      const h = home(this.keys[table[j]! - 1]!, this.tShift);
      if (hole <= j ? h <= hole || h > j : h <= hole && h > j) {
        table[hole] = table[j]!;
        hole = j;
      }
    }
    table[hole] = 0;
    this.unlink(e);
    this.next[e] = this.free;
    this.free = e;
    this.size--;
    return true;
  }

  /** The oldest key, or undefined when empty. */
  oldestKey(): number | undefined {
    return this.head === NONE ? undefined : this.keys[this.head];
  }

  /** Every key, oldest first (the map must not change while they are read). */
  *keysInOrder(): IterableIterator<number> {
    for (let e = this.head; e !== NONE; e = this.next[e]!) yield this.keys[e]!;
  }

  clear(): void {
    this.table.fill(0);
    this.head = this.tail = this.free = NONE;
    this.top = 0;
    this.size = 0;
  }

  private unlink(e: number): void {
    const p = this.prev[e]!;
    const n = this.next[e]!;
    if (p !== NONE) this.next[p] = n;
    else this.head = n;
    if (n !== NONE) this.prev[n] = p;
    else this.tail = p;
  }

  private alloc(): number {
    if (this.free !== NONE) {
      const e = this.free;
      this.free = this.next[e]!;
      return e;
    }
    if (this.top === this.keys.length) this.grow();
    return this.top++;
  }

  /** Put entry e (its key set) into the table. */
  private place(e: number): void {
    const table = this.table;
    let i = home(this.keys[e]!, this.tShift);
    while (table[i] !== 0) i = (i + 1) & this.tMask;
    table[i] = e + 1;
  }

  /** Twice the entries, and a table twice that, rehashed. */
  private grow(): void {
    const n = this.keys.length * 2;
    const widen = <T extends Float64Array | Int32Array | Uint8Array>(a: T): T => {
      const b = new (a.constructor as new (len: number) => T)(n);
      b.set(a);
      return b;
    };
    this.keys = widen(this.keys);
    this.vals = widen(this.vals);
    this.tags = widen(this.tags);
    this.prev = widen(this.prev);
    this.next = widen(this.next);
    this.table = new Int32Array(2 * n);
    this.tMask = 2 * n - 1;
    this.tShift = 32 - Math.log2(2 * n);
    for (let e = this.head; e !== NONE; e = this.next[e]!) this.place(e);
  }
}
