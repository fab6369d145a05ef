import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { WorkerState } from '../../../../src/fleet/worker-state.js';
import { PrefixIndex } from '../../../../src/scheduler/index/prefix-index.js';
import { PrefixMatcher } from '../../../../src/scheduler/index/prefix-match.js';
import {
  KVGATE_ESTIMATE_TABLE,
  kvgateEstimate,
  kvgateEstimateProducer,
  type KvgateEstimateOptions,
} from '../../../../src/scheduler/policies/kvgate/estimate.js';
import {
  kvgateHeadroomScorer,
  kvgateLoadScorer,
  kvgatePrefixScorer,
  kvgateQueueScorer,
  kvgateSessionScorer,
  kvgateTtftScorer,
} from '../../../../src/scheduler/policies/kvgate/scorers.js';
import { USED_STALE_METRICS } from '../../../../src/scheduler/state-keys.js';
import type { RoutingContext } from '../../../../src/scheduler/types.js';
import { seededRng } from '../../../../src/util/rng.js';
import { request, seq, worker } from '../../helpers.js';

const ctx = (now = 0): RoutingContext => ({ now, rng: seededRng(1), staleAfterMs: 5000 });

function producer(
  rates: Record<string, number> = {},
  sessions: Record<string, string> = {},
  decode: { msPer1k: number; batch: Record<string, { contextTokens: number; stallShare: number; outputs?: number[]; n?: number; outputTokens?: number }> } = { msPer1k: 0, batch: {} },
  stallModel: 'linear' | 'misses' = 'linear',
  more: Partial<KvgateEstimateOptions> = {},
) {
  const matcher = new PrefixMatcher(new PrefixIndex());
  const opts: KvgateEstimateOptions = {
    matcher,
    exact: false,
    queueMsPerWaiting: 2,
    decodeMsPerRunning: 0.5,
    decodeMsPer1kContext: decode.msPer1k,
    tpotWorthMs: 20,
    decodeStepMs: 7.5,
    tpotTargetMs: 50,
    stallWeight: 1,
    stallModel,
    // Off here, so the hand-worked stalls below need not count the prompt ahead; its own test sets it.
    prefillChunkTokens: 0,
    arrivalsBehind: false,
    preemptionWeight: 0.5,
    prefillRate: (w) => rates[w.id] ?? 10_000,
    expectedOutput: (req) => Math.min(req.maxTokens, 1024),
    inflightBatch: (w) => {
      const b = decode.batch[w.id];
      if (!b) return { contextTokens: 0, stallShare: 0, n: 0, outputTokens: 0, outputs: [] };
      // Without n the batch's outputs are unknown: the estimate takes this request's as theirs.
      const outputs = b.outputs ?? [];
      return { ...b, outputs, n: b.n ?? outputs.length, outputTokens: b.outputTokens ?? outputs.reduce((x, y) => x + y, 0) };
    },
    sessionWorker: (k) => sessions[k],
    ...more,
  };
  return { matcher, p: kvgateEstimateProducer(opts) };
}

/** Put the first `blocks` blocks of `tokens` at `w`. */
function hold(matcher: PrefixMatcher, w: WorkerState, tokens: number[], blocks: number): void {
  matcher.track(w);
  matcher.index.insert(w.id, matcher.hashesFor(request(tokens), w), 'routed', 0, 0, blocks);
}

