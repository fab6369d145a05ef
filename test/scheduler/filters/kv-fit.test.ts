import { test } from 'node:test';
import assert from 'node:assert/strict';
import { kvFitFilter, type KvFitOptions } from '../../../src/scheduler/filters/kv-fit.js';
import { PrefixIndex } from '../../../src/scheduler/index/prefix-index.js';
import { PrefixMatcher } from '../../../src/scheduler/index/prefix-match.js';
import { PipelinePolicy } from '../../../src/scheduler/pipeline.js';
import { maxScorePicker } from '../../../src/scheduler/pickers/max-score.js';
import { KV_OVERFULL, KV_ROOM, USED_STALE_METRICS } from '../../../src/scheduler/state-keys.js';
import type { RoutingContext } from '../../../src/scheduler/types.js';
import { seededRng } from '../../../src/util/rng.js';
import { request, seq, worker } from '../helpers.js';

const ctx = (now = 0): RoutingContext => ({ now, rng: seededRng(1), staleAfterMs: 5000 });
const all: KvFitOptions = { whenNoneFits: 'all', overfullSlackBlocks: 0 };
/** 320 prompt tokens + 16 output tokens: 20 + 1 blocks of 16 with nothing cached. */
const prompt = () => request(seq(0, 20 * 16));
/** A 100-block worker whose last snapshot shows `freeBlocks` free. */
const withFree = (id: string, freeBlocks: number) => worker(id, { blocks: 100, snapshot: { kvUsage: (100 - freeBlocks) / 100 } });

test('keeps the workers with room for the uncached prompt and the expected output, and only them', () => {
  const f = kvFitFilter(null, all);
  const cases: Array<{ free: Record<string, number>; kept: string[] }> = [
    { free: { a: 21, b: 20 }, kept: ['a'] },
    { free: { a: 50, b: 10, c: 30 }, kept: ['a', 'c'] },
    { free: { a: 20, b: 21 }, kept: ['b'] },
  ];
  for (const c of cases) {
    const req = prompt();
    const ws = Object.entries(c.free).map(([id, free]) => withFree(id, free));
    assert.deepEqual(f.filter(req, ws, ctx()).map((w) => w.id), c.kept, JSON.stringify(c.free));
    assert.equal(req.state.has(KV_OVERFULL), false);
  }
  // Everyone fits: the input comes back as is.
  const ws = [withFree('a', 50), withFree('b', 60)];
  assert.equal(f.filter(prompt(), ws, ctx()), ws);
});

test('a request of several sequences needs every prompt of its batch and output blocks for each sequence', () => {
  const f = kvFitFilter(null, all);
  // 20 prompt blocks + 1 output block alone; n = 4: 20 + 4; three such prompts with n = 2: 60 + 6.
  const cases: Array<{ extra: Record<string, number>; need: number }> = [
    { extra: {}, need: 21 },
    { extra: { sequences: 4 }, need: 24 },
    { extra: { sequences: 6, batchPromptTokens: 3 * 20 * 16 }, need: 66 },
  ];
  for (const c of cases) {
    const ws = [withFree('short', c.need - 1), withFree('enough', c.need)];
    const req = request(seq(0, 20 * 16), c.extra);
    assert.deepEqual(f.filter(req, ws, ctx()).map((w) => w.id), ['enough'], JSON.stringify(c));
  }
});

test('blocks reserved since the snapshot count against a worker, as do blocks the prompt has cached for it', () => {
  const index = new PrefixIndex();
  const matcher = new PrefixMatcher(index);
  const f = kvFitFilter(matcher, all);
  const req = prompt();
  const cached = withFree('cached', 10);
  const cold = withFree('cold', 15);
  matcher.track(cached);
  index.insert('cached', matcher.hashesFor(req, cached), 'routed', 0);
  // cached holds 19 usable blocks: 1 + 1 blocks needed; cold needs 21.
  assert.deepEqual(f.filter(req, [cached, cold], ctx()).map((w) => w.id), ['cached']);
  // Reserve 9 of its 10 free blocks after the snapshot: now nobody fits.
  cached.begin({ id: 'x', promptTokens: 1, uncachedTokens: 1, maxTokens: 1, blocks: 9, dispatchedAt: 1 });
  const again = prompt();
  f.filter(again, [cached, cold], ctx(2));
  assert.equal(again.state.get(KV_OVERFULL), true);
});

test('nobody fits now but some could when idle: never refused; all of them, or the least overfull within the slack', () => {
  // Overfull by 21 − free: a by 11, b by 6, c by 9.
  const ws = () => [withFree('a', 10), withFree('b', 15), withFree('c', 12)];
  const cases: Array<{ opts: KvFitOptions; kept: string[] }> = [
    { opts: all, kept: ['a', 'b', 'c'] },
    { opts: { whenNoneFits: 'least-overfull', overfullSlackBlocks: 0 }, kept: ['b'] },
    { opts: { whenNoneFits: 'least-overfull', overfullSlackBlocks: 3 }, kept: ['b', 'c'] },
    { opts: { whenNoneFits: 'least-overfull', overfullSlackBlocks: 5 }, kept: ['a', 'b', 'c'] },
  ];
  for (const c of cases) {
    const req = prompt();
    assert.deepEqual(kvFitFilter(null, c.opts).filter(req, ws(), ctx()).map((w) => w.id), c.kept, JSON.stringify(c.opts));
    assert.equal(req.state.get(KV_OVERFULL), true);
  }
  // A worker too small ever to hold the prompt is dropped even then.
  const req = prompt();
  assert.deepEqual(kvFitFilter(null, all).filter(req, [withFree('a', 10), worker('tiny', { blocks: 20 })], ctx()).map((w) => w.id), ['a']);
});

