import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { WorkerState } from '../../../src/fleet/worker-state.js';
import { PROMPT_ADAPTER } from '../../../src/kv/prompt-blocks.js';
import { llmdLoraAffinityScorer } from '../../../src/scheduler/policies/llm-d-plugins.js';
import { createPolicy } from '../../../src/scheduler/registry.js';
import { request, router, seq, worker } from '../helpers.js';

let loadSeq = 0;
/** Charge `n` in-flight requests to `w`; their ids, to end them. */
const load = (w: WorkerState, n: number): string[] => {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const id = `${w.id}-load-${loadSeq++}`;
    w.begin({ id, promptTokens: 10, uncachedTokens: 10, maxTokens: 1, blocks: 1, dispatchedAt: 0 });
    ids.push(id);
  }
  return ids;
};

test('sglang-cache-aware: best match above 0.3, least loaded below it, least loaded when imbalanced', () => {
  const { router: r } = router(createPolicy('sglang-cache-aware'));
  const a = worker('a');
  const b = worker('b');
  const sys = 'You are a helpful assistant. '.repeat(20);
  const q1 = request([1], { promptText: sys + 'question one' });
  const first = r.route(q1, [a, b]);
  assert.ok(first.ok);
  const home = first.ok ? first.decision.worker : a;
  const other = home === a ? b : a;
  // Home is busier, but the match rate (> 0.3) wins while the load is balanced.
  load(home, 10);
  const out = r.route(request([1], { promptText: sys + 'question two' }), [a, b]);
  assert.ok(out.ok && out.decision.worker === home && out.decision.reason === 'prefix');
  // A prompt matching less than 30% goes to the least loaded.
  const cold = r.route(request([1], { promptText: sys.slice(0, 50) + 'x'.repeat(400) }), [a, b]);
  assert.ok(cold.ok && cold.decision.worker === other && cold.decision.reason === 'least-load');
  // Imbalance: max − min > 64 and max > 1.5 · min → least loaded despite the perfect match.
  load(home, 70);
  const imb = r.route(request([1], { promptText: sys + 'question three' }), [a, b]);
  assert.ok(imb.ok && imb.decision.worker === other && imb.decision.reason === 'least-load');
  // max − min > 64 but max ≤ 1.5 · min: not imbalanced → the match wins again, even on the busier.
  load(other, 200); // other: 202 in flight
  load(home, 220); // home: 302 = 1.495 · 202
  assert.ok(home.inflightCount - other.inflightCount > 64 && home.inflightCount <= 1.5 * other.inflightCount);
  const bal = r.route(request([1], { promptText: sys + 'question one' }), [a, b]);
  assert.ok(bal.ok && bal.decision.worker === home && bal.decision.reason === 'prefix');
});

test('sglang-cache-aware: a shared prefix sticks to the worker that sent it first, not the least loaded holder', () => {
  const { router: r } = router(createPolicy('sglang-cache-aware'));
  const a = worker('a');
  const b = worker('b');
  const sys = 'System: answer briefly and cite sources. '.repeat(10);
  const q1 = request([1], { promptText: sys + 'first question' });
  const o1 = r.route(q1, [a, b]);
  // Equal load, neither routed yet: the first listed.
  assert.ok(o1.ok && o1.decision.worker === a && o1.decision.reason === 'least-load');
  // Make a far busier than b (imbalanced): the next request goes to b and b's tree learns the
  // prefix too.
  const busy = load(a, 70);
  const o2 = r.route(request([1], { promptText: sys + 'second question' }), [a, b]);
  assert.ok(o2.ok && o2.decision.worker === b && o2.decision.reason === 'least-load');
  // Balanced again, a still busier: both hold the prefix, and it stays a's.
  for (const id of busy.slice(0, 65)) a.end(id);
  assert.ok(a.inflightCount > b.inflightCount);
  for (let i = 0; i < 5; i++) {
    const o = r.route(request([1], { promptText: sys + `question ${i + 3}` }), [a, b]);
    assert.ok(o.ok && o.decision.worker === a && o.decision.reason === 'prefix', JSON.stringify(o.ok && o.decision.reason));
  }
  // The owner unavailable (a retry excludes it): the first candidate, without recording the prompt.
  const o3 = r.route(request([1], { promptText: sys + 'retried' }), [a, b], new Set(['a']));
  assert.ok(o3.ok && o3.decision.worker === b && o3.decision.reason === 'fallback');
});