test('per worker: cached share, TTFT from the prefill ahead and uncached at its rate plus the queue, headroom, session', () => {
  // The one request this gateway has at a: 1,000 tokens of context, 3 tokens to generate, so a
  // millisecond's stall adds 0.5 ms to its TPOT, worth 10 ms of TTFT.
  const { matcher, p } = producer({ b: 20_000 }, { s1: 'b' }, { msPer1k: 0, batch: { a: { contextTokens: 1000, stallShare: 10 } } });
  const tokens = seq(0, 1600);
  const a = worker('a', { blocks: 1000, snapshot: { waiting: 3, running: 4, kvUsage: 0.5 } });
  const b = worker('b', { blocks: 1000, snapshot: { waiting: 0, running: 0, kvUsage: 0.9 } });
  hold(matcher, a, tokens, 50); // 800 of the 1,600 tokens
  a.begin({ id: 'x', promptTokens: 400, uncachedTokens: 400, maxTokens: 1, blocks: 10, dispatchedAt: 1 });
  const req = request(tokens, { sessionKey: 's1' });
  p.produce(req, [a, b], ctx(2));
  const ea = kvgateEstimate(req, a)!;
  const eb = kvgateEstimate(req, b)!;
  // a: (400 ahead + 800 uncached) · 0.1 ms + 2 ms · (3 + 1 dispatched since) + 0.5 ms · 4
  assert.deepEqual(ea, {
    hit: 0.5,
    cachedTokens: 800,
    uncachedTokens: 800,
    aheadTokens: 400,
    ttftMs: 120 + 8 + 2,
    msPerToken: 0.1,
    headroom: (1000 - 500 - 10 - 50) / 1000,
    waiting: 4,
    running: 4,
    session: false,
    outputTokens: 16,
    // a reported 7 requests, and this gateway has sent it 1 since, where it has 1 in flight: its
    // batch is taken to be 8 like that one.
    batchContextTokens: 8000,
    decodeMs: 0,
    tailMs: 0,
    // 80 ms of prefill stall for 8 requests like that one, 8 · 10 · 80 ms, weighed by the headroom
    // their TPOT has left: a bare 7.5 ms step of the 50 ms target (no KV read here) leaves 0.85.
    stallMs: 6400 / (1 - 7.5 / 50),
    readSlackMs: 0,
    // 490 blocks free, 10 reserved by what is in flight, 51 needed: room to spare.
    preemptMs: 0,
    costMs: 130 + 6400 / (1 - 7.5 / 50),
  });
  // b: 1,600 uncached at 20,000 tokens/s, the session's worker, 100 blocks free of 1,000, needs 100.
  assert.deepEqual(
    { ttftMs: eb.ttftMs, msPerToken: eb.msPerToken, headroom: eb.headroom, session: eb.session, hit: eb.hit },
    { ttftMs: 80, msPerToken: 0.05, headroom: 0, session: true, hit: 0 },
  );
  const t = req.state.get(KVGATE_ESTIMATE_TABLE)!;
  assert.deepEqual([t.minTtft, t.minWait, t.maxWait, t.minRun, t.maxRun], [80, 0, 4, 0, 4]);
  assert.equal(req.state.has(USED_STALE_METRICS), false);
});

test("a placement's KV read is counted for the steps it shares with the neighbours, no more", () => {
  // One request of ours at a (100 tokens to generate), reported in a batch of 10: 10 requests like
  // it (stallShare 20 / 99 each), so about 50 steps left on average.
  const batch = { a: { contextTokens: 2000, stallShare: 20 / 99, n: 1, outputTokens: 100 } };
  const { p } = producer({}, {}, { msPer1k: 0.06, batch });
  const a = worker('a', { snapshot: null });
  a.begin({ id: 'y', promptTokens: 2000, uncachedTokens: 0, maxTokens: 100, blocks: 10, dispatchedAt: 0 });
  a.applySnapshot({ at: 0, kvUsage: 0, running: 10, waiting: 0 });
  const k = 0.06 / 1000;
  const stall = (maxTokens: number, overlap: number): void => {
    const req = request(seq(0, 1600), { maxTokens });
    p.produce(req, [a], ctx(1));
    const e = kvgateEstimate(req, a)!;
    const S = 10 * (20 / 99);
    const ownCtx = 1600 + maxTokens / 2;
    const headroom = 1 - (7.5 + k * 20_000 + k * ownCtx) / 50;
    const expected = (S * 0.1 * 1600) / headroom + (10 * overlap * k * ownCtx) / headroom;
    assert.ok(Math.abs(e.stallMs - expected) < 1e-6, `${maxTokens} tokens: ${e.stallMs} ≠ ${expected}`);
  };
  // A 1,000-token answer shares only the neighbours' remaining ~50 steps with them.
  stall(1000, 50);
  // A 16-token answer shares its own 16.
  stall(16, 16);
});

