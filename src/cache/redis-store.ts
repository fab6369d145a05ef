/**
 * The Redis store (ioredis): one string key per entry, `SET key value PX ttl`, shared by every
 * gateway replica that points at the same Redis and key prefix.
 *
 * - Values: one format byte, then the entry's JSON — as it is ('J') or, from
 *   `compressAboveBytes` on, brotli-compressed ('B', quality 4; compression and decompression run
 *   on libuv's thread pool, off the event loop). A value that does not decode is a miss.
 * - Failure is never waited out: commands are not queued while disconnected (they fail at once),
 *   each has `timeoutMs`, and ioredis reconnects in the background (100 ms, 200 ms, … up to 2 s
 *   between tries), so when Redis comes back the cache does too.
 * - `clear` walks the tenant's (or the prefix's) keys with SCAN and UNLINKs them in batches; it
 *   never uses KEYS or FLUSHDB (the Redis may hold other data).
 * - Entries and bytes are sampled by a background SCAN (keys, STRLEN) every `statsEveryMs`,
 *   bounded to `statsMaxKeys` keys; between samples the last figures stand.
 */
import { promisify } from 'node:util';
import { brotliCompress, brotliDecompress, constants as zc } from 'node:zlib';
import type { Redis as RedisClient } from 'ioredis';
import { failFastRedisOptions } from '../util/redis-options.js';
import type { CacheEntry, CompletionBody, EmbeddingsList } from './entry.js';
import type { CacheStore, StoreStats } from './store.js';

const compress = promisify(brotliCompress);
const decompress = promisify(brotliDecompress);

const RAW = 0x4a; // 'J'
const BROTLI = 0x42; // 'B'

export interface RedisStoreOptions {
  url: string;
  keyPrefix: string;
  timeoutMs: number;
  connectTimeoutMs: number;
  compressAboveBytes: number;
  /** Called on connection state changes and errors (never with the URL's password). */
  onEvent?: (e: { type: 'ready' | 'error' | 'close'; message?: string }) => void;
  statsEveryMs?: number;
  statsMaxKeys?: number;
}

/** The URL with any password replaced, for logs. */
export function redactRedisUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return 'redis://(unparseable url)';
  }
}

export async function encodeValue(json: string, compressAboveBytes: number): Promise<Buffer> {
  const raw = Buffer.from(json, 'utf8');
  if (raw.length < compressAboveBytes) return Buffer.concat([Buffer.of(RAW), raw]);
  const z = await compress(raw, { params: { [zc.BROTLI_PARAM_QUALITY]: 4, [zc.BROTLI_PARAM_SIZE_HINT]: raw.length } });
  return Buffer.concat([Buffer.of(BROTLI), z]);
}

export async function decodeValue(v: Buffer): Promise<CacheEntry | null> {
  if (v.length < 2) return null;
  try {
    const body = v[0] === BROTLI ? await decompress(v.subarray(1)) : v[0] === RAW ? v.subarray(1) : null;
    if (body === null) return null;
    const e = JSON.parse(body.toString('utf8')) as CacheEntry;
    if (!e || e.v !== 1 || !e.body) return null;
    return (e.route === 'embeddings' ? Array.isArray((e.body as EmbeddingsList).data) : Array.isArray((e.body as CompletionBody).choices)) ? e : null;
  } catch {
    return null;
  }
}

export class RedisStore implements CacheStore {
  readonly kind = 'redis' as const;
  private client: RedisClient | null = null;
  private last: StoreStats = { entries: null, bytes: null };
  private statsTimer: NodeJS.Timeout | null = null;
  private sampling = false;
  private closed = false;

  constructor(private readonly o: RedisStoreOptions) {}

  async start(): Promise<void> {
    const { Redis } = await import('ioredis');
    // A failing command is counted and the request goes on; reconnects back off up to 2 s.
    const opts = failFastRedisOptions(this.o, (times) => (this.closed ? null : Math.min(100 * times, 2000)));
    const client = new Redis(this.o.url, opts);
    this.client = client;
    client.on('ready', () => this.o.onEvent?.({ type: 'ready' }));
    client.on('error', (e: Error) => this.o.onEvent?.({ type: 'error', message: e.message }));
    client.on('close', () => this.o.onEvent?.({ type: 'close' }));
    // The first connection may fail (Redis not up yet): ioredis keeps retrying in the background.
    await client.connect().catch(() => undefined);
    const every = this.o.statsEveryMs ?? 30_000;
    if (every > 0) {
      void this.sample();
      this.statsTimer = setInterval(() => void this.sample(), every);
      this.statsTimer.unref();
    }
  }

  private get c(): RedisClient {
    if (!this.client) throw new Error('redis store not started');
    return this.client;
  }

  /** True while the connection is usable. */
  get ready(): boolean {
    return this.client?.status === 'ready';
  }

  async get(key: string): Promise<CacheEntry | null> {
    const v = await this.c.getBuffer(key);
    return v === null ? null : decodeValue(v);
  }

  async set(key: string, _tenant: string, _entry: CacheEntry, json: string, ttlMs: number): Promise<void> {
    const value = await encodeValue(json, this.o.compressAboveBytes);
    await this.c.set(key, value, 'PX', Math.max(1, Math.round(ttlMs)));
  }

  async clear(tenant?: string): Promise<number> {
    const match = `${globEscape(this.o.keyPrefix)}${tenant === undefined ? '' : `${tenant}:`}*`;
    let cursor = '0';
    let n = 0;
    do {
      const [next, keys] = await this.c.scan(cursor, 'MATCH', match, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) n += await this.c.unlink(...keys);
    } while (cursor !== '0');
    void this.sample();
    return n;
  }

  stats(): StoreStats {
    return this.last;
  }

  /** Count the prefix's keys and their value bytes (bounded), in the background. */
  async sample(): Promise<void> {
    if (this.sampling || !this.ready) return;
    this.sampling = true;
    try {
      const max = this.o.statsMaxKeys ?? 1_000_000;
      let cursor = '0';
      let entries = 0;
      let bytes = 0;
      do {
        const [next, keys] = await this.c.scan(cursor, 'MATCH', `${globEscape(this.o.keyPrefix)}*`, 'COUNT', 1000);
        cursor = next;
        if (keys.length > 0) {
          const p = this.c.pipeline();
          for (const k of keys) p.strlen(k);
          const res = (await p.exec()) ?? [];
          keys.forEach((k, i) => {
            const r = res[i];
            if (r && r[0] === null && typeof r[1] === 'number') {
              entries++;
              bytes += r[1] + k.length;
            }
          });
        }
      } while (cursor !== '0' && entries < max);
      this.last = { entries, bytes };
    } catch {
      // Keep the last figures; the failure shows in the operation counters.
    } finally {
      this.sampling = false;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.statsTimer) clearInterval(this.statsTimer);
    const c = this.client;
    this.client = null;
    if (!c) return;
    try {
      if (c.status === 'ready') await c.quit();
      else c.disconnect();
    } catch {
      c.disconnect();
    }
  }
}

/** Escape Redis glob characters in a literal prefix. */
function globEscape(s: string): string {
  return s.replace(/[*?[\]\\]/g, (c) => `\\${c}`);
}
