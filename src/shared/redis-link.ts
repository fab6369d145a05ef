/**
 * One gateway replica's link to the Redis that replicas share (`shared.redis.url` or REDIS_URL):
 * a command connection and a subscriber connection (a subscribed Redis connection can issue no
 * other command). Both reconnect in the background for as long as the gateway runs.
 *
 * `up` is true while the command connection is ready. Commands never queue while Redis is away
 * (enableOfflineQueue off, one attempt, a short per-command timeout): the caller falls back to
 * local state at once, so a lost Redis fails no request and never holds one up for long.
 */
import type { Redis as RedisClient } from 'ioredis';
import { failFastRedisOptions } from '../util/redis-options.js';

export interface RedisLinkOptions {
  url: string;
  /** Per-command timeout, ms: a slower Redis counts as down for that command. */
  timeoutMs: number;
  connectTimeoutMs: number;
  /** Called when `up` changes (true: connected and ready). */
  onChange?: (up: boolean, err?: string) => void;
}

export class RedisLink {
  private cmd: RedisClient | null = null;
  private sub: RedisClient | null = null;
  private closed = false;
  private wasUp = false;
  /** Set after the first change of `up`: later returns to ready count as reconnects. */
  private reconnectsArmed = false;
  /** Times the command connection became ready after being down (the first connect excluded). */
  reconnects = 0;

  constructor(private readonly o: RedisLinkOptions) {}

  async start(): Promise<void> {
    const { Redis } = await import('ioredis');
    const opts = failFastRedisOptions(this.o, () => (this.closed ? null : 250));
    const cmd = new Redis(this.o.url, opts);
    // The subscriber has no command timeout (it waits for messages). listen() subscribes on each
    // 'ready' itself, so ioredis' autoResubscribe is off.
    const sub = new Redis(this.o.url, { ...opts, commandTimeout: undefined, autoResubscribe: false });
    this.cmd = cmd;
    this.sub = sub;
    const changed = (err?: string) => {
      const up = cmd.status === 'ready';
      if (up === this.wasUp) return;
      if (up && this.reconnectsArmed) this.reconnects++;
      this.reconnectsArmed = true;
      this.wasUp = up;
      this.o.onChange?.(up, err);
    };
    cmd.on('ready', () => changed());
    cmd.on('close', () => changed());
    cmd.on('end', () => changed());
    cmd.on('error', (e: Error) => changed(e.message));
    sub.on('error', () => undefined);
    // The first connection may fail (Redis not up yet): ioredis keeps retrying in the background.
    await Promise.all([cmd.connect().catch(() => undefined), sub.connect().catch(() => undefined)]);
  }

  /** True while commands can be sent. */
  get up(): boolean {
    return this.cmd?.status === 'ready';
  }

  /** The command connection (throws before start). */
  get client(): RedisClient {
    if (!this.cmd) throw new Error('redis link not started');
    return this.cmd;
  }

  /**
   * Receive `channel`'s messages. Subscribes on every (re)connect of the subscriber connection,
   * not once: with no offline queue a SUBSCRIBE sent while Redis is away fails at once, and
   * ioredis' own re-subscribe only knows channels whose SUBSCRIBE was answered before the
   * connection dropped. `onSubscribed` runs after each successful SUBSCRIBE.
   */
  listen(channel: string, onMessage: (message: string) => void, onSubscribed?: () => void): void {
    const sub = this.subscriber;
    sub.on('message', (ch: string, message: string) => {
      if (ch === channel) onMessage(message);
    });
    const subscribe = () =>
      void sub.subscribe(channel).then(
        () => onSubscribed?.(),
        () => undefined,
      );
    sub.on('ready', subscribe);
    if (sub.status === 'ready') subscribe();
  }

  /** The subscriber connection (throws before start). */
  get subscriber(): RedisClient {
    if (!this.sub) throw new Error('redis link not started');
    return this.sub;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const c of [this.cmd, this.sub]) {
      if (!c) continue;
      try {
        if (c.status === 'ready') await c.quit();
        else c.disconnect();
      } catch {
        c.disconnect();
      }
    }
  }
}