test("a prompt sent where another is still in prefill pays for the first-token delay it puts on that one", () => {
  // a has a 6,000-token prompt of ours ahead in prefill, b nothing; no decodes to stall anywhere
  // (no batch of ours reported, no KV read), so the stall is that delay alone.
  const estimate = (chunk: number, prompt: number, w: 'a' | 'b') => {
    const { p } = producer({}, {}, { msPer1k: 0, batch: {} }, 'linear', { prefillChunkTokens: chunk });
    const a = worker('a', { blocks: 100_000, snapshot: null });
    const b = worker('b', { blocks: 100_000, snapshot: null });
    a.begin({ id: 'x', promptTokens: 6000, uncachedTokens: 6000, maxTokens: 1, blocks: 10, dispatchedAt: 0 });
    const req = request(seq(0, prompt), { maxTokens: 1 });
    p.produce(req, [a, b], ctx(1));
    return kvgateEstimate(req, w === 'a' ? a : b)!;
  };
  // What the prompt ahead leaves of the 8,192-token step it finishes in, L, is taken as uniform on
  // [0, 8192]: a 4,096-token prompt puts E[min(4096, L)] = 4096 − 4096² / 16384 = 3,072 tokens into
  // it, 307.2 ms at 10,000 tokens/s, in the stall and so in the cost.
  const e = estimate(8192, 4096, 'a');
  assert.ok(Math.abs(e.stallMs - 307.2) < 1e-9, `${e.stallMs}`);
  assert.ok(Math.abs(e.costMs - e.ttftMs - 307.2) < 1e-9);
  assert.equal(estimate(8192, 4096, 'b').stallMs, 0, 'nothing in prefill at b: nothing joined');
  // A prompt of the budget or longer takes half of it on average, whatever its length.
  assert.ok(Math.abs(estimate(8192, 12_000, 'a').stallMs - 409.6) < 1e-9);
  assert.ok(Math.abs(estimate(8192, 20_000, 'a').stallMs - 409.6) < 1e-9);
  // A smaller budget (vLLM's 2,048 on smaller GPUs) leaves less to join.
  assert.ok(Math.abs(estimate(2048, 4096, 'a').stallMs - 102.4) < 1e-9);
  assert.equal(estimate(0, 4096, 'a').stallMs, 0, 'prefillChunkTokens 0: not counted');
});

test('a prefill costs the requests expected to arrive behind it the wait it puts before them', () => {
  // a: a 2,000-token prompt ahead (200 ms at 10,000 tokens/s); b: nothing. Requests reached a at
  // one per 100 ms for the last minute, b at one per second.
  const { p } = producer({}, {}, { msPer1k: 0, batch: {} }, 'linear', { arrivalsBehind: true });
  const a = worker('a', { blocks: 100_000, snapshot: null });
  const b = worker('b', { blocks: 100_000, snapshot: null });
  for (let t = 0; t <= 60_000; t += 100) a.arrivals.add(t);
  for (let t = 0; t <= 60_000; t += 1000) b.arrivals.add(t);
  a.begin({ id: 'x', promptTokens: 2000, uncachedTokens: 2000, maxTokens: 1, blocks: 10, dispatchedAt: 60_000 });
  const req = request(seq(0, 4000), { maxTokens: 1 });
  p.produce(req, [a, b], ctx(60_000));
  const la = a.arrivals.perMs(60_000);
  const lb = b.arrivals.perMs(60_000);
  // The decayed rates are the streams' own, to within what the last 10 s constant leaves out.
  assert.ok(Math.abs(la - 0.01) < 0.01 * 0.01 + 1e-4, `${la}`);
  assert.ok(Math.abs(lb - 0.001) < 0.001 * 0.01 + 1e-4, `${lb}`);
  // 400 ms of prefill: at a, those arriving during the 200 ms ahead wait all of it, those during
  // it half: λ · 400 · (200 + 200); at b, λ · 400 · 200.
  assert.ok(Math.abs(kvgateEstimate(req, a)!.stallMs - la * 400 * 400) < 1e-9);
  assert.ok(Math.abs(kvgateEstimate(req, b)!.stallMs - lb * 400 * 200) < 1e-9);
  assert.ok(kvgateEstimate(req, a)!.stallMs > 10 * kvgateEstimate(req, b)!.stallMs);
});

