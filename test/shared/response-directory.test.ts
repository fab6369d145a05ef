/** The shared directory of Responses API responses, on a real Redis and with Redis away. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RedisLink } from '../../src/shared/redis-link.js';
import { RedisResponseDirectory, ResponseDirectoryUnreachable } from '../../src/shared/response-directory.js';
import { ResponseAffinity } from '../../src/gateway/responses/response-affinity.js';
import { redisSkip } from '../redis-server.js';
import { redisFixture } from './redis-fixture.js';
import { waitFor } from '../support.js';

describe('response directory', { skip: redisSkip() }, () => {
  const fx = redisFixture();

  it('stores which worker holds a response for which tenant, for a day, and finds it from another link', async () => {
    const links = [0, 1].map(() => new RedisLink({ url: fx.server.url, timeoutMs: 200, connectTimeoutMs: 1000 }));
    for (const l of links) {
      await l.start();
      fx.closers.push(() => l.close());
    }
    const [a, b] = links.map((link) => new RedisResponseDirectory({ link, keyPrefix: 'rd:', ttlS: 86_400 }));
    a!.remember('resp_1', { workerId: 'w3', tenantId: 'acme' });
    await waitFor(() => a!.counts.stored === 1);
    assert.deepEqual(await b!.holderOf('resp_1'), { workerId: 'w3', tenantId: 'acme' });
    assert.equal(await b!.holderOf('resp_2'), undefined);
    assert.deepEqual(b!.counts, { stored: 0, found: 1, notFound: 1, failed: 0 });
    // An entry that names only its worker (as older replicas wrote them): its tenant is not known.
    await fx.raw.set('rd:resp:resp_old', 'w1');
    assert.deepEqual(await b!.holderOf('resp_old'), { workerId: 'w1', tenantId: null });
    const ttl = await fx.raw.ttl('rd:resp:resp_1');
    assert.ok(ttl > 86_000 && ttl <= 86_400, `ttl ${ttl}`);
  });

  it("a continuation's lookup that misses asks again a moment later: the other replica's write may still be landing", async () => {
    const link = new RedisLink({ url: fx.server.url, timeoutMs: 200, connectTimeoutMs: 1000 });
    await link.start();
    fx.closers.push(() => link.close());
    const dir = new RedisResponseDirectory({ link, keyPrefix: 'rl:', ttlS: 60 });
    // The entry lands 20 ms after the lookup began (another replica's write, late).
    const late = (id: string) => setTimeout(() => void fx.raw.set(`rl:resp:${id}`, `acme\u001fw2`), 20);
    late('resp_late');
    assert.deepEqual(await new ResponseAffinity(100, dir).locate('resp_late'), { workerId: 'w2', tenantId: 'acme' });
    late('resp_late2');
    assert.equal(await new ResponseAffinity(100, dir, 0).locate('resp_late2'), undefined, 'without the second look it is missed');
    // An id nobody wrote: asked twice, then unknown.
    const before = dir.counts.notFound;
    assert.equal(await new ResponseAffinity(100, dir).locate('resp_none'), undefined);
    assert.equal(dir.counts.notFound - before, 2);
  });

  it('with Redis away, says it cannot answer (not "not found") and drops writes, counted', async () => {
    const link = new RedisLink({ url: 'redis://127.0.0.1:1', timeoutMs: 100, connectTimeoutMs: 200 });
    await link.start();
    fx.closers.push(() => link.close());
    const d = new RedisResponseDirectory({ link, keyPrefix: 'rd:', ttlS: 60 });
    d.remember('resp_x', { workerId: 'w0', tenantId: 'default' });
    await assert.rejects(d.holderOf('resp_x'), ResponseDirectoryUnreachable);
    assert.equal(d.counts.failed, 2);
    // So does a continuation's lookup: not retried, not taken for an unknown id.
    await assert.rejects(new ResponseAffinity(100, d).locate('resp_x'), ResponseDirectoryUnreachable);
    assert.equal(d.counts.failed, 3);
  });
});
