import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AttainmentWatch, attainmentByPrompt, attainmentOf, distribution, MIN_BAND_REQUESTS, percentile, sloOf, summarize, weightedDistribution, weightedTail, worstBandAttainment } from '../../src/bench/metrics.js';
import { describeSlo, hasSlo, meetsSlo, ttftBoundMs } from '../../src/bench/slo.js';
import type { SimResult } from '../../src/sim/fleet-sim.js';
import { SampledSeries } from '../../src/sim/sampled-series.js';
import type { SimRequest } from '../../src/sim/sim-request.js';
import { LatencyHistogram } from '../../src/util/latency-histogram.js';

function result(rows: Array<{ arrival: number; first: number; finish: number; prompt: number; out: number; cached: number }>, extra: Partial<SimResult> = {}): SimResult {
  const c = { arrival: [] as number[], firstToken: [] as number[], finish: [] as number[], promptTokens: [] as number[], outputTokens: [] as number[], cachedTokens: [] as number[], worker: [] as number[] };
  for (const r of rows) {
    c.arrival.push(r.arrival);
    c.firstToken.push(r.first);
    c.finish.push(r.finish);
    c.promptTokens.push(r.prompt);
    c.outputTokens.push(r.out);
    c.cachedTokens.push(r.cached);
    c.worker.push(0);
  }
  const worker = (id: string, busyMs: number, preemptions: number) => ({ id, routed: 0, preemptions, prefillPreemptions: preemptions - 1, busyMs, steps: 0, kvUsage: new SampledSeries(), final: {} as never });
  return {
    policy: 'p',
    scrapeIntervalMs: 1000,
    kvSampleMs: 1000,
    requests: rows.length,
    rejected: 0,
    shed: 0,
    refusals: {},
    completed: c,
    itl: new LatencyHistogram(),
    firstArrivalMs: rows[0]?.arrival ?? NaN,
    lastArrivalMs: rows.at(-1)?.arrival ?? NaN,
    lastFinishMs: Math.max(...rows.map((r) => r.finish)),
    workers: [worker('w0', 3000, 2), worker('w1', 1000, 1)],
    wallMs: 12.4,
    events: 0,
    ...extra,
  };
}

describe('AttainmentWatch', () => {
  const slo = { ttftMs: 1000, tpotMs: 50 };
  const ok = { arrival: 0, first: 100, finish: 1100, prompt: 10, out: 21, cached: 0 };
  const slow = { arrival: 0, first: 2000, finish: 3000, prompt: 10, out: 21, cached: 0 };
  it('counts misses as requests complete and are refused, and says when the target is out of reach', () => {
    // 10 requests in all, target 0.8: the run is decided once 3 have missed.
    const w = new AttainmentWatch(slo, 0.8, 10);
    const r = result([ok, slow, ok]);
    assert.equal(w.bound(r), 0.9);
    assert.equal(w.decided(r), false);
    r.completed.arrival.push(0);
    r.completed.firstToken.push(100);
    r.completed.finish.push(100 + 60 * 20); // TPOT 60 ms: a miss
    r.completed.promptTokens.push(10);
    r.completed.outputTokens.push(21);
    r.completed.cachedTokens.push(0);
    r.completed.worker.push(0);
    assert.equal(w.bound(r), 0.8);
    assert.equal(w.decided(r), false, 'exactly the target can still be met');
    r.shed = 1;
    assert.equal(w.bound(r), 0.7);
    assert.equal(w.decided(r), true);
    // The bound is never below what the run ends with: the full run's attainment.
    const all = result([ok, slow, ok, slow, ok, ok, ok, ok, ok], { shed: 1, requests: 10 });
    assert.ok(new AttainmentWatch(slo, 0.8, 10).bound(all) >= attainmentOf(all, slo));
  });

  it('counts requests in flight whose first token came, or can only come, after their TTFT bound', () => {
    // 10 requests in all, target 0.8; one completed miss so far.
    const w = new AttainmentWatch(slo, 0.8, 10);
    const r = result([ok, slow]);
    const inflight = (arrivedAt: number, firstToken?: number) => ({ arrivedAt, firstToken, req: { promptTokens: new Array(10).fill(1) } }) as unknown as SimRequest;
    // At 1,500 ms: one waits since 0 with no token (late), one since 1,000 (not yet), one got its token at 900 (in time).
    const now = 1500;
    assert.equal(w.bound(r, now, [inflight(0), inflight(1000), inflight(0, 900)]), 0.8);
    assert.equal(w.decided(r, now, [inflight(0), inflight(1000), inflight(0, 900)]), false);
    // One more whose first token came at 1,200 ms after arriving at 100: late too.
    assert.equal(w.decided(r, now, [inflight(0), inflight(100, 1200), inflight(1000)]), true);
    // Without the requests in flight, only the completed miss counts.
    assert.equal(w.bound(r), 0.9);
  });

  it('does not call a run decided that rounds to the target', () => {
    // 19,999 of 20,000 would meet 0.99995 → rounded 1.0; one miss of 20,000 leaves 0.99995.
    const w = new AttainmentWatch(slo, 0.99995, 20000);
    assert.equal(w.decided(result([slow])), false);
  });
});

