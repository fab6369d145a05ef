/** Policy.retune: new options taken in place on a config reload, learned state kept; shape-defining knobs refused. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { BUILTIN_POLICIES, createPolicy, policyDefinition } from '../../../src/scheduler/registry.js';
import { request, router, seq, worker } from '../helpers.js';

const parsed = (name: string, raw: Record<string, unknown> = {}): Record<string, unknown> => policyDefinition(name).options.parse(raw);

test('every policy with options either retunes its defaults in place or says it cannot', () => {
  const inPlace = new Set(['kvgate', 'oracle', 'sglang-cache-aware', 'llm-d', 'llm-d-precise', 'llm-d-legacy', 'dynamo', 'dynamo-approx', 'aibrix']);
  for (const d of BUILTIN_POLICIES) {
    const p = createPolicy(d.name);
    const index = p.prefixIndex;
    assert.equal(p.retune?.(parsed(d.name)) ?? false, inPlace.has(d.name), d.name);
    assert.equal(p.prefixIndex, index, `${d.name} keeps its index`);
  }
});

test('an index knob cannot change in place: refused, the old options stay', () => {
  for (const name of ['kvgate', 'llm-d', 'llm-d-precise', 'llm-d-legacy', 'dynamo', 'dynamo-approx']) {
    const p = createPolicy(name);
    assert.equal(p.retune!(parsed(name, { indexMaxBytes: 123_456 })), false, name);
    // The weights of a refused retune are not taken either.
    assert.equal(p.retune!(parsed(name)), true, name);
  }
});

test('llm-d-legacy: a retuned weight changes the next decision', () => {
  // Without no-hit-lru (the router's built-in profile): these requests are cold.
  const p = createPolicy('llm-d-legacy', { noHitLruWeight: 0 });
  // a: nobody waiting but its KV nearly full; b: ten waiting, KV empty.
  const a = worker('a', { snapshot: { waiting: 0, kvUsage: 0.9 } });
  const b = worker('b', { snapshot: { waiting: 10, kvUsage: 0 } });
  const { router: r } = router(p);
  const pick = (): string => {
    const req = request(seq(0, 64));
    const out = r.route(req, [a, b]);
    assert.ok(out.ok);
    r.complete(req.id, true);
    return out.decision.worker.id;
  };
  // queue 2 · 1 + kv 2 · 0.1 = 2.2 for a against kv 2 · 1 = 2 for b.
  assert.equal(pick(), 'a');
  // Refused with an index knob: none of it is taken, the weight included.
  assert.equal(p.retune!(parsed('llm-d-legacy', { noHitLruWeight: 0, queueWeight: 0, indexMaxBytes: 123_456 })), false);
  assert.equal(pick(), 'a');
  assert.equal(p.retune!(parsed('llm-d-legacy', { noHitLruWeight: 0, queueWeight: 0 })), true);
  assert.equal(pick(), 'b');
});

test('sglang-cache-aware: a retuned threshold is read at the next decision', () => {
  const p = createPolicy('sglang-cache-aware');
  const a = worker('a');
  const b = worker('b');
  const { router: r } = router(p);
  const text = 'the same long shared prompt '.repeat(10);
  const first = r.route(request(seq(0, 8), { promptText: text }), [a, b]);
  assert.ok(first.ok);
  const home = first.decision.worker.id;
  // The first request stays in flight at home: the least-loaded choice is the other worker.
  const again = () => r.route(request(seq(0, 8), { promptText: text }), [a, b]);
  const second = again();
  assert.ok(second.ok);
  assert.equal(second.decision.worker.id, home, 'the match is above cache_threshold 0.3');
  assert.equal(p.retune!(parsed('sglang-cache-aware', { cacheThreshold: 1 })), true);
  const third = again();
  assert.ok(third.ok);
  assert.notEqual(third.decision.worker.id, home, 'no match can be above 1: least loaded');
});
