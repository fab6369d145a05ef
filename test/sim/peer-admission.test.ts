/**
 * llm-d's flow control and probabilistic admitter as the simulation models them
 * (src/sim/peer-admission.ts), on hand-worked examples and a hand-driven clock.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { PriorityClass } from '../../src/admission/classes.js';
import type { WorkerState } from '../../src/fleet/worker-state.js';
import {
  LLMD_ADMITTER_ONLY,
  LLMD_FLOW_CONTROL_DEFAULTS,
  rooflineSaturation,
  sheddingProbability,
  SimLlmdFlowControl,
  type LlmdFlowControlSettings,
  type PeerAdmissionHost,
} from '../../src/sim/peer-admission.js';
import type { SimRequest } from '../../src/sim/sim-request.js';
import { VirtualClock } from '../../src/util/clock.js';
import { worker } from '../scheduler/helpers.js';

test('saturation: the mean over workers of max(waiting / 5, KV usage / 0.8); no scrape or a stale one counts 1', () => {
  const ws = [
    worker('a', { snapshot: { at: 900, waiting: 2, kvUsage: 0.4 } }), // max(0.4, 0.5) = 0.5
    worker('b', { snapshot: { at: 900, waiting: 10, kvUsage: 0.2 } }), // max(2, 0.25) = 2
    worker('c', { snapshot: null }), // 1
    worker('d', { snapshot: { at: 700, waiting: 0, kvUsage: 0 } }), // 300 ms old at 1000: stale, 1
  ];
  assert.equal(rooflineSaturation(ws, 5, 0.8, 1000, 200), (0.5 + 2 + 1 + 1) / 4);
  // The admitter has no staleness test: d counts 0.
  assert.equal(rooflineSaturation(ws, 5, 0.8, 1000), (0.5 + 2 + 1 + 0) / 4);
  assert.equal(rooflineSaturation([], 5, 0.8, 0), 1);
});

test('the probabilistic admitter refuses a sheddable request with probability min(S^5 · 300, 1)', () => {
  // Its README's curve: ~2.3% at 0.15, ~9.6% at 0.20, ~73% at 0.30, all from (1/300)^(1/5) ≈ 0.319.
  assert.ok(Math.abs(sheddingProbability(0.15, 5, 300) - 0.0227813) < 1e-6);
  assert.ok(Math.abs(sheddingProbability(0.2, 5, 300) - 0.096) < 1e-9);
  assert.ok(Math.abs(sheddingProbability(0.3, 5, 300) - 0.729) < 1e-9);
  assert.equal(sheddingProbability(0.32, 5, 300), 1);
  assert.equal(sheddingProbability(0, 5, 300), 0);
});

/** A flow control over `ws` whose host records what happens to each request. */
function harness(ws: WorkerState[], settings: Partial<LlmdFlowControlSettings> = {}) {
  const clock = new VirtualClock(0);
  const log: string[] = [];
  const wakes: number[] = [];
  const host: PeerAdmissionHost = {
    model: 'm',
    declaredMax: () => 16,
    proceed: (rec) => log.push(`go ${rec.id}`),
    refuse: (rec, status, code) => log.push(`${status} ${code} ${rec.id}`),
    queued: (rec) => log.push(`wait ${rec.id}`),
    wake: (t) => wakes.push(t),
  };
  const fc = new SimLlmdFlowControl({ ...LLMD_FLOW_CONTROL_DEFAULTS, ...settings }, clock, ws, host, 1);
  const admit = (id: string, cls: PriorityClass) => {
    if (fc.admit({ id } as SimRequest, cls)) log.push(`go ${id}`);
  };
  return { clock, log, wakes, fc, admit };
}