test('the steps a KV read shares are half the mean expected output at the worker, not a mean weighted to the short answers', () => {
  // Ten requests of ours at a: nine 10-token answers and one of 910 (mean 100; W · N / S, the mean
  // stallShare weighs by, about 10).
  const outputs = [...Array<number>(9).fill(10), 910];
  const S = outputs.reduce((x, n) => x + 20 / (n - 1), 0);
  const { p } = producer({}, {}, { msPer1k: 0.06, batch: { a: { contextTokens: 20_000, stallShare: S, outputs } } });
  const a = worker('a', { snapshot: null });
  for (let i = 0; i < 10; i++) a.begin({ id: `y${i}`, promptTokens: 2000, uncachedTokens: 0, maxTokens: 100, blocks: 10, dispatchedAt: 0 });
  const req = request(seq(0, 1600), { maxTokens: 1000 });
  p.produce(req, [a], ctx(1));
  const e = kvgateEstimate(req, a)!;
  const k = 0.06 / 1000;
  const ownCtx = 1600 + 500;
  const headroom = 1 - (7.5 + k * 20_000 + k * ownCtx) / 50;
  // 50 steps with each of the 10, where W · N / S would say about 5.
  const read = (10 * 50 * k * ownCtx) / headroom;
  assert.ok(Math.abs(e.stallMs - ((S * 0.1 * 1600) / headroom + read)) < 1e-6, `${e.stallMs}`);
});

test("of the neighbours' time a KV read takes, the share below their TPOT target is slack", () => {
  // Worked by hand. 10 neighbours reported at a, our one among them with 2,000 tokens of context
  // (so 20,000 in the batch) and 100 tokens to generate (stallShare 20 / 99 each, S = 2.0202). The
  // request: 1,600 tokens, all cached but the last block (16 tokens, 1.6 ms of prefill), 40 to
  // generate: ownCtx 1,620, overlap min(40, 100 / 2) = 40 steps, each 0.06 · 1.62 = 0.0972 ms
  // longer: 38.88 ms of the neighbours' time. Their step, with it: 7.5 + 1.2 + 0.0972 = 8.7972 ms
  // of 50, load 0.175944, headroom 0.824056: the read is worth 38.88 / 0.824056 = 47.1813 ms, of
  // which the share below the target, 0.824056 of it (38.88 ms), is slack and 8.3013 ms is lost.
  // The prefill gap: S · 1.6 / 0.824056 = 3.9225.
  const { matcher, p } = producer({}, {}, { msPer1k: 0.06, batch: { a: { contextTokens: 2000, stallShare: 20 / 99, n: 1, outputTokens: 100 } } });
  const a = worker('a', { snapshot: null });
  a.begin({ id: 'y', promptTokens: 2000, uncachedTokens: 0, maxTokens: 100, blocks: 10, dispatchedAt: 0 });
  a.applySnapshot({ at: 0, kvUsage: 0, running: 10, waiting: 0 });
  const tokens = seq(0, 1600);
  hold(matcher, a, tokens, 100);
  const req = request(tokens, { maxTokens: 40 });
  p.produce(req, [a], ctx(1));
  const e = kvgateEstimate(req, a)!;
  assert.equal(e.uncachedTokens, 16);
  assert.ok(Math.abs(e.stallMs - (47.1813 + 3.9225)) < 1e-3, `stall ${e.stallMs}`);
  assert.ok(Math.abs(e.readSlackMs - 38.88) < 1e-3, `slack ${e.readSlackMs}`);
  // Nearer the target the slack is the same time, the loss grows: the same batch with 20 times the
  // context (24 ms more a step): 7.5 + 24 + 0.0972 = 31.5972 ms of 50, headroom 0.368056, the read
  // worth 105.6361 ms of which 38.88 is slack and 66.7561 lost.
  const { matcher: m2, p: p2 } = producer({}, {}, { msPer1k: 0.06, batch: { a: { contextTokens: 40_000, stallShare: 20 / 99, n: 1, outputTokens: 100 } } });
  const b = worker('a', { snapshot: null });
  b.begin({ id: 'y', promptTokens: 2000, uncachedTokens: 0, maxTokens: 100, blocks: 10, dispatchedAt: 0 });
  b.applySnapshot({ at: 0, kvUsage: 0, running: 10, waiting: 0 });
  hold(m2, b, tokens, 100);
  const req2 = request(tokens, { maxTokens: 40 });
  p2.produce(req2, [b], ctx(1));
  const e2 = kvgateEstimate(req2, b)!;
  assert.ok(Math.abs(e2.readSlackMs - 38.88) < 1e-3, `slack ${e2.readSlackMs}`);
  assert.ok(Math.abs(e2.stallMs - (105.6361 + (20 / 99) * 10 * 1.6 / 0.368056)) < 1e-3, `stall ${e2.stallMs}`);
});

