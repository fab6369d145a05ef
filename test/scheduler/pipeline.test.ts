import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { WorkerState } from '../../src/fleet/worker-state.js';
import { healthyFilter } from '../../src/scheduler/filters/healthy.js';
import { PipelinePolicy, type PipelineConfig } from '../../src/scheduler/pipeline.js';
import { USED_STALE_METRICS } from '../../src/scheduler/state-keys.js';
import type { Filter, Pick, Picker, Producer, RoutingContext, Scorer } from '../../src/scheduler/types.js';
import { seededRng } from '../../src/util/rng.js';
import { stateKey } from '../../src/util/state.js';
import { request, worker } from './helpers.js';

const ctx: RoutingContext = { now: 0, rng: seededRng(1), staleAfterMs: 5000 };
const ids = (ws: readonly { id: string }[]) => ws.map((w) => w.id);

/** Rates each worker by a fixed table, by worker id. */
const fixed = (name: string, byId: Record<string, number>): Scorer => ({
  name,
  score: (_req, ws) => ws.map((w) => byId[w.id] ?? 0),
});

/** Picks the first candidate and records what it saw. */
function firstPicker(seen: Array<{ id: string; score: number; parts: Record<string, number> }>, extra: Partial<Pick> = {}): Picker {
  return {
    name: 'first',
    pick(_req, candidates) {
      for (const c of candidates) seen.push({ id: c.worker.id, score: c.score, parts: { ...c.parts } });
      return candidates.length > 0 ? { worker: candidates[0]!, reason: 'first', ...extra } : null;
    },
  };
}

const dropIds = (name: string, drop: string[], log?: string[][]): Filter => ({
  name,
  filter(_req, ws) {
    log?.push(ids(ws));
    return ws.filter((w) => !drop.includes(w.id));
  },
});

test('filters run in order, each on the survivors of the one before', () => {
  const log: string[][] = [];
  const seen: Array<{ id: string; score: number; parts: Record<string, number> }> = [];
  const p = new PipelinePolicy({
    name: 't',
    filters: [dropIds('one', ['a'], log), dropIds('two', ['c'], log)],
    scorers: [],
    picker: firstPicker(seen),
  });
  const out = p.route(request([1, 2, 3]), ['a', 'b', 'c', 'd'].map((id) => worker(id)), ctx);
  assert.deepEqual(log, [['a', 'b', 'c', 'd'], ['b', 'c', 'd']]);
  assert.deepEqual(ids(seen), ['b', 'd']);
  assert.ok(out.ok && out.decision.worker.id === 'b' && out.decision.policy === 't' && out.decision.reason === 'first');
});

test('a filter that leaves nobody ends the decision: 400 if it says the request never fits, else 503 naming it', () => {
  const neverAsked: WorkerState[][] = [];
  const cases: Array<{ never: string | null; status: number; code: string; message: RegExp }> = [
    { never: 'too long for every worker', status: 400, code: 'context_length_exceeded', message: /^too long for every worker$/ },
    { never: null, status: 503, code: 'no_worker_available', message: /model 'm' can take the request now: every worker was filtered out \(empty\)/ },
  ];
  for (const c of cases) {
    const empty: Filter = {
      name: 'empty',
      filter: () => [],
      neverFits(_req, ws) {
        neverAsked.push([...ws]);
        return c.never;
      },
    };
    const p = new PipelinePolicy({ name: 't', filters: [dropIds('first', ['a']), empty], scorers: [], picker: firstPicker([]) });
    const out = p.route(request([1]), ['a', 'b'].map((id) => worker(id)), ctx);
    assert.ok(!out.ok);
    if (!out.ok) {
      assert.equal(out.status, c.status);
      assert.equal(out.code, c.code);
      assert.match(out.message, c.message);
    }
  }
  // neverFits is asked about the filter's own input, not the whole pool.
  assert.deepEqual(neverAsked.map(ids), [['b'], ['b']]);
  // A filter without neverFits: 503.
  const p = new PipelinePolicy({ name: 't', filters: [dropIds('all', ['a'])], scorers: [], picker: firstPicker([]) });
  const out = p.route(request([1]), [worker('a')], ctx);
  assert.ok(!out.ok && out.status === 503);
});

test('producers run after the filters and before the scorers, over the filtered candidates', () => {
  const order: string[] = [];
  const LOADS = stateKey<Map<string, number>>('test.loads');
  const producer: Producer = {
    name: 'loads',
    produce(req, ws) {
      order.push(`produce ${ids(ws).join(',')}`);
      req.state.set(LOADS, new Map(ws.map((w, i) => [w.id, i / 10])));
    },
  };
  const reader: Scorer = {
    name: 'reader',
    score(req, ws) {
      order.push('score');
      const loads = req.state.get(LOADS)!;
      return ws.map((w) => loads.get(w.id)!);
    },
  };
  const seen: Array<{ id: string; score: number; parts: Record<string, number> }> = [];
  const p = new PipelinePolicy({
    name: 't',
    filters: [{ name: 'f', filter: (_r, ws) => (order.push('filter'), ws.filter((w) => w.id !== 'a')) }],
    producers: [producer],
    scorers: [{ scorer: reader, weight: 1 }],
    picker: firstPicker(seen),
  });
  p.route(request([1]), ['a', 'b', 'c'].map((id) => worker(id)), ctx);
  assert.deepEqual(order, ['filter', 'produce b,c', 'score']);
  assert.deepEqual(seen.map((s) => s.parts['reader']), [0, 0.1]);
});

