import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decide, type DeciderInput, type DeciderOptions } from '../../../src/scheduler/disagg/decider.js';
import { planDisaggregation, rolePools } from '../../../src/scheduler/disagg/select.js';
import { WorkerState, type WorkerRole } from '../../../src/fleet/worker-state.js';
import { createPolicy } from '../../../src/scheduler/registry.js';
import { seededRng } from '../../../src/util/rng.js';
import { request, seq } from '../helpers.js';

const opts: DeciderOptions = { nonCachedTokens: 512, minPromptTokens: 0, saturatedQueueMs: 1000 };
const idlePrefill = { queueMs: 0, prefillMs: 200, transferMs: 10 };
const input = (o: Partial<DeciderInput> = {}): DeciderInput => ({
  promptTokens: 2000,
  decodeUncachedTokens: 2000,
  decodeLocalPrefillMs: 200,
  prefill: idlePrefill,
  ...o,
});

test('decider: a long uncached prompt is disaggregated, a cached or short one is not', () => {
  assert.deepEqual(decide(input(), opts), { mode: 'disaggregated', reason: 'uncached' });
  // The decode worker has all but 100 tokens: prefilling those itself is cheaper than a transfer.
  assert.deepEqual(decide(input({ decodeUncachedTokens: 100 }), opts), { mode: 'local', reason: 'cached' });
  assert.deepEqual(decide(input({ decodeUncachedTokens: 512 }), opts).mode, 'disaggregated');
  assert.deepEqual(decide(input({ promptTokens: 300, decodeUncachedTokens: 300 }), opts), { mode: 'local', reason: 'cached' });
  assert.deepEqual(decide(input(), { ...opts, minPromptTokens: 4000 }), { mode: 'local', reason: 'short-prompt' });
  assert.deepEqual(decide(input(), { ...opts, nonCachedTokens: 0 }), { mode: 'local', reason: 'disabled' });
  assert.deepEqual(decide(input({ prefill: null }), opts), { mode: 'local', reason: 'no-prefill-worker' });
});

test('decider: a saturated prefill pool gets no prompt the decode worker would prefill sooner', () => {
  const saturated = { queueMs: 5000, prefillMs: 200, transferMs: 10 };
  assert.deepEqual(decide(input({ prefill: saturated }), opts), { mode: 'local', reason: 'prefill-saturated' });
  // The decode worker is busier still: the saturated pool is the sooner of the two.
  assert.deepEqual(decide(input({ prefill: saturated, decodeLocalPrefillMs: 9000 }), opts).mode, 'disaggregated');
  // Busy but not saturated: the prompt still goes to the prefill pool, though local would be sooner.
  assert.deepEqual(decide(input({ prefill: { ...saturated, queueMs: 900 } }), opts).mode, 'disaggregated');
});

function roleWorker(id: string, role: WorkerRole): WorkerState {
  const w = new WorkerState({ id, url: `http://127.0.0.1:1/${id}`, pool: role, model: 'm', numGpuBlocks: 10_000, blockSize: 16, role });
  w.applySnapshot({ at: 0, kvUsage: 0, running: 0, waiting: 0 });
  return w;
}

test('roles: a model without roles is not disaggregated; `both` workers decode and prefill for others', () => {
  assert.equal(rolePools([roleWorker('a', 'both'), roleWorker('b', 'both')]), null);
  const [p, d, b] = [roleWorker('p', 'prefill'), roleWorker('d', 'decode'), roleWorker('b', 'both')];
  const pools = rolePools([p, d, b])!;
  assert.deepEqual(pools.decode.map((w) => w.id), ['d', 'b']);
  assert.deepEqual(pools.prefill.map((w) => w.id), ['p', 'b']);
});

test('plan: the policy ranks each pool, the prefill queue and the decode worker cached prefix feed the decider', () => {
  const policy = createPolicy('kvgate', {});
  const [p1, p2, d] = [roleWorker('p1', 'prefill'), roleWorker('p2', 'prefill'), roleWorker('d', 'decode')];
  const ctx = { now: 0, rng: seededRng(1), staleAfterMs: 5000 };
  const env = { prefillRate: () => 10_000, transferMs: (tokens: number) => tokens / 100 };
  const pools = rolePools([p1, p2, d])!;
  const req = request(seq(0, 4000), { maxTokens: 64 });
  // p1 has 30 s of prefill queued: the policy picks p2.
  p1.begin({ id: 'busy', promptTokens: 300_000, uncachedTokens: 300_000, maxTokens: 1, blocks: 10, dispatchedAt: 0 });
  const plan = planDisaggregation(policy, req, pools, ctx, env, opts);
  assert.equal(plan.decode?.worker.id, 'd');
  assert.equal(plan.prefill?.worker.id, 'p2');
  assert.deepEqual(plan.decision, { mode: 'disaggregated', reason: 'uncached' });
  assert.equal(plan.input.decodeUncachedTokens, 4000);
  assert.equal(plan.input.prefill?.transferMs, 40);
  // Nothing was charged by planning.
  assert.equal(d.inflightCount, 0);
  assert.equal(p2.inflightCount, 0);
  // The only prefill worker is saturated and the idle decode worker is sooner: local.
  const onlyBusy = planDisaggregation(policy, request(seq(0, 4000)), { decode: [d], prefill: [p1] }, ctx, env, opts);
  assert.deepEqual(onlyBusy.decision, { mode: 'local', reason: 'prefill-saturated' });
});
