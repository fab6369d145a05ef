/**
 * A set of 53-bit block hashes (kv/block-hash.ts) in one Float64Array, open addressing with
 * linear probing, doubling at three quarters full: 11–21 bytes per hash, no object per entry
 * for the collector to trace. (At half full the table of a 100k-request run is twice the size:
 * the memory the kernel maps and zeroes for each doubling, and the cache misses of every probe,
 * cost more than the longer probe runs at 3/4, which stay within a cache line or two.) A JS Set of the same hashes boxes each one (it is past the small-integer
 * range) and stops at 2^24 entries, which a day-long replay's distinct blocks pass.
 *
 * 0 marks an empty slot, so the hash 0 is kept in a flag of its own.
 */
export class HashSet53 {
  private slots: Float64Array;
  private mask: number;
  /** A hash's home slot is the top bits of slotOf(h): 32 − log2(slots) is the shift. */
  private shift: number;
  private hasZero = false;
  size = 0;

  constructor(capacity = 1 << 16) {
    let n = 16;
    while (n < capacity * 2) n *= 2;
    this.slots = new Float64Array(n);
    this.mask = n - 1;
    this.shift = 32 - Math.log2(n);
  }

  /** Bytes the table holds. */
  get bytes(): number {
    return this.slots.byteLength;
  }

  has(h: number): boolean {
    if (h === 0) return this.hasZero;
    const s = this.slots;
    for (let i = slotOf(h) >>> this.shift; ; i = (i + 1) & this.mask) {
      const v = s[i]!;
      if (v === h) return true;
      if (v === 0) return false;
    }
  }

  /** Add `h`; false if it was there already. */
  add(h: number): boolean {
    if (h === 0) {
      if (this.hasZero) return false;
      this.hasZero = true;
      this.size++;
      return true;
    }
    if (this.insert(this.slots, this.mask, this.shift, h)) {
      this.size++;
      if (this.size * 4 > this.slots.length * 3) this.grow();
      return true;
    }
    return false;
  }

  private insert(s: Float64Array, mask: number, shift: number, h: number): boolean {
    for (let i = slotOf(h) >>> shift; ; i = (i + 1) & mask) {
      const v = s[i]!;
      if (v === h) return false;
      if (v === 0) {
        s[i] = h;
        return true;
      }
    }
  }

  /**
   * Double the table. A home is the top bits of slotOf(h), so home i becomes 2i or 2i + 1 and
   * the old table, read in order, fills the new one nearly in order: the rehash streams through
   * memory instead of writing a random slot per hash.
   */
  private grow(): void {
    const old = this.slots;
    const next = new Float64Array(old.length * 2);
    const mask = next.length - 1;
    const shift = this.shift - 1;
    for (let i = 0; i < old.length; i++) if (old[i] !== 0) this.insert(next, mask, shift, old[i]!);
    this.slots = next;
    this.mask = mask;
    this.shift = shift;
  }
}

/** 32 well-spread bits of the hash (already mixed: fmix in block-hash.ts), scrambled once more; a slot is their top bits. */
function slotOf(h: number): number {
  // `^` takes h's low 32 bits itself (a `%` of a double would be a call to fmod).
  return Math.imul(h ^ Math.floor(h / 4294967296), 0x9e3779b1) >>> 0;
}
