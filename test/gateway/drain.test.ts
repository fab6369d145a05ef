/**
 * Draining a worker for maintenance (POST / DELETE /admin/workers/{id}/drain): no new requests go
 * to it while those it is serving finish; then it is back in routing.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { metricValue, MODEL, post, startGateway, startSims } from './helpers.js';

const ADMIN = { authorization: 'Bearer sk-admin-0001' };
const APP = { authorization: 'Bearer sk-app-00001' };

test('a drained worker gets no new requests, finishes the ones it has, and comes back', async () => {
  // Real-time workers: a 200-token answer takes a visible time.
  const sims = await startSims(2, { speed: 1 });
  const { gw, url } = await startGateway(sims.map((s) => s.url), {
    admin: { keys: [{ value: 'sk-admin-0001' }] },
    tenants: [{ id: 'app', keys: [{ value: 'sk-app-00001' }] }],
  } as never);
  const drain = (id: string, method: 'POST' | 'DELETE', h: Record<string, string> = ADMIN) => fetch(`${url}/admin/workers/${id}/drain`, { method, headers: h });
  const worker = async (id: string) => ((await (await fetch(url + '/admin/workers', { headers: ADMIN })).json()) as Array<{ id: string; draining: boolean; inflight: number }>).find((w) => w.id === id)!;
  try {
    // A long answer on w0, found by sending until one lands there.
    let long: Promise<Awaited<ReturnType<typeof post>>> | null = null;
    for (let i = 0; i < 20 && long === null; i++) {
      const p = post(url + '/v1/completions', { model: MODEL, prompt: `story ${i}`, max_tokens: 200, stream: true }, APP);
      await new Promise((r) => setTimeout(r, 100));
      if ((await worker('w0')).inflight > 0) long = p;
      else await p;
    }
    assert.ok(long !== null, 'no request reached w0');

    const r = await drain('w0', 'POST');
    assert.equal(r.status, 200);
    const body = (await r.json()) as { id: string; draining: boolean; inflight: number };
    assert.deepEqual([body.id, body.draining, body.inflight], ['w0', true, 1]);
    for (let i = 0; i < 10; i++) {
      const q = await post(url + '/v1/completions', { model: MODEL, prompt: `other ${i}`, max_tokens: 2 }, APP);
      assert.equal(q.status, 200, q.text);
      assert.equal(q.headers.get('x-kvgate-worker'), 'w1');
    }
    // Its own request runs to the end, and then it is idle.
    const done = await long;
    assert.equal(done.status, 200);
    assert.match(done.text, /data: \[DONE\]/);
    assert.deepEqual([(await worker('w0')).draining, (await worker('w0')).inflight], [true, 0]);
    const m = await (await fetch(url + '/metrics', { headers: ADMIN })).text();
    assert.equal(metricValue(m, 'kvgate_worker_healthy', { worker: 'w0' }), 0);
    assert.equal(metricValue(m, 'kvgate_worker_draining', { worker: 'w0' }), 1, 'out of routing on purpose, for alerts to tell');
    assert.equal(metricValue(m, 'kvgate_worker_draining', { worker: 'w1' }), 0);

    assert.equal((await drain('w0', 'DELETE')).status, 200);
    assert.equal((await worker('w0')).draining, false);
    // Back in routing: it gets requests again. The scraped view of w0 may still show its long answer
    // running for a scrape or two (a busy machine delays scrapes), so a few requests may go to w1 first.
    const seen = new Set<string>();
    for (let i = 0; i < 40 && !seen.has('w0'); i++) {
      seen.add((await post(url + '/v1/completions', { model: MODEL, prompt: `back ${i} ${'x'.repeat((i % 10) * 30)}`, max_tokens: 2 }, APP)).headers.get('x-kvgate-worker')!);
      if (i % 10 === 9) await new Promise((r) => setTimeout(r, 250));
    }
    assert.ok(seen.has('w0'), `after the drain ended: ${[...seen]}`);

    // Draining every worker leaves none to route to: a 503, as when all are down.
    await drain('w0', 'POST');
    await drain('w1', 'POST');
    const none = await post(url + '/v1/completions', { model: MODEL, prompt: 'nowhere', max_tokens: 2 }, APP);
    assert.equal(none.status, 503, none.text);
    assert.deepEqual(Object.keys(none.json.error).sort(), ['code', 'message', 'param', 'type']);
    await drain('w1', 'DELETE');

    // An admin's route: a tenant's key is refused, an unknown worker is a 404, GET is not a method of it.
    assert.equal((await drain('w0', 'POST', APP)).status, 403);
    assert.equal((await drain('w0', 'POST', {})).status, 401);
    const unknown = await drain('w9', 'POST');
    assert.equal(unknown.status, 404);
    assert.equal(((await unknown.json()) as { error: { code: string } }).error.code, 'worker_not_found');
    assert.equal((await fetch(`${url}/admin/workers/w0/drain`, { headers: ADMIN })).status, 405);
  } finally {
    await gw.close();
    for (const s of sims) await s.close();
  }
});
