/**
 * The simulation routes like the live gateway: the same request sequence, sent through a real
 * gateway in front of real simulated workers and replayed in the fleet simulation, lands on the
 * same workers in the same order.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import { createPolicy } from '../../src/scheduler/registry.js';
import { simulateFleet } from '../../src/sim/fleet-sim.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import type { BenchRequest } from '../../src/workload/types.js';
import { estimateTokenizer } from '../../src/tokenizer/index.js';
import { MODEL, post, startGateway, startSims, waitFor } from '../gateway/helpers.js';

const WORKERS = 3;
const SEED = 42;
const prompts = Array.from({ length: 9 }, (_, i) => `Request number ${i}: tell me about the state of the cache and the route it takes ${'again '.repeat(i)}`);

let sims: SimWorker[];

before(async () => {
  sims = await startSims(WORKERS, { speed: 100 });
});

after(async () => {
  await Promise.all(sims.map((s) => s.close()));
});

async function liveOrder(policy: string): Promise<string[]> {
  const { gw, url } = await startGateway(
    sims.map((s) => s.url),
    { policy: { name: policy, seed: SEED, options: {} }, scrape: { intervalMs: 40, staleAfterMs: 5000 } },
  );
  try {
    // Wait for a first scrape of every worker, as the simulation has one at time 0.
    await waitFor(() => gw.registry.workers.every((w) => w.snapshot !== null), 5000);
    const order: string[] = [];
    for (const prompt of prompts) {
      const r = await post(`${url}/v1/completions`, { model: MODEL, prompt, max_tokens: 4, temperature: 0 });
      assert.equal(r.status, 200, r.text);
      order.push(r.headers.get('x-kvgate-worker')!);
      // Wait for a scrape of every worker taken after this answer, so the next decision sees an
      // idle fleet, as the widely spaced simulated arrivals do.
      const answeredAt = performance.now();
      await waitFor(() => gw.router.openCount === 0 && gw.registry.workers.every((w) => w.snapshot !== null && w.snapshot.at > answeredAt), 5000);
    }
    return order;
  } finally {
    await gw.close();
  }
}

async function simOrder(policy: string): Promise<string[]> {
  const reqs: BenchRequest[] = prompts.map((p, i) => ({
    arrivalMs: i * 10_000,
    promptTokens: estimateTokenizer.encode(p),
    promptText: p,
    maxTokens: 4,
    outputSeed: i,
  }));
  const order: string[] = [];
  await simulateFleet(reqs, {
    workers: WORKERS,
    engineConfig: buildEngineConfig({ gpu: 'h100', model: MODEL, hashSeed: 1 }),
    policy: createPolicy(policy),
    seed: SEED,
    model: MODEL,
    routerTrace: (e) => {
      if (e.type === 'route') order.push(e.worker ?? 'refused');
    },
  });
  return order;
}

describe('simulation and live gateway route a request sequence identically', () => {
  for (const policy of ['round-robin', 'least-load']) {
    it(policy, async () => {
      const sim = await simOrder(policy);
      const live = await liveOrder(policy);
      assert.equal(live.length, prompts.length);
      assert.deepEqual(live, sim);
      assert.ok(new Set(sim).size >= 2, `only ${[...new Set(sim)]} used`);
    });
  }
});
