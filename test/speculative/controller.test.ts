/** The speculation controllers, as plain code: choices of k, switching off, probing, recovery. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AcceptanceTracker, expectedTokensPerRound } from '../../src/speculative/acceptance.js';
import { AdaptiveK, FixedK, type RoundContext } from '../../src/speculative/controller.js';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import { seededRng } from '../../src/util/rng.js';

const round = (over: Partial<RoundContext> = {}): RoundContext => ({
  model: 'm',
  cls: 'c',
  targetLoad: { running: 1, waiting: 0 },
  tpotBudgetMs: null,
  firstRound: true,
  probing: false,
  ...over,
});

/** Feed `n` rounds of k proposals where each token is accepted with probability alpha. */
function feed(t: AcceptanceTracker, alpha: number, n: number, k = 4, seed = 1): void {
  const rng = seededRng(seed);
  for (let i = 0; i < n; i++) {
    let a = 0;
    while (a < k && rng() < alpha) a++;
    t.observe('m', 'c', a, a < k);
  }
}

/** A controller whose costs are known: draft 1 ms + 2 ms/token, verification 20 ms, target token 20 ms. */
function controller(tracker: AcceptanceTracker, opts = {}) {
  const c = new AdaptiveK(tracker, { initialDraftFixedMs: 1, initialDraftTokenMs: 2, initialVerifyMs: 20, minEvidence: 50, ...opts });
  return c;
}

describe('acceptance tracking', () => {
  it('estimates the per-token acceptance probability, not accepted/proposed', () => {
    const t = new AcceptanceTracker(1e9);
    feed(t, 0.7, 4000);
    assert.ok(Math.abs(t.alpha('m', 'c')! - 0.7) < 0.02, String(t.alpha('m', 'c')));
  });

  it('follows a shift in acceptance with its half-life', () => {
    const t = new AcceptanceTracker(500);
    feed(t, 0.9, 2000);
    feed(t, 0.3, 1000, 4, 2);
    assert.ok(t.alpha('m', 'c')! < 0.4, String(t.alpha('m', 'c')));
  });

  it('expected tokens per round match the published figures', () => {
    assert.ok(Math.abs(expectedTokensPerRound(0.5, 4) - 1.94) < 0.01);
    assert.ok(Math.abs(expectedTokensPerRound(0.7, 4) - 2.77) < 0.01);
    assert.ok(Math.abs(expectedTokensPerRound(0.8, 4) - 3.36) < 0.01);
    assert.equal(expectedTokensPerRound(1, 4), 5);
  });
});

