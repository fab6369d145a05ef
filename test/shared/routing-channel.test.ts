/** The routing channel on a real Redis: batching, no echo, bad messages, Redis going away. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PrefixIndex } from '../../src/scheduler/index/prefix-index.js';
import { RedisLink } from '../../src/shared/redis-link.js';
import { RoutingChannel } from '../../src/shared/routing-channel.js';
import { systemClock } from '../../src/util/clock.js';
import { redisSkip } from '../redis-server.js';
import { redisFixture } from './redis-fixture.js';
import { waitFor } from '../support.js';

const skip = redisSkip();

describe('routing channel', { skip }, () => {
  const fx = redisFixture();

  async function replica(id: string): Promise<{ index: PrefixIndex; channel: RoutingChannel; link: RedisLink }> {
    const link = new RedisLink({ url: fx.server.url, timeoutMs: 200, connectTimeoutMs: 1000 });
    await link.start();
    const index = new PrefixIndex();
    index.addWorker('w0', 1000);
    const channel = new RoutingChannel({ link, index, clock: systemClock, channel: 'rc:routing', replicaId: id, publishIntervalMs: 10, capacityOf: () => 500 });
    await channel.start();
    fx.closers.push(() => link.close(), () => channel.close());
    return { index, channel, link };
  }

  it('publishes one message per batch, learned by the others and not by its sender', async () => {
    const a = await replica('a');
    const b = await replica('b');
    await waitFor(async () => ((await fx.raw.pubsub('NUMSUB', 'rc:routing')) as [string, number])[1] === 2);
    a.index.insertLater('w0', [1, 2, 3], 'predicted', systemClock.now());
    a.index.insertLater('w1', [7, 8], 'predicted', systemClock.now());
    a.index.confirm('w0', [1, 2, 3], systemClock.now());
    await waitFor(() => b.channel.counts.received === 3);
    assert.equal(a.channel.counts.messagesPublished, 1, 'three runs, one message');
    assert.equal(b.index.matchWorker([1, 2, 3], 'w0', systemClock.now()), 3);
    // A worker b had not met is registered at the capacity the registry gives.
    assert.equal(b.index.matchWorker([7, 8], 'w1', systemClock.now()), 2);
    assert.equal(b.index.workerStatus('w1')?.capacity, 500);
    // b republishes nothing it learned; a ignores its own message.
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(b.channel.counts.messagesPublished, 0);
    assert.equal(a.channel.counts.received, 0);
  });

  it('ignores malformed messages and entries', async () => {
    const c = await replica('c');
    await fx.raw.publish('rc:routing', 'not json');
    await fx.raw.publish('rc:routing', JSON.stringify({ r: 'x', e: [['w0', 'p', [41, 42]], ['w0', 'q', [1]], [3, 'p', [1]]] }));
    await waitFor(() => c.channel.counts.received === 1 && c.channel.counts.badMessages === 3);
    assert.equal(c.index.matchWorker([41, 42], 'w0', systemClock.now()), 2);
  });

  it('drops what it cannot publish while Redis is away, and publishes again when it returns', async () => {
    const d = await replica('d');
    const e = await replica('e');
    await fx.server.stop();
    await waitFor(() => !d.link.up);
    d.index.insertLater('w0', [91, 92], 'predicted', systemClock.now());
    await waitFor(() => d.channel.counts.dropped >= 1);
    await fx.server.start();
    await waitFor(() => d.link.up && e.link.up, 20_000);
    // The subscriber re-subscribes after its reconnect: keep publishing until e hears.
    let n = 0;
    await waitFor(async () => {
      d.index.insertLater('w0', [100 + n++], 'predicted', systemClock.now());
      await new Promise((r) => setTimeout(r, 30));
      return e.channel.counts.received > 0;
    }, 20_000);
    assert.equal(e.index.matchWorker([91, 92], 'w0', systemClock.now()), 0, 'the dropped run never arrived');
  });

  it('subscribes once Redis comes up when it was down at start', async () => {
    await fx.server.stop();
    const late = await replica('late');
    assert.equal(late.link.up, false);
    await fx.server.start();
    const f = await replica('f');
    await waitFor(() => late.link.up, 20_000);
    let n = 0;
    await waitFor(async () => {
      f.index.insertLater('w0', [200 + n++], 'predicted', systemClock.now());
      await new Promise((r) => setTimeout(r, 30));
      return late.channel.counts.received > 0;
    }, 20_000);
  });
});
