import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createPolicy } from '../../../src/scheduler/registry.js';
import type { RouteOutcome } from '../../../src/scheduler/types.js';
import { feedKvEvents, request, router, seq, worker } from '../helpers.js';

const prompt = seq(100, 64 * 16); // 64 full blocks
const picked = (o: RouteOutcome) => (o.ok ? o.decision.worker.id : `refused ${o.status}`);

/**
 * a's engine reported the first `held` blocks of the prompt and a has 4 requests waiting; b holds
 * nothing and has none. Both at 10% KV usage. Who gets the prompt?
 *   a = 2 · held/64 + 1 · 0.9 + 1 · 0;   b = 2 · 0 + 1 · 0.9 + 1 · 1
 */
function withHeld(held: number): string {
  const policy = createPolicy('llm-d-precise');
  const { router: r } = router(policy);
  const a = worker('a', { snapshot: { waiting: 4, kvUsage: 0.1 } });
  const b = worker('b', { snapshot: { waiting: 0, kvUsage: 0.1 } });
  feedKvEvents(policy, a, prompt.slice(0, held * 16));
  return picked(r.route(request(prompt), [a, b]));
}

test('llm-d-precise: prefix ×2 on KV-event-fed blocks against queue ×1 and KV utilisation ×1', () => {
  const policy = createPolicy('llm-d-precise');
  assert.equal(policy.usesKvEvents, true);
  assert.equal(policy.scrapeIntervalMs, 50);
  assert.equal(withHeld(40), 'a'); // 1.25 + 0.9 = 2.15 > 1.9
  assert.equal(withHeld(24), 'b'); // 0.75 + 0.9 = 1.65 < 1.9
  assert.equal(withHeld(64), 'a');
});

test('llm-d-precise: learns nothing from its own picks unless speculative indexing is on', () => {
  for (const speculative of [false, true]) {
    const { router: r, clock } = router(createPolicy('llm-d-precise', { speculativeIndexing: speculative }));
    const a = worker('a');
    const b = worker('b');
    const first = r.route(request(prompt), [a, b]);
    assert.ok(first.ok);
    const home = first.ok ? first.decision.worker : a;
    // All else equal, a speculative entry (2 s) is what sends the same prompt home again.
    const again = r.route(request(prompt), [a, b]);
    assert.ok(again.ok);
    if (speculative) assert.ok(again.decision.worker === home && again.decision.expectedPrefixHit === 1);
    else assert.equal(again.decision.expectedPrefixHit, 0);
    clock.advance(2001);
    const later = r.route(request(prompt), [a, b]);
    assert.ok(later.ok && later.decision.expectedPrefixHit === 0);
  }
});
