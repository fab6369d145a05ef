/**
 * Routing knowledge shared by gateway replicas through Redis pub/sub, so a replica that never saw
 * a prefix still sends it where another replica put it.
 *
 * Each replica's prefix index hands its own knowledge — pick-time predictions and confirmed
 * (routed) blocks: worker id and block-hash run (PrefixIndex.observer) — to this channel, which
 * only queues it: the request path pays one array push. Every `publishIntervalMs` the queue is
 * published as one message on `{keyPrefix}routing`; every replica subscribes and applies the other
 * replicas' runs to its own index (PrefixIndex.learn, never echoed back). Knowledge from KV events
 * is not published: every replica subscribes to the workers' events itself.
 *
 * Message: JSON `{"r": replica id, "e": [[worker id, "p" | "r", [block hash, ...]], ...]}`.
 *
 * Pub/sub is at-most-once: while Redis is away, queued knowledge is dropped (counted) and each
 * replica routes on what it learns itself; when Redis returns the subscriber re-subscribes and
 * publishing resumes. A lost message costs at most one prefix miss, never a request.
 */
import type { PrefixIndex } from '../scheduler/index/prefix-index.js';
import type { BlockSeq } from '../kv/prompt-blocks.js';
import type { Clock } from '../util/clock.js';
import { readBatch } from './batch-message.js';
import type { RedisLink } from './redis-link.js';

export interface RoutingChannelOptions {
  link: RedisLink;
  index: PrefixIndex;
  clock: Clock;
  channel: string;
  /** This replica's id (ignores its own messages). */
  replicaId: string;
  publishIntervalMs: number;
  /** Most block runs queued between two publishes; beyond it the oldest are dropped. */
  maxQueued?: number;
  /** KV capacity of a worker the index has not met yet (from the gateway's registry). */
  capacityOf: (worker: string) => number | undefined;
}

interface Queued {
  worker: string;
  source: 'predicted' | 'routed';
  hashes: BlockSeq;
}

type Entry = [string, 'p' | 'r', number[]];

function allHashes(h: BlockSeq): number[] {
  const out = new Array<number>(h.length);
  for (let i = 0; i < h.length; i++) out[i] = h.at(i)!;
  return out;
}

export class RoutingChannel {
  private queue: Queued[] = [];
  private timer: NodeJS.Timeout | null = null;
  private readonly maxQueued: number;
  /** Block runs published, received from other replicas, and dropped (Redis away or queue full). */
  readonly counts = { published: 0, received: 0, dropped: 0, messagesPublished: 0, messagesReceived: 0, badMessages: 0 };

  constructor(private readonly o: RoutingChannelOptions) {
    this.maxQueued = o.maxQueued ?? 10_000;
  }

  async start(): Promise<void> {
    if (this.o.index.observer) throw new Error('the prefix index already has an observer');
    this.o.index.observer = (worker, hashes, source) => {
      if (this.queue.length >= this.maxQueued) {
        this.queue.shift();
        this.counts.dropped++;
      }
      this.queue.push({ worker, source, hashes });
    };
    this.o.link.listen(this.o.channel, (message) => this.receive(message));
    this.timer = setInterval(() => this.publish(), this.o.publishIntervalMs);
    this.timer.unref();
  }

  /** Publish what is queued (off the request path: on a timer). */
  publish(): void {
    if (this.queue.length === 0) return;
    const batch = this.queue;
    this.queue = [];
    if (!this.o.link.up) {
      this.counts.dropped += batch.length;
      return;
    }
    const e: Entry[] = batch.map((q) => [q.worker, q.source === 'predicted' ? 'p' : 'r', allHashes(q.hashes)]);
    this.o.link.client.publish(this.o.channel, JSON.stringify({ r: this.o.replicaId, e })).then(
      () => {
        this.counts.published += batch.length;
        this.counts.messagesPublished++;
      },
      () => {
        this.counts.dropped += batch.length;
      },
    );
  }

  private receive(message: string): void {
    const m = readBatch(message);
    if (!m) {
      this.counts.badMessages++;
      return;
    }
    if (m.replica === this.o.replicaId) return;
    this.counts.messagesReceived++;
    const now = this.o.clock.now();
    for (const x of m.entries) {
      if (!Array.isArray(x) || typeof x[0] !== 'string' || (x[1] !== 'p' && x[1] !== 'r') || !Array.isArray(x[2])) {
        this.counts.badMessages++;
        continue;
      }
      const hashes = (x[2] as unknown[]).filter((h): h is number => typeof h === 'number');
      this.o.index.learn(x[0], hashes, x[1] === 'p' ? 'predicted' : 'routed', now, this.o.capacityOf(x[0]));
      this.counts.received++;
    }
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    if (this.o.index.observer) this.o.index.observer = null;
    this.queue = [];
  }
}
