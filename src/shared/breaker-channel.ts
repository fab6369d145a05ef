/**
 * Circuit-breaker state shared by gateway replicas through Redis: a breaker one replica opens is
 * honoured by every replica within milliseconds (pub/sub), and a replica that starts or
 * reconnects later learns the breakers already open (a Redis hash, read on every connect).
 *
 * What is shared: a replica's breaker opening (its own failures tripped it) and closing (its own
 * half-open probe succeeded; a request dispatched before the opening that succeeds after it closes
 * a circuit this replica opened, as in a single process, but is not published — and does not close
 * a circuit another replica opened). Half-open is not shared: each replica that holds a worker open
 * reaches half-open at the end of its cool-down and probes on its own, as a single process does.
 * Breakers are matched by worker id and URL, which are the same in every replica (workers are
 * configured identically); a message about a worker this replica does not have, or has at
 * another URL, is ignored (counted).
 *
 * One Lua script per transition (off the request path, on the breaker's transition callback):
 *   - takes a version: Redis's clock in ms, or one more than the last version if that is not
 *     later — so versions only grow, also across a Redis restart (which empties the counter);
 *   - writes the hash `{keyPrefix}{breakers}`: field worker id → the opening as JSON (deleted
 *     on closing; expired openings are deleted on each write, and the whole hash expires a minute
 *     after its last opening ends);
 *   - publishes the transition on the channel `{keyPrefix}breakers`.
 * Message (and hash entry): JSON
 *   {"v": version, "r": replica id, "w": worker id, "u": worker URL, "s": "open" | "closed",
 *    "ms": cool-down left (open), "until": end of the cool-down on Redis's clock (open)}.
 *
 * A receiver applies a transition only if its version is newer than the last it knows for that
 * worker (from any replica, itself included), so a late or replayed message — an opening
 * published before the probe that closed the breaker — cannot reopen a recovered worker. An
 * opening is applied for the cool-down it has left, never longer than the receiver's own
 * cool-down; its own messages are ignored.
 * The replica that publishes learns its transition's version only from the script's reply, which
 * may come after an older transition of another replica reached it on the subscriber connection;
 * if that older one was applied meanwhile, the replica puts its breaker back in its own (newer)
 * state when the reply comes (`reasserted`).
 *
 * Losing Redis: transitions are not published meanwhile (counted as dropped) and each replica's
 * breakers work from its own outcomes alone; on reconnect the subscriber re-subscribes and the
 * replica reads the hash again. A closing missed meanwhile keeps the worker out for the rest of
 * that replica's cool-down at most, after which it probes the worker itself.
 */
import type { BreakerState, CircuitBreaker, TransitionCause } from '../fleet/circuit-breaker.js';
import type { RedisLink } from './redis-link.js';

/**
 * KEYS: the hash of open breakers, the version counter. ARGV: worker id, state ("open" |
 * "closed"), cool-down ms, replica id, worker URL, channel. Returns the version.
 */
const PUBLISH_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local v = now
if v <= last then v = last + 1 end
redis.call('SET', KEYS[2], string.format('%d', v))
local m = { v = v, r = ARGV[4], w = ARGV[1], u = ARGV[5], s = ARGV[2] }
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local ok, e = pcall(cjson.decode, all[i + 1])
  if not ok or type(e) ~= 'table' or tonumber(e['until']) == nil or tonumber(e['until']) <= now then
    redis.call('HDEL', KEYS[1], all[i])
  end
end
if ARGV[2] == 'open' then
  local ms = tonumber(ARGV[3])
  m.ms = ms
  m['until'] = now + ms
  local msg = cjson.encode(m)
  redis.call('HSET', KEYS[1], ARGV[1], msg)
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl < ms + 60000 then redis.call('PEXPIRE', KEYS[1], ms + 60000) end
  redis.call('PUBLISH', ARGV[6], msg)