test('the six scorers rate the candidates from the table', () => {
  const { p } = producer({}, { s: 'b' });
  const a = worker('a', { snapshot: { waiting: 4, running: 2 } });
  const b = worker('b', { snapshot: { waiting: 0, running: 6 } });
  const c = worker('c', { snapshot: { waiting: 2, running: 4 } });
  const ws = [a, b, c];
  const req = request(seq(0, 160), { sessionKey: 's' });
  p.produce(req, ws, ctx());
  const ttft = ws.map((w) => kvgateEstimate(req, w)!.ttftMs);
  const min = Math.min(...ttft);
  assert.deepEqual(kvgateTtftScorer.score(req, ws, ctx()), ttft.map((x) => min / x));
  assert.deepEqual(kvgateQueueScorer.score(req, ws, ctx()), [0, 1, 0.5]);
  assert.deepEqual(kvgateLoadScorer.score(req, ws, ctx()), [1, 0, 0.5]);
  assert.deepEqual(kvgateSessionScorer.score(req, ws, ctx()), [0, 1, 0]);
  assert.deepEqual(kvgatePrefixScorer.score(req, ws, ctx()), [0, 0, 0]);
  assert.deepEqual(kvgateHeadroomScorer.score(req, ws, ctx()), ws.map((w) => kvgateEstimate(req, w)!.headroom));
  // Asked about other candidates than the producer saw, they refuse rather than misalign.
  assert.throws(() => kvgatePrefixScorer.score(req, [a, b], ctx()), /kvgate-estimate producer/);
  assert.throws(() => kvgatePrefixScorer.score(request([1]), ws, ctx()), /kvgate-estimate producer/);
});

test('a stale snapshot: in-flight accounting, flagged; a retry estimates only the workers not seen before', () => {
  const { p } = producer();
  const a = worker('a', { snapshot: { at: 0, waiting: 50 } });
  const b = worker('b', { snapshot: { at: 9000, waiting: 1 } });
  const req = request(seq(0, 160));
  p.produce(req, [a], ctx(10_000));
  const first = kvgateEstimate(req, a)!;
  assert.equal(first.waiting, 0);
  assert.equal(req.state.get(USED_STALE_METRICS), true);
  // The retry: a's load changed, but its estimate for this request is kept.
  a.begin({ id: 'x', promptTokens: 1000, uncachedTokens: 1000, maxTokens: 1, blocks: 1, dispatchedAt: 10_000 });
  p.produce(req, [b, a], ctx(10_001));
  assert.equal(kvgateEstimate(req, a), first);
  assert.equal(kvgateEstimate(req, b)!.waiting, 1);
  assert.deepEqual(req.state.get(KVGATE_ESTIMATE_TABLE)!.ws.map((w) => w.id), ['b', 'a']);
});

