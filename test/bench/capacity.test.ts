import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { capacityRatios, probesLeft, searchCapacity, type ProbeFn } from '../../src/bench/capacity.js';
import { benchRequests, runBench } from '../../src/bench/run.js';
import { workloadSource } from '../../src/workload/workloads.js';

/** A fake fleet whose attainment is a function of the rate scale; records the scales probed. */
function fake(attainment: (s: number) => number, calls: number[] = []): ProbeFn {
  return async (s) => {
    calls.push(s);
    return { attainment: attainment(s), requests_per_s: 10 * s };
  };
}

describe('capacity search (fake fleet)', () => {
  it('a monotone step: brackets by doubling, bisects to 2%, reports the highest scale that met the target', async () => {
    const calls: number[] = [];
    const r = await searchCapacity(fake((s) => (s <= 3.7 ? 0.95 : 0.5), calls), { start: 1 });
    // 1 and 2 meet the target, 4 misses: the bracket is [2, 4], then bisection.
    assert.deepEqual(calls.slice(0, 3), [1, 2, 4]);
    assert.ok(r.converged);
    const [lo, hi] = r.bracket as [number, number];
    assert.ok(hi / lo <= 1.02 + 1e-9, `bracket ${lo}–${hi}`);
    assert.ok(lo <= 3.7 && hi > 3.7);
    assert.equal(r.rate_scale, lo);
    assert.ok(r.rate_scale >= 3.7 / 1.02 && r.rate_scale <= 3.7);
    assert.equal(r.requests_per_s, Math.round(10 * r.rate_scale * 1000) / 1000);
    assert.equal(r.attainment, 0.95);
    assert.equal(r.probes.length, calls.length);
    assert.ok(r.probes.length <= 14);
  });

  it('a smooth curve gives the known answer within the precision, from above (halving)', async () => {
    // attainment(s) = 1 / (1 + (s/5)^8) crosses 0.9 at s* = 5 · (1/9)^(1/8).
    const star = 5 * (1 / 9) ** (1 / 8);
    const calls: number[] = [];
    const r = await searchCapacity(fake((s) => 1 / (1 + (s / 5) ** 8), calls), { start: 20, target: 0.9 });
    assert.deepEqual(calls.slice(0, 4), [20, 10, 5, 2.5]);
    assert.ok(r.converged);
    assert.ok(r.rate_scale! <= star && r.rate_scale! >= star / 1.02, `${r.rate_scale} vs ${star}`);
    assert.ok(r.attainment! >= 0.9);
    // A looser precision takes fewer probes.
    const coarse = await searchCapacity(fake((s) => 1 / (1 + (s / 5) ** 8)), { start: 20, precision: 0.2 });
    assert.ok(coarse.probes.length < r.probes.length);
    assert.ok(coarse.rate_scale! <= star && coarse.rate_scale! >= star / 1.2);
  });

  it('is not fooled by a non-monotone curve into claiming a scale it did not see meet the target', async () => {
    // Meets the target up to 2, misses on (2, 2.5), meets again on [2.5, 3], misses above.
    const att = (s: number) => (s <= 2 || (s >= 2.5 && s <= 3) ? 0.92 : 0.6);
    const r = await searchCapacity(fake(att), { start: 1 });
    assert.ok(r.rate_scale !== null);
    assert.ok(att(r.rate_scale) >= 0.9, 'the reported scale met the target');
    const met = r.probes.filter((p) => p.attainment >= 0.9).map((p) => p.rate_scale);
    assert.equal(r.rate_scale, Math.max(...met));
  });

  it('caps the probes and says when it ran out; no probe meeting the target gives null', async () => {
    const always = await searchCapacity(fake(() => 1), { start: 1, maxProbes: 5 });
    assert.equal(always.probes.length, 5);
    assert.equal(always.converged, false);
    assert.equal(always.rate_scale, 16);
    assert.deepEqual(always.bracket, [16, null]);
    const never = await searchCapacity(fake(() => 0.1), { start: 1, maxProbes: 4 });
    assert.equal(never.rate_scale, null);
    assert.equal(never.requests_per_s, null);
    assert.equal(never.converged, false);
    assert.deepEqual(never.bracket, [null, 0.125]);
    // Exactly on the target meets it.
    const edge = await searchCapacity(fake((s) => (s <= 1 ? 0.9 : 0.89)), { start: 1 });
    assert.equal(edge.rate_scale, 1);
    await assert.rejects(searchCapacity(fake(() => 1), { target: 1.5 }), /target attainment/);
    await assert.rejects(searchCapacity(fake(() => 1), { maxProbes: 0 }), /probe budget/);
  });

  it('with a band floor, a probe whose worst prompt-length band misses it does not count', async () => {
    // The aggregate meets 0.9 up to scale 4; the worst band only up to 2.
    const probe: ProbeFn = async (s) => ({ attainment: s <= 4 ? 0.95 : 0.5, requests_per_s: s, worst_band_attainment: s <= 2 ? 0.92 : 0.6 });
    const plain = await searchCapacity(probe, { start: 1 });
    const floored = await searchCapacity(probe, { start: 1, minBandAttainment: 0.9 });
    assert.ok(plain.rate_scale! > 3.9 && plain.rate_scale! <= 4);
    assert.ok(floored.rate_scale! > 1.96 && floored.rate_scale! <= 2, `${floored.rate_scale}`);
    assert.equal(floored.worst_band_attainment, 0.92);
    assert.equal(floored.attainment, 0.95);
    // A probe that did not measure its bands cannot meet a floor.
    assert.equal((await searchCapacity(fake(() => 1), { start: 1, maxProbes: 3, minBandAttainment: 0.5 })).rate_scale, null);
    await assert.rejects(searchCapacity(fake(() => 1), { minBandAttainment: 0 }), /band attainment floor/);
    // Without band figures the result has no band fields.
    assert.equal('worst_band_attainment' in (await searchCapacity(fake(() => 1), { start: 1, maxProbes: 2 })), false);
  });

  it('ratios: to round-robin and to the best peer (every policy but kvgate and the oracles)', () => {
    const r = capacityRatios([
      { name: 'round-robin', rate_scale: 1 },
      { name: 'llm-d', rate_scale: 1.5 },
      { name: 'dynamo', rate_scale: 1.2 },
      { name: 'kvgate', rate_scale: 1.8 },
      { name: 'oracle', rate_scale: 2.4 },
      { name: 'oracle-greedy', rate_scale: null },
    ]);
    assert.equal(r.best_peer, 'llm-d');
    assert.equal(r.vs_round_robin.kvgate, 1.8);
    assert.equal(r.vs_best_peer.kvgate, 1.2);
    assert.equal(r.vs_best_peer['llm-d'], 1);
    assert.equal(r.vs_best_peer.oracle, 1.6);
    assert.equal(r.vs_round_robin['oracle-greedy'], null);
    const noRr = capacityRatios([{ name: 'kvgate', rate_scale: 2 }]);
    assert.equal(noRr.best_peer, null);
    assert.equal(noRr.vs_round_robin.kvgate, null);
    assert.equal(noRr.vs_best_peer.kvgate, null);
  });
});

