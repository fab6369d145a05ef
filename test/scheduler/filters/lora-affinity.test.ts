import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WorkerRegistry } from '../../../src/fleet/registry.js';
import { WorkerState, type MetricsSnapshot } from '../../../src/fleet/worker-state.js';
import { PROMPT_ADAPTER } from '../../../src/kv/prompt-blocks.js';
import { loraAffinityFilter as makeFilter, SlotDemand } from '../../../src/scheduler/filters/lora-affinity.js';
import type { RouteRequest, RoutingContext } from '../../../src/scheduler/types.js';
import { RequestState } from '../../../src/util/state.js';

function worker(id: string, lora?: MetricsSnapshot['lora']): WorkerState {
  const w = new WorkerState({ id, url: `http://${id}`, pool: 'p', model: 'm', adapters: ['a', 'b', 'c'] });
  w.snapshot = { at: 0, kvUsage: 0, running: 0, waiting: 0, ...(lora ? { lora } : {}) };
  return w;
}
function req(adapter?: string): RouteRequest {
  const state = new RequestState();
  if (adapter !== undefined) state.set(PROMPT_ADAPTER, adapter);
  return { id: 'r', state } as unknown as RouteRequest;
}
const ctx = {} as RoutingContext;
const ids = (ws: readonly WorkerState[]) => ws.map((w) => w.id);
/** Step 2 never spreads: the rules before the fresh-slot demand is weighed. */
const loraAffinityFilter = makeFilter({ spreadRisk: 0 });

test('an adapter stays on its workers while they keep up, spreads to free slots when they do not, never to taken ones', () => {
  const busy = worker('busy', { maxLoras: 1, running: ['b'], waiting: [] });
  const active = worker('active', { maxLoras: 1, running: ['a'], waiting: [] });
  const queued = worker('queued', { maxLoras: 1, running: ['b'], waiting: ['a'] });
  const free = worker('free', { maxLoras: 2, running: ['b'], waiting: [] });
  const silent = worker('silent');
  assert.deepEqual(ids(loraAffinityFilter.filter(req('a'), [busy, active, queued, free, silent], ctx)), ['active', 'queued']);
  // Its workers backed up (more than a step of prompt tokens waiting): it spreads to free slots.
  for (const w of [active, queued]) w.begin({ id: `big-${w.id}`, promptTokens: 9000, uncachedTokens: 9000, maxTokens: 5, blocks: 600, dispatchedAt: 0, adapter: 'a' });
  assert.deepEqual(ids(loraAffinityFilter.filter(req('a'), [busy, active, queued, free, silent], ctx)), ['active', 'queued', 'free', 'silent']);
  // Not active anywhere: the free slots.
  assert.deepEqual(ids(loraAffinityFilter.filter(req('c'), [busy, free], ctx)), ['free']);
  // The base model's requests, and fleets that report no LoRA state, are not limited.
  const all = [busy, active];
  assert.equal(loraAffinityFilter.filter(req(), all, ctx), all);
  const quiet = [worker('q1'), worker('q2')];
  assert.equal(loraAffinityFilter.filter(req('a'), quiet, ctx), quiet);
  // Every slot taken by other adapters: all are kept, the scorers pick.
  assert.deepEqual(ids(loraAffinityFilter.filter(req('c'), [busy, worker('x', { maxLoras: 1, running: ['a'], waiting: [] })], ctx)), ['busy', 'x']);
});

test('while free slots outnumber the adapters active nowhere, an active adapter may spread', () => {
  const ws = (adapters: string[], ...snaps: Array<MetricsSnapshot['lora']>) =>
    snaps.map((lora, i) => {
      const w = new WorkerState({ id: `w${i}`, url: `http://w${i}`, pool: 'p', model: 'm', adapters });
      w.snapshot = { at: 0, kvUsage: 0, running: 0, waiting: 0, lora };
      return w;
    });
  // 3 free slots, one adapter (b) active nowhere: a spreads.
  const roomy = ws(['a', 'b'], { maxLoras: 2, running: ['a'], waiting: [] }, { maxLoras: 2, running: [], waiting: [] });
  assert.deepEqual(ids(loraAffinityFilter.filter(req('a'), roomy, ctx)), ['w0', 'w1']);
  // 1 free slot, and b, c, d active nowhere: a stays where it runs.
  const tight = ws(['a', 'b', 'c', 'd'], { maxLoras: 2, running: ['a'], waiting: [] }, { maxLoras: 1, running: [], waiting: [] });
  assert.deepEqual(ids(loraAffinityFilter.filter(req('a'), tight, ctx)), ['w0']);
  assert.deepEqual(tight[0]!.freeAdapterSlots(new Set()), 1);
  // Workers serving different adapters (some loaded at run time on one only): every worker's
  // adapters that run nowhere count, not the first worker's.
  const [only, more] = ws(['a'], { maxLoras: 2, running: ['a'], waiting: [] }, { maxLoras: 1, running: [], waiting: [] });
  assert.deepEqual(ids(loraAffinityFilter.filter(req('a'), [only!, more!], ctx)), ['w0', 'w1'], 'nothing else wants a slot: a spreads');
  const registry = new WorkerRegistry([], { staleAfterMs: 5000, now: () => 0, breaker: { failuresToOpen: 5, coolDownMs: 1000 } });
  const loaded = registry.add({ id: 'w1', url: 'http://w1', pool: 'p', model: 'm', adapters: ['a'] });
  loaded.snapshot = { at: 0, kvUsage: 0, running: 0, waiting: 0, lora: { maxLoras: 1, running: [], waiting: [] } };
  registry.setLoadedAdapters(loaded, ['b', 'c']);
  assert.deepEqual(ids(loraAffinityFilter.filter(req('a'), [only!, loaded], ctx)), ['w0'], "w1's b and c, active nowhere, may want its slot");
});