test('sglang-cache-aware: equally loaded workers go to the one routed the fewest so far, then the first listed', () => {
  const { router: r } = router(createPolicy('sglang-cache-aware'));
  const ws = [worker('a'), worker('b'), worker('c')];
  const picks: string[] = [];
  for (let i = 0; i < 7; i++) {
    // Unrelated prompts (no match above the threshold); each finishes before the next arrives.
    const q = request([1], { promptText: `${i} `.repeat(50) + `unrelated ${i}` });
    const o = r.route(q, ws);
    assert.ok(o.ok && o.decision.reason === 'least-load');
    picks.push(o.ok ? o.decision.worker.id : '');
    r.complete(q.id, true);
  }
  assert.deepEqual(picks, ['a', 'b', 'c', 'a', 'b', 'c', 'a']);
});

test('sglang-cache-aware: KV-usage triggers (off at 1.0): overload above the ceiling, or spread hottest − coolest', () => {
  const sys = 'You are a helpful assistant. '.repeat(20);
  /** Where the second prompt with the prefix goes when the first's worker reports `hot` KV usage. */
  const place = (hot: number, cool: number, options: Record<string, number>): string => {
    const { router: r } = router(createPolicy('sglang-cache-aware', options));
    const a = worker('a', { snapshot: { kvUsage: cool } });
    const b = worker('b', { snapshot: { kvUsage: cool } });
    const first = r.route(request([1], { promptText: sys + 'question one' }), [a, b]);
    assert.ok(first.ok && first.decision.worker === a);
    // a (the prefix's home) runs one request; its engine reports `hot`.
    a.applySnapshot({ at: 0, kvUsage: hot, running: 1, waiting: 0 });
    const o = r.route(request([1], { promptText: sys + 'question two' }), [a, b]);
    return o.ok ? `${o.decision.worker.id} ${o.decision.reason}` : 'refused';
  };
  // Defaults: in-flight 1 against 0 is balanced, and the KV triggers are off even at 0.99.
  assert.equal(place(0.99, 0, {}), 'a prefix');
  // Overload: max usage 0.95 > 0.9 → least loaded (b); 0.85 ≤ 0.9 → the match.
  assert.equal(place(0.95, 0.9, { overloadTokenUsageThreshold: 0.9 }), 'b least-load');
  assert.equal(place(0.85, 0.85, { overloadTokenUsageThreshold: 0.9 }), 'a prefix');
  // Spread: 0.7 − 0.2 = 0.5 > 0.4 → b; 0.5 − 0.2 = 0.3 ≤ 0.4 → the match.
  assert.equal(place(0.7, 0.2, { balanceTokenUsageThreshold: 0.4 }), 'b least-load');
  assert.equal(place(0.5, 0.2, { balanceTokenUsageThreshold: 0.4 }), 'a prefix');
  // Workers without a scrape are left out of the KV bounds: b alone has one, so no spread.
  const { router: r } = router(createPolicy('sglang-cache-aware', { balanceTokenUsageThreshold: 0.1 }));
  const a = worker('a', { snapshot: null });
  const b = worker('b', { snapshot: { kvUsage: 0.9 } });
  assert.ok(r.route(request([1], { promptText: sys + 'question one' }), [a, b]).ok);
  const o = r.route(request([1], { promptText: sys + 'question two' }), [a, b]);
  assert.ok(o.ok && o.decision.reason === 'prefix');
});