describe('probes left in a search (for the progress ETA)', () => {
  it('hand-worked: a fresh search 8 (first, one doubling, 6 bisections of [x, 2x] at 2%); bracketed, the bisections left', () => {
    // ln 2 / ln 1.02 = 35.0 widths of 2%: 6 halvings close it.
    assert.equal(probesLeft([]), 8);
    assert.equal(probesLeft([{ scale: 1, met: true }]), 7);
    assert.equal(probesLeft([{ scale: 1, met: true }, { scale: 2, met: false }]), 6);
    // [1.5, 1.6]: ln(1.0667) / ln(1.02) = 3.26 widths, 2 halvings.
    assert.equal(probesLeft([{ scale: 1.6, met: false }, { scale: 1.5, met: true }]), 2);
    assert.equal(probesLeft([{ scale: 1, met: true }, { scale: 1.01, met: false }]), 0);
    // Never past the budget.
    assert.equal(probesLeft([{ scale: 1, met: true }, { scale: 2, met: false }], 0.02, 4), 2);
  });

  for (const capacity of [0.3, 1.37, 3.7, 9.1]) {
    it(`once bracketed, exactly the probes the search still makes (capacity ${capacity})`, async () => {
      const calls: number[] = [];
      const met = (s: number): boolean => s <= capacity;
      await searchCapacity(fake((s) => (met(s) ? 0.95 : 0.5), calls), { start: 1 });
      for (let k = 1; k < calls.length; k++) {
        const outcomes = calls.slice(0, k).map((scale) => ({ scale, met: met(scale) }));
        const bracketed = outcomes.some((o) => o.met) && outcomes.some((o) => !o.met);
        const left = probesLeft(outcomes);
        if (bracketed) assert.equal(left, calls.length - k, `after ${k} probes`);
        else assert.ok(left >= 1 && left <= calls.length - k, `after ${k} probes: ${left} of ${calls.length - k}`);
      }
      assert.equal(probesLeft(calls.map((scale) => ({ scale, met: met(scale) }))), 0);
    });
  }
});