describe('summary statistics', () => {
  it('percentiles interpolate linearly like numpy', () => {
    const s = Float64Array.from([1, 2, 3, 4]);
    assert.equal(percentile(s, 50), 2.5);
    assert.equal(percentile(s, 0), 1);
    assert.equal(percentile(s, 100), 4);
    assert.ok(Math.abs(percentile(s, 90)! - 3.7) < 1e-12);
    assert.equal(percentile(new Float64Array(0), 50), null);
    assert.deepEqual(distribution([10, 0, 20, 30, 40]), { p50: 20, p90: 36, p99: 39.6, mean: 20 });
    assert.deepEqual(distribution([]), { p50: null, p90: null, p99: null, mean: null });
  });

  it('weighted distribution equals the distribution of the expanded samples', () => {
    const values = [5, 1, 3, 9];
    const weights = [2, 3, 0, 5];
    const expanded = values.flatMap((v, i) => Array<number>(weights[i]!).fill(v));
    assert.deepEqual(weightedDistribution(values, weights), distribution(expanded));
    assert.deepEqual(weightedDistribution([], []), { p50: null, p90: null, p99: null, mean: null });
  });

  it('weighted tail is the p99.9 and the largest of the expanded samples', () => {
    // 2,000 gaps of 20 ms and 3 of 100 ms: the p99 sees none of the long ones, the p99.9 does.
    const values = [20, 100];
    const weights = [2000, 3];
    const expanded = Float64Array.from(values.flatMap((v, i) => Array<number>(weights[i]!).fill(v))).sort();
    const tail = weightedTail(values, weights);
    assert.equal(weightedDistribution(values, weights).p99, 20);
    assert.equal(tail.p99_9, Math.round(percentile(expanded, 99.9)! * 1000) / 1000);
    assert.ok(tail.p99_9 > 20 && tail.p99_9 <= 100);
    assert.equal(tail.max, 100);
    assert.deepEqual(weightedTail([5, 7], [0, 0]), { p99_9: null, max: null });
  });

  it('computes TTFT, TPOT, E2E, throughput, hit rate, goodput and cost from hand-made requests', () => {
    const r = result([
      // TTFT 100, E2E 1100, 11 tokens → TPOT 100
      { arrival: 0, first: 100, finish: 1100, prompt: 1000, out: 11, cached: 500 },
      // TTFT 500, E2E 900, 5 tokens → TPOT 100
      { arrival: 1000, first: 1500, finish: 1900, prompt: 1000, out: 5, cached: 0 },
      // TTFT 50, single token: no TPOT
      { arrival: 2000, first: 2050, finish: 2050, prompt: 2000, out: 1, cached: 2000 },
      // TTFT 200, E2E 4000, 20 tokens → TPOT 200
      { arrival: 3000, first: 3200, finish: 7000, prompt: 0, out: 20, cached: 0 },
    ]);
    const s = summarize(r, { tp: 2, gpuHourCost: 3.6, sloTtftMs: 300, sloTpotMs: 150 });
    assert.equal(s.completed, 4);
    assert.equal(s.duration_s, 7);
    assert.deepEqual(s.ttft_ms, distribution([100, 500, 50, 200]));
    assert.deepEqual(s.tpot_ms, distribution([100, 100, 200]));
    assert.deepEqual(s.e2e_ms, distribution([1100, 900, 50, 4000]));
    assert.equal(s.throughput_rps, Math.round((4 / 7) * 1000) / 1000);
    assert.equal(s.output_tokens_per_s, Math.round((37 / 7) * 1000) / 1000);
    assert.equal(s.prefix_hit_rate, 0.625); // 2,500 of 4,000 prompt tokens
    // Goodput: #1 (100 ≤ 300, 100 ≤ 150) and #3 (50, no TPOT) meet both SLOs; #2 misses TTFT, #4 TPOT.
    assert.equal(s.goodput_rps, Math.round((2 / 7) * 1000) / 1000);
    // 2 workers × tp 2 = 4 GPUs for 7 s = 28 GPU-seconds; $3.6/h → $0.028 for 37 output tokens.
    assert.equal(s.gpu_seconds, 28);
    assert.equal(s.cost_per_million_output_tokens, Math.round((0.028 / 37e-6) * 1e4) / 1e4);
    assert.equal(s.busy_gpu_seconds, 8); // (3 s + 1 s) × tp 2
    assert.equal(s.preemptions, 3);
    assert.equal(s.preemptions_in_prefill, 1);
    assert.equal(s.sim_wall_ms, 12);
    assert.equal(summarize(r, { tp: 1, gpuHourCost: 1, omitWallTime: true }).sim_wall_ms, undefined);
  });

  it('without SLOs every completed request counts as goodput; an empty run is all zeros', () => {
    const r = result([
      { arrival: 0, first: 10, finish: 20, prompt: 5, out: 2, cached: 0 },
      { arrival: 0, first: 10, finish: 1000, prompt: 5, out: 2, cached: 0 },
    ]);
    const s = summarize(r, { tp: 1, gpuHourCost: 1 });
    assert.equal(s.goodput_rps, s.throughput_rps);
    const empty = summarize(result([], { lastFinishMs: NaN, requests: 3, shed: 3 }), { tp: 1, gpuHourCost: 1 });
    assert.equal(empty.completed, 0);
    assert.equal(empty.shed, 3);
    assert.equal(empty.throughput_rps, 0);
    assert.equal(empty.cost_per_million_output_tokens, null);
    assert.equal(empty.ttft_ms.p50, null);
  });
});

