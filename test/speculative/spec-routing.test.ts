/** Routing between workers that speculate inside the engine and plain ones. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseConfig } from '../../src/config/index.js';
import { WorkerState, type MetricsSnapshot } from '../../src/fleet/worker-state.js';
import { createGateway } from '../../src/gateway/gateway.js';
import { startSimWorker } from '../../src/sim/worker/server.js';
import { chooseGroup } from '../../src/speculative/spec-routing.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { metricValue, waitFor } from '../support.js';

function worker(id: string, snap: Partial<MetricsSnapshot>): WorkerState {
  const w = new WorkerState({ id, url: `http://127.0.0.1:1/${id}`, pool: 'p', model: 'm' });
  w.applySnapshot({ at: 0, kvUsage: 0.1, running: 0, waiting: 0, ...snap });
  return w;
}

const O = { busyRunning: 8, minAcceptanceLength: 1.8 };

describe('choosing speculating or plain workers', () => {
  it('leaves a model with one kind of worker alone', () => {
    assert.equal(chooseGroup([worker('a', {}), worker('b', {})], O).group, 'all');
    assert.equal(chooseGroup([worker('a', { specDrafts: 10, specAcceptedTokens: 20 })], O).group, 'all');
  });

  it('sends requests to the speculating workers at low load when they accept enough', () => {
    const ws = [worker('s', { specDrafts: 100, specAcceptedTokens: 150, running: 1 }), worker('p', { running: 1 })];
    assert.deepEqual(chooseGroup(ws, O), { group: 'speculating', reason: 'acceptance' });
    const poor = [worker('s', { specDrafts: 100, specAcceptedTokens: 50, running: 1 }), worker('p', { running: 1 })];
    assert.deepEqual(chooseGroup(poor, O), { group: 'plain', reason: 'low_acceptance' });
    // A handful of drafts is no evidence either way.
    const fresh = [worker('s', { specDrafts: 3, specAcceptedTokens: 0, running: 0 }), worker('p', {})];
    assert.deepEqual(chooseGroup(fresh, O), { group: 'speculating', reason: 'unmeasured' });
  });

  it('sends everything to the plain workers under load', () => {
    const busy = [worker('s', { specDrafts: 100, specAcceptedTokens: 300, running: 9 }), worker('p', { running: 9 })];
    assert.deepEqual(chooseGroup(busy, O), { group: 'plain', reason: 'busy' });
    const queued = [worker('s', { specDrafts: 100, specAcceptedTokens: 300, running: 1, waiting: 2 }), worker('p', { running: 1 })];
    assert.equal(chooseGroup(queued, O).group, 'plain');
  });
});

describe('speculation-aware routing in the gateway', () => {
  it('routes to the speculating worker while idle, to the plain one once the pool is busy', async () => {
    // Slow enough (speed 5) that the long requests below run for seconds, however busy the machine,
    // while the gateway's scrapes see them.
    const spec = await startSimWorker({ model: 'llama-3.1-70b', tp: 4, speed: 5, speculative: { k: 4, draftModel: 'llama-3.1-8b', acceptance: 0.8 } });
    const plain = await startSimWorker({ model: 'llama-3.1-70b', tp: 4, speed: 5 });
    const gw = createGateway(
      parseConfig({
        listen: { host: '127.0.0.1', port: 0 },
        pools: [{ name: 'p', model: 'llama-3.1-70b', workers: [{ url: spec.url, id: 'spec' }, { url: plain.url, id: 'plain' }] }],
        scrape: { intervalMs: 50 },
        log: { level: 'silent' },
        server: { routingHeaders: true }, // the test reads x-kvgate-worker
        speculative: { routing: { enabled: true, busyRunning: 3 } },
      }),
      { logger: createLogger({ level: 'silent' }) },
    );
    const { url } = await gw.start();
    const ask = (maxTokens: number) =>
      fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'llama-3.1-70b', prompt: 'Tell me about tides.', max_tokens: maxTokens, ignore_eos: true }),
      });
    try {
      await waitFor(() => gw.registry.workers.every((w) => w.snapshot !== null), 30_000);
      for (let i = 0; i < 3; i++) {
        const r = await ask(8);
        await r.text();
        assert.equal(r.headers.get('x-kvgate-worker'), 'spec');
      }
      // Load the pool with long requests; once the workers report it busy, requests go plain.
      const long = Array.from({ length: 8 }, () => ask(2000).then((r) => r.text()));
      await waitFor(() => gw.registry.workers.reduce((a, w) => a + (w.snapshot?.running ?? 0), 0) >= 6, 30_000);
      const where: string[] = [];
      for (let i = 0; i < 3; i++) {
        const r = await ask(4);
        await r.text();
        where.push(r.headers.get('x-kvgate-worker')!);
      }
      assert.deepEqual(where, ['plain', 'plain', 'plain']);
      await Promise.all(long);
      const m = await (await fetch(`${url}/metrics`)).text();
      assert.ok((metricValue(m, 'kvgate_spec_routing_total', { model: 'llama-3.1-70b', group: 'plain', reason: 'busy' }) ?? 0) >= 3);
    } finally {
      await gw.close();
      await spec.close();
      await plain.close();
    }
  });
});
