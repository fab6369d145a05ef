import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WorkerRegistry } from '../../../src/fleet/registry.js';
import { WorkerState, type MetricsSnapshot } from '../../../src/fleet/worker-state.js';
import { PROMPT_ADAPTER } from '../../../src/kv/prompt-blocks.js';
import { loraAffinityFilter } from '../../../src/scheduler/filters/lora-affinity.js';
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
