/** KV-cache events from real simulated workers feed the kvgate policy's prefix index through the gateway. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FIRST_SCRAPE_WAIT_MS } from '../../src/fleet/scraper.js';
import { startSimWorker } from '../../src/sim/worker/server.js';
import { MODEL, metricValue, post, startGateway, startStub, waitFor } from './helpers.js';

test('subscribers start with the gateway, the index learns from events, /admin/workers shows both', async () => {
  const sims = await Promise.all(
    [0, 1].map(() => startSimWorker({ port: 0, model: MODEL, speed: 100, kvEvents: { endpoint: 'tcp://127.0.0.1:0', replayEndpoint: 'tcp://127.0.0.1:0' } })),
  );
  const { gw, url } = await startGateway([], {
    pools: [
      {
        name: 'main',
        model: MODEL,
        workers: sims.map((s, i) => ({ url: s.url, id: `w${i}`, kvEvents: { endpoint: s.kvEventsEndpoint!, replayEndpoint: s.kvReplayEndpoint! } })),
      },
    ],
    policy: { name: 'kvgate' },
  });
  try {
    const system = 'You are a meticulous assistant who answers in full sentences. '.repeat(30);
    const first = await post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'system', content: system }, { role: 'user', content: 'one' }], max_tokens: 4 });
    assert.equal(first.status, 200);
    const home = first.headers.get('x-kvgate-worker')!;
    const describe = async () => ((await (await fetch(url + '/admin/workers')).json()) as any[]).find((w) => w.id === home);
    await waitFor(async () => {
      const d = await describe();
      return d.kvEvents?.source === 'events' && d.kvEvents.batches > 0 && d.prefixIndex?.blocks > 0;
    }, 5000);
    const d = await describe();
    assert.equal(d.prefixIndex.source, 'events');
    const second = await post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'system', content: system }, { role: 'user', content: 'two' }], max_tokens: 4 });
    assert.equal(second.headers.get('x-kvgate-worker'), home, 'the shared prefix draws the request to its cache');
    assert.ok(Number(second.headers.get('x-kvgate-prefix-hit')) > 0.5);
    const m = await (await fetch(url + '/metrics')).text();
    assert.equal(metricValue(m, 'kvgate_kv_events_source', { worker: home, source: 'events' }), 1);
    assert.equal(metricValue(m, 'kvgate_kv_events_source', { worker: home, source: 'approximate' }), 0);
    assert.ok((metricValue(m, 'kvgate_kv_events_batches', { worker: home }) ?? 0) > 0);
    const hits = m.split('\n').filter((l) => l.startsWith('kvgate_route_prefix_hit_ratio_bucket{le="0.5",policy="kvgate"}'));
    assert.equal(hits.length, 1);
    assert.equal(Number(hits[0]!.split(' ')[1]), 1, 'the first request expected no hit, the second more than half');
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});

for (const policy of ['dynamo', 'llm-d-precise']) {
  test(`${policy} routes on the KV events the gateway subscribes to`, async () => {
    const sims = await Promise.all([0, 1].map(() => startSimWorker({ port: 0, model: MODEL, speed: 100, kvEvents: { endpoint: 'tcp://127.0.0.1:0' } })));
    const { gw, url } = await startGateway([], {
      pools: [{ name: 'main', model: MODEL, workers: sims.map((s, i) => ({ url: s.url, id: `w${i}`, kvEvents: { endpoint: s.kvEventsEndpoint! } })) }],
      policy: { name: policy },
    });
    try {
      const system = 'Answer as a careful librarian would, citing the shelf of every book. '.repeat(30);
      const ask = (q: string) => post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'system', content: system }, { role: 'user', content: q }], max_tokens: 4 });
      const first = await ask('one');
      assert.equal(first.status, 200);
      assert.equal(Number(first.headers.get('x-kvgate-prefix-hit')), 0);
      const home = first.headers.get('x-kvgate-worker')!;
      // Nothing is learned from the routing itself: the prefix shows up once the worker's events arrive.
      const index = gw.router.policy.prefixIndex!;
      await waitFor(() => index.workerStatus(home)?.source === 'events' && index.blockCount(home) > 0, 5000);
      const second = await ask('two');
      assert.equal(second.headers.get('x-kvgate-worker'), home, 'the shared prefix draws the request to its cache');
      assert.ok(Number(second.headers.get('x-kvgate-prefix-hit')) > 0.5);
    } finally {
      await gw.close();
      await Promise.all(sims.map((s) => s.close()));
    }
  });
}

test('with KV events the start still scrapes each worker once and waits for it at most FIRST_SCRAPE_WAIT_MS', async () => {
  // A worker that never answers its scrape (scrape.timeoutMs: 48 s at this interval), subscribed
  // to an event endpoint nobody publishes on: the KV-event service waits for the start's own
  // first scrape, bounded, rather than a second round of its own.
  let scrapes = 0;
  const stub = await startStub((req, res) => {
    req.resume();
    if (req.url === '/metrics') scrapes++;
    else res.writeHead(500).end();
  });
  const started = Date.now();
  const { gw } = await startGateway([], {
    pools: [{ name: 'main', model: MODEL, workers: [{ url: stub.url, id: 'w0', kvEvents: { endpoint: 'tcp://127.0.0.1:9' } }] }],
    health: { intervalMs: 60_000 },
    scrape: { intervalMs: 60_000 },
  });
  try {
    const waited = Date.now() - started;
    assert.ok(waited >= FIRST_SCRAPE_WAIT_MS - 50 && waited < 2 * FIRST_SCRAPE_WAIT_MS, `start waited ${waited} ms`);
    assert.equal(scrapes, 1);
  } finally {
    await gw.close();
    await stub.close();
  }
});
