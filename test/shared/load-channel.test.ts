/** The load channel on a real Redis: mirroring, no echo, bad messages, silent replicas, Redis going away. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { WorkerState, type InflightRequest } from '../../src/fleet/worker-state.js';
import { LoadChannel } from '../../src/shared/load-channel.js';
import { RedisLink } from '../../src/shared/redis-link.js';
import { systemClock } from '../../src/util/clock.js';
import { redisSkip } from '../redis-server.js';
import { redisFixture } from './redis-fixture.js';
import { waitFor } from '../support.js';

const skip = redisSkip();

describe('load channel', { skip }, () => {
  const fx = redisFixture();

  async function replica(id: string, channel: string, opts: { heartbeatMs?: number; maxAgeMs?: number } = {}) {
    const link = new RedisLink({ url: fx.server.url, timeoutMs: 200, connectTimeoutMs: 1000 });
    await link.start();
    const w0 = new WorkerState({ id: 'w0', url: 'http://127.0.0.1:1', pool: 'p', model: 'm' });
    const load = new LoadChannel({
      link,
      workerOf: (wid) => (wid === 'w0' ? w0 : undefined),
      clock: systemClock,
      channel,
      replicaId: id,
      publishIntervalMs: 10,
      heartbeatMs: opts.heartbeatMs ?? 50,
      maxAgeMs: opts.maxAgeMs ?? 60_000,
    });
    await load.start();
    fx.closers.push(() => load.close(), () => link.close());
    await waitFor(async () => ((await fx.raw.pubsub('NUMSUB', channel)) as [string, number])[1] >= 1);
    return { w0, load, link };
  }
  const request = (id: string): InflightRequest => ({ id, promptTokens: 2000, uncachedTokens: 1500, maxTokens: 200, blocks: 107, dispatchedAt: 0 });

  it('mirrors dispatches, first tokens and ends into the other replica, never back to the sender', async () => {
    const a = await replica('a', 'lc:1');
    const b = await replica('b', 'lc:1');
    await waitFor(async () => ((await fx.raw.pubsub('NUMSUB', 'lc:1')) as [string, number])[1] === 2);
    const r = request('r1');
    a.w0.begin(r);
    a.load.observe('begin', a.w0, r);
    await waitFor(() => b.w0.inflightCount === 1);
    assert.equal(b.w0.inflightPrefillTokens, 1500);
    assert.equal(b.w0.inflightBlocks, 107);
    assert.equal(b.w0.routed, 0, "another replica's request is not counted as routed here");
    assert.equal(b.load.mirrored, 1);
    a.load.observe('first', a.w0, r);
    await waitFor(() => b.w0.inflightPrefillTokens === 0);
    a.load.observe('end', a.w0, r);
    await waitFor(() => b.w0.inflightCount === 0);
    assert.equal(b.w0.inflightBlocks, 0);
    // a never applies its own messages.
    await new Promise((res) => setTimeout(res, 60));
    assert.equal(a.w0.inflightCount, 1, 'only its own begin (never ended locally in this test)');
    assert.equal(a.load.counts.received, 0);
  });

  it('mirrors the sequences of a request of n answers', async () => {
    const a = await replica('a', 'lc:6');
    const b = await replica('b', 'lc:6');
    await waitFor(async () => ((await fx.raw.pubsub('NUMSUB', 'lc:6')) as [string, number])[1] === 2);
    const r: InflightRequest = { ...request('r8'), sequences: 8 };
    a.w0.begin(r);
    a.load.observe('begin', a.w0, r);
    await waitFor(() => b.w0.inflightCount === 1);
    assert.equal(b.w0.inflightSequences, 8);
    a.load.observe('end', a.w0, r);
    await waitFor(() => b.w0.inflightCount === 0);
    assert.equal(b.w0.inflightSequences, 0);
  });

  it('ignores malformed messages and entries', async () => {
    const c = await replica('c', 'lc:2');
    await fx.raw.publish('lc:2', 'not json');
    await fx.raw.publish('lc:2', JSON.stringify({ r: 'x', e: [['b', 'w0', 'q', -1, 0, 0, 0], ['z', 'w0', 'q'], [1, 2], ['b', 'w0', 'ok', 10, 10, 10, 1], ['b', 'nope', 'q2', 1, 1, 1, 1], ['b', 'w0', 'q3', 1, 1, 1, 1, 0.5]] }));
    await waitFor(() => c.load.counts.badMessages === 5);
    assert.equal(c.w0.inflightCount, 1);
    assert.equal(c.load.counts.received, 1);
  });

  it('ends the requests of a replica that goes silent', async () => {
    const d = await replica('d', 'lc:3', { heartbeatMs: 50 });
    await fx.raw.publish('lc:3', JSON.stringify({ r: 'ghost', e: [['b', 'w0', 'g1', 100, 100, 10, 7]] }));
    await waitFor(() => d.w0.inflightCount === 1);
    // No heartbeat from 'ghost': gone after 3 × 50 ms.
    await waitFor(() => d.w0.inflightCount === 0, 5_000);
    assert.equal(d.load.counts.expired, 1);
  });

  it('ends mirrored requests older than the longest request', async () => {
    const e = await replica('e', 'lc:4', { maxAgeMs: 100 });
    // A live replica (it keeps sending) whose request never ends.
    const keepAlive = setInterval(() => void fx.raw.publish('lc:4', JSON.stringify({ r: 'slow', e: [] })), 20);
    try {
      await fx.raw.publish('lc:4', JSON.stringify({ r: 'slow', e: [['b', 'w0', 's1', 100, 100, 10, 7]] }));
      await waitFor(() => e.w0.inflightCount === 1);
      await waitFor(() => e.w0.inflightCount === 0, 5_000);
      assert.equal(e.load.counts.expired, 1);
    } finally {
      clearInterval(keepAlive);
    }
  });

  it('drops what it cannot hear while Redis is away, and mirrors again when it returns', async () => {
    const f = await replica('f', 'lc:5');
    const g = await replica('g', 'lc:5');
    await waitFor(async () => ((await fx.raw.pubsub('NUMSUB', 'lc:5')) as [string, number])[1] === 2);
    f.load.observe('begin', f.w0, request('x1'));
    await waitFor(() => g.w0.inflightCount === 1);
    await fx.server.stop();
    // g can no longer hear f's end: it drops f's requests rather than keep a phantom.
    await waitFor(() => g.w0.inflightCount === 0);
    f.load.observe('end', f.w0, request('x1'));
    await waitFor(() => f.load.counts.dropped >= 1);
    await fx.server.start();
    await waitFor(() => f.link.up && g.link.up, 20_000);
    let n = 0;
    await waitFor(async () => {
      f.load.observe('begin', f.w0, request(`y${n++}`));
      await new Promise((res) => setTimeout(res, 30));
      return g.w0.inflightCount > 0;
    }, 20_000);
  });
});