else
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('PUBLISH', ARGV[6], cjson.encode(m))
end
return v
`;

/** KEYS: the hash of open breakers. Returns Redis's clock (ms) and the hash's fields and values. */
const SNAPSHOT_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return { string.format('%d', now), redis.call('HGETALL', KEYS[1]) }
`;

export interface BreakerChannelOptions {
  link: RedisLink;
  /** This replica's breaker and URL for a worker id (undefined: no such worker here). */
  breakerOf: (workerId: string) => { breaker: CircuitBreaker; url: string } | undefined;
  /** Channel; the hash and version keys are derived from `keyPrefix`. */
  keyPrefix: string;
  /** This replica's id (ignores its own messages). */
  replicaId: string;
  /** Called when another replica's transition was applied here (logs). */
  onApplied?: (worker: string, to: 'open' | 'closed', from: string, ms: number) => void;
}

interface Transition {
  v: number;
  r: string;
  w: string;
  u: string;
  s: 'open' | 'closed';
  ms?: number;
  until?: number;
}

/** A message or hash entry, or null when malformed. */
function parse(text: string): Transition | null {
  let m: unknown;
  try {
    m = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof m !== 'object' || m === null) return null;
  const o = m as Record<string, unknown>;
  if (!Number.isSafeInteger(o.v) || typeof o.r !== 'string' || typeof o.w !== 'string' || typeof o.u !== 'string') return null;
  if (o.s === 'closed') return { v: o.v as number, r: o.r, w: o.w, u: o.u, s: 'closed' };
  if (o.s !== 'open' || typeof o.ms !== 'number' || !Number.isFinite(o.ms) || o.ms < 0 || typeof o.until !== 'number') return null;
  return { v: o.v as number, r: o.r, w: o.w, u: o.u, s: 'open', ms: o.ms, until: o.until };
}

export class BreakerChannel {
  readonly channel: string;
  private readonly hashKey: string;
  private readonly versionKey: string;
  /** The newest version known per worker id (applied, published by this replica, or read). */
  private readonly versions = new Map<string, number>();
  private started = false;
  /** This replica's transitions awaiting their version, per worker, and the newest peer version applied meanwhile. */
  private readonly pending = new Map<string, { to: 'open' | 'closed'; until: number; peerV: number }>();
  /**
   * published: transitions this replica published; dropped: not published (Redis unavailable);
   * opened / closed: other replicas' transitions applied here; stale: older than what this replica
   * knew; unchanged: applied to a breaker already in that state; unknownWorker: about a worker
   * this replica does not have (or has at another URL); badMessages: malformed; snapshots: reads
   * of the open breakers on (re)connect; reasserted: own transitions put back after an older
   * peer transition overtook their reply.
   */
  readonly counts = { published: 0, dropped: 0, opened: 0, closed: 0, stale: 0, unchanged: 0, unknownWorker: 0, badMessages: 0, snapshots: 0, reasserted: 0 };

  constructor(private readonly o: BreakerChannelOptions) {
    this.channel = `${o.keyPrefix}breakers`;
    this.hashKey = `${o.keyPrefix}{breakers}`;
    this.versionKey = `${o.keyPrefix}{breakers}:version`;
  }

  async start(): Promise<void> {
    this.started = true;
    // After every (re)subscription, read the breakers already open: what was published before the
    // subscription took effect is in the hash.
    this.o.link.listen(this.channel, (message) => this.receive(message), () => void this.snapshot());
    // The command connection may become ready after the subscriber: read then too.
    this.o.link.client.on('ready', () => void this.snapshot());
  }

