/** Metrics scraping and health probing against real servers on loopback. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { Worker } from 'node:worker_threads';
import { HealthProber } from '../../src/fleet/health.js';
import { fetchText, MetricsScraper } from '../../src/fleet/scraper.js';
import { Upstreams } from '../../src/fleet/upstreams.js';
import { WorkerState } from '../../src/fleet/worker-state.js';
import { startSimWorker } from '../../src/sim/worker/server.js';
import { systemClock } from '../../src/util/clock.js';
import { startStub, waitFor } from '../gateway/helpers.js';

const upstreamOpts = { connections: 0, keepAliveTimeoutMs: 1000, connectTimeoutMs: 500 };

test('scrapes a simulated worker (V1 and legacy names) into a snapshot', async () => {
  for (const legacyMetricNames of [false, true]) {
    const sim = await startSimWorker({ port: 0, speed: 100, numGpuBlocks: 1234, legacyMetricNames });
    const ups = new Upstreams(upstreamOpts);
    const w = new WorkerState({ id: 'w0', url: sim.url, pool: 'p', model: sim.model });
    const scraper = new MetricsScraper([w], { intervalMs: 1000, timeoutMs: 500, clock: systemClock, upstreams: ups });
    try {
      await scraper.scrape(w);
      assert.equal(w.lastScrapeError, null);
      assert.ok(w.snapshot);
      assert.equal(w.snapshot.numGpuBlocks, 1234);
      assert.equal(w.numGpuBlocks, 1234);
      assert.equal(w.snapshot.blockSize, 16);
      assert.equal(w.snapshot.running, 0);
      assert.equal(w.snapshot.kvUsage, 0);
      assert.equal(w.isStale(systemClock.now(), 1000), false);
    } finally {
      await ups.close();
      await sim.close();
    }
  }
});

test('garbage, errors and timeouts mark the scrape failed and the data goes stale; recovery clears it', async () => {
  let mode: 'good' | 'garbage' | 'error' | 'slow' = 'good';
  const stub = await startStub((req, res) => {
    if (mode === 'slow') return; // never answers
    if (mode === 'error') {
      res.writeHead(500);
      return res.end('no');
    }
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end(mode === 'good' ? 'vllm:kv_cache_usage_perc{engine="0"} 0.5\nvllm:num_requests_running 2\n' : '<html>oops</html>\n');
  });
  const ups = new Upstreams(upstreamOpts);
  const w = new WorkerState({ id: 'w', url: stub.url, pool: 'p', model: 'm' });
  const scraper = new MetricsScraper([w], { intervalMs: 1000, timeoutMs: 300, clock: systemClock, upstreams: ups });
  try {
    await scraper.scrape(w);
    assert.equal(w.snapshot?.kvUsage, 0.5);
    const goodAt = w.snapshot!.at;
    for (const m of ['garbage', 'error', 'slow'] as const) {
      mode = m;
      await scraper.scrape(w);
      assert.ok(w.lastScrapeError, `${m}: error noted`);
      assert.equal(w.snapshot!.at, goodAt, `${m}: old snapshot kept`);
    }
    assert.match(w.lastScrapeError!, /timed out/);
    await sleep(60);
    assert.equal(w.isStale(systemClock.now(), 50), true);
    mode = 'good';
    await scraper.scrape(w);
    assert.equal(w.lastScrapeError, null);
    assert.equal(w.isStale(systemClock.now(), 50), false);
  } finally {
    scraper.stop();
    await ups.close();
    await stub.close();
  }
});

test('the scrape loop never overlaps scrapes of one worker', async () => {
  let concurrent = 0;
  let maxConcurrent = 0;
  let count = 0;
  const stub = await startStub((_req, res) => {
    concurrent++;
    count++;
    maxConcurrent = Math.max(maxConcurrent, concurrent);
    // Slower than the interval: a naive setInterval would pile up.
    setTimeout(() => {
      concurrent--;
      res.end('vllm:kv_cache_usage_perc 0.1\n');
    }, 40);
  });
  const ups = new Upstreams(upstreamOpts);
  const w = new WorkerState({ id: 'w', url: stub.url, pool: 'p', model: 'm' });
  const scraper = new MetricsScraper([w], { intervalMs: 10, timeoutMs: 500, clock: systemClock, upstreams: ups });
  scraper.start();
  await sleep(300);
  scraper.stop();
  await ups.close();
  await stub.close();
  assert.equal(maxConcurrent, 1);
  assert.ok(count >= 3, `scraped ${count} times`);
});

test('health: N consecutive failures mark a worker down, one success brings it back', async () => {
  let up = true;
  const stub = await startStub((_req, res) => {
    res.writeHead(up ? 200 : 503);
    res.end();
  });
  const ups = new Upstreams(upstreamOpts);
  const w = new WorkerState({ id: 'w', url: stub.url, pool: 'p', model: 'm' });
  const changes: boolean[] = [];
  // Generous timeout: a probe slowed down by a busy machine must not count as a failure here.
  const prober = new HealthProber([w], { intervalMs: 2000, timeoutMs: 1500, failuresToMarkDown: 3, upstreams: ups, onChange: (_w, h) => changes.push(h) });
  try {
    await prober.probe(w);
    assert.equal(w.healthy, true);
    up = false;
    await prober.probe(w);
    await prober.probe(w);
    assert.equal(w.healthy, true, 'two failures are not enough');
    await prober.probe(w);
    assert.equal(w.healthy, false);
    up = true;
    prober.start();
    await waitFor(() => w.healthy, 2000);
    assert.deepEqual(changes, [false, true]);
  } finally {
    prober.stop();
    await ups.close();
    await stub.close();
  }
});

test('a stall of the gateway’s own event loop is not counted against a worker whose answer arrived during it', async () => {
  // The worker runs on its own thread, so it answers while the test's loop is blocked: 30 ms
  // after each request, saying when the request arrived.
  const server = new Worker(
    `const { parentPort } = require('node:worker_threads');
     const s = require('node:http').createServer((req, res) => { parentPort.postMessage('request'); setTimeout(() => res.end('ok'), 30); });
     s.listen(0, '127.0.0.1', () => parentPort.postMessage(s.address().port));`,
    { eval: true },
  );
  const ups = new Upstreams(upstreamOpts);
  try {
    const [port] = (await once(server, 'message')) as [number];
    const w = new WorkerState({ id: 'w0', url: `http://127.0.0.1:${port}`, pool: 'p', model: 'm' });
    for (let i = 0; i < 3; i++) {
      const received = once(server, 'message');
      const answer = fetchText(ups, w, '/health', 100, 1024).then(
        (text) => text,
        (e: Error) => e.message,
      );
      await received;
      // The gateway's loop is blocked for 400 ms: the answer arrives after 30, the 100 ms timer
      // is due long before the loop next reads the socket.
      const until = performance.now() + 400;
      while (performance.now() < until);
      assert.equal(await answer, 'ok');
    }
  } finally {
    await ups.close();
    await server.terminate();
  }
});

test('a worker that never answers still times out when the gateway’s loop stalls again and again', async () => {
  const silent = await startStub(() => {
    // Never answers.
  });
  const ups = new Upstreams(upstreamOpts);
  try {
    const w = new WorkerState({ id: 'w0', url: silent.url, pool: 'p', model: 'm' });
    const answer = fetchText(ups, w, '/health', 50, 1024).then(
      () => 'answered',
      (e: Error) => e.message,
    );
    // Every turn of the loop blocks it for 100 ms, twice the timeout: each time the timer runs late.
    let stalls = 0;
    const stall = setInterval(() => {
      stalls++;
      const until = performance.now() + 100;
      while (performance.now() < until);
    }, 1);
    const message = await answer.finally(() => clearInterval(stall));
    assert.equal(message, '/health timed out after 50 ms');
    assert.ok(stalls >= 3, `${stalls} stalls`);
  } finally {
    await ups.close();
    await silent.close();
  }
});
