/**
 * Subscriber for one worker's KV-cache events, in vLLM's ZeroMQ wire format
 * (vllm/distributed/kv_events.py; decoding in kv-events-wire.ts), feeding the prefix index
 * through the engine → kvgate hash mapping (kv-events-mapper.ts).
 *
 * Reliability, because a silent event pipeline is worse than none:
 * - Sequence gaps (PUB drops past its high-water mark) are repaired from the replay socket
 *   (DEALER → the publisher's ROUTER: send the first missing seq as 8 bytes, receive
 *   (seq, payload) until seq −1). If replay is unavailable or does not cover the gap, the worker's
 *   event-fed state is cleared and the index falls back to the approximate model for it until
 *   `rebuildMs` of gap-free events have passed.
 * - On joining a publisher mid-stream, the replay socket is asked for its whole buffer so blocks
 *   stored before we connected are known too.
 * - A sequence number that goes backwards means the worker restarted (a new publisher counts from
 *   0): its event-fed state is cleared and rebuilt from the new stream. After a reconnection the
 *   new count may already be past ours, so the replay socket is asked for our last batch: if it
 *   does not return it byte for byte, the publisher is a new process.
 * - No event within `silenceMs` while the worker is busy, a socket error or a decode error → the
 *   worker's view is 'approximate' with a reason (index.setSource, shown in /admin/workers and
 *   the kvgate_kv_events_source metric). Events arriving in sequence again restore 'events'.
 * ZeroMQ reconnects by itself after the worker restarts; nothing here waits for it.
 */
import * as zmq from 'zeromq';
import type { Clock } from '../util/clock.js';
import { systemClock } from '../util/clock.js';
import type { IndexSource, KvBlockSink } from './kv-block-sink.js';
import { KvEventMapper, type KvEventMapperStats } from './kv-events-mapper.js';
import { decodeEventBatch, decodeSeq, encodeSeq } from './kv-events-wire.js';

export interface KvEventSubscriberOptions {
  workerId: string;
  /** The publisher's PUB endpoint, e.g. tcp://10.0.0.5:5557. */
  endpoint: string;
  /** The publisher's replay ROUTER endpoint, if it has one. */
  replayEndpoint?: string;
  /** Topic prefix to subscribe to (vLLM's default topic is ''). */
  topic?: string;
  index: KvBlockSink;
  /** Block size the index hashes this worker's prompts at (the worker's block size). */
  blockSize: number;
  clock?: Clock;
  /** Silence bound while the worker is busy, ms (default 10,000). */
  silenceMs?: number;
  /** Whether the worker has work (so silence means trouble). Default: always busy. */
  isBusy?: () => boolean;
  /** How long a replay may take before it counts as failed, ms (default 2,000). */
  replayTimeoutMs?: number;
  /** Gap-free events needed after a resynchronisation before trusting events again, ms (default 30,000). */
  rebuildMs?: number;
  /** Called whenever the worker's source or reason changes. */
  onStatus?: (s: KvEventSubscriberStatus) => void;
}

export interface KvEventSubscriberStatus {
  workerId: string;
  endpoint: string;
  source: IndexSource;
  reason: string;
  lastSeq: number;
  lastEventAt: number | null;
  batches: number;
  gaps: number;
  replays: number;
  replayFailures: number;
  resyncs: number;
  restarts: number;
  errors: number;
  mapper: KvEventMapperStats;
}

export class KvEventSubscriber {
  readonly workerId: string;
  readonly endpoint: string;
  private readonly opts: KvEventSubscriberOptions;
  private readonly clock: Clock;
  private readonly mapper: KvEventMapper;
  private readonly silenceMs: number;
  private readonly replayTimeoutMs: number;
  private readonly rebuildMs: number;
  private sub: zmq.Subscriber | null = null;
  private dealer: zmq.Dealer | null = null;
  private loop: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;
  private lastSeq = -1;
  /** Digest of the last applied payload, to recognise our own history in a replay. */
  private lastDigest = 0;
  private disconnectedSinceLast = false;
  private lastEventAt: number | null = null;
  /** Set after a resynchronisation: events are trusted again only from this time on. */
  private rebuildUntil = -Infinity;
  private source: IndexSource = 'approximate';
  private reason = 'waiting for the first kv event';
  private readonly counters = { batches: 0, gaps: 0, replays: 0, replayFailures: 0, resyncs: 0, restarts: 0, errors: 0 };