test("rule 'ever': room now does not matter, only whether the prompt could ever fit; a decision where none had room is still flagged", () => {
  const ever: KvFitOptions = { ...all, rule: 'ever' };
  const f = kvFitFilter(null, ever);
  // a has room, b has none now: both kept (the input as is), nothing flagged.
  const ws = [withFree('a', 50), withFree('b', 5)];
  const some = prompt();
  assert.equal(f.filter(some, ws, ctx()), ws);
  assert.equal(some.state.has(KV_OVERFULL), false);
  // …and the ones with room are marked for the picker (only when some lack it).
  assert.deepEqual([...some.state.get(KV_ROOM)!].map((w) => w.id), ['a']);
  const roomy = prompt();
  f.filter(roomy, [withFree('a', 50), withFree('b', 60)], ctx());
  assert.equal(roomy.state.has(KV_ROOM), false);
  // Nobody has room now: all kept, flagged. least-overfull applies to rule 'now' only.
  const none = prompt();
  const full = [withFree('a', 10), withFree('b', 15)];
  assert.deepEqual(kvFitFilter(null, { ...ever, whenNoneFits: 'least-overfull' }).filter(none, full, ctx()).map((w) => w.id), ['a', 'b']);
  assert.equal(none.state.get(KV_OVERFULL), true);
  assert.equal(none.state.has(KV_ROOM), false);
  // A worker too small ever to hold the prompt is still dropped, and neverFits still answers.
  assert.deepEqual(f.filter(prompt(), [withFree('a', 5), worker('tiny', { blocks: 20 })], ctx()).map((w) => w.id), ['a']);
  assert.match(f.neverFits(request(seq(0, 60 * 16)), [worker('a', { blocks: 50 })], ctx()) ?? '', /does not fit in the KV cache/);
});

test('a prompt no worker could ever hold: nobody kept, and neverFits explains with the largest worker', () => {
  const f = kvFitFilter(null, all);
  const req = request(seq(0, 60 * 16)); // 60 blocks + 1 > either cache
  const ws = [worker('a', { blocks: 50 }), worker('b', { blocks: 60 })];
  assert.deepEqual(f.filter(req, ws, ctx()), []);
  assert.equal(
    f.neverFits(req, ws, ctx()),
    "The prompt (960 tokens) does not fit in the KV cache of any worker serving model 'm' (largest: 60 blocks of 16 tokens = 960 tokens). Please reduce the length of the prompt.",
  );
  // One worker that could hold it when idle: not a never-fits.
  assert.equal(f.neverFits(req, [...ws, worker('big', { blocks: 61 })], ctx()), null);
  assert.equal(f.neverFits(req, [], ctx()), null);
  // Through the pipeline that is a 400, not a 503.
  const p = new PipelinePolicy({ name: 't', filters: [f], scorers: [], picker: maxScorePicker });
  const out = p.route(req, ws, ctx());
  assert.ok(!out.ok && out.status === 400 && out.code === 'context_length_exceeded' && /960 tokens/.test(out.message));
});

test('a stale snapshot is not trusted: capacity minus the gateway’s own reservations, and the decision says so', () => {
  const f = kvFitFilter(null, all);
  const w = worker('a', { blocks: 100, snapshot: { at: 0, kvUsage: 1 } });
  const fresh = prompt();
  assert.deepEqual(f.filter(fresh, [w, withFree('b', 30)], ctx(1000)).map((x) => x.id), ['b']);
  assert.equal(fresh.state.has(USED_STALE_METRICS), false);
  const stale = prompt();
  // 10 s later the full snapshot is stale; nothing is reserved there, so it has room.
  assert.deepEqual(f.filter(stale, [w], ctx(10_000)).map((x) => x.id), ['a']);
  assert.equal(stale.state.get(USED_STALE_METRICS), true);
});

test('exact: free blocks and cached tokens come from the engine’s probe where there is one', () => {
  const f = kvFitFilter(null, { ...all, exact: true });
  const a = withFree('a', 100); // the snapshot says empty…
  a.oracle = { cachedPrefixTokens: () => 0, running: () => 0, waiting: () => 0, freeBlocks: () => 5, pendingPrefillTokens: () => 0 };
  const b = withFree('b', 0); // …or full, but the probe knows better
  b.oracle = { cachedPrefixTokens: () => 320, running: () => 0, waiting: () => 0, freeBlocks: () => 3, pendingPrefillTokens: () => 0 };
  const req = prompt();
  assert.deepEqual(f.filter(req, [a, b], ctx()).map((w) => w.id), ['b']);
});
