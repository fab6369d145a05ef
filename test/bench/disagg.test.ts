import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';
import { benchFromFlags, disaggFromFlags, help, parseFlags } from '../../src/cli/bench.js';
import { disaggTable, parseDisaggSplit, type DisaggBenchResults } from '../../src/bench/disagg.js';
import { KV_LINKS } from '../../src/engine/kv-link.js';

const CLI = resolve(dirname(fileURLToPath(import.meta.url)), '../../src/cli.js');
const dir = mkdtempSync(join(tmpdir(), 'kvgate-bench-disagg-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function bench(...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, 'bench', ...args], { encoding: 'utf8', timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** The disaggregation options of a command line, or the usage error it gives. */
function parse(...args: string[]) {
  const v = parseFlags(['--workload', 'rag', ...args]);
  const { opts } = benchFromFlags(v);
  return { opts, d: disaggFromFlags(v, opts.workers, opts.model, opts.tp ?? 1, opts.policies) };
}

describe('kvgate bench --disagg', () => {
  it('parses P:D against the fleet size, and auto', () => {
    assert.deepEqual(parseDisaggSplit('1:3', 4), { prefill: 1, decode: 3 });
    assert.equal(parseDisaggSplit('auto', 4), 'auto');
    assert.throws(() => parseDisaggSplit('1-3', 4), /takes P:D .* or auto, got '1-3'/);
    assert.throws(() => parseDisaggSplit('0:4', 4), /at least one prefill and one decode worker/);
    assert.throws(() => parseDisaggSplit('2:3', 4), /2:3 is 5 workers, but --workers is 4/);
  });

  it('sizes the fleet from the split, with the gateway decider\'s defaults and the chosen link', () => {
    const { opts, d } = parse('--disagg', '2:6');
    assert.equal(opts.workers, 8);
    assert.deepEqual(opts.policies, ['kvgate']);
    assert.deepEqual(d!.split, { prefill: 2, decode: 6 });
    assert.deepEqual(d!.decider, { nonCachedTokens: 512, minPromptTokens: 0, saturatedQueueMs: 1000 });
    assert.equal(d!.transfer.link, KV_LINKS['ib-400']);
    assert.equal(d!.transfer.bytesPerToken, 131072);
    const nv = parse('--disagg', 'auto', '--workers', '4', '--kv-link', 'nvlink', '--disagg-threshold', '2048', '--disagg-prefill-role', 'both').d!;
    assert.equal(nv.split, 'auto');
    assert.equal(nv.transfer.link.name, 'nvlink');
    assert.equal(nv.decider.nonCachedTokens, 2048);
    assert.equal(nv.prefillRole, 'both');
    const custom = parse('--disagg', '1:1', '--kv-link-gbps', '200', '--kv-link-latency-us', '50').d!;
    assert.equal(custom.transfer.link.bytesPerSecond, 25e9);
    assert.equal(custom.transfer.link.latencyMs, 0.05);
  });

  it('refuses bad values and combinations, naming the flag', () => {
    const cases: Array<[string[], RegExp]> = [
      [['--disagg', '3'], /--disagg takes P:D/],
      [['--disagg', '1:3', '--workers', '8'], /--disagg 1:3 is 4 workers, but --workers is 8/],
      [['--disagg', 'auto', '--workers', '1'], /--disagg auto needs --workers 2 or more/],
      [['--disagg', '1:3', '--policy', 'kvgate,round-robin'], /one policy/],
      [['--disagg', '1:3', '--kv-link', 'pcie'], /--kv-link must be one of nvlink, ib-400, tcp-100, got 'pcie'/],
      [['--disagg', '1:3', '--kv-link', 'nvlink', '--kv-link-gbps', '100'], /not both/],
      [['--disagg', '1:3', '--kv-link-latency-us', '5'], /--kv-link-latency-us applies to --kv-link-gbps only/],
      [['--disagg', '1:3', '--kv-link-gbps', '0'], /--kv-link-gbps must be a positive number/],
      [['--disagg', '1:3', '--disagg-threshold', '0.5'], /--disagg-threshold must be an integer ≥ 1/],
      [['--disagg', '1:3', '--disagg-prefill-role', 'decode'], /--disagg-prefill-role must be prefill or both/],
      [['--disagg', '1:3', '--cache', 'on'], /not simulated with --cache/],
      [['--disagg', '1:3', '--report', 'x.html'], /--report is not drawn for --disagg/],
      [['--kv-link', 'nvlink'], /--kv-link applies to --disagg only/],
      [['--disagg-threshold', '100'], /--disagg-threshold applies to --disagg only/],
    ];
    for (const [args, re] of cases) assert.throws(() => parse(...args), re, args.join(' '));
  });

  it('documents its flags in --help and answers a bad one with status 2', () => {
    for (const f of ['disagg', 'kv-link', 'kv-link-gbps', 'kv-link-latency-us', 'disagg-threshold', 'disagg-prefill-role']) assert.ok(help.includes(`--${f}`), `--${f} missing from help`);
    const r = bench('--workload', 'rag', '--disagg', 'x:y');
    assert.equal(r.code, 2);
    assert.match(r.stderr, /kvgate bench: --disagg takes P:D/);
  });

  it('runs the aggregated fleet and the split on the same requests and writes the comparison', () => {
    const out = join(dir, 'd.json');
    const r = bench('--workload', 'rag', '--size', '120', '--disagg', '1:2', '--json', out);
    assert.equal(r.code, 0, r.stderr);
    const res = JSON.parse(readFileSync(out, 'utf8')) as DisaggBenchResults;
    assert.deepEqual(res.fleets.map((f) => f.fleet), ['aggregated', '1P:2D']);
    assert.equal(res.runs['aggregated']!.completed, 120);
    assert.equal(res.runs['1P:2D']!.completed, 120);
    assert.ok(res.fleets[1]!.disaggregated_fraction > 0);
    assert.ok(res.fleets[1]!.transfer_gb > 0);
    assert.equal(res.fleets[0]!.transfer_gb, 0);
    assert.ok(r.stdout.includes(disaggTable(res).split('\n')[2]!), 'the printed table is the JSON\'s');
  });
});
