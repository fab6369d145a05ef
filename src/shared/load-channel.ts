/**
 * In-flight load shared between gateway replicas through Redis pub/sub (`shared.load`).
 *
 * Each replica routes on the workers' last scrape plus its own in-flight accounting (what it
 * dispatched since the scrape, prefill still pending, KV blocks reserved). With N replicas each
 * sees only its own share of the dispatches between two scrapes, so a burst spread over the
 * replicas piles onto the worker every one of them thinks is idle. This channel mirrors every
 * replica's accounting into the others: the router's dispatch, first-token and end events are
 * queued (the request path pays one array push) and published every `publishIntervalMs` as one
 * message on `{keyPrefix}load`; the others apply them to their WorkerStates under the sender's
 * name, so between two scrapes each replica sees the whole fleet's dispatches.
 *
 * Pub/sub is at-most-once, and an end that never arrives must not leave a phantom request behind:
 * every replica also publishes at least once a `heartbeatMs`, and a replica not heard from for
 * `staleAfterMs` (or every replica, while this one's Redis is away) has its mirrored requests
 * ended. A mirrored request older than `maxAgeMs` (the longest a request may last) is ended too.
 */
import type { InflightRequest, WorkerState } from '../fleet/worker-state.js';
import type { LoadEvent, LoadObserver } from '../scheduler/router.js';
import type { Clock } from '../util/clock.js';
import { readBatch } from './batch-message.js';
import type { RedisLink } from './redis-link.js';

export interface LoadChannelOptions {
  link: RedisLink;
  /** This replica's WorkerState for a worker id (read on every message: workers may change). */
  workerOf: (id: string) => WorkerState | undefined;
  clock: Clock;
  channel: string;
  replicaId: string;
  publishIntervalMs: number;
  heartbeatMs?: number;
  staleAfterMs?: number;
  maxAgeMs: number;
  /** Most events queued between two publishes; beyond it the oldest are dropped. */
  maxQueued?: number;
}

/**
 * One event on the wire: [kind, worker, request, prompt, uncached, maxTokens, blocks, sequences?]
 * (the rest after the request for 'b' only; sequences only when more than one).
 */
type Wire = ['b', string, string, number, number, number, number] | ['b', string, string, number, number, number, number, number] | ['f' | 'e', string, string];

interface Mirrored {
  worker: WorkerState;
  at: number;
}

export class LoadChannel {
  private queue: Wire[] = [];
  private timer: NodeJS.Timeout | null = null;
  private lastPublish = -Infinity;
  private readonly maxQueued: number;
  private readonly heartbeatMs: number;
  private readonly staleAfterMs: number;
  /** Per other replica: when it was last heard, and its requests mirrored here by mirrored id. */
  private readonly peers = new Map<string, { heardAt: number; requests: Map<string, Mirrored> }>();
  readonly counts = { published: 0, received: 0, dropped: 0, expired: 0, badMessages: 0 };

  constructor(private readonly o: LoadChannelOptions) {
    this.maxQueued = o.maxQueued ?? 100_000;
    this.heartbeatMs = o.heartbeatMs ?? 1_000;
    this.staleAfterMs = o.staleAfterMs ?? 3 * this.heartbeatMs;
  }

  /** For Router.loadObserver: queue one of this replica's own events. */
  readonly observe: LoadObserver = (ev: LoadEvent, w: WorkerState, r: InflightRequest) => {
    if (this.queue.length >= this.maxQueued) {
      this.queue.shift();
      this.counts.dropped++;
    }
    if (ev !== 'begin') this.queue.push([ev === 'first' ? 'f' : 'e', w.id, r.id]);
    else if (r.sequences === undefined) this.queue.push(['b', w.id, r.id, r.promptTokens, r.uncachedTokens, r.maxTokens, r.blocks]);
    else this.queue.push(['b', w.id, r.id, r.promptTokens, r.uncachedTokens, r.maxTokens, r.blocks, r.sequences]);
  };

  async start(): Promise<void> {
    this.o.link.listen(this.o.channel, (message) => this.receive(message));
    this.timer = setInterval(() => this.tick(), this.o.publishIntervalMs);
    this.timer.unref();
  }

  /** Publish what is queued (or a heartbeat when due), then expire what can no longer be trusted. */
  tick(): void {
    const now = this.o.clock.now();
    if (!this.o.link.up) {
      this.counts.dropped += this.queue.length;
      this.queue = [];
      // Deaf while Redis is away: nobody's ends can reach us.
      for (const id of [...this.peers.keys()]) this.forget(id);
    } else if (this.queue.length > 0 || now - this.lastPublish >= this.heartbeatMs) {
      const batch = this.queue;
      this.queue = [];
      this.lastPublish = now;
      this.o.link.client.publish(this.o.channel, JSON.stringify({ r: this.o.replicaId, e: batch })).then(
        () => (this.counts.published += batch.length),
        () => (this.counts.dropped += batch.length),
      );
    }
    for (const [id, p] of this.peers) {
      if (now - p.heardAt > this.staleAfterMs) this.forget(id);
      else {
        for (const [rid, m] of p.requests) {
          if (now - m.at > this.o.maxAgeMs) {
            m.worker.end(rid);
            p.requests.delete(rid);
            this.counts.expired++;
          }
        }
      }
    }
  }

  /** Requests of other replicas mirrored here now. */
  get mirrored(): number {
    let n = 0;
    for (const p of this.peers.values()) n += p.requests.size;
    return n;
  }

  /** Apply one message from another replica. */
  receive(message: string): void {
    const m = readBatch(message);
    if (!m) {
      this.counts.badMessages++;
      return;
    }
    if (m.replica === this.o.replicaId) return;
    const now = this.o.clock.now();
    let peer = this.peers.get(m.replica);
    if (!peer) this.peers.set(m.replica, (peer = { heardAt: now, requests: new Map() }));
    peer.heardAt = now;
    for (const e of m.entries) {
      if (!Array.isArray(e) || typeof e[1] !== 'string' || typeof e[2] !== 'string') {
        this.counts.badMessages++;
        continue;
      }
      const w = this.o.workerOf(e[1]);
      if (!w) continue;
      const id = `${m.replica}\u0000${e[2]}`;
      if (e[0] === 'b') {
        const [, , , prompt, uncached, maxTokens, blocks, sequences] = e as unknown[];
        if (
          ![prompt, uncached, maxTokens, blocks].every((x) => typeof x === 'number' && Number.isFinite(x) && x >= 0) ||
          !(sequences === undefined || (Number.isInteger(sequences) && (sequences as number) >= 1))
        ) {
          this.counts.badMessages++;
          continue;
        }
        const charge: InflightRequest = { id, promptTokens: prompt as number, uncachedTokens: uncached as number, maxTokens: maxTokens as number, blocks: blocks as number, dispatchedAt: now };
        if (sequences !== undefined) charge.sequences = sequences as number;
        w.begin(charge, true);
        peer.requests.set(id, { worker: w, at: now });
      } else if (e[0] === 'f') w.firstToken(id, now);
      else if (e[0] === 'e') {
        w.end(id);
        peer.requests.delete(id);
      } else {
        this.counts.badMessages++;
        continue;
      }
      this.counts.received++;
    }
  }

  /** End every request mirrored from replica `id`. */
  private forget(id: string): void {
    const p = this.peers.get(id);
    if (!p) return;
    for (const [rid, m] of p.requests) {
      m.worker.end(rid);
      this.counts.expired++;
    }
    this.peers.delete(id);
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    for (const id of [...this.peers.keys()]) this.forget(id);
  }
}
