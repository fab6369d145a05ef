/**
 * Circuit breakers shared through a real Redis: openings and closings reach the other replicas,
 * a late replica reads the breakers already open, stale / malformed / own / foreign messages
 * change nothing, and Redis going away leaves each replica with its own breakers.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { CircuitBreaker } from '../../src/fleet/circuit-breaker.js';
import { WorkerState } from '../../src/fleet/worker-state.js';
import { BreakerChannel } from '../../src/shared/breaker-channel.js';
import { RedisLink } from '../../src/shared/redis-link.js';
import { redisSkip } from '../redis-server.js';
import { redisFixture } from './redis-fixture.js';
import { waitFor } from '../support.js';

const skip = redisSkip();
const PREFIX = 'bc:';
const URLS: Record<string, string> = { w0: 'http://127.0.0.1:9000', w1: 'http://127.0.0.1:9001' };

interface Replica {
  id: string;
  link: RedisLink;
  channel: BreakerChannel;
  breakers: Map<string, CircuitBreaker>;
  workers: Map<string, WorkerState>;
  /** Transitions seen: "w0 open local", "w0 open peer", ... */
  seen: string[];
}

describe('breaker channel', { skip }, () => {
  const fx = redisFixture();

  async function replica(id: string, coolDownMs = 5_000, urls: Record<string, string> = URLS): Promise<Replica> {
    const link = new RedisLink({ url: fx.server.url, timeoutMs: 200, connectTimeoutMs: 1000 });
    await link.start();
    const breakers = new Map<string, CircuitBreaker>();
    const workers = new Map<string, WorkerState>();
    const seen: string[] = [];
    const channel: BreakerChannel = new BreakerChannel({
      link,
      keyPrefix: PREFIX,
      replicaId: id,
      breakerOf: (w) => {
        const b = breakers.get(w);
        return b ? { breaker: b, url: workers.get(w)!.url } : undefined;
      },
    });
    for (const [wid, url] of Object.entries(urls)) {
      const w = new WorkerState({ id: wid, url, pool: 'p', model: 'm' });
      workers.set(wid, w);
      breakers.set(
        wid,
        new CircuitBreaker(w, {
          failuresToOpen: 2,
          coolDownMs,
          onTransition: (ws, to, cause, from) => {
            seen.push(`${ws.id} ${to} ${cause}`);
            channel.onTransition(ws, to, cause, from);
          },
        }),
      );
    }
    await channel.start();
    fx.closers.push(
      () => link.close(),
      () => channel.close(),
      () => {
        for (const b of breakers.values()) b.close();
      },
    );
    return { id, link, channel, breakers, workers, seen };
  }

  const subscribers = async (n: number) => waitFor(async () => ((await fx.raw.pubsub('NUMSUB', `${PREFIX}breakers`)) as [string, number])[1] >= n);
  /** A clean Redis and two replicas subscribed to each other. */
  const pair = async (idA: string, idB: string, coolDownMs?: number): Promise<[Replica, Replica]> => {
    await fx.closeAll();
    await fx.raw.flushall();
    const a = await replica(idA, coolDownMs);
    const b = await replica(idB, coolDownMs);
    await subscribers(2);
    return [a, b];
  };
  const open = (r: Replica, w: string) => {
    r.breakers.get(w)!.onFailure();
    r.breakers.get(w)!.onFailure();
    assert.equal(r.breakers.get(w)!.state, 'open');
  };

  it('an opening reaches the other replica within a second, and the closing after a good probe too', async () => {
    const [a, b] = await pair('a', 'b', 300);
    const t0 = Date.now();
    open(a, 'w0');
    await waitFor(() => b.breakers.get('w0')!.state === 'open', 1_000);
    const took = Date.now() - t0;
    assert.ok(took < 1_000, `${took} ms`);
    assert.equal(b.workers.get('w0')!.circuitOpen, true, 'out of routing at b');
    assert.equal(b.workers.get('w1')!.circuitOpen, false);
    assert.ok(b.breakers.get('w0')!.openRemainingMs() > 100, 'for the cool-down a has left');
    assert.deepEqual(b.seen, ['w0 open peer']);
    assert.equal(b.channel.counts.opened, 1);
    // b publishes nothing it was told; a ignores its own message.
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(b.channel.counts.published, 0);
    assert.equal(a.channel.counts.published, 1);
    assert.equal(a.channel.counts.opened + a.channel.counts.stale, 0);
    // The opening is in the hash for replicas that come later.
    const entry = JSON.parse((await fx.raw.hget(`${PREFIX}{breakers}`, 'w0'))!);
    assert.equal(entry.s, 'open');
    assert.equal(entry.r, 'a');
    assert.equal(entry.u, URLS.w0);

    // A request b dispatched before the opening that succeeds now does not close it at b.
    b.breakers.get('w0')!.onSuccess();
    assert.equal(b.breakers.get('w0')!.state, 'open');
    // Both go half-open after the cool-down; a's probe succeeds first: b closes on a's word.
    await waitFor(() => a.breakers.get('w0')!.state === 'half-open' && b.breakers.get('w0')!.state === 'half-open');
    a.breakers.get('w0')!.onDispatch();
    a.breakers.get('w0')!.onSuccess();
    await waitFor(() => b.breakers.get('w0')!.state === 'closed', 1_000);
    assert.equal(b.channel.counts.closed, 1);
    assert.equal(await fx.raw.hexists(`${PREFIX}{breakers}`, 'w0'), 0, 'closed: gone from the hash');
  });

  it("a straggler's success closing a replica's own opening stays local", async () => {
    const [a, b] = await pair('a6', 'b6');
    open(a, 'w1');
    await waitFor(() => b.breakers.get('w1')!.state === 'open');
    a.breakers.get('w1')!.onSuccess(); // dispatched before the opening, answered after it
    assert.equal(a.breakers.get('w1')!.state, 'closed', 'as in a single process');
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(a.channel.counts.published, 1, 'only the opening was published');
    assert.equal(b.breakers.get('w1')!.state, 'open');
  });

  it('ignores stale, malformed, own and foreign messages', async () => {
    const [a, b] = await pair('a2', 'b2');
    // Record what goes over the channel, to replay it later.
    const tap = new Redis(fx.server.url).on('error', () => undefined);
    fx.closers.push(() => tap.disconnect());
    const heard: string[] = [];
    tap.on('message', (_c: string, m: string) => heard.push(m));
    await tap.subscribe(`${PREFIX}breakers`);
    open(a, 'w1');
    await waitFor(() => b.breakers.get('w1')!.state === 'open');
    b.breakers.get('w1')!.applyPeerClose(); // as if b's own probe had succeeded without publishing
    // A newer closing, then the old opening again: the replay must not reopen the worker.
    const closing = { v: Date.now() * 10, r: 'x', w: 'w1', u: URLS.w1, s: 'closed' };
    await fx.raw.publish(`${PREFIX}breakers`, JSON.stringify(closing));
    await waitFor(() => b.channel.counts.unchanged === 1);
    await waitFor(() => heard.length >= 1);
    const before = { ...b.channel.counts };
    await fx.raw.publish(`${PREFIX}breakers`, heard[0]!);
    await waitFor(() => b.channel.counts.stale === before.stale + 1);
    assert.equal(b.breakers.get('w1')!.state, 'closed', 'a stale opening does not reopen a recovered worker');

    const bad = [
      'not json',
      '42',
      JSON.stringify({ v: 1.5, r: 'x', w: 'w0', u: URLS.w0, s: 'closed' }),
      JSON.stringify({ v: Date.now() * 20, r: 'x', w: 'w0', u: URLS.w0, s: 'open' }), // no ms
      JSON.stringify({ v: Date.now() * 20, r: 'x', w: 'w0', u: URLS.w0, s: 'half-open' }),
      JSON.stringify({ v: Date.now() * 20, r: 'x', w: 'w0', s: 'open', ms: 1000, until: 1 }), // no url
    ];
    for (const m of bad) await fx.raw.publish(`${PREFIX}breakers`, m);
    await waitFor(() => b.channel.counts.badMessages === before.badMessages + bad.length);
    // Its own id: ignored. A worker it does not have, or has at another URL: ignored, counted.
    await fx.raw.publish(`${PREFIX}breakers`, JSON.stringify({ v: Date.now() * 30, r: 'b2', w: 'w0', u: URLS.w0, s: 'open', ms: 1000, until: 1 }));
    await fx.raw.publish(`${PREFIX}breakers`, JSON.stringify({ v: Date.now() * 30, r: 'x', w: 'w9', u: URLS.w0, s: 'open', ms: 1000, until: 1 }));
    await fx.raw.publish(`${PREFIX}breakers`, JSON.stringify({ v: Date.now() * 30, r: 'x', w: 'w0', u: 'http://127.0.0.1:1', s: 'open', ms: 1000, until: 1 }));
    await waitFor(() => b.channel.counts.unknownWorker === before.unknownWorker + 2);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(b.breakers.get('w0')!.state, 'closed', 'none of them opened w0');
    assert.equal(b.channel.counts.opened, before.opened);
    // A peer's opening never outlasts this replica's own cool-down.
    await fx.raw.publish(`${PREFIX}breakers`, JSON.stringify({ v: Date.now() * 40, r: 'x', w: 'w0', u: URLS.w0, s: 'open', ms: 3_600_000, until: 1 }));
    await waitFor(() => b.breakers.get('w0')!.state === 'open');
    assert.ok(b.breakers.get('w0')!.openRemainingMs() <= 5_000);
  });

  it("an older transition that overtakes the reply to a replica's own does not win", async () => {
    await fx.closeAll();
    await fx.raw.flushall();
    const a = await replica('a5');
    await subscribers(1);
    open(a, 'w0');
    await waitFor(() => a.channel.counts.published === 1);
    const v1 = JSON.parse((await fx.raw.hget(`${PREFIX}{breakers}`, 'w0'))!).v as number;
    // Hold a's command connection for 100 ms (a blocking pop on an empty list), so the script
    // publishing its next transition runs, and replies, only after another replica's older opening
    // (version v1 + 1, below anything Redis hands out 100 ms later) has reached a's subscriber.
    const held = a.link.client.blpop(`${PREFIX}nothing`, 0.1).catch(() => undefined);
    // Closed here by a good probe: published behind the pop.
    a.breakers.get('w0')!.onRecovered();
    a.breakers.get('w0')!.onDispatch();
    a.breakers.get('w0')!.onSuccess();
    await fx.raw.publish(`${PREFIX}breakers`, JSON.stringify({ v: v1 + 1, r: 'x', w: 'w0', u: URLS.w0, s: 'open', ms: 4_000, until: 1 }));
    await waitFor(() => a.channel.counts.opened === 1, 5_000);
    assert.equal(a.breakers.get('w0')!.state, 'open', 'the older opening, applied before the closing had a version');
    await held;
    await waitFor(() => a.channel.counts.published === 2, 5_000);
    assert.equal(a.breakers.get('w0')!.state, 'closed', 'its own closing is newer: put back');
    assert.equal(a.channel.counts.reasserted, 1);
  });

  it('a replica started later learns the breakers already open from the hash', async () => {
    await fx.closeAll();
    await fx.raw.flushall();
    const a = await replica('a3', 2_000);
    open(a, 'w0');
    await waitFor(() => a.channel.counts.published === 1);
    // An expired opening left in the hash is not applied.
    await fx.raw.hset(`${PREFIX}{breakers}`, 'w1', JSON.stringify({ v: 5, r: 'old', w: 'w1', u: URLS.w1, s: 'open', ms: 1000, until: 1000 }));
    const late = await replica('late3', 2_000);
    await waitFor(() => late.breakers.get('w0')!.state === 'open', 1_000);
    const left = late.breakers.get('w0')!.openRemainingMs();
    assert.ok(left > 0 && left <= 2_000, `${left} ms left`);
    assert.equal(late.breakers.get('w1')!.state, 'closed');
    assert.ok(late.channel.counts.snapshots >= 1);
  });

  it('keeps local breakers while Redis is away, and shares again when it returns', async () => {
    const [a, b] = await pair('a4', 'b4');
    await fx.server.stop();
    await waitFor(() => !a.link.up && !b.link.up);
    open(a, 'w0');
    assert.equal(a.channel.counts.dropped, 1, 'not published, nothing thrown');
    assert.equal(b.breakers.get('w0')!.state, 'closed');
    // b's own breaker still opens on its own failures.
    open(b, 'w1');
    await fx.server.start();
    await waitFor(() => a.link.up && b.link.up, 20_000);
    await waitFor(async () => ((await fx.raw.pubsub('NUMSUB', `${PREFIX}breakers`)) as [string, number])[1] >= 2, 20_000);
    b.breakers.get('w1')!.applyPeerClose();
    open(b, 'w1');
    await waitFor(() => a.breakers.get('w1')!.state === 'open', 1_000);
  });
});
