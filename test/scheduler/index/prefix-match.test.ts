import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WorkerState } from '../../../src/fleet/worker-state.js';
import { PrefixIndex } from '../../../src/scheduler/index/prefix-index.js';
import { PrefixMatcher } from '../../../src/scheduler/index/prefix-match.js';
import type { RoutingContext } from '../../../src/scheduler/types.js';
import { seededRng } from '../../../src/util/rng.js';
import { request, seq, worker } from '../helpers.js';

const ctx = (now = 0): RoutingContext => ({ now, rng: seededRng(1), staleAfterMs: 5000 });

/** Put the first `blocks` blocks of `tokens` at `w` as routed. */
function hold(matcher: PrefixMatcher, w: WorkerState, tokens: number[], blocks: number): void {
  matcher.track(w);
  matcher.index.insert(w.id, matcher.hashesFor(request(tokens), w), 'routed', 0, 0, blocks);
}

test('each worker matches the leading blocks it holds; a fully cached prompt still computes its last token', () => {
  const matcher = new PrefixMatcher(new PrefixIndex());
  const a = worker('a');
  const b = worker('b');
  const c = worker('c');
  const cases: Array<{ tokens: number; held: number; blocks: number; cachedTokens: number }> = [
    { tokens: 100, held: 3, blocks: 3, cachedTokens: 48 },
    { tokens: 64, held: 4, blocks: 4, cachedTokens: 48 }, // 4 full blocks, all held: 3 of them serve
    { tokens: 65, held: 4, blocks: 4, cachedTokens: 64 },
    { tokens: 100, held: 0, blocks: 0, cachedTokens: 0 },
  ];
  for (const [i, k] of cases.entries()) {
    const tokens = seq(10_000 * (i + 1), k.tokens);
    hold(matcher, a, tokens, k.held);
    hold(matcher, b, tokens, 1);
    const m = matcher.matches(request(tokens), [a, b, c], ctx());
    assert.deepEqual(m.get(a), { blocks: k.blocks, tokens: k.cachedTokens, promptBlocks: Math.floor(k.tokens / 16), blockSize: 16, tiers: [k.blocks, 0, 0] }, JSON.stringify(k));
    assert.equal(m.get(b)!.blocks, 1);
    assert.equal(m.get(c)!.blocks, 0, 'a worker seen for the first time holds nothing');
  }
  assert.ok(matcher.index.hasWorker('c'));
});

test('a match ends at the last block the worker holds, found by bisection over prefix-closed holdings', () => {
  const matcher = new PrefixMatcher(new PrefixIndex());
  const a = worker('a');
  const tokens = seq(0, 10 * 16);
  matcher.track(a);
  const h = matcher.hashesFor(request(tokens), a);
  matcher.index.insert('a', h, 'routed', 0, 0, 7);
  assert.equal(matcher.matches(request(tokens), [a], ctx()).get(a)!.blocks, 7);
  // A prompt that diverges inside block 4 matches the 4 blocks before it.
  const other = [...tokens];
  other[4 * 16 + 5] = 123_456;
  assert.equal(matcher.matches(request(other), [a], ctx()).get(a)!.blocks, 4);
});

test('the answer is computed once per request and kept in its state; later changes show in the next request', () => {
  const matcher = new PrefixMatcher(new PrefixIndex());
  const a = worker('a');
  const b = worker('b');
  const tokens = seq(0, 200);
  const req = request(tokens);
  const first = matcher.matches(req, [a], ctx());
  hold(matcher, a, tokens, 5);
  const again = matcher.matches(req, [a, b], ctx());
  assert.equal(again, first, 'the same map, extended with the new worker');
  assert.equal(again.get(a)!.blocks, 0);
  assert.equal(again.get(b)!.blocks, 0);
  assert.equal(matcher.matches(request(tokens), [a], ctx()).get(a)!.blocks, 5);
  // Two matchers on one request keep separate answers.
  const other = new PrefixMatcher(new PrefixIndex());
  assert.equal(other.matches(req, [a], ctx()).get(a)!.blocks, 0);
  assert.equal(matcher.matches(req, [a], ctx()).get(a)!.blocks, 0);
});