describe('SLO rule (goodput and attainment)', () => {
  it('allows extra TTFT per 1,000 prompt tokens; TPOT has its own bound; one-token answers have no TPOT', () => {
    const slo = { ttftMs: 1000, ttftPer1kMs: 100, tpotMs: 50 };
    assert.equal(ttftBoundMs(slo, 2000), 1200);
    assert.equal(meetsSlo(slo, 1150, 40, 2000), true); // 1150 ≤ 1000 + 200
    assert.equal(meetsSlo(slo, 1150, 40, 1000), false); // 1150 > 1000 + 100
    assert.equal(meetsSlo(slo, 1100, 40, 1000), true); // on the bound
    assert.equal(meetsSlo(slo, 100, 51, 10), false);
    assert.equal(meetsSlo(slo, 100, undefined, 10), true);
    assert.equal(meetsSlo({ ttftMs: 1000 }, 1150, 400, 9000), false); // no allowance unless set
    assert.equal(meetsSlo({ ttftPer1kMs: 100 }, 850, 1, 9000), true); // allowance alone: base 0
    assert.equal(meetsSlo({}, 1e9, 1e9, 1), true);
    assert.equal(hasSlo({}), false);
    assert.equal(describeSlo(slo), 'TTFT ≤ 1000 ms + 100 ms/1k prompt tokens, TPOT ≤ 50 ms');
  });

  it('goodput uses the per-1k allowance; attainment counts refused requests as misses', () => {
    const r = result(
      [
        // TTFT 1150 on a 2,000-token prompt: meets 1000 + 100/1k, misses 1000 alone.
        { arrival: 0, first: 1150, finish: 1250, prompt: 2000, out: 3, cached: 0 },
        // TTFT 1150 on a 1,000-token prompt: misses either way.
        { arrival: 0, first: 1150, finish: 1250, prompt: 1000, out: 3, cached: 0 },
        // Meets everything.
        { arrival: 500, first: 600, finish: 2000, prompt: 100, out: 2, cached: 0 },
      ],
      { requests: 5, rejected: 1, shed: 1 },
    );
    const plain = summarize(r, { tp: 1, gpuHourCost: 1, sloTtftMs: 1000, sloTpotMs: 5000 });
    const per1k = summarize(r, { tp: 1, gpuHourCost: 1, sloTtftMs: 1000, sloTtftPer1kMs: 100, sloTpotMs: 5000 });
    assert.equal(plain.goodput_rps, Math.round((1 / 2) * 1000) / 1000); // 1 request over 2 s
    assert.equal(per1k.goodput_rps, 1);
    assert.equal(plain.attainment, 0.2); // 1 of 5 requests (2 refused)
    assert.equal(per1k.attainment, 0.4);
    assert.equal(attainmentOf(r, sloOf({ tp: 1, gpuHourCost: 1, sloTtftMs: 1000, sloTtftPer1kMs: 100 })), 0.4);
    assert.equal(summarize(r, { tp: 1, gpuHourCost: 1 }).attainment, null);
  });

  it('says why completed requests missed the SLO: TTFT, TPOT, both, and how many had long prompts', () => {
    const r = result([
      { arrival: 0, first: 1500, finish: 1600, prompt: 100, out: 3, cached: 0 }, // TTFT only
      { arrival: 0, first: 100, finish: 1100, prompt: 100, out: 11, cached: 0 }, // TPOT 100 only
      { arrival: 0, first: 2000, finish: 4000, prompt: 5000, out: 11, cached: 0 }, // both, long prompt
      { arrival: 0, first: 1400, finish: 1500, prompt: 5000, out: 3, cached: 0 }, // meets (1000 + 500)
      { arrival: 0, first: 10, finish: 20, prompt: 10, out: 1, cached: 0 }, // meets
    ]);
    const s = summarize(r, { tp: 1, gpuHourCost: 1, sloTtftMs: 1000, sloTtftPer1kMs: 100, sloTpotMs: 50 });
    assert.deepEqual(s.slo_misses, { ttft: 1, tpot: 1, both: 1, long_prompt: 1 });
    assert.equal(s.attainment, 0.4);
    assert.equal(summarize(r, { tp: 1, gpuHourCost: 1 }).slo_misses, undefined);
  });

  it('splits attainment by prompt length: short prompts cannot hide a band of long ones that miss', () => {
    const ok = (prompt: number) => ({ arrival: 0, first: 100, finish: 200, prompt, out: 3, cached: 0 });
    const late = (prompt: number) => ({ arrival: 0, first: 9000, finish: 9100, prompt, out: 3, cached: 0 });
    // 30 short prompts that meet the SLO, 10 of 8k+ that miss, and 5 mid-length ones (2 miss).
    const rows = [
      ...Array.from({ length: 30 }, () => ok(500)),
      ...Array.from({ length: 10 }, () => late(9000)),
      ...Array.from({ length: 3 }, () => ok(4000)),
      ...Array.from({ length: 2 }, () => late(2048)),
    ];
    const r = result(rows);
    const slo = sloOf({ tp: 1, gpuHourCost: 1, sloTtftMs: 1000, sloTtftPer1kMs: 100, sloTpotMs: 50 });
    const bands = attainmentByPrompt(r, slo);
    assert.deepEqual(bands, [
      { band: '<2k', requests: 30, attainment: 1 },
      { band: '2k-8k', requests: 5, attainment: 0.6 },
      { band: '>=8k', requests: 10, attainment: 0 },
    ]);
    assert.deepEqual(summarize(r, { tp: 1, gpuHourCost: 1, sloTtftMs: 1000, sloTtftPer1kMs: 100, sloTpotMs: 50 }).attainment_by_prompt, bands);
    // Bands under MIN_BAND_REQUESTS are not held to a floor: here only '<2k' counts.
    assert.equal(MIN_BAND_REQUESTS, 20);
    assert.equal(worstBandAttainment(bands), 1);
    assert.equal(worstBandAttainment([...bands.slice(0, 2), { band: '>=8k', requests: 20, attainment: 0.5 }]), 0.5);
    assert.equal(summarize(r, { tp: 1, gpuHourCost: 1 }).attainment_by_prompt, undefined);
  });
});
