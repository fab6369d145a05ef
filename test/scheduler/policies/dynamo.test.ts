/**
 * The Dynamo KV router's rules as `dynamo` and `dynamo-approx` model them, on hand-built cases
 * (block size 16; a 32-block shared prefix; prompts of 33 full blocks):
 *
 *   cost = prefillLoadScale · max((active prefill tokens + prompt tokens)/16 − decay · overlap, 0)
 *          + active decode blocks (each shared block once) + the prompt's blocks not active
 *          + decodeActiveRequestWeight · active requests
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createPolicy } from '../../../src/scheduler/registry.js';
import type { PolicyOptions, RouteOutcome } from '../../../src/scheduler/types.js';
import { feedKvEvents, request, router, seq, worker } from '../helpers.js';

const sys = seq(10, 32 * 16);
/** The shared prefix and a one-block tail of its own: 33 full blocks. */
const prompt = (tail: number) => [...sys, ...seq(tail, 16)];
const picked = (o: RouteOutcome) => (o.ok ? `${o.decision.worker.id} ${o.decision.reason}` : `refused ${o.status}`);

/**
 * a runs three requests sharing the prefix (35 distinct blocks), b one unrelated request of k
 * blocks; where does a fourth prompt with the prefix go, counting decode blocks only?
 */
function decodeOnly(k: number, options: PolicyOptions = {}): string {
  const { router: r } = router(createPolicy('dynamo', { prefillLoadScale: 0, ...options }));
  const a = worker('a');
  const b = worker('b');
  for (const t of [5000, 6000, 7000]) assert.ok(r.route(request(prompt(t)), [a]).ok);
  assert.ok(r.route(request(seq(90_000, 16 * k)), [b]).ok);
  return picked(r.route(request(prompt(8000)), [a, b]));
}

test('dynamo: active decode blocks count a block shared by several requests once, plus the prompt’s new blocks', () => {
  // a: 32 shared + 3 tails = 35 active, + 1 new block = 36. b: k active + 33 new.
  assert.equal(decodeOnly(2), 'b load'); // 35 < 36
  assert.equal(decodeOnly(4), 'a load'); // 37 > 36
  // Without router_assume_kv_reuse every request's blocks count: a = 3 · 33 + 33 = 132.
  assert.equal(decodeOnly(4, { assumeKvReuse: false }), 'b load');
  assert.equal(decodeOnly(60, { assumeKvReuse: false }), 'b load'); // 93 < 132
  assert.equal(decodeOnly(100, { assumeKvReuse: false }), 'a load'); // 133 > 132
});

test('dynamo: prefill blocks = (active prefill tokens + prompt)/block − KV-event overlap, released at the first token', () => {
  const policy = createPolicy('dynamo', { prefillLoadScale: 100 });
  assert.equal(policy.usesKvEvents, true);
  const { router: r } = router(policy);
  const a = worker('a');
  const b = worker('b');
  // a's engine reported the shared prefix; a is prefilling an unrelated 100-block prompt.
  feedKvEvents(policy, a, sys);
  const busy = request(seq(50_000, 1600));
  assert.ok(r.route(busy, [a]).ok);
  // a: 100 · ((1600 + 528)/16 − 32) + 100 active + 33 new = 10,233; b: 100 · 33 + 33 = 3,333.
  const q1 = request(prompt(8000));
  assert.equal(picked(r.route(q1, [a, b])), 'b load');
  r.complete(q1.id, false);
  // Its prefill done, a owes only the prompt's uncached block: 100 · (33 − 32) + 100 + 33 = 233.
  r.firstToken(busy.id);
  const q2 = request(prompt(9000));
  const o = r.route(q2, [a, b]);
  assert.equal(picked(o), 'a prefix');
  assert.ok(o.ok && Math.abs(o.decision.expectedPrefixHit - 512 / 528) < 1e-9);
  // Dynamo charges q2 its uncached tokens (528 − 32 · 16 = 16) until its own first token.
  r.complete(q2.id, true);
  r.complete(busy.id, true);
  // With everything released, a's overlap alone decides: 100 · 1 + 33 against 100 · 33 + 33.
  assert.equal(picked(r.route(request(prompt(9500)), [b, a])), 'a prefix');
});

test('dynamo: the overlap comes from KV events only, not from its own routing', () => {
  const { router: r } = router(createPolicy('dynamo'));
  const a = worker('a');
  const b = worker('b');
  const first = request(prompt(1));
  assert.ok(r.route(first, [a, b]).ok);
  r.firstToken(first.id);
  r.complete(first.id, true);
  const again = r.route(request(prompt(2)), [a, b]);
  assert.ok(again.ok && again.decision.expectedPrefixHit === 0 && again.decision.reason === 'load');
});