test('a worker whose requests would outgrow its KV charges the likely preemption: a recompute and its stall', () => {
  // One request of ours at each worker, a's reserved 950 of its 1,000 blocks (a long answer still
  // to write: the scrape after it shows 200 in use); b's reserved 50 of them.
  const { p } = producer({}, {}, { msPer1k: 0, batch: { a: { contextTokens: 0, stallShare: 2 }, b: { contextTokens: 0, stallShare: 2 } } });
  const a = worker('a', { blocks: 1000, snapshot: { kvUsage: 0.2 } });
  const b = worker('b', { blocks: 1000, snapshot: { kvUsage: 0.2 } });
  a.begin({ id: 'long', promptTokens: 3200, uncachedTokens: 3200, maxTokens: 12000, blocks: 950, dispatchedAt: 0 });
  b.begin({ id: 'short', promptTokens: 800, uncachedTokens: 800, maxTokens: 0, blocks: 50, dispatchedAt: 0 });
  for (const w of [a, b]) w.applySnapshot({ at: 0.5, kvUsage: 0.2, running: 1, waiting: 0 });
  // 1,584 prompt tokens (99 blocks) and 16 to generate (1 block): 100 blocks needed.
  const req = request(seq(0, 1584));
  p.produce(req, [a, b], ctx(1));
  const ea = kvgateEstimate(req, a)!;
  const eb = kvgateEstimate(req, b)!;
  // At a, 950 + 100 − 1,000 = 50 of its 100 blocks do not fit once the long answer is written:
  // half a recompute of its 1,600 tokens of context at 0.1 ms each, plus the stall that recompute
  // puts in the batch (Σ stallShare 2, over the headroom of a bare 7.5 ms step of 50 ms).
  const preempt = 0.5 * 0.1 * 1600 * (1 + 2 / (1 - 7.5 / 50));
  assert.ok(Math.abs(ea.preemptMs - preempt) < 1e-9, `${ea.preemptMs} ≠ ${preempt}`);
  assert.ok(Math.abs(ea.costMs - (ea.ttftMs + ea.decodeMs + ea.stallMs + 0.5 * preempt)) < 1e-9, 'the cost carries preemptionWeight · preemptMs');
  // At b the scrape's 200 blocks in use (more than its 50 reserved) leave room.
  assert.equal(eb.preemptMs, 0);
  // Blocks in use as scraped count too: a scrape showing 95% used is as full as a's reservations.
  const c = worker('c', { blocks: 1000, snapshot: { kvUsage: 0.95 } });
  const req2 = request(seq(0, 1584));
  p.produce(req2, [c], ctx(1));
  assert.ok(kvgateEstimate(req2, c)!.preemptMs > 0);
});

test('a batch that turned over since the scrape: what left is not counted, what came is', () => {
  const { p } = producer();
  const a = worker('a', { snapshot: null });
  for (let i = 0; i < 6; i++) {
    a.begin({ id: `r${i}`, promptTokens: 1000, uncachedTokens: 1000, maxTokens: 50, blocks: 70, dispatchedAt: 0 });
    a.firstToken(`r${i}`, 1);
  }
  a.applySnapshot({ at: 2, kvUsage: 0.4, running: 6, waiting: 0 });
  for (let i = 0; i < 5; i++) a.end(`r${i}`);
  a.begin({ id: 'n', promptTokens: 1000, uncachedTokens: 1000, maxTokens: 50, blocks: 70, dispatchedAt: 3 });
  const req = request(seq(0, 160));
  p.produce(req, [a], ctx(4));
  const e = kvgateEstimate(req, a)!;
  assert.deepEqual({ running: e.running, waiting: e.waiting }, { running: 1, waiting: 1 });
  // The queue terms count the one left running and the one sent since, not the scrape's six plus one.
  assert.equal(e.ttftMs, 0.1 * (1000 + 160) + 2 * 1 + 0.5 * 1);
});