describe('the adaptive controller', () => {
  it('speculates longer as acceptance rises', () => {
    const ks = [0.5, 0.7, 0.9].map((alpha) => {
      const t = new AcceptanceTracker(1e9);
      feed(t, alpha, 2000);
      return controller(t).chooseK(round());
    });
    assert.ok(ks[0]!.k > 0 && ks[0]!.k <= ks[1]!.k && ks[1]!.k < ks[2]!.k, JSON.stringify(ks));
    assert.equal(ks[2]!.reason, 'speculate');
  });

  it('picks the k that maximises expected tokens per unit cost', () => {
    const t = new AcceptanceTracker(1e9);
    feed(t, 0.8, 4000);
    const c = controller(t);
    const alpha = c.alpha('m', 'c');
    let bestK = 0;
    let best = 0;
    for (let k = 1; k <= 8; k++) {
      const v = expectedTokensPerRound(alpha, k) / (1 + 2 * k + 20);
      if (v > best) [best, bestK] = [v, k];
    }
    assert.equal(c.chooseK(round()).k, bestK);
  });

  it('switches a low-acceptance class off, probes it with single rounds, and switches it back on when it recovers', () => {
    const t = new AcceptanceTracker(300);
    feed(t, 0.1, 2000);
    let now = 0;
    // A probe round costs a verification (20 ms); 5% of the GPU time pays for one every 400 ms,
    // whatever the share of requests that is.
    const c = controller(t, { probeShare: 0.05, now: () => now });
    const decisions = Array.from({ length: 2000 }, () => {
      now += 100;
      return c.chooseK(round());
    });
    const probes = decisions.filter((d) => d.reason === 'probe').length;
    assert.ok(decisions.every((d) => (d.reason === 'probe' && d.k === 2) || (d.k === 0 && d.reason === 'no_gain')));
    // 200 s at 5% of one worker: 10 s of target time, 500 rounds of 20 ms.
    assert.ok(probes > 450 && probes <= 500, `probes ${probes}`);
    // A probe is one round: the request's later rounds are off while its class is.
    assert.equal(c.chooseK(round({ firstRound: false, probing: true })).k, 0);
    assert.equal(c.chooseK(round({ firstRound: false })).k, 0);
    // The probes' rounds show acceptance recovering: the class comes back.
    feed(t, 0.9, 600, 2, 5);
    assert.equal(c.chooseK(round()).reason, 'speculate');
  });

  it('probes spend at most probeShare of the target pool’s GPU time, however many requests arrive', () => {
    const t = new AcceptanceTracker(1e9);
    feed(t, 0.05, 4000);
    for (const rate of [1, 20, 200]) {
      let now = 0;
      const c = controller(t, { probeShare: 0.01, targetWorkers: 4, now: () => now });
      let probes = 0;
      const seconds = 600;
      for (let i = 0; i < seconds * rate; i++) {
        now += 1000 / rate;
        if (c.chooseK(round()).reason === 'probe') probes++;
      }
      // Each probe round costs one verification (20 ms of a target worker).
      const budget = 0.01 * 4 * seconds * 1000;
      assert.ok(c.probeSpentMs <= budget && probes * 20 === c.probeSpentMs, `rate ${rate}: spent ${c.probeSpentMs} of ${budget}`);
      // It is a bound, not a quota: few requests probe each time; many use the budget up.
      assert.ok(c.probeSpentMs > 0.9 * Math.min(seconds * rate * 20, budget), `rate ${rate}: spent ${c.probeSpentMs}`);
    }
  });

  it('does not speculate on a busy target or past a TPOT budget', () => {
    const t = new AcceptanceTracker(1e9);
    feed(t, 0.9, 2000);
    const c = controller(t, { busyRunning: 32 });
    assert.deepEqual(c.chooseK(round({ targetLoad: { running: 40, waiting: 0 } })), { k: 0, reason: 'busy' });
    assert.deepEqual(c.chooseK(round({ targetLoad: { running: 4, waiting: 2 } })), { k: 0, reason: 'busy' });
    // One request caught waiting by a scrape is not a queue.
    assert.ok(c.chooseK(round({ targetLoad: { running: 4, waiting: 1 } })).k > 0);
    assert.ok(c.chooseK(round({ targetLoad: { running: 4, waiting: 0 } })).k > 0);
    // Expected ms per token here is about (1 + 2k + 20) / E(0.9, k) ≈ 5 ms.
    assert.deepEqual(c.chooseK(round({ tpotBudgetMs: 2 })), { k: 0, reason: 'tpot' });
    assert.ok(c.chooseK(round({ tpotBudgetMs: 50 })).k > 0);
  });

  it('learns the costs from the calls it observes: an expensive draft turns speculation off', () => {
    const t = new AcceptanceTracker(1e9);
    feed(t, 0.6, 2000);
    const c = controller(t, { targetTokenMs: 20 });
    assert.ok(c.chooseK(round()).k > 0);
    for (let i = 0; i < 400; i++) c.observe({ model: 'm', k: 1 + (i % 4), draftMs: 5 + 30 * (1 + (i % 4)), verifyMs: 25 });
    const costs = c.costsOf('m');
    // The fit is shrunk toward the prior split, so it is close, not exact.
    assert.ok(Math.abs(costs.draftTokenMs - 30) < 3 && Math.abs(costs.draftFixedMs - 5) < 5 && Math.abs(costs.verifyMs - 25) < 1, JSON.stringify(costs));
    assert.equal(c.chooseK(round()).k, 0);
  });

  it('a draft call time seen at one k only is split as the initial costs split it, not by a noisy slope', () => {
    const t = new AcceptanceTracker(1e9);
    const c = controller(t); // initial: 1 ms fixed + 2 ms/token
    const rng = seededRng(4);
    for (let i = 0; i < 300; i++) c.observe({ model: 'm', k: 4, draftMs: 9 * (0.8 + 0.4 * rng()), verifyMs: 20 });
    const costs = c.costsOf('m');
    assert.ok(Math.abs(costs.draftFixedMs + 4 * costs.draftTokenMs - 9) < 0.5, JSON.stringify(costs));
    assert.ok(costs.draftTokenMs > 1.5 && costs.draftTokenMs < 2.5, JSON.stringify(costs));
  });

  it('one slow call does not switch speculation off; a lasting slowdown does', () => {
    const t = new AcceptanceTracker(1e9);
    feed(t, 0.9, 2000);
    const c = controller(t, { targetTokenMs: 20 });
    const call = (draftMs: number, verifyMs = 20) => c.observe({ model: 'm', k: 4, draftMs, verifyMs });
    for (let i = 0; i < 50; i++) call(9);
    assert.equal(c.chooseK(round({ firstRound: false })).reason, 'speculate');
    // A two-second stall of the draft call, then of the verification.
    call(2000);
    call(9, 2000);
    const after = c.costsOf('m');
    assert.ok(after.draftFixedMs + 4 * after.draftTokenMs < 12, JSON.stringify(after));
    assert.ok(after.verifyMs < 25, JSON.stringify(after));
    assert.equal(c.chooseK(round({ firstRound: false })).reason, 'speculate');
    // A draft pool that has become ten times slower is followed.
    for (let i = 0; i < 60; i++) call(90);
    const slow = c.costsOf('m');
    assert.ok(slow.draftFixedMs + 4 * slow.draftTokenMs > 70, JSON.stringify(slow));
    assert.notEqual(c.chooseK(round({ firstRound: false })).reason, 'speculate');
  });

  it('a slow first call is forgotten when the next ones are quick', () => {
    const t = new AcceptanceTracker(1e9);
    feed(t, 0.9, 2000);
    const c = controller(t, { targetTokenMs: 20 });
    // A cold connection: the first draft call and the first verification take half a second.
    c.observe({ model: 'm', k: 2, draftMs: 500, verifyMs: 500 });
    assert.notEqual(c.chooseK(round({ firstRound: false })).reason, 'speculate');
    c.observe({ model: 'm', k: 2, draftMs: 5, verifyMs: 20 });
    const costs = c.costsOf('m');
    assert.ok(costs.draftFixedMs + 2 * costs.draftTokenMs < 6 && costs.verifyMs < 21, JSON.stringify(costs));
    assert.equal(c.chooseK(round({ firstRound: false })).reason, 'speculate');
  });

  it('uses the prior until a class has evidence', () => {
    const t = new AcceptanceTracker(1e9);
    const c = controller(t, { priorAcceptance: 0.6 });
    assert.equal(c.alpha('m', 'c'), 0.6);
    t.observe('m', 'c', 0, true);
    assert.ok(c.alpha('m', 'c') > 0.5);
  });

  it('FixedK always gives the configured k', () => {
    const f = new FixedK(new Map([['m', 3]]));
    assert.deepEqual(f.chooseK(round()), { k: 3, reason: 'fixed' });
    assert.equal(f.chooseK(round({ model: 'other' })).k, 0);
  });
});

