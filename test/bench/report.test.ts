import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { describe, it } from 'node:test';
import { createProgressBar } from '../../src/bench/progress.js';
import { renderReport } from '../../src/bench/report.js';
import { downsample, runBench } from '../../src/bench/run.js';
import { summaryTable } from '../../src/bench/table.js';
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
