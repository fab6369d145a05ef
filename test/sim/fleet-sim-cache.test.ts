/** The response cache in the fleet simulation: the gateway's cache code, in virtual time. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MemoryStore } from '../../src/cache/memory-store.js';
import { ResponseCache } from '../../src/cache/response-cache.js';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import { createPolicy } from '../../src/scheduler/registry.js';
import { simulateFleet } from '../../src/sim/fleet-sim.js';
import { summarize } from '../../src/bench/metrics.js';
import { VirtualClock } from '../../src/util/clock.js';
import type { BenchRequest } from '../../src/workload/types.js';
import { fillStream } from '../../src/workload/tokens.js';

const cfg = buildEngineConfig({ gpu: 'h100', model: 'llama-3-8b', hashSeed: 7, emitTokens: false });

function req(arrivalMs: number, seed: number, tenant?: string, maxTokens = 20): BenchRequest {
  const p = new Int32Array(300);
  fillStream(p, 0, seed, 300);
  const r: BenchRequest = { arrivalMs, promptTokens: p, maxTokens, outputSeed: seed };
  if (tenant !== undefined) r.tenant = tenant;
  return r;
}

function cache(ttlMs = 60_000) {
  const clock = new VirtualClock(0);
  const store = new MemoryStore({ maxBytes: 1 << 24, now: () => clock.now() });
  const c = new ResponseCache({ defaults: { enabled: true, ttlMs, maxEntryBytes: 1 << 20, sampled: false }, singleFlight: true, keyPrefix: '', store, metrics: null, now: () => clock.now(), wallNow: () => clock.now() });
  return { cache: c, clock };
}

const run = (reqs: BenchRequest[], c = cache(), overheadMs = 0) =>
  simulateFleet(reqs, { workers: 2, engineConfig: cfg, policy: createPolicy('round-robin'), seed: 1, cache: c, overheadMs });

describe('fleet simulation with the response cache', () => {
  it('answers a later identical request from the cache without a worker', async () => {
    const r = await run([req(0, 1), req(5000, 1), req(6000, 2)], cache(), 0.5);
    assert.deepEqual(r.cache, { hits: 1, coalesced: 0, misses: 2, stored: 2, evictions: 0 });
    assert.equal(r.completed.arrival.length, 3);
    const i = r.completed.fromCache!.indexOf(1);
    assert.equal(r.completed.worker[i], -1);
    assert.equal(r.completed.arrival[i], 5000);
    assert.equal(r.completed.firstToken[i], 5000.5, 'answered after the gateway overhead');
    assert.equal(r.completed.outputTokens[i], 20);
    assert.equal(r.workers.reduce((n, w) => n + w.routed, 0), 2, 'only the misses reached a worker');
    const s = summarize(r, { tp: 1, gpuHourCost: 1 });
    assert.equal(s.cache_hit_rate, 0.3333);
  });

  it('a request identical to one in flight follows it: the leader’s first token and finish', async () => {
    const r = await run([req(0, 1), req(1, 1)]);
    assert.deepEqual(r.cache, { hits: 0, coalesced: 1, misses: 1, stored: 1, evictions: 0 });
    const c = r.completed;
    const lead = c.fromCache!.indexOf(0);
    const follow = c.fromCache!.indexOf(2);
    assert.equal(c.finish[follow], c.finish[lead]);
    assert.equal(c.firstToken[follow], Math.max(1, c.firstToken[lead]!));
  });

  it('keeps tenants apart and expires entries in virtual time', async () => {
    const r = await run([req(0, 1, 'a'), req(5000, 1, 'b'), req(10_000, 1, 'a'), req(80_000, 1, 'a')], cache(60_000));
    assert.deepEqual(r.cache, { hits: 1, coalesced: 0, misses: 3, stored: 3, evictions: 0 });
  });

  it('without a cache nothing changes: every request reaches a worker', async () => {
    const r = await simulateFleet([req(0, 1), req(5000, 1)], { workers: 2, engineConfig: cfg, policy: createPolicy('round-robin'), seed: 1 });
    assert.equal(r.cache, null);
    assert.equal(r.workers.reduce((n, w) => n + w.routed, 0), 2);
    assert.equal(summarize(r, { tp: 1, gpuHourCost: 1 }).cache_hit_rate, 0);
  });
});