  /**
   * The breaker callback: publish this replica's own openings, and its closings by a successful
   * half-open probe (a straggler's success closing a circuit it opened itself stays local).
   */
  onTransition(worker: { id: string; url: string }, to: BreakerState, cause: TransitionCause, from: BreakerState): void {
    if (!this.started || cause !== 'local' || to === 'half-open' || (to === 'closed' && from !== 'half-open')) return;
    const entry = this.o.breakerOf(worker.id);
    if (!entry) return;
    if (!this.o.link.up) {
      this.counts.dropped++;
      return;
    }
    const ms = to === 'open' ? Math.max(1, Math.round(entry.breaker.openRemainingMs())) : 0;
    const mine = { to, until: performance.now() + ms, peerV: 0 };
    this.pending.set(worker.id, mine);
    const settle = (): boolean => {
      const current = this.pending.get(worker.id) === mine;
      if (current) this.pending.delete(worker.id);
      return current;
    };
    this.o.link.client.eval(PUBLISH_SCRIPT, 2, this.hashKey, this.versionKey, worker.id, to, String(ms), this.o.replicaId, worker.url, this.channel).then(
      (v) => {
        this.counts.published++;
        const version = Number(v);
        if (version > (this.versions.get(worker.id) ?? 0)) this.versions.set(worker.id, version);
        // An older transition of another replica was applied while this one awaited its version.
        if (settle() && mine.peerV > 0 && mine.peerV < version) this.reassert(worker.id, mine);
      },
      () => {
        settle();
        this.counts.dropped++;
      },
    );
  }

  /** Read the breakers open now (on connect): each newer than what this replica knows is applied. */
  async snapshot(): Promise<void> {
    if (!this.started || !this.o.link.up) return;
    let reply: [string, string[]];
    try {
      reply = (await this.o.link.client.eval(SNAPSHOT_SCRIPT, 1, this.hashKey)) as [string, string[]];
    } catch {
      return;
    }
    this.counts.snapshots++;
    const now = Number(reply[0]);
    const fields = reply[1];
    for (let i = 0; i + 1 < fields.length; i += 2) {
      const t = parse(fields[i + 1]!);
      if (!t || t.s !== 'open' || t.w !== fields[i]) {
        this.counts.badMessages++;
        continue;
      }
      if (t.until! <= now) continue;
      // An entry this replica wrote itself is news to it only after a restart (a new replica id).
      if (t.r === this.o.replicaId) continue;
      this.apply({ ...t, ms: Math.min(t.ms!, t.until! - now) });
    }
  }

  private receive(message: string): void {
    if (!this.started) return;
    const t = parse(message);
    if (!t) {
      this.counts.badMessages++;
      return;
    }
    if (t.r === this.o.replicaId) return;
    this.apply(t);
  }

  private apply(t: Transition): void {
    const entry = this.o.breakerOf(t.w);
    if (!entry || entry.url !== t.u) {
      this.counts.unknownWorker++;
      return;
    }
    if (t.v <= (this.versions.get(t.w) ?? 0)) {
      this.counts.stale++;
      return;
    }
    this.versions.set(t.w, t.v);
    const mine = this.pending.get(t.w);
    if (mine) mine.peerV = Math.max(mine.peerV, t.v);
    const changed = t.s === 'open' ? entry.breaker.applyPeerOpen(t.ms!) : entry.breaker.applyPeerClose();
    if (!changed) {
      this.counts.unchanged++;
      return;
    }
    if (t.s === 'open') this.counts.opened++;
    else this.counts.closed++;
    this.o.onApplied?.(t.w, t.s, t.r, t.ms ?? 0);
  }

  private reassert(worker: string, mine: { to: 'open' | 'closed'; until: number }): void {
    const b = this.o.breakerOf(worker)?.breaker;
    if (!b) return;
    const changed = mine.to === 'closed' ? b.applyPeerClose() : b.applyPeerOpen(mine.until - performance.now());
    if (changed) this.counts.reasserted++;
  }

    /** Workers whose breaker is open here now, with the cool-down left (for /admin/shared). */
  openHere(workers: readonly string[]): Record<string, number> {
    const out: Record<string, number> = {};
    for (const id of workers) {
      const b = this.o.breakerOf(id)?.breaker;
      if (b && b.state === 'open') out[id] = Math.round(b.openRemainingMs());
    }
    return out;
  }

  close(): void {
    this.started = false;
  }
}