test('dynamo-approx: overlap from its own decisions, each block kept 120 s since last routed', () => {
  const policy = createPolicy('dynamo-approx');
  assert.notEqual(policy.usesKvEvents, true);
  const { router: r } = router(policy, 4);
  const a = worker('a');
  const b = worker('b');
  const first = request(prompt(5000));
  const o1 = r.route(first, [a, b]);
  assert.ok(o1.ok);
  const home = o1.ok ? o1.decision.worker : a;
  r.firstToken(first.id);
  // home: max(33 − 32, 0) + 33 active + 1 new = 35; other: 33 + 0 + 33 = 66.
  const o2 = r.route(request(prompt(6000)), [a, b]);
  assert.equal(o2.ok && o2.decision.worker, home);
  assert.equal(o2.ok && o2.decision.reason, 'prefix');
  assert.ok(o2.ok && o2.decision.expectedPrefixHit > 0.9);
  // The window: a block last routed 121 s ago is forgotten.
  const { router: r2, clock: clock2 } = router(createPolicy('dynamo-approx'), 4);
  const c = worker('c');
  const d = worker('d');
  const q = request(prompt(1));
  assert.ok(r2.route(q, [c, d]).ok);
  r2.complete(q.id, true);
  const soon = r2.route(request(prompt(2)), [c, d]);
  assert.ok(soon.ok && soon.decision.expectedPrefixHit > 0.9);
  clock2.advance(121_000);
  const later = r2.route(request(prompt(3)), [c, d]);
  assert.ok(later.ok && later.decision.expectedPrefixHit === 0);
});

test('dynamo: decodeActiveRequestWeight charges each request active at the worker (0 by default)', () => {
  // a runs two 2-block requests past their prefill (4 active blocks), b one 5-block request (5).
  // A fresh 2-block prompt: a = 2 + 4 + 2 = 8, b = 2 + 5 + 2 = 9 at the default weight 0;
  // with weight 1: a = 8 + 2 = 10, b = 9 + 1 = 10 (a tie); with weight 2: a = 12 > b = 11.
  const place = (options: PolicyOptions, name = 'dynamo'): string => {
    const { router: r } = router(createPolicy(name, options));
    const a = worker('a');
    const b = worker('b');
    for (const [w, q] of [[a, request(seq(100, 32))], [a, request(seq(200, 32))], [b, request(seq(300, 80))]] as const) {
      assert.ok(r.route(q, [w]).ok);
      r.firstToken(q.id);
    }
    return picked(r.route(request(seq(400, 32)), [a, b]));
  };
  assert.equal(place({}), 'a load');
  assert.equal(place({ decodeActiveRequestWeight: 2 }), 'b load');
  // dynamo-approx shares the cost (its own index holds nothing of these unrelated prompts).
  assert.equal(place({}, 'dynamo-approx'), 'a load');
  assert.equal(place({ decodeActiveRequestWeight: 2 }, 'dynamo-approx'), 'b load');
  // A completed request no longer counts: without b's request, a (12) still loses to an idle b (4).
  const { router: r } = router(createPolicy('dynamo', { decodeActiveRequestWeight: 2 }));
  const a = worker('a');
  const b = worker('b');
  const gone = request(seq(300, 80));
  assert.ok(r.route(gone, [b]).ok);
  r.complete(gone.id, true);
  assert.ok(r.route(request(seq(100, 32)), [a]).ok);
  assert.equal(picked(r.route(request(seq(400, 32)), [a, b])), 'b load');
});

test('dynamo: overlapScoreCreditDecay fades the GPU credit with the prefill backlog above the least loaded', () => {
  // a holds the 32-block prefix (KV events) and is prefilling one 16-token request; b is idle.
  // The query is the prefix and a one-block tail: 33 blocks (528 tokens).
  const place = (decay: number): string => {
    const policy = createPolicy('dynamo', { overlapScoreCreditDecay: decay });
    const { router: r } = router(policy);
    const a = worker('a');
    const b = worker('b');
    feedKvEvents(policy, a, sys);
    // a: one 16-token request still prefilling (1 active block, 16 prefill tokens).
    assert.ok(r.route(request(seq(60_000, 16)), [a]).ok);
    return picked(r.route(request(prompt(8000)), [a, b]));
  };
  // decay(a) = 1 / (1 + d · 1 / 33).  a = max((16 + 528)/16 − 32 · decay(a), 0) + 1 + 33
  //   = 34 − 32 · decay(a) + 34;  b = 33 + 33 = 66.
  // d = 0: a = 2 + 34 = 36 < 66 → a.  d = 33: decay ½, a = 18 + 34 = 52 < 66 → a.
  // d = 330: decay 1/11, a = 34 − 2.909 + 34 = 65.09 < 66 → a.  d = 3300: decay 1/101,
  // a = 34 − 0.317 + 34 = 67.68 > 66 → b.
  assert.equal(place(0), 'a prefix');
  assert.equal(place(330), 'a prefix');
  assert.equal(place(3300), 'b load');
});

test('dynamo: the decay spares the least loaded worker', () => {
  // Both workers hold the prefix; a is prefilling 16 tokens more than b. Decay applies to a only.
  const policy = createPolicy('dynamo', { overlapScoreCreditDecay: 1e9 });
  const { router: r } = router(policy);
  const a = worker('a');
  const b = worker('b');
  feedKvEvents(policy, a, sys);
  feedKvEvents(policy, b, sys);
  assert.ok(r.route(request(seq(60_000, 16)), [a]).ok);
  // a ≈ 34 − 0 + 34 = 68 (credit gone); b = max(33 − 32, 0) + 0 + 33 = 34 → b, on its cache.
  assert.equal(picked(r.route(request(prompt(8000)), [a, b])), 'b prefix');
});