describe('the cost model: verification prefill, target load and TPOT budget', () => {
  // llama-3.1-70b TP 4 on H100 ($3.50 × 4 per hour) verified for a llama-3.1-8b int4 draft on an
  // A10G ($1.00): the step times are the engine model's roofline, the draft's ~11 ms per token.
  const step = buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-70b', tp: 4, hashSeed: 1 }).timeModel;
  const modelled = (tracker: AcceptanceTracker, opts = {}) =>
    new AdaptiveK(tracker, {
      targetStep: step,
      draftPrice: 1,
      targetPrice: 14,
      initialDraftFixedMs: 2,
      initialDraftTokenMs: 11,
      probeShare: 0,
      ...opts,
    });
  const at = (running: number, contextTokens: number, over: Partial<RoundContext> = {}) => round({ targetLoad: { running, waiting: 0 }, contextTokens, ...over });
  const trackerAt = (alpha: number) => {
    const t = new AcceptanceTracker(1e9);
    feed(t, alpha, 4000);
    return t;
  };

  it('speculates on a target that is nearly idle and turns itself off as its batch fills, before any busy threshold', () => {
    const c = modelled(trackerAt(0.9), { verifyReuse: 'prefix', tpotBudgetMs: null });
    const light = c.chooseK(at(1, 300, { tpotBudgetMs: 100 }));
    assert.equal(light.reason, 'speculate');
    // 48 sequences share each decode step: a target-only token costs a sliver of one, and a
    // verification still adds its prefill to the step.
    const loaded = c.chooseK(at(48, 2000, { tpotBudgetMs: 100 }));
    assert.deepEqual(loaded, { k: 0, reason: 'no_gain' });
  });

  it('turns itself off at a low acceptance rate', () => {
    const c = modelled(trackerAt(0.05), { verifyReuse: 'prefix' });
    assert.equal(c.chooseK(at(1, 300, { tpotBudgetMs: 100 })).k, 0);
    assert.equal(modelled(trackerAt(0.9), { verifyReuse: 'prefix' }).chooseK(at(1, 300, { tpotBudgetMs: 100 })).reason, 'speculate');
  });

  it('prices a verification by the context the engine cannot reuse: recomputing a long context loses where reading the cache wins', () => {
    const t = trackerAt(0.8);
    const recompute = modelled(t, { verifyReuse: 'none' });
    const cached = modelled(t, { verifyReuse: 'prefix', verifyReuseBlock: 16 });
    const r = at(4, 4000, { tpotBudgetMs: 200 });
    assert.equal(cached.reusedTokens(4000), 3984);
    assert.equal(cached.reusedTokens(17), 16);
    assert.equal(recompute.reusedTokens(4000), 0);
    const a = recompute.best('m', 0.8, r);
    const b = cached.best('m', 0.8, r);
    assert.ok(a.targetMs > 5 * b.targetMs, `recompute ${a.targetMs} ms vs cached ${b.targetMs} ms of target time per round`);
    assert.equal(recompute.chooseK(r).reason, 'no_gain');
    assert.equal(cached.chooseK(r).reason, 'speculate');
  });

  it('without a budget from the request, keeps each request as fast as the target alone would make it', () => {
    const c = modelled(trackerAt(0.7), { verifyReuse: 'prefix' });
    // The draft's 11 ms per token and a verification pass make every k slower per token than a
    // 70B decode step at α 0.7: off, for latency, though it would be cheaper.
    assert.deepEqual(c.chooseK(at(4, 300)), { k: 0, reason: 'tpot' });
    assert.equal(c.chooseK(at(4, 300, { tpotBudgetMs: 50 })).reason, 'speculate');
    // A cheaper draft makes a short k fast enough.
    const fast = modelled(trackerAt(0.7), { verifyReuse: 'prefix', initialDraftFixedMs: 0.5, initialDraftTokenMs: 2 });
    const d = fast.chooseK(at(4, 300));
    assert.equal(d.reason, 'speculate');
    const b = fast.best('m', fast.alpha('m', 'c'), at(4, 300));
    const sd = step.stepMs({ prefill: [], decodeSeqs: 4, decodeContextTokens: 1200 });
    assert.ok(b.msPerToken <= sd, `${b.msPerToken} ms per token against a ${sd} ms decode step`);
  });
});