/** Workers a and b, each with `n` requests of this gateway in flight (the batches the tests describe). */
function decodingWorkers(n: number): [WorkerState, WorkerState] {
  const ws = [worker('a', { snapshot: null }), worker('b', { snapshot: null })] as [WorkerState, WorkerState];
  for (const w of ws) for (let i = 0; i < n; i++) w.begin({ id: `${w.id}${i}`, promptTokens: 100, uncachedTokens: 100, maxTokens: 10, blocks: 10, dispatchedAt: 0 });
  return ws;
}

test("stallModel 'misses': a stall costs the TPOT targets it breaks, one per short answer, none for long ones", () => {
  // a decodes four answers of ours: 1, 3, 5 and 300 tokens; b four of 300. k = 0: every TPOT has
  // 50 − 7.5 = 42.5 ms of slack.
  const batch = {
    a: { contextTokens: 0, stallShare: 0, outputs: [1, 3, 5, 300] },
    b: { contextTokens: 0, stallShare: 0, outputs: [300, 300, 300, 300] },
  };
  const { p } = producer({}, {}, { msPer1k: 0, batch }, 'misses');
  const [a, b] = decodingWorkers(4);
  // 2,000 uncached tokens at 0.1 ms: a 200 ms stall, 200 / 42.5 = 4.7 ms per token of slack: the
  // answers of 2 to 5 tokens miss (3 and 5 at a), the one-token answer and the long ones do not.
  const req = request(seq(0, 2000));
  p.produce(req, [a, b], ctx(1));
  assert.equal(kvgateEstimate(req, a)!.stallMs, 2 * 20 * 50);
  assert.equal(kvgateEstimate(req, b)!.stallMs, 0);
  // A 100-token prompt stalls 10 ms: nobody misses.
  const small = request(seq(5000, 100));
  p.produce(small, [a], ctx(1));
  assert.equal(kvgateEstimate(small, a)!.stallMs, 0);
  // The linear model prices the same stall on every answer, long ones included.
  const lin = producer({}, {}, { msPer1k: 0, batch: { b: { contextTokens: 0, stallShare: 4 * (20 / 299), outputs: [300, 300, 300, 300] } } }).p;
  const req2 = request(seq(0, 2000));
  lin.produce(req2, [b], ctx(1));
  assert.ok(kvgateEstimate(req2, b)!.stallMs > 0);
});

test("stallModel 'misses': the request's own TPOT is worth at most one miss, as a neighbour's is", () => {
  // a's batch holds 600,000 tokens of context of ours (two requests): at 0.06 ms per 1k tokens its
  // decode steps read 36 ms of KV, 7.5 + 36 = 43.5 ms of the 50 ms target, headroom 0.13: the
  // linear price of this request's TPOT there, 20 · 36 / 0.13, is some 5.5 s of TTFT, five and a
  // half misses' worth. Under 'misses' it is one miss: 20 · 50 = 1,000 ms.
  const batch = { a: { contextTokens: 600_000, stallShare: 0, outputs: [300, 300] } };
  const [a] = decodingWorkers(2);
  const req = request(seq(0, 100), { maxTokens: 100 });
  const lin = producer({}, {}, { msPer1k: 0.06, batch }, 'linear').p;
  lin.produce(req, [a], ctx(1));
  assert.ok(kvgateEstimate(req, a)!.decodeMs > 5000);
  const { p } = producer({}, {}, { msPer1k: 0.06, batch }, 'misses');
  const req2 = request(seq(0, 100), { maxTokens: 100 });
  p.produce(req2, [a], ctx(1));
  assert.equal(kvgateEstimate(req2, a)!.decodeMs, 20 * 50);
  // A light batch is priced as before, below one miss: 30,000 tokens, 1.8 ms of KV read.
  const light = producer({}, {}, { msPer1k: 0.06, batch: { a: { contextTokens: 30_000, stallShare: 0, outputs: [300, 300] } } }, 'misses').p;
  const req3 = request(seq(0, 100), { maxTokens: 100 });
  light.produce(req3, [a], ctx(1));
  const h = 1 - (7.5 + 1.8) / 50;
  assert.ok(Math.abs(kvgateEstimate(req3, a)!.decodeMs - (20 * 1.8) / h) < 1e-6);
});