describe('capacity search (real fleet)', () => {
  it('finds a bracket on one small worker and reports probes, capacity and ratios in the results', async () => {
    const source = workloadSource('shared-prefix', { size: 250, rate: 8, seed: 2 });
    const probes: Array<[string, number]> = [];
    const { results } = await runBench({
      source,
      policies: ['round-robin', 'least-load'],
      workers: 1,
      gpu: 'h100',
      model: 'llama-3.1-8b',
      seed: 1,
      sloTtftMs: 1000,
      sloTtftPer1kMs: 100,
      sloTpotMs: 50,
      // Every probe replays exactly these requests (the next test lengthens them).
      capacity: { maxProbes: 10, minSeconds: 0 },
      omitWallTime: true,
      onProbe: (name, p) => probes.push([name, p.rate_scale]),
    });
    assert.ok(results.capacity);
    assert.equal(results.capacity.target_attainment, 0.9);
    assert.equal(results.capacity.max_probes, 10);
    for (const p of results.policies) {
      const c = p.capacity!;
      assert.ok(c.probes.length >= 2 && c.probes.length <= 10, `${p.name}: ${c.probes.length} probes`);
      // The first probe is the run at the given rate scale, whose attainment the summary reports.
      assert.equal(c.probes[0]!.rate_scale, 1);
      assert.equal(c.probes[0]!.attainment, p.attainment);
      assert.ok(c.rate_scale !== null && c.bracket[1] !== null, `${p.name}: no bracket`);
      assert.ok(c.attainment! >= 0.9);
      for (const q of c.probes) if (q.rate_scale > c.rate_scale) assert.ok(q.attainment < 0.9 || !c.converged);
      if (c.converged) assert.ok(c.bracket[1] / c.bracket[0]! <= 1.02 + 1e-9);
      assert.ok(c.requests_per_s! > 0);
      assert.equal(probes.filter(([n]) => n === p.name).length, c.probes.length);
    }
    assert.equal(results.capacity.vs_round_robin['round-robin'], 1);
    assert.equal(typeof results.capacity.vs_round_robin['least-load'], 'number');
    assert.ok(results.capacity.best_peer === 'round-robin' || results.capacity.best_peer === 'least-load');
  });

  it('stops a probe once its misses decide it, and finds the same capacity as with every probe run to its end', async () => {
    const source = workloadSource('shared-prefix', { size: 250, rate: 8, seed: 6 });
    const base = { source, policies: ['round-robin', 'kvgate'], workers: 1, gpu: 'h100', model: 'llama-3.1-8b', seed: 6, sloTtftMs: 1000, sloTtftPer1kMs: 100, sloTpotMs: 50, omitWallTime: true };
    const early = (await runBench({ ...base, capacity: { maxProbes: 8, minSeconds: 20 } })).results;
    const full = (await runBench({ ...base, capacity: { maxProbes: 8, minSeconds: 20, fullProbes: true } })).results;
    let stopped = 0;
    for (const p of early.policies) {
      const c = p.capacity!;
      const f = full.policies.find((q) => q.name === p.name)!.capacity!;
      assert.deepEqual([c.rate_scale, c.requests_per_s, c.attainment, c.bracket, c.converged], [f.rate_scale, f.requests_per_s, f.attainment, f.bracket, f.converged], p.name);
      assert.deepEqual(c.probes.map((q) => q.rate_scale), f.probes.map((q) => q.rate_scale), `${p.name}: the same probes`);
      for (let i = 0; i < c.probes.length; i++) {
        const q = c.probes[i]!;
        const g = f.probes[i]!;
        assert.equal(g.stopped_early, undefined);
        if (q.stopped_early) {
          stopped++;
          assert.ok(q.attainment < 0.9 && g.attainment < 0.9, `${p.name} ×${q.rate_scale}: a stopped probe missed`);
          assert.ok(q.attainment >= g.attainment, `${p.name} ×${q.rate_scale}: at most ${q.attainment}, measured ${g.attainment}`);
          assert.equal(q.requests, g.requests, 'the requests it would have replayed');
        } else assert.deepEqual(q, g);
      }
    }
    assert.ok(stopped > 0, 'some probe stopped early');
  });

  it('probes of a built-in workload last the minimum time, with the run’s requests first; a trace replays its rows', async () => {
    const source = workloadSource('rag', { size: 12, rate: 1, seed: 4 });
    const base = { policies: ['round-robin'], workers: 1, gpu: 'h100', model: 'llama-3.1-8b', seed: 1, sloTtftMs: 1000, sloTtftPer1kMs: 100, sloTpotMs: 50, omitWallTime: true };
    const { results } = await runBench({ ...base, source, capacity: { maxProbes: 4, minSeconds: 40 } });
    assert.equal(results.capacity!.min_seconds, 40);
    const probes = results.policies[0]!.capacity!.probes;
    assert.equal(probes.length, 4);
    for (const q of probes) {
      // Arrivals until 40 virtual seconds, however fast the probe sends them (a probe its misses
      // stopped early reports the span it ran).
      assert.ok(q.span_s! < 40, `probe ×${q.rate_scale}: ${q.span_s} s`);
      if (!q.stopped_early) assert.ok(q.span_s! > 40 - 6 / Math.min(1, q.rate_scale), `probe ×${q.rate_scale}: ${q.span_s} s`);
      assert.ok(q.requests! >= 12);
      assert.ok(Math.abs(q.requests! - 40 * q.rate_scale) < 3 * Math.sqrt(40 * q.rate_scale) + 12, `probe ×${q.rate_scale}: ${q.requests} requests`);
    }
    // The work bound of the requests replayed at capacity: one worker, 40 s of rag.
    const c = results.policies[0]!.capacity!;
    if (c.rate_scale !== null) assert.ok(c.work_bound_rps! > 0 && c.work_bound_rps! < Infinity);
    // The run itself (not a probe) keeps --size: 12 requests.
    assert.equal(results.policies[0]!.requests, 12);
    // The lengthened stream starts with the run's own requests.
    const own = [...benchRequests(source, { rateScale: 2 })];
    const longer = [...benchRequests(source, { rateScale: 2, minMs: 40_000 })];
    assert.ok(longer.length > own.length);
    assert.deepEqual(longer.slice(0, own.length).map((r) => [r.arrivalMs, r.promptTokens.length]), own.map((r) => [r.arrivalMs, r.promptTokens.length]));
    assert.ok(longer.at(-1)!.arrivalMs < 40_000);
    // A trace cannot be lengthened: every probe replays its rows.
    const rows = [...source.open()];
    const trace = { name: 'trace:test', skipped: 0, open: () => rows };
    const t = await runBench({ ...base, source: trace, capacity: { maxProbes: 3, minSeconds: 40 } });
    for (const q of t.results.policies[0]!.capacity!.probes) assert.equal(q.requests, 12);
  });

  it('a closed-loop workload is lengthened by when its sessions start, at the run’s own rate too', async () => {
    // 60 multi-turn requests start their sessions within a second; their later turns, seconds of
    // think time apart, arrive for long after 20 s. The probe at ×1 must still take sessions that
    // start until 20 s, as every other probe does, not replay the run's ramp up and drain.
    const source = workloadSource('multi-turn', { size: 60, seed: 3 });
    const starts = [...benchRequests(source, { rateScale: 1 })].map((r) => r.arrivalMs);
    assert.ok(starts.at(-1)! < 2_000, `sessions start until ${starts.at(-1)} ms`);
    const base = { policies: ['round-robin'], workers: 1, gpu: 'h100', model: 'llama-3.1-8b', seed: 1, sloTtftMs: 1000, sloTtftPer1kMs: 100, sloTpotMs: 50, omitWallTime: true };
    const { results } = await runBench({ ...base, source, capacity: { maxProbes: 1, minSeconds: 20 } });
    assert.equal(results.policies[0]!.requests, 60);
    const probe = results.policies[0]!.capacity!.probes[0]!;
    assert.equal(probe.rate_scale, 1);
    let turns = 0;
    for (const r of benchRequests(source, { rateScale: 1, minMs: 20_000 })) turns += r.turns ?? 1;
    assert.ok(turns > 60);
    assert.equal(probe.requests, turns);
  });

  it('needs an SLO', async () => {
    await assert.rejects(
      runBench({ source: workloadSource('rag', { size: 10 }), policies: ['round-robin'], workers: 1, gpu: 'h100', model: 'llama-3.1-8b', seed: 1, capacity: {} }),
      /needs an SLO/,
    );
  });
});