  constructor(opts: KvEventSubscriberOptions) {
    this.opts = opts;
    this.workerId = opts.workerId;
    this.endpoint = opts.endpoint;
    this.clock = opts.clock ?? systemClock;
    this.silenceMs = opts.silenceMs ?? 10_000;
    this.replayTimeoutMs = opts.replayTimeoutMs ?? 2000;
    this.rebuildMs = opts.rebuildMs ?? 30_000;
    this.mapper = new KvEventMapper(opts.index, opts.workerId, { blockSize: opts.blockSize });
    opts.index.setSource(this.workerId, 'approximate', this.reason, this.clock.now());
  }

  /** Connect and start consuming in the background. */
  start(): void {
    if (this.sub || this.closed) return;
    const sub = new zmq.Subscriber({ linger: 0, reconnectInterval: 100, reconnectMaxInterval: 2000 });
    this.sub = sub;
    sub.connect(this.endpoint);
    sub.subscribe(this.opts.topic ?? '');
    sub.events.on('disconnect', () => {
      if (this.closed) return;
      this.disconnectedSinceLast = true;
      this.setSource('approximate', 'publisher disconnected');
    });
    this.loop = this.consume(sub);
    const tick = Math.max(10, Math.min(1000, this.silenceMs / 4));
    this.timer = setInterval(() => this.checkSilence(), tick);
    this.timer.unref();
  }

