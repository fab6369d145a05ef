/**
 * The discrete-event simulation's event queue: a binary min-heap on (time, insertion order).
 * Ties in time pop in the order they were pushed, which keeps runs deterministic.
 */

interface Entry<T> {
  t: number;
  seq: number;
  ev: T;
}

function before<T>(a: Entry<T>, b: Entry<T>): boolean {
  return a.t < b.t || (a.t === b.t && a.seq < b.seq);
}

export class EventQueue<T> {
  private readonly heap: Entry<T>[] = [];
  private seq = 0;

  get size(): number {
    return this.heap.length;
  }

  /** Time of the earliest event, or Infinity when empty. */
  peekTime(): number {
    return this.heap.length > 0 ? this.heap[0]!.t : Infinity;
  }

  push(t: number, ev: T): void {
    const h = this.heap;
    const e: Entry<T> = { t, seq: this.seq++, ev };
    h.push(e);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!before(e, h[p]!)) break;
      h[i] = h[p]!;
      i = p;
    }
    h[i] = e;
  }

  /** Remove and return the earliest event (its time in `out.t`), or undefined when empty. */
  pop(): { t: number; ev: T } | undefined {
    const h = this.heap;
    const top = h[0];
    if (top === undefined) return undefined;
    const last = h.pop()!;
    const n = h.length;
    if (n > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= n) break;
        const r = l + 1;
        const c = r < n && before(h[r]!, h[l]!) ? r : l;
        if (!before(h[c]!, last)) break;
        h[i] = h[c]!;
        i = c;
      }
      h[i] = last;
    }
    return top;
  }
}