test('a candidate’s score is Σ weight · rating, each rating clamped to [0, 1] and kept under the scorer’s name', () => {
  const seen: Array<{ id: string; score: number; parts: Record<string, number> }> = [];
  const p = new PipelinePolicy({
    name: 't',
    filters: [],
    scorers: [
      { scorer: fixed('x', { a: 0.5, b: 2, c: -1 }), weight: 2 },
      { scorer: fixed('y', { a: 0.25, b: Number.NaN, c: 1 }), weight: 4 },
    ],
    picker: firstPicker(seen),
  });
  p.route(request([1]), ['a', 'b', 'c'].map((id) => worker(id)), ctx);
  assert.deepEqual(seen, [
    { id: 'a', score: 2 * 0.5 + 4 * 0.25, parts: { x: 0.5, y: 0.25 } },
    { id: 'b', score: 2 * 1, parts: { x: 1, y: 0 } },
    { id: 'c', score: 4 * 1, parts: { x: 0, y: 1 } },
  ]);
});

test('expected prefix hit: the picker’s own, else the hook’s, else the prefix rating, else 0; clamped', () => {
  const cases: Array<{ what: string; cfg: Partial<PipelineConfig>; pick?: Partial<Pick>; hit: number }> = [
    { what: 'picker states it', cfg: { scorers: [{ scorer: fixed('prefix', { a: 0.3 }), weight: 1 }], expectedPrefixHit: () => 0.6 }, pick: { expectedPrefixHit: 0.9 }, hit: 0.9 },
    { what: 'hook', cfg: { scorers: [{ scorer: fixed('prefix', { a: 0.3 }), weight: 1 }], expectedPrefixHit: () => 0.6 }, hit: 0.6 },
    { what: 'prefix rating', cfg: { scorers: [{ scorer: fixed('prefix', { a: 0.3 }), weight: 0 }] }, hit: 0.3 },
    { what: 'nothing', cfg: { scorers: [{ scorer: fixed('other', { a: 0.3 }), weight: 1 }] }, hit: 0 },
    { what: 'clamped', cfg: {}, pick: { expectedPrefixHit: 1.5 }, hit: 1 },
  ];
  for (const c of cases) {
    const p = new PipelinePolicy({ name: 't', filters: [], scorers: [], picker: firstPicker([], c.pick), ...c.cfg });
    const out = p.route(request([1]), [worker('a')], ctx);
    assert.ok(out.ok, c.what);
    if (out.ok) assert.equal(out.decision.expectedPrefixHit, c.hit, c.what);
  }
});

test('no pick is 503; a plugin’s stale-metrics flag is reported with the decision', () => {
  const none = new PipelinePolicy({ name: 't', filters: [], scorers: [], picker: { name: 'none', pick: () => null } });
  const out = none.route(request([1]), [worker('a')], ctx);
  assert.ok(!out.ok && out.status === 503 && out.code === 'no_worker_available');

  const flagging: Filter = {
    name: 'stale',
    filter(req, ws) {
      req.state.set(USED_STALE_METRICS, true);
      return [...ws];
    },
  };
  const p = new PipelinePolicy({ name: 't', filters: [flagging], scorers: [], picker: firstPicker([]) });
  const flagged = p.route(request([1]), [worker('a')], ctx);
  assert.ok(flagged.ok && flagged.decision.usedStaleMetrics === true);
  const plain = new PipelinePolicy({ name: 't', filters: [], scorers: [], picker: firstPicker([]) }).route(request([1]), [worker('a')], ctx);
  assert.ok(plain.ok && plain.decision.usedStaleMetrics === undefined);
});

test('policy properties and hooks come from the config', () => {
  const calls: string[] = [];
  const p = new PipelinePolicy({
    name: 't',
    filters: [],
    scorers: [],
    picker: firstPicker([]),
    scrapeIntervalMs: 50,
    usesOracle: true,
    onDispatch: () => calls.push('dispatch'),
    describeWorker: (w) => ({ id: w.id }),
  });
  assert.equal(p.scrapeIntervalMs, 50);
  assert.equal(p.usesOracle, true);
  assert.equal(p.prefixIndex, undefined);
  assert.deepEqual(p.describeWorker?.(worker('z')), { id: 'z' });
  const out = p.route(request([1]), [worker('a')], ctx);
  assert.ok(out.ok);
  if (out.ok) p.onDispatch?.(request([1]), out.decision, ctx);
  assert.deepEqual(calls, ['dispatch']);
});

test('no routable worker is 503 naming why each is out: failing health checks, an open breaker, draining', () => {
  const p = new PipelinePolicy({ name: 't', filters: [healthyFilter], scorers: [], picker: firstPicker([]) });
  const [down, open, drained] = [worker('a'), worker('b'), worker('c')];
  down.healthy = false;
  open.circuitOpen = true;
  drained.draining = true;
  const out = p.route(request([1]), [down, open, drained], ctx);
  assert.ok(!out.ok && out.status === 503 && out.code === 'no_worker_available');
  assert.equal(out.message, "no worker for model 'm' can take the request now: no healthy worker (3 workers: 1 failing health checks, 1 with an open circuit breaker, 1 draining)");
});