  status(): KvEventSubscriberStatus {
    return {
      workerId: this.workerId,
      endpoint: this.endpoint,
      source: this.source,
      reason: this.reason,
      lastSeq: this.lastSeq,
      lastEventAt: this.lastEventAt,
      ...this.counters,
      mapper: this.mapper.stats(),
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.sub?.close();
    this.dealer?.close();
    this.dealer = null;
    await this.loop;
    this.setSource('approximate', 'subscriber closed');
  }

  private async consume(sub: zmq.Subscriber): Promise<void> {
    try {
      for await (const frames of sub) {
        if (this.closed) break;
        try {
          await this.onMessage(frames);
        } catch (err) {
          this.counters.errors++;
          this.setSource('approximate', `bad kv event message: ${(err as Error).message}`);
        }
      }
    } catch (err) {
      if (!this.closed) {
        this.counters.errors++;
        this.setSource('approximate', `kv event socket error: ${(err as Error).message}`);
      }
    }
  }

  private async onMessage(frames: Buffer[]): Promise<void> {
    if (frames.length < 3) throw new Error(`expected [topic, seq, payload], got ${frames.length} frames`);
    const seq = decodeSeq(frames[frames.length - 2]!);
    const payload = frames[frames.length - 1]!;
    const replayable = this.opts.replayEndpoint !== undefined;
    const reconnected = this.disconnectedSinceLast;
    this.disconnectedSinceLast = false;
    if (this.lastSeq < 0) {
      // First message: learn what was stored before we joined, if the publisher keeps a buffer.
      if (seq > 0 && replayable) await this.replay(0, seq, null);
    } else if (seq <= this.lastSeq) {
      this.restarted(seq);
      if (seq > 0 && replayable) await this.replay(0, seq, null);
    } else if (seq > this.lastSeq + 1 || (reconnected && replayable)) {
      // A gap, or a reconnection after which a restarted worker's new count may have overtaken
      // ours. The replay socket tells which: it must return our last batch byte for byte.
      const gap = seq > this.lastSeq + 1;
      if (gap) this.counters.gaps++;
      const outcome = replayable ? await this.replay(this.lastSeq, seq, this.lastDigest) : 'failed';
      if (outcome === 'restarted') {
        this.restarted(seq);
        await this.replay(0, seq, null);
      } else if (outcome !== 'ok') {
        this.resync(gap ? `sequence gap ${this.lastSeq + 1}..${seq - 1} not replayable` : 'reconnected, replay unavailable');
      }
    }
    this.applyPayload(seq, payload);
  }

  /** The publisher counts from the start again: the worker restarted and its cache is empty. */
  private restarted(seq: number): void {
    this.counters.restarts++;
    this.mapper.reset();
    this.lastSeq = -1;
    this.setSource('approximate', `worker restarted (sequence now ${seq})`);
  }

  private applyPayload(seq: number, payload: Uint8Array): void {
    const batch = decodeEventBatch(payload);
    const now = this.clock.now();
    this.mapper.apply(batch.events, now);
    this.lastSeq = seq;
    this.lastDigest = digest(payload);
    this.lastEventAt = now;
    this.counters.batches++;
    const foreign = this.mapper.lastForeignBlockSize;
    if (foreign !== null) {
      // Events hashed at another block size can never match prompts hashed at ours.
      this.setSource('approximate', `events use block size ${foreign}, the index hashes prompts at ${this.mapper.blockSize}`);
    } else if (now >= this.rebuildUntil) this.setSource('events', 'in sequence');
  }

  /**
   * Fetch batches [from, upTo) from the replay socket and apply them. With `verify` (the digest of
   * batch `from`, which we already applied), the first reply must be that batch unchanged, or the
   * publisher is a new process ('restarted'). 'holes' when its buffer no longer covers the range.
   */
  private async replay(from: number, upTo: number, verify: number | null): Promise<'ok' | 'holes' | 'restarted' | 'failed'> {
    this.counters.replays++;
    let dealer = this.dealer;
    if (!dealer) {
      dealer = new zmq.Dealer({ linger: 0, receiveTimeout: this.replayTimeoutMs, sendTimeout: this.replayTimeoutMs });
      dealer.connect(this.opts.replayEndpoint!);
      this.dealer = dealer;
    }
    // Joining mid-stream (verify null) applies whatever the buffer still has; repairing a gap
    // needs every missing batch, or the chain of parents is broken and a resync follows.
    let outcome: 'ok' | 'holes' | 'restarted' = 'ok';
    let next = verify === null ? from : from + 1;
    let first = true;
    try {
      await dealer.send([Buffer.alloc(0), encodeSeq(from)]);
      for (;;) {
        let frames = await dealer.receive();
        if (frames.length > 0 && frames[0]!.length === 0) frames = frames.slice(1);
        if (frames.length < 2) throw new Error('malformed replay reply');
        const seq = decodeSeq(frames[0]!);
        if (seq === -1) break;
        // Drain the whole reply even once the outcome is known, so the socket stays in step.
        if (outcome !== 'ok') continue;
        if (verify !== null && first) {
          first = false;
          if (seq !== from) outcome = seq < from ? 'restarted' : 'holes';
          else if (digest(frames[1]!) !== verify) outcome = 'restarted';
          continue;
        }
        first = false;
        if (seq < next || seq >= upTo) continue; // applied already, or the live stream has it
        if (seq > next && verify !== null) {
          outcome = 'holes';
          continue;
        }
        this.applyPayload(seq, frames[1]!);
        next = seq + 1;
      }
      if (verify !== null && first) return 'holes'; // an empty buffer cannot vouch for us
      if (outcome === 'ok' && verify !== null && next !== upTo) return 'holes';
      return outcome;
    } catch (err) {
      this.counters.replayFailures++;
      // A timed-out dealer may still receive the old reply later: start afresh next time.
      dealer.close();
      this.dealer = null;
      if (!this.closed) this.setSource('approximate', `replay failed: ${(err as Error).message}`);
      return 'failed';
    }
  }

  /** Forget the event-fed state and rely on the approximate model until events rebuild it. */
  private resync(reason: string): void {
    this.counters.resyncs++;
    this.mapper.reset();
    this.rebuildUntil = this.clock.now() + this.rebuildMs;
    this.setSource('approximate', `${reason}; resynchronising`);
  }

  private checkSilence(): void {
    if (this.source !== 'events') return;
    const busy = this.opts.isBusy ? this.opts.isBusy() : true;
    const now = this.clock.now();
    if (busy && this.lastEventAt !== null && now - this.lastEventAt > this.silenceMs) {
      this.setSource('approximate', `no kv events for ${Math.round(now - this.lastEventAt)} ms while busy`);
    }
  }

  private setSource(source: IndexSource, reason: string): void {
    if (source === this.source && reason === this.reason) return;
    this.source = source;
    this.reason = reason;
    this.opts.index.setSource(this.workerId, source, reason, this.clock.now());
    this.opts.onStatus?.(this.status());
  }
}

/** FNV-1a over the payload bytes: cheap, and only compared with our own earlier digest. */
function digest(b: Uint8Array): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < b.length; i++) h = Math.imul(h ^ b[i]!, 0x01000193);
  return h >>> 0;
}

/** The subscribers of a fleet, by worker id, for the gateway and /admin/workers. */
export class KvEventSubscribers {
  private readonly subs = new Map<string, KvEventSubscriber>();

  add(opts: KvEventSubscriberOptions): KvEventSubscriber {
    const old = this.subs.get(opts.workerId);
    if (old) void old.close();
    const s = new KvEventSubscriber(opts);
    this.subs.set(opts.workerId, s);
    s.start();
    return s;
  }

  get(workerId: string): KvEventSubscriber | undefined {
    return this.subs.get(workerId);
  }

  async remove(workerId: string): Promise<void> {
    const s = this.subs.get(workerId);
    this.subs.delete(workerId);
    await s?.close();
  }

  statuses(): KvEventSubscriberStatus[] {
    return [...this.subs.values()].map((s) => s.status());
  }

  async closeAll(): Promise<void> {
    const all = [...this.subs.values()];
    this.subs.clear();
    await Promise.all(all.map((s) => s.close()));
  }
}
