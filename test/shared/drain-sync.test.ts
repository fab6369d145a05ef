/**
 * Drained workers shared through a real Redis: a drain set through one replica is followed by the
 * others at their next read, its end too; a worker at another URL is left alone; and a drain made
 * while Redis is away stays with the replica that took it and is shared once Redis is back.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { WorkerState } from '../../src/fleet/worker-state.js';
import { DrainSync } from '../../src/shared/drain-sync.js';
import { RedisLink } from '../../src/shared/redis-link.js';
import { redisSkip } from '../redis-server.js';
import { redisFixture } from './redis-fixture.js';
import { waitFor } from '../support.js';

describe('drain sync', { skip: redisSkip() }, () => {
  const fx = redisFixture();

  async function replica(key: string, urls: Record<string, string>) {
    const link = new RedisLink({ url: fx.server.url, timeoutMs: 200, connectTimeoutMs: 1000 });
    await link.start();
    const workers = Object.entries(urls).map(([id, url]) => new WorkerState({ id, url, pool: 'p', model: 'm' }));
    const applied: string[] = [];
    // Polled by hand: `poll()` is what the timer calls.
    const sync = new DrainSync({ link, key, workers: () => workers, pollMs: 3_600_000, onApplied: (w, on) => applied.push(`${w.id} ${on}`) });
    fx.closers.push(() => link.close());
    return { link, workers, sync, applied, w: (id: string) => workers.find((w) => w.id === id)! };
  }

  it('follows a drain set through another replica, and its end; a worker at another URL is not drained', async () => {
    const a = await replica('ds1:drained', { w0: 'http://127.0.0.1:9000', w1: 'http://127.0.0.1:9001' });
    const b = await replica('ds1:drained', { w0: 'http://127.0.0.1:9000', w1: 'http://10.0.0.9:9001' });
    a.w('w0').draining = true;
    a.sync.set(a.w('w0'), true);
    a.w('w1').draining = true;
    a.sync.set(a.w('w1'), true);
    await waitFor(async () => (await fx.raw.hlen('ds1:drained')) === 2);
    await b.sync.poll();
    assert.equal(b.w('w0').draining, true);
    assert.equal(b.w('w1').draining, false, 'the same id at another URL is another worker');
    assert.deepEqual(b.applied, ['w0 true']);
    // A's own poll leaves its own state as it is.
    await a.sync.poll();
    assert.deepEqual([a.w('w0').draining, a.w('w1').draining, a.applied.length], [true, true, 0]);
    b.w('w0').draining = false;
    b.sync.set(b.w('w0'), false);
    await waitFor(async () => (await fx.raw.hexists('ds1:drained', 'w0')) === 0);
    await a.sync.poll();
    assert.equal(a.w('w0').draining, false);
    assert.deepEqual(a.applied, ['w0 false']);
  });

  it('keeps a drain made while Redis is away, and shares it when Redis is back', async () => {
    const a = await replica('ds2:drained', { w0: 'http://127.0.0.1:9000' });
    const b = await replica('ds2:drained', { w0: 'http://127.0.0.1:9000' });
    await fx.server.stop();
    await waitFor(() => !a.link.up && !b.link.up);
    a.w('w0').draining = true;
    a.sync.set(a.w('w0'), true);
    await a.sync.poll(); // nothing to read: Redis is away
    assert.equal(a.w('w0').draining, true, 'kept by the replica that took it');
    await fx.server.start();
    await waitFor(() => a.link.up && b.link.up, 20_000);
    // A's next poll writes the change before it reads the set, so it is not undone.
    await a.sync.poll();
    assert.equal(a.w('w0').draining, true);
    assert.equal(await fx.raw.hget('ds2:drained', 'w0'), 'http://127.0.0.1:9000');
    await b.sync.poll();
    assert.equal(b.w('w0').draining, true);
  });
});