test("this gateway's own requests in flight count before the next scrape shows them", () => {
  const w = worker('w', { maxLoras: 1, running: [], waiting: [] });
  assert.equal(w.adapterSlot('a'), 'free');
  w.begin({ id: 'r1', promptTokens: 10, uncachedTokens: 10, maxTokens: 5, blocks: 1, dispatchedAt: 0, adapter: 'b' });
  assert.equal(w.adapterSlot('a'), 'taken', 'b took the only slot');
  assert.equal(w.adapterSlot('b'), 'active');
  w.begin({ id: 'r2', promptTokens: 10, uncachedTokens: 10, maxTokens: 5, blocks: 1, dispatchedAt: 0, adapter: 'b' });
  w.end('r1');
  assert.equal(w.adapterSlot('a'), 'taken', 'one of b still runs');
  w.end('r2');
  assert.equal(w.adapterSlot('a'), 'free');
  assert.equal(w.inflightAdapters.size, 0);
});

test('the fresh-slot demand: Little\'s law over the share of requests whose adapter ran nowhere, Poisson arrivals', () => {
  const d = new SlotDemand();
  for (let i = 0; i < 63; i++) d.note(i % 10 === 0);
  assert.equal(d.covers(5, 4, 0.5), false, 'not before 64 requests are seen');
  d.note(false);
  // A share of 7 in 64 and 4 requests in flight: 0.4375 fresh-slot arrivals per stay.
  // For Poisson(0.4375), P(N > 2) = 0.0101, P(N > 1) = 0.072, P(N > 0) = 0.35.
  assert.equal(d.covers(2, 4, 0.02), true);
  assert.equal(d.covers(2, 4, 0.01), false);
  assert.equal(d.covers(1, 4, 0.02), false);
  assert.equal(d.covers(1, 4, 0.1), true);
  assert.equal(d.covers(0, 4, 0.1), false);
  assert.equal(d.covers(-1, 0, 1), false, 'no slot left after taking one: never');
  // Every request a fresh one: the share climbs and the same slots no longer cover it.
  for (let i = 0; i < 64; i++) d.note(true);
  assert.equal(d.covers(2, 4, 0.02), false);
});

test('with slots scarce, an adapter that keeps up spreads to free slots only when the slots left cover the demand', () => {
  // Four adapters besides a, all active nowhere, and two free slots: step 2 applies.
  const mk = (id: string, running: string[]) => {
    const w = new WorkerState({ id, url: `http://${id}`, pool: 'p', model: 'm', adapters: ['a', 'b', 'c', 'd', 'e'] });
    w.snapshot = { at: 0, kvUsage: 0, running: 0, waiting: 0, lora: { maxLoras: 1, running, waiting: [] } };
    return w;
  };
  const fleet = [mk('home', ['a']), mk('f1', []), mk('f2', [])];
  const quietFleet = makeFilter({ spreadRisk: 0.1 });
  // a's requests only, always on its worker: no fresh slot wanted, so the free slots may be used.
  for (let i = 0; i < 63; i++) quietFleet.filter(req('a'), fleet, ctx);
  assert.deepEqual(ids(quietFleet.filter(req('a'), fleet, ctx)), ['home', 'f1', 'f2']);
  // Half the requests name adapters running nowhere, with 6 of a's in flight: Poisson(3) > 1 is
  // likely, so a stays home.
  const busyFleet = makeFilter({ spreadRisk: 0.1 });
  for (let i = 0; i < 6; i++) fleet[0]!.begin({ id: `a${i}`, promptTokens: 10, uncachedTokens: 10, maxTokens: 5, blocks: 1, dispatchedAt: 0, adapter: 'a' });
  for (let i = 0; i < 64; i++) busyFleet.filter(req(i % 2 === 0 ? 'a' : 'b'), fleet, ctx);
  assert.deepEqual(ids(busyFleet.filter(req('a'), fleet, ctx)), ['home']);
  // A filter rebuilt on the same demand (the policy's options changed) goes on from its count.
  const rebuilt = makeFilter({ spreadRisk: 0.1, demand: new SlotDemand() });
  assert.deepEqual(ids(rebuilt.filter(req('a'), fleet, ctx)), ['home'], 'a fresh count spreads nothing');
  const shared = new SlotDemand();
  const before = makeFilter({ spreadRisk: 0.1, demand: shared });
  for (let i = 0; i < 64; i++) before.filter(req(i % 32 === 0 ? 'b' : 'a'), fleet, ctx);
  assert.deepEqual(ids(makeFilter({ spreadRisk: 0.1, demand: shared }).filter(req('a'), fleet, ctx)), ['home', 'f1', 'f2']);
  // spreadRisk 0 never spreads in step 2.
  assert.deepEqual(ids(loraAffinityFilter.filter(req('a'), fleet, ctx)), ['home']);
});