test('llm-d-legacy without no-hit-lru (the router built-in): queue 2, kv 2, prefix 3 over stale-as-is metrics; prefix learned from its own picks', () => {
  const policy = createPolicy('llm-d-legacy', { noHitLruWeight: 0 });
  assert.equal(policy.scrapeIntervalMs, 50);
  const { router: r } = router(policy, 3);
  const text = 'lorem ipsum dolor sit amet '.repeat(60); // 1,620 chars → 6 blocks of 256
  const a = worker('a', { snapshot: { waiting: 0, kvUsage: 0.1 } });
  const b = worker('b', { snapshot: { waiting: 0, kvUsage: 0.1 } });
  const first = r.route(request([1], { promptText: text }), [a, b]);
  assert.ok(first.ok);
  const home = first.ok ? first.decision.worker : a;
  const other = home === a ? b : a;
  // Same prompt: prefix 3 > queue 2 penalty when home has the most waiting and other the least.
  home.applySnapshot({ at: 0, waiting: 4, running: 0, kvUsage: 0.1 });
  other.applySnapshot({ at: 0, waiting: 0, running: 0, kvUsage: 0.1 });
  const again = r.route(request([1], { promptText: text }), [a, b]);
  assert.ok(again.ok && again.decision.worker === home);
  assert.ok(again.ok && again.decision.expectedPrefixHit === 1);
  // Add a KV penalty: queue (2) + kv (2 · 0.9) outweigh prefix (3).
  home.applySnapshot({ at: 0, waiting: 4, running: 0, kvUsage: 1 });
  const moved = r.route(request([1], { promptText: text }), [a, b]);
  assert.ok(moved.ok && moved.decision.worker === other);
  // The scorer reads the scrape as is: dispatches since the scrape do not count (herding
  // between polls is what its 50 ms interval is meant to bound).
  const c = worker('c');
  const d = worker('d', { snapshot: { waiting: 1 } });
  for (let i = 0; i < 5; i++) {
    const o = r.route(request([1], { promptText: `unrelated ${i} `.repeat(40) }), [c, d]);
    assert.ok(o.ok && o.decision.worker === c);
  }
});

test("llm-d-legacy with loraWeight: GIE's lora-affinity-scorer, 1 running, 0.8 a free slot, 0.6 waiting, 0 taken", () => {
  const rate = (target: string, lora: { maxLoras: number; running: string[]; waiting: string[] } | undefined): number => {
    const req = request([1], { model: 'm' });
    req.state.set(PROMPT_ADAPTER, target);
    return llmdLoraAffinityScorer.score(req, [worker('w', { snapshot: lora ? { lora } : {} })], {} as never)[0]!;
  };
  assert.equal(rate('a', { maxLoras: 1, running: ['a'], waiting: [] }), 1);
  assert.equal(rate('a', { maxLoras: 2, running: ['b'], waiting: [] }), 0.8);
  assert.equal(rate('a', { maxLoras: 1, running: ['b'], waiting: ['a'] }), 0.6);
  assert.equal(rate('a', { maxLoras: 1, running: ['b'], waiting: [] }), 0);
  assert.equal(rate('a', undefined), 0, 'no LoRA state reported');
  // In the profile with a weight, it draws an adapter to where it runs over an emptier queue.
  const { router: r } = router(createPolicy('llm-d-legacy', { loraWeight: 3, noHitLruWeight: 0 }), 3);
  const runs = worker('runs', { snapshot: { waiting: 2, lora: { maxLoras: 1, running: ['a'], waiting: [] } } });
  const other = worker('other', { snapshot: { waiting: 0, lora: { maxLoras: 1, running: ['b'], waiting: [] } } });
  const req = request([1], { promptText: 'hello' });
  req.state.set(PROMPT_ADAPTER, 'a');
  const d = r.route(req, [other, runs]);
  assert.ok(d.ok && d.decision.worker === runs);
  // By default (weight 0) the queue decides.
  const plain = router(createPolicy('llm-d-legacy', { noHitLruWeight: 0 }), 3).router;
  const req2 = request([1], { promptText: 'hello' });
  req2.state.set(PROMPT_ADAPTER, 'a');
  const d2 = plain.route(req2, [other, runs]);
  assert.ok(d2.ok && d2.decision.worker === other);
});