test('workers are matched at their own block size', () => {
  const matcher = new PrefixMatcher(new PrefixIndex());
  const small = worker('small');
  const large = new WorkerState({ id: 'large', url: 'http://x/', pool: 'p', model: 'm', numGpuBlocks: 1000, blockSize: 32 });
  const tokens = seq(0, 320);
  hold(matcher, small, tokens, 20);
  hold(matcher, large, tokens, 10);
  const m = matcher.matches(request(tokens), [small, large], ctx());
  assert.deepEqual(m.get(small), { blocks: 20, tokens: 304, promptBlocks: 20, blockSize: 16, tiers: [20, 0, 0] });
  assert.deepEqual(m.get(large), { blocks: 10, tokens: 288, promptBlocks: 10, blockSize: 32, tiers: [10, 0, 0] });
});

test('a fixed block size and seed (llm-d’s 256-character blocks) ignore the workers’ own and kvgate’s hash space', () => {
  const index = new PrefixIndex();
  const chars = new PrefixMatcher(index, { seed: 7, blockSize: 256 });
  const kvgate = new PrefixMatcher(index);
  const a = worker('a');
  const tokens = seq(0, 1024);
  hold(chars, a, tokens, 4);
  assert.deepEqual(chars.matches(request(tokens), [a], ctx()).get(a), { blocks: 4, tokens: 768, promptBlocks: 4, blockSize: 256, tiers: [4, 0, 0] });
  assert.equal(kvgate.matches(request(tokens), [a], ctx()).get(a)!.blocks, 0);
});

test('a prediction is seen by the next request, withdrawn by retract, kept past its lifetime by confirm', () => {
  const matcher = new PrefixMatcher(new PrefixIndex({ predictedTtlMs: 1000 }));
  const a = worker('a');
  const tokens = seq(0, 160);
  const blocksAt = (now: number) => matcher.matches(request(tokens), [a], ctx(now)).get(a)!.blocks;
  matcher.predict(request(tokens), a, 0);
  assert.equal(blocksAt(0), 10);
  matcher.retract(request(tokens), a);
  assert.equal(blocksAt(0), 0);
  matcher.predict(request(tokens), a, 0);
  assert.equal(blocksAt(999), 10);
  assert.equal(blocksAt(1001), 0, 'an unconfirmed prediction expires');
  matcher.predict(request(tokens), a, 2000);
  matcher.confirm(request(tokens), a, 2500);
  assert.equal(blocksAt(60_000), 10);
});

test('a request’s confirmation follows its own prediction’s trail, at the worker it predicted', () => {
  const matcher = new PrefixMatcher(new PrefixIndex({ predictedTtlMs: 1000 }));
  const [a, b] = [worker('a'), worker('b')];
  const stats = () => matcher.index.stats();
  const r1 = request(seq(0, 160));
  matcher.predict(r1, a, 0);
  matcher.confirm(r1, a, 10);
  assert.deepEqual([stats().confirmedAlongTrail, stats().confirmedLookedUp], [10, 0]);
  assert.equal(matcher.matches(request(seq(0, 160)), [a], ctx(60_000)).get(a)!.blocks, 10, 'confirmed: past the prediction’s lifetime');
  // Confirmed at another worker than predicted (a retry): looked up there, no trail followed.
  const r2 = request(seq(5000, 160));
  matcher.track(b);
  matcher.predict(r2, a, 0);
  matcher.confirm(r2, b, 10);
  assert.deepEqual([stats().confirmedAlongTrail, stats().confirmedLookedUp], [10, 0]);
  assert.equal(matcher.matches(request(seq(5000, 160)), [b], ctx(60_000)).get(b)!.blocks, 10);
  // A prediction made not to be confirmed keeps no trail.
  const r3 = request(seq(9000, 160));
  matcher.predict(r3, a, 0, { confirmed: false });
  matcher.confirm(r3, a, 10);
  assert.deepEqual([stats().confirmedAlongTrail, stats().confirmedLookedUp], [10, 0]);
});
