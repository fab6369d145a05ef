import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { describe, it } from 'node:test';
import { createProgressBar } from '../../src/bench/progress.js';
import { offeredLine, renderReport } from '../../src/bench/report.js';
import { runBench } from '../../src/bench/run.js';
import { downsample } from '../../src/sim/sampled-series.js';
import { summaryTable } from '../../src/bench/table.js';
import { boundsAtCapacity, describeBoundsAtCapacity } from '../../src/bench/work-bound.js';
import { workloadSource } from '../../src/workload/workloads.js';

const small = () => workloadSource('rag', { size: 60, rate: 20, seed: 1 });

describe('bench run, report and table', () => {
  it('runs each policy on a fresh fleet and reports curves for each', async () => {
    const { results, curves } = await runBench({ source: small(), policies: ['round-robin', 'least-load'], workers: 2, gpu: 'h100', model: 'llama-3.1-8b', seed: 1 });
    assert.deepEqual(results.policies.map((p) => p.name), ['round-robin', 'least-load']);
    assert.equal(results.gpu_hour_cost, 3.5);
    for (const p of results.policies) {
      assert.equal(p.completed, 60);
      assert.equal(p.workers.length, 2);
      assert.equal(p.workers.reduce((a, w) => a + w.routed, 0), 60);
    }
    assert.equal(curves[0]!.ttftQuantiles.length, 201);
    assert.ok(curves[0]!.ttftQuantiles.every((v, i, a) => i === 0 || v >= a[i - 1]!));
    assert.equal(curves[0]!.kvUsage.length, 2);
    const table = summaryTable(results.policies);
    assert.match(table, /^policy\s+done/);
    assert.equal(table.trim().split('\n').length, 4);
    const html = renderReport(results, curves);
    assert.doesNotMatch(html, /NaN|undefined|Infinity/);
  });

  it('a plain run shows the rate it offered beside its throughput, so the bars do not read as capacity', async () => {
    const { results, curves } = await runBench({ source: small(), policies: ['round-robin'], workers: 2, gpu: 'h100', model: 'llama-3.1-8b', seed: 1 });
    // rag at 20 req/s: 60 Poisson arrivals.
    assert.ok(results.offered_rps > 10 && results.offered_rps < 40, `offered ${results.offered_rps}`);
    const html = renderReport(results, curves);
    assert.ok(html.includes(`Throughput (offered ${results.offered_rps.toFixed(1)} req/s)`));
    assert.ok(html.includes(offeredLine(results.offered_rps)));
    assert.match(offeredLine(20), /^offered rate: 20\.0 req\/s .*not what a fleet can carry/);
  });

  it('the capacity report sets each capacity beside the work bound of the requests it replayed', async () => {
    const source = workloadSource('rag', { size: 12, rate: 1, seed: 4 });
    const { results, curves } = await runBench({
      source, policies: ['round-robin'], workers: 1, gpu: 'h100', model: 'llama-3.1-8b', seed: 1,
      sloTtftMs: 1000, sloTtftPer1kMs: 100, sloTpotMs: 50, omitWallTime: true, capacity: { maxProbes: 3, minSeconds: 20 },
    });
    const c = results.policies[0]!.capacity!;
    assert.ok(c.requests_per_s !== null && c.work_bound_rps != null);
    const html = renderReport(results, curves);
    assert.ok(html.includes(`round-robin ${c.work_bound_rps.toFixed(1)} req/s (capacity ${c.requests_per_s.toFixed(1)}`), 'the bound at the capacity, not the plain run\'s');
    assert.doesNotMatch(html, /No policy can sustain more than/);
  });

  it('a bound below a capacity is never stated as a ceiling', () => {
    // The figures of a shared-prefix run: the plain run's requests bound 204.8 req/s, kvgate's
    // capacity 238.5 was measured on a longer stream whose bound is 245.1.
    const line = describeBoundsAtCapacity(
      boundsAtCapacity([
        { name: 'kvgate', capacity: { requests_per_s: 238.5, work_bound_rps: 245.1 } },
        { name: 'round-robin', capacity: { requests_per_s: 171, work_bound_rps: 240 } },
        { name: 'short', capacity: { requests_per_s: 300, work_bound_rps: 250 } },
        { name: 'none', capacity: null },
      ]),
    )!;
    assert.match(line, /kvgate 245\.1 req\/s \(capacity 238\.5, 0\.97 of it\)/);
    assert.match(line, /round-robin 240\.0 req\/s \(capacity 171\.0, 0\.71 of it\)/);
    assert.match(line, /short 250\.0 req\/s \(capacity 300\.0, 1\.20 of it: above the bound, so its probes were too short/);
    assert.doesNotMatch(line, /none/);
    assert.equal(describeBoundsAtCapacity([]), null);
  });

  it('uses the admission seam and still renders when nothing completes', async () => {
    const { results, curves } = await runBench({
      source: small(),
      policies: ['round-robin'],
      workers: 2,
      gpu: 'a100',
      model: 'llama-3.1-8b',
      seed: 1,
      admission: () => () => ({ ok: false, status: 503, code: 'overloaded' }),
    });
    const p = results.policies[0]!;
    assert.equal(p.shed, 60);
    assert.equal(p.completed, 0);
    assert.deepEqual(p.refusals, { overloaded: 60 });
    assert.equal(results.gpu_hour_cost, 1.8);
    const html = renderReport(results, curves);
    assert.doesNotMatch(html, /NaN|undefined|Infinity/);
    assert.match(summaryTable(results.policies), /^round-robin\s+0\s+0\s+60/m);
  });

  it('rejects unknown policies with the known names before running anything', async () => {
    await assert.rejects(
      runBench({ source: small(), policies: ['round-robin', 'nope'], workers: 1, gpu: 'h100', model: 'llama-3.1-8b', seed: 1 }),
      /unknown policy 'nope' \(known: .*round-robin/,
    );
  });

  it('downsamples long series by averaging', () => {
    assert.deepEqual(downsample([1, 2, 3, 4, 5], 10), { factor: 1, points: [1, 2, 3, 4, 5] });
    assert.deepEqual(downsample([1, 3, 5, 7, 9], 2), { factor: 3, points: [3, 8] });
  });

  it('draws a progress bar on the given stream', () => {
    let out = '';
    const sink = new Writable({
      write(chunk, _enc, cb) {
        out += String(chunk);
        cb();
      },
    }) as unknown as NodeJS.WriteStream;
    const bar = createProgressBar('p', 10, sink);
    bar.update(5, 2000);
    bar.finish();
    assert.match(out, /\rp \[#{15}\.{15}\] 5\/10 requests, 2 s simulated/);
    assert.ok(out.endsWith('\r\x1b[K'));
  });
});