test('oracle-greedy: exact cache and queue through the probe, lowest estimated TTFT', () => {
  const policy = createPolicy('oracle-greedy');
  assert.equal(policy.usesOracle, true);
  assert.equal(createPolicy('oracle').usesOracle, true);
  assert.notEqual(createPolicy('kvgate').usesOracle, true);
  const { router: r } = router(policy);
  const a = worker('a');
  const b = worker('b');
  const prompt = seq(0, 4000);
  a.oracle = { cachedPrefixTokens: () => 3000, running: () => 0, waiting: () => 0, freeBlocks: () => 1000, pendingPrefillTokens: () => 500 };
  b.oracle = { cachedPrefixTokens: () => 0, running: () => 0, waiting: () => 0, freeBlocks: () => 1000, pendingPrefillTokens: () => 0 };
  // a: 500 + 1000 = 1500 tokens to prefill; b: 4000.
  const o = r.route(request(prompt), [a, b]);
  assert.ok(o.ok && o.decision.worker === a && Math.abs(o.decision.expectedPrefixHit - 0.75) < 1e-9);
  a.oracle.pendingPrefillTokens = () => 3500; // 3500 + 1000 > 4000
  const o2 = r.route(request(prompt), [a, b]);
  assert.ok(o2.ok && o2.decision.worker === b && o2.decision.reason === 'load');
});

test('oracle: kvgate’s rules on the engines’ exact state, not on the index or the metrics', () => {
  const { router: r } = router(createPolicy('oracle', { learnPrefillRate: false }));
  // Stale metrics and an empty index would say nothing; the probes say b holds the prompt.
  const a = worker('a', { snapshot: null });
  const b = worker('b', { snapshot: null });
  const prompt = seq(0, 4000);
  a.oracle = { cachedPrefixTokens: () => 0, running: () => 0, waiting: () => 0, freeBlocks: () => 9000, pendingPrefillTokens: () => 0 };
  b.oracle = { cachedPrefixTokens: () => 3984, running: () => 2, waiting: () => 0, freeBlocks: () => 9000, pendingPrefillTokens: () => 800 };
  const o = r.route(request(prompt), [a, b]);
  assert.ok(o.ok && o.decision.worker === b && o.decision.reason === 'prefix');
  assert.ok(o.ok && o.decision.expectedPrefixHit > 0.99 && o.decision.usedStaleMetrics !== true);
  // b's exact queue grows far beyond what its cache saves: spill to a.
  b.oracle.pendingPrefillTokens = () => 40_000;
  const o2 = r.route(request(prompt), [a, b]);
  assert.ok(o2.ok && o2.decision.worker === a && o2.decision.reason === 'spill');
});

test('llm-d-legacy: no-hit-lru at weight 2 sends cold requests to the worker least recently sent one; warm ones score 0.5', () => {
  // No scrapes: queue 1 and kv 1 everywhere, so only prefix and no-hit-lru tell workers apart.
  const { router: r } = router(createPolicy('llm-d-legacy'), 5);
  const [a, b, c] = [worker('a'), worker('b'), worker('c')];
  const cold = (i: number) => {
    const o = r.route(request([1], { promptText: `cold prompt ${i} `.repeat(40) }), [a, b, c]);
    assert.ok(o.ok);
    return o.decision.worker.id;
  };
  // Never used, in candidate order: a 1 − 0/2 = 1, b 1 − 1/2 = 0.5, c 0 → a.
  assert.equal(cold(1), 'a');
  // LRU [a]: never used b 1, c 0.5; a at rank 2 never-used + position 0 → 1 − 2/2 = 0 → b.
  assert.equal(cold(2), 'b');
  // LRU [a, b]: c 1, a 1 − (1 + 0)/2 = 0.5, b 1 − (1 + 1)/2 = 0 → c; then the oldest, a.
  assert.equal(cold(3), 'c');
  assert.equal(cold(4), 'a');
  // A warm request (b holds its prompt) scores 0.5 everywhere on no-hit-lru: prefix 3 decides → b.
  const text = 'cold prompt 2 '.repeat(40);
  const warm = r.route(request([1], { promptText: text }), [a, b, c]);
  assert.ok(warm.ok && warm.decision.worker === b && warm.decision.expectedPrefixHit === 1);
  // ... and does not move b in the LRU: the next cold request still goes to the oldest, b.
  assert.equal(cold(5), 'b');
});
