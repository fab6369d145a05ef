/**
 * A bounded admission queue for one model, ordered by class then arrival: the head is the oldest
 * entry of the most important class present. Insertion is O(classes) (one FIFO per class);
 * cancellation is O(1) (entries are marked and skipped, and counted out at once).
 *
 * A full queue makes room for a more important arrival by evicting the newest entry of the least
 * important class present (evictFor): a tenant filling the queue with standard requests cannot
 * keep a critical one out. The newest goes first, as it has waited least.
 */
import { CLASS_RANK, PRIORITY_CLASSES, type PriorityClass } from './classes.js';

export interface QueueEntry<T> {
  readonly value: T;
  readonly cls: PriorityClass;
  readonly enqueuedAt: number;
  /** Latest clock time at which the request may still start. */
  readonly deadline: number;
  /** False once dequeued, expired or cancelled. */
  live: boolean;
}

export class ClassQueue<T> {
  private readonly fifos: Record<PriorityClass, QueueEntry<T>[]> = { critical: [], standard: [], sheddable: [] };
  private readonly heads: Record<PriorityClass, number> = { critical: 0, standard: 0, sheddable: 0 };
  private readonly counts: Record<PriorityClass, number> = { critical: 0, standard: 0, sheddable: 0 };

  /** maxSize may be changed (config reload): a smaller one turns new arrivals away, it evicts nobody. */
  constructor(public maxSize: number) {}

  get size(): number {
    return this.counts.critical + this.counts.standard + this.counts.sheddable;
  }

  depth(cls: PriorityClass): number {
    return this.counts[cls];
  }

  /** Entries of `cls` or a more important class waiting. */
  depthAtOrAbove(cls: PriorityClass): number {
    let n = 0;
    for (const c of PRIORITY_CLASSES) if (CLASS_RANK[c] <= CLASS_RANK[cls]) n += this.counts[c];
    return n;
  }

  /** The new entry, or null when the queue is full. */
  push(value: T, cls: PriorityClass, now: number, deadline: number): QueueEntry<T> | null {
    if (this.size >= this.maxSize) return null;
    const e: QueueEntry<T> = { value, cls, enqueuedAt: now, deadline, live: true };
    this.fifos[cls].push(e);
    this.counts[cls]++;
    return e;
  }

  /**
   * Make room in a full queue for an arrival of `cls`: remove and return the newest entry of the
   * least important class less important than `cls`. Null when there is none, or when the queue is
   * not full, or is over its size by more than one entry (maxSize lowered by a reload: it turns
   * arrivals away and evicts nobody).
   */
  evictFor(cls: PriorityClass): QueueEntry<T> | null {
    if (this.size !== this.maxSize) return null;
    for (let i = PRIORITY_CLASSES.length - 1; i >= 0; i--) {
      const c = PRIORITY_CLASSES[i]!;
      if (CLASS_RANK[c] <= CLASS_RANK[cls]) return null;
      if (this.counts[c] === 0) continue;
      const f = this.fifos[c];
      for (let j = f.length - 1; j >= this.heads[c]; j--) {
        const e = f[j]!;
        if (!e.live) continue;
        this.remove(e);
        // Drop the dead tail, so the next eviction does not walk it again.
        while (f.length > this.heads[c] && !f[f.length - 1]!.live) f.pop();
        this.front(c);
        return e;
      }
    }
    return null;
  }

  /** The oldest live entry of the most important class, without removing it. */
  peek(): QueueEntry<T> | null {
    for (const c of PRIORITY_CLASSES) {
      const e = this.front(c);
      if (e) return e;
    }
    return null;
  }

  /** Remove `e` (dequeued, expired or cancelled). Idempotent. */
  remove(e: QueueEntry<T>): boolean {
    if (!e.live) return false;
    e.live = false;
    this.counts[e.cls]--;
    this.front(e.cls);
    return true;
  }

  /** Every live entry whose deadline is at or before `now`, removed, oldest first per class. */
  expire(now: number): QueueEntry<T>[] {
    const out: QueueEntry<T>[] = [];
    for (const c of PRIORITY_CLASSES) {
      if (this.counts[c] === 0) continue;
      const f = this.fifos[c];
      for (let i = this.heads[c]; i < f.length; i++) {
        const e = f[i]!;
        if (e.live && e.deadline <= now) {
          this.remove(e);
          out.push(e);
        }
      }
      this.front(c);
    }
    return out;
  }

  /** Every live entry, in queue order. */
  entries(): QueueEntry<T>[] {
    const out: QueueEntry<T>[] = [];
    for (const c of PRIORITY_CLASSES) this.collect(c, out);
    return out;
  }

  /** The live entries of one class, oldest first. */
  entriesOf(cls: PriorityClass): QueueEntry<T>[] {
    return this.collect(cls, []);
  }

  private collect(c: PriorityClass, out: QueueEntry<T>[]): QueueEntry<T>[] {
    const f = this.fifos[c];
    for (let i = this.heads[c]; i < f.length; i++) if (f[i]!.live) out.push(f[i]!);
    return out;
  }

  /** Earliest deadline among live entries (Infinity when empty). */
  nextDeadline(): number {
    let t = Infinity;
    for (const c of PRIORITY_CLASSES) {
      const f = this.fifos[c];
      for (let i = this.heads[c]; i < f.length; i++) if (f[i]!.live && f[i]!.deadline < t) t = f[i]!.deadline;
    }
    return t;
  }

  /** Skips dead entries at the front of a class's FIFO (compacting now and then). */
  private front(c: PriorityClass): QueueEntry<T> | null {
    const f = this.fifos[c];
    let h = this.heads[c];
    while (h < f.length && !f[h]!.live) h++;
    if (h === f.length) {
      f.length = 0;
      h = 0;
    } else if (h > 1024 && h * 2 > f.length) {
      f.splice(0, h);
      h = 0;
    }
    this.heads[c] = h;
    return f[h] ?? null;
  }
}
