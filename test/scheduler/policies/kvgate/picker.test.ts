import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { WorkerState } from '../../../../src/fleet/worker-state.js';
import { kvgatePicker, type KvgatePickerOptions } from '../../../../src/scheduler/policies/kvgate/picker.js';
import { KVGATE_ESTIMATES, type KvgateEstimate } from '../../../../src/scheduler/policies/kvgate/estimate.js';
import { KV_OVERFULL } from '../../../../src/scheduler/state-keys.js';
import type { RouteRequest, RoutingContext, ScoredWorker } from '../../../../src/scheduler/types.js';
import { seededRng } from '../../../../src/util/rng.js';
import { request, seq, worker } from '../../helpers.js';

const DEFAULTS: KvgatePickerOptions = {
  nearRelative: 0.25,
  nearAbsoluteMs: 0,
  spillRelative: 0.25,
  spillAbsoluteMs: 0,
  spillSavedFraction: 0.75,
  minHitGain: 0.05,
  wSession: 0.5,
};
const ctx: RoutingContext = { now: 0, rng: seededRng(1), staleAfterMs: 5000 };
const PROMPT = 4000;
/** 0.1 ms per prefill token (10,000 tokens/s). */
const MS_PER_TOKEN = 0.1;

interface Candidate {
  id: string;
  /** Weighted score from the scorers. */
  score: number;
  /** Cached prompt tokens. */
  cached: number;
  ttftMs: number;
  session?: boolean;
  /** The part of the cost that prices the request's own E2E (estimate.ts tailMs). */
  tailMs?: number;
  /** What it costs its own TPOT besides tailMs (estimate.ts decodeMs less tailMs). */
  decodeMs?: number;
  /** What it costs the worker's batch (estimate.ts stallMs, at stallWeight 1). */
  stallMs?: number;
}

/** The candidates as the pipeline would hand them over, with the producer's estimates in state. */
function setup(cs: Candidate[]): { req: RouteRequest; candidates: ScoredWorker[] } {
  const req = request(seq(0, PROMPT));
  const est = new Map<WorkerState, KvgateEstimate>();
  const candidates = cs.map((c) => {
    const w = worker(c.id);
    est.set(w, {
      hit: c.cached / PROMPT,
      cachedTokens: c.cached,
      uncachedTokens: PROMPT - c.cached,
      aheadTokens: 0,
      ttftMs: c.ttftMs,
      msPerToken: MS_PER_TOKEN,
      headroom: 1,
      waiting: 0,
      running: 0,
      session: c.session ?? false,
      outputTokens: 16,
      batchContextTokens: 0,
      decodeMs: (c.decodeMs ?? 0) + (c.tailMs ?? 0),
      tailMs: c.tailMs ?? 0,
      stallMs: c.stallMs ?? 0,
      readSlackMs: 0,
      preemptMs: 0,
      costMs: c.ttftMs + (c.decodeMs ?? 0) + (c.tailMs ?? 0) + (c.stallMs ?? 0),
    });
    return { worker: w, score: c.score, parts: {} };
  });
  req.state.set(KVGATE_ESTIMATES, est);
  return { req, candidates };
}

/** The cheapest candidate of most cases below: cost 200 ms, half of it its stall on the batch. */
const CHEAPEST: Candidate = { id: 'a', score: 1, cached: 0, ttftMs: 100, stallMs: 100 };

