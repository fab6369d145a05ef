import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runBench } from '../../src/bench/run.js';
import { benchFromFlags, parseFlags } from '../../src/cli/bench.js';
import { runBenchParallel } from '../../src/cli/bench-parallel.js';

test('--jobs: the threads one policy leaves idle run its capacity probes ahead, with the serial figures', async () => {
  const argv = ['--workload', 'shared-prefix', '--size', '80', '--rate', '10', '--workers', '2', '--policy', 'kvgate', '--capacity', '--max-probes', '5', '--capacity-seconds', '8', '--omit-wall-time'];
  const serial = await runBench(benchFromFlags(parseFlags(argv)).opts);
  const stats = { probesAhead: 0 };
  const parallel = await runBenchParallel(argv, benchFromFlags(parseFlags(argv)).opts, 3, null, stats);
  assert.ok(stats.probesAhead > 0, 'some probes ran on lent threads');
  // The run-wide figures come from the main thread in a parallel run; the policy's, probes
  // included, must be the serial run's to the byte.
  assert.equal(JSON.stringify(parallel.results.policies), JSON.stringify(serial.results.policies));
  assert.ok(serial.results.policies[0]!.capacity!.probes.length >= 4);
});

test('--jobs with one policy: it runs on this thread, the run-wide figures on a worker, every figure the serial run’s', async () => {
  const argv = ['--workload', 'mixed', '--size', '120', '--rate', '12', '--workers', '3', '--seed', '5', '--policy', 'least-load', '--omit-wall-time'];
  const serial = await runBench(benchFromFlags(parseFlags(argv)).opts);
  const opts = benchFromFlags(parseFlags(argv)).opts;
  const started: string[] = [];
  opts.onPolicyStart = (name) => started.push(name);
  const parallel = await runBenchParallel(argv, opts, 2, null);
  // The policy's own callbacks ran here: a policy on a worker thread reports through messages.
  assert.deepEqual(started, ['least-load']);
  assert.ok(serial.results.ideal_hit_rate > 0, 'the run-wide pass ran');
  assert.equal(JSON.stringify(parallel.results), JSON.stringify(serial.results));
  assert.equal(JSON.stringify(parallel.curves), JSON.stringify(serial.curves));
});
