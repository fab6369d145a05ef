/**
 * The oldest entry of a Map or Set used as a least-recently-used list (refreshed by delete then
 * set, trimmed from the front), taken off in amortised constant time.
 *
 * `map.keys().next()` starts at the first slot of V8's ordered hash table and steps over every
 * entry deleted since the table was last rebuilt. Trimming from the front leaves those deleted
 * entries exactly there, thousands of them in a table of 10,000 (`npm run bench --
 * insertion-front`: 5.3 µs an operation that way and 0.23 µs with this, every operation a new key
 * into a Map of 10,000). An iterator kept from one call to the next resumes where it stopped:
 * V8's Map and Set iterators follow their table through rebuilds (as the language requires of
 * entries deleted and added during iteration), and a key set again is met again at its new place.
 * Everything behind the iterator was taken off by this class, so each call steps over only what
 * was deleted since the last one. That holds as long as nothing else advances the iterator: the
 * oldest entry is only ever read by taking it off.
 */
interface InsertionOrdered<K, E> {
  readonly size: number;
  entries(): IterableIterator<[K, E]>;
  delete(key: K): boolean;
}

export class InsertionFront<K, E> {
  private it: Iterator<[K, E]> | null = null;

  constructor(private readonly c: InsertionOrdered<K, E>) {}

  /** Remove the oldest entry and return it ([key, value]; a Set's is [value, value]), or undefined when empty. */
  shift(): [K, E] | undefined {
    if (this.c.size === 0) return undefined;
    for (;;) {
      const r = (this.it ??= this.c.entries()).next();
      // An iterator that has ended stays ended: entries set since are met by a new one.
      if (r.done === true) {
        this.it = null;
        continue;
      }
      this.c.delete(r.value[0]);
      return r.value;
    }
  }
}