test('prefix, spill, session or load: which worker and why', () => {
  const cases: Array<{ what: string; cs: Candidate[]; opts?: Partial<KvgatePickerOptions>; pick: string; reason: string; hit: number }> = [
    {
      what: 'the best-cached worker is busier but within the slack: it keeps the prefix',
      // a costs 100 + 100 = 200, b 120 + 300 = 420 ≤ 200 · 1.25 + 0.75 · 0.1 · 3000 = 475; b's
      // first token (120 ms) is within 100 + 0.25 · 100 = 125 ms
      cs: [
        CHEAPEST,
        { id: 'b', score: 3, cached: 3000, ttftMs: 120, stallMs: 300 },
      ],
      pick: 'b',
      reason: 'prefix',
      hit: 0.75,
    },
    {
      what: 'the best-cached worker is too busy: the prefix spills to the near pick',
      cs: [
        CHEAPEST,
        { id: 'b', score: 3, cached: 3000, ttftMs: 120, stallMs: 356 },
      ],
      pick: 'a',
      reason: 'spill',
      hit: 0,
    },
    {
      what: 'the best-cached worker costs little more, but its first token would come later than the band allows: it spills',
      // b costs 330 ≤ 475, but 130 ms > 125
      cs: [
        CHEAPEST,
        { id: 'b', score: 3, cached: 3000, ttftMs: 130, stallMs: 200 },
      ],
      pick: 'a',
      reason: 'spill',
      hit: 0,
    },
    {
      what: "the allowance is a share of the cheapest's own cost, its decode included",
      // 130 ms ≤ 100 + 0.25 · (100 + 40)
      cs: [
        { id: 'a', score: 1, cached: 0, ttftMs: 100, decodeMs: 40, stallMs: 60 },
        { id: 'b', score: 3, cached: 3000, ttftMs: 130, stallMs: 200 },
      ],
      pick: 'b',
      reason: 'prefix',
      hit: 0.75,
    },
    {
      what: "a long answer's own E2E at the busier best-cached worker is no reason to spill its prefix",
      // b costs 120 + 400 ms of tailMs + 300 = 820 > 475, but less its tailMs 420 ≤ 475
      cs: [
        CHEAPEST,
        { id: 'b', score: 3, cached: 3000, ttftMs: 120, tailMs: 400, stallMs: 300 },
      ],
      pick: 'b',
      reason: 'prefix',
      hit: 0.75,
    },
    {
      what: 'a short shared prefix saves little: the same load gap spills it',
      // 420 > 250 + 0.75 · 0.1 · 400 = 280
      cs: [
        CHEAPEST,
        { id: 'b', score: 3, cached: 400, ttftMs: 120, stallMs: 300 },
      ],
      pick: 'a',
      reason: 'spill',
      hit: 0,
    },
    {
      what: 'no clear cache gain (≤ minHitGain) and the near pick holds some: prefix on the near pick',
      cs: [{ id: 'a', score: 2, cached: 1000, ttftMs: 100 }, { id: 'b', score: 3, cached: 1100, ttftMs: 110 }],
      pick: 'b',
      reason: 'prefix',
      hit: 1100 / PROMPT,
    },
    {
      what: 'nothing cached anywhere: the best score in the near band, for load',
      cs: [{ id: 'a', score: 1, cached: 0, ttftMs: 100 }, { id: 'b', score: 2, cached: 0, ttftMs: 120 }, { id: 'c', score: 5, cached: 0, ttftMs: 126 }],
      pick: 'b',
      reason: 'load',
      hit: 0,
    },
    {
      what: 'the session’s worker wins the near band on its session score',
      cs: [{ id: 'a', score: 1, cached: 0, ttftMs: 100 }, { id: 'b', score: 1.5, cached: 0, ttftMs: 110, session: true }],
      pick: 'b',
      reason: 'session',
      hit: 0,
    },
    {
      what: 'with the session weight at 0 that is load',
      cs: [{ id: 'a', score: 1, cached: 0, ttftMs: 100 }, { id: 'b', score: 1.5, cached: 0, ttftMs: 110, session: true }],
      opts: { wSession: 0 },
      pick: 'b',
      reason: 'load',
      hit: 0,
    },
    {
      what: 'in the near band, a better-rated worker whose first token comes later than the allowance is passed over',
      // band: cost ≤ 200 · 1.25 = 250, b's 220 is in it; first token ≤ 125 ms, b's 130 is not
      cs: [
        CHEAPEST,
        { id: 'b', score: 5, cached: 0, ttftMs: 130, stallMs: 90 },
      ],
      pick: 'a',
      reason: 'load',
      hit: 0,
    },
    {
      what: 'an absolute near slack widens the band',
      cs: [{ id: 'a', score: 1, cached: 0, ttftMs: 100 }, { id: 'b', score: 2, cached: 0, ttftMs: 140 }],
      opts: { nearAbsoluteMs: 20 },
      pick: 'b',
      reason: 'load',
      hit: 0,
    },
  ];
  for (const c of cases) {
    const { req, candidates } = setup(c.cs);
    const p = kvgatePicker({ ...DEFAULTS, ...c.opts }).pick(req, candidates, ctx);
    assert.equal(p?.worker.worker.id, c.pick, c.what);
    assert.equal(p?.reason, c.reason, c.what);
    assert.equal(p?.expectedPrefixHit, c.hit, c.what);
  }
});

test('when the KV-fit filter found nobody with room, the reason says so', () => {
  const { req, candidates } = setup([{ id: 'a', score: 1, cached: 0, ttftMs: 100 }]);
  req.state.set(KV_OVERFULL, true);
  assert.equal(kvgatePicker(DEFAULTS).pick(req, candidates, ctx)?.reason, 'load+overfull');
});

test('equal candidates are picked at random, and without the producer’s estimates the picker refuses to guess', () => {
  const seen = new Set<string>();
  const random: RoutingContext = { now: 0, rng: seededRng(4), staleAfterMs: 5000 };
  for (let i = 0; i < 50; i++) {
    const { req, candidates } = setup(['a', 'b', 'c'].map((id) => ({ id, score: 1, cached: 0, ttftMs: 100 })));
    seen.add(kvgatePicker(DEFAULTS).pick(req, candidates, random)!.worker.worker.id);
  }
  assert.deepEqual([...seen].sort(), ['a', 'b', 'c']);
  assert.equal(kvgatePicker(DEFAULTS).pick(request([1]), [], ctx), null);
  assert.throws(() => kvgatePicker(DEFAULTS).pick(request([1]), [{ worker: worker('a'), score: 0, parts: {} }], ctx), /kvgate-estimate/);
});