test('e2eTail: an answer longer than the mean in flight pays for its own E2E at a crowded worker, a short one its TPOT only', () => {
  // a decodes four answers of ours, 100, 100, 100 and 1,000 tokens (mean 325), over 100,000 tokens
  // of context: at 0.06 ms per 1k tokens its steps read 6 ms of KV, headroom 1 − 13.5 / 50 = 0.73.
  const batch = { a: { contextTokens: 100_000, stallShare: 0, outputs: [100, 100, 100, 1000] } };
  const [a, b] = decodingWorkers(4);
  const { p } = producer({}, {}, { msPer1k: 0.06, batch }, 'linear', { meanOutputInFlight: () => 325 });
  const tpotMs = (20 * 6) / 0.73;
  // A 1,000-token answer: its 999 − 325 decodes beyond the mean lose 6 ms each, 4,044 ms, of
  // which its TPOT price is already counted.
  const long = request(seq(0, 100), { maxTokens: 1000 });
  p.produce(long, [a, b], ctx(1));
  const el = kvgateEstimate(long, a)!;
  assert.ok(Math.abs(el.decodeMs - 674 * 6) < 1e-6, `decode ${el.decodeMs}`);
  assert.ok(Math.abs(el.tailMs - (674 * 6 - tpotMs)) < 1e-6, `tail ${el.tailMs}`);
  // b's batch is empty: nothing to read, nothing to lose.
  assert.equal(kvgateEstimate(long, b)!.tailMs, 0);
  // A 100-token answer finishes before the mean: its TPOT price only.
  const short = request(seq(0, 100), { maxTokens: 100 });
  p.produce(short, [a, b], ctx(1));
  assert.equal(kvgateEstimate(short, a)!.tailMs, 0);
  assert.ok(Math.abs(kvgateEstimate(short, a)!.decodeMs - tpotMs) < 1e-6);
  // Off (the default of the bare producer): the long answer is priced by its TPOT alone.
  const off = producer({}, {}, { msPer1k: 0.06, batch }).p;
  const long2 = request(seq(0, 100), { maxTokens: 1000 });
  off.produce(long2, [a, b], ctx(1));
  assert.equal(kvgateEstimate(long2, a)!.tailMs, 0);
  assert.ok(Math.abs(kvgateEstimate(long2, a)!.decodeMs - tpotMs) < 1e-6);
});

test("e2eTail: a prefill's stall also costs the share of it the longer-than-mean answers' E2E loses", () => {
  // a decodes answers of 100, 100, 100 and 1,000 tokens (mean 325); no TPOT price (stallShare 0)
  // and no KV read (k = 0), so what is left is the tail share: 1 − 325 / 999 for the long answer.
  const batch = { a: { contextTokens: 0, stallShare: 0, outputs: [100, 100, 100, 1000] } };
  const [a] = decodingWorkers(4);
  const { p } = producer({}, {}, { msPer1k: 0, batch }, 'linear', { meanOutputInFlight: () => 325 });
  // 2,000 uncached tokens at 0.1 ms: a 200 ms stall.
  const req = request(seq(0, 2000));
  p.produce(req, [a], ctx(1));
  const share = 1 - 325 / 999;
  assert.ok(Math.abs(kvgateEstimate(req, a)!.stallMs - share * 200) < 1e-6, `stall ${kvgateEstimate(req, a)!.stallMs}`);
  const off = producer({}, {}, { msPer1k: 0, batch }).p;
  const req2 = request(seq(0, 2000));
  off.produce(req2, [a], ctx(1));
  assert.equal(kvgateEstimate(req2, a)!.stallMs, 0);
});
