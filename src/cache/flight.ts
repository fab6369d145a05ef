/**
 * Single-flight: concurrent identical misses share one upstream request.
 *
 * The first miss for a key (the leader) goes upstream as usual and opens a Flight; identical
 * requests arriving while it runs (followers) join it instead of sending their own. A streaming
 * leader publishes each SSE event as it is relayed, and keeps the events so far for followers that
 * join late; when the leader's response is over the flight settles with the assembled entry (the
 * answer ended normally) or null (it did not: upstream error, worker failure, client gone, too
 * large to assemble). A follower never relays a broken answer: on null it makes its own upstream
 * request (the cache stage decides how, depending on what it had already sent).
 */
import type { StreamEventKind } from './assemble.js';
import type { CacheEntry } from './entry.js';

export interface FlightFollower {
  /** A streaming leader relayed one more SSE event. */
  event(text: string, kind: StreamEventKind): void;
  /** The leader's response is over: its answer, or null if there is none to share. */
  settle(entry: CacheEntry | null): void;
}

export class Flight {
  /** SSE events relayed so far (streaming leaders). */
  readonly events: Array<{ text: string; kind: StreamEventKind }> = [];
  private readonly followers = new Set<FlightFollower>();
  private settled = false;
  private result: CacheEntry | null = null;
  /** False once the flight takes no new followers (its events are no longer all kept). */
  joinable = true;

  /**
   * @param streaming the leader's answer arrives as SSE events (else as one JSON body)
   * @param willHaveUsage the leader's answer includes usage (JSON, or a stream with include_usage)
   */
  constructor(
    readonly key: string,
    readonly streaming: boolean,
    readonly willHaveUsage: boolean,
  ) {}

  /** Can a request that needs usage (or not) join now? */
  accepts(needsUsage: boolean): boolean {
    return !this.settled && this.joinable && (!needsUsage || this.willHaveUsage);
  }

  get followerCount(): number {
    return this.followers.size;
  }

  get done(): boolean {
    return this.settled;
  }

  /** Join; a streaming follower is sent the events so far at once. */
  join(f: FlightFollower): void {
    if (this.settled) {
      f.settle(this.result);
      return;
    }
    this.followers.add(f);
    for (const e of this.events) f.event(e.text, e.kind);
  }

  leave(f: FlightFollower): void {
    this.followers.delete(f);
  }

  /** The leader relayed an event. */
  emit(text: string, kind: StreamEventKind, keep: boolean): void {
    if (this.settled) return;
    if (keep) this.events.push({ text, kind });
    else this.joinable = false;
    for (const f of this.followers) f.event(text, kind);
  }

  settle(entry: CacheEntry | null): void {
    if (this.settled) return;
    this.settled = true;
    this.result = entry;
    this.events.length = 0;
    const fs = [...this.followers];
    this.followers.clear();
    for (const f of fs) f.settle(entry);
  }
}
