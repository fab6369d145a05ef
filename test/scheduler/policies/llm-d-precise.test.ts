import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createPolicy } from '../../../src/scheduler/registry.js';
import type { RouteOutcome } from '../../../src/scheduler/types.js';
import { feedKvEvents, request, router, seq, worker } from '../helpers.js';

const prompt = seq(100, 64 * 16); // 64 full blocks
const picked = (o: RouteOutcome) => (o.ok ? o.decision.worker.id : `refused ${o.status}`);

/**
 * a's engine reported the first `held` of the prompt's 64 blocks (16 tokens each) and a is
 * prefilling another 1,024-token prompt; b holds nothing and is idle. Who gets the prompt?
 *   sticky when held / 64 ≥ 0.8 (a's TTFT lead, 1,024 / 15,928 s = 64 ms, is far under 18 s);
 *   else token load: a 1,024 + (64 − held) · 16 against b 1,024.
 */
function withHeld(held: number): string {
  const policy = createPolicy('llm-d-precise');
  const { router: r } = router(policy);
  const a = worker('a');
  const b = worker('b');
  assert.ok(r.route(request(seq(50_000, 64 * 16)), [a]).ok);
  feedKvEvents(policy, a, prompt.slice(0, held * 16));
  return picked(r.route(request(prompt), [a, b]));
}

test('llm-d-precise: the affinity gate on KV-event-fed blocks, then token load in the model’s tokens', () => {
  const policy = createPolicy('llm-d-precise');
  assert.equal(policy.usesKvEvents, true);
  assert.equal(withHeld(52), 'a'); // 52/64 = 0.81 ≥ 0.8: sticky, whatever a's load
  assert.equal(withHeld(51), 'b'); // 0.797: no one sticky; a 1,024 + 208 = 1,232 > b 1,024
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