test('flow control: nothing dispatches at saturation ≥ 1; then the highest band first, one a tick, at the ticks', () => {
  const w = worker('w', { snapshot: { at: 0, waiting: 5, kvUsage: 0 } }); // S = 5/5 = 1
  const { clock, log, wakes, fc, admit } = harness([w], { admitter: false });
  admit('s1', 'sheddable');
  admit('c1', 'critical');
  admit('n1', 'standard');
  assert.deepEqual(log, ['wait s1', 'wait c1', 'wait n1']);
  assert.equal(fc.queueDepth(), 3);
  assert.deepEqual(wakes, [], 'saturated: no ticker');
  // A scrape at 50 ms shows 4 waiting (S = 0.8): a cycle dispatches the critical one, the ticker
  // takes the next at 51 ms, standard, then sheddable at 52 ms.
  clock.set(50);
  w.applySnapshot({ at: 50, waiting: 4, kvUsage: 0, running: 0 });
  fc.pump();
  assert.deepEqual(log.slice(3), ['go c1']);
  assert.deepEqual(wakes, [51]);
  fc.pump(); // a pump before the tick does nothing
  assert.deepEqual(log.slice(3), ['go c1']);
  clock.set(51);
  fc.pump();
  clock.set(52);
  fc.pump();
  assert.deepEqual(log.slice(3), ['go c1', 'go n1', 'go s1']);
  assert.equal(fc.queueDepth(), 0);
  // An arrival below saturation with nothing waiting goes at once.
  admit('c2', 'critical');
  assert.deepEqual(log.slice(6), ['go c2']);
});

test("llm-d's sample admitter configuration: a queue the default detector stops at goes through; only full KV everywhere holds", () => {
  const w = worker('w', { snapshot: { at: 0, waiting: 50, kvUsage: 0.95 } }); // default S = max(10, 1.19): saturated
  const held = harness([w], { admitter: false });
  held.admit('c1', 'critical');
  assert.deepEqual(held.log, ['wait c1']);
  const { log, clock, fc, admit } = harness([w], { ...LLMD_ADMITTER_ONLY, admitter: false });
  admit('c1', 'critical');
  assert.deepEqual(log, ['go c1'], 'S = max(50 / 999999999, 0.95 / 1) < 1');
  clock.set(50);
  w.applySnapshot({ at: 50, waiting: 50, kvUsage: 1, running: 0 });
  admit('c2', 'critical');
  assert.deepEqual(log, ['go c1', 'wait c2'], 'KV full: S = 1');
  assert.equal(fc.queueDepth(), 1);
  // The admitter keeps its own thresholds (5 and 0.8): it still sheds sheddable requests.
  assert.equal(LLMD_ADMITTER_ONLY.admitter, true);
  assert.equal(LLMD_ADMITTER_ONLY.admitterQueueDepthThreshold, 5);
});

test('flow control: a stale scrape counts as saturated; a request waiting 60 s is shed; a full band rejects', () => {
  const w = worker('w', { snapshot: { at: 0, waiting: 0, kvUsage: 0 } });
  const { clock, log, fc, admit } = harness([w], { admitter: false, bandMaxRequests: 2 });
  clock.set(201); // the only scrape is 201 ms old: S = 1
  admit('a', 'standard');
  admit('b', 'standard');
  admit('c', 'standard');
  assert.deepEqual(log, ['wait a', 'wait b', '429 flow_control_capacity c']);
  clock.set(60_000);
  fc.pump(); // a's deadline is 201 + 60,000
  assert.equal(fc.queueDepth(), 2);
  clock.set(60_201);
  fc.pump();
  assert.deepEqual(log.slice(3), ['429 flow_control_ttl a', '429 flow_control_ttl b']);
  assert.equal(fc.queueDepth(), 0);
});

test('the admitter refuses dispatched sheddable requests at its saturation, never critical or standard ones', () => {
  // S' = max(2/5, 0.3/0.8) = 0.4 → p = min(0.4^5 · 300, 1) = 1: every sheddable request is refused;
  // the detector's S = 0.4 < 1, so flow control dispatches all of them.
  const w = worker('w', { snapshot: { at: 0, waiting: 2, kvUsage: 0.3 } });
  const { log, admit } = harness([w]);
  admit('s', 'sheddable');
  admit('c', 'critical');
  admit('n', 'standard');
  assert.deepEqual(log, ['429 llm_d_admitter_shed s', 'go c', 'go n']);
  // At S' = 0.2 (waiting 1): p = 0.096 — about one in ten of many.
  const calm = harness([worker('v', { snapshot: { at: 0, waiting: 1, kvUsage: 0 } })]);
  for (let i = 0; i < 2000; i++) calm.admit(`s${i}`, 'sheddable');
  const shed = calm.log.filter((l) => l.startsWith('429')).length;
  assert.ok(shed > 150 && shed < 240, `shed ${shed} of 2000`);
});
