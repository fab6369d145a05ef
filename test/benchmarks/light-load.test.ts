import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const DISPATCHER = join(ROOT, 'dist/benchmarks/index.js');

function run(...args: string[]) {
  const r = spawnSync(process.execPath, [DISPATCHER, ...args], { encoding: 'utf8', timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

interface Out {
  capacities: string[];
  rows: Array<{ workload: string; fraction: number; rate: number; ratios: Array<{ metric: string; kvgate: number; best: number; peer: string; ratio: number }> }>;
}

describe('npm run bench -- light-load with a trace', () => {
  let dir = '';
  let trace = '';
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'kvgate-light-load-test-'));
    trace = join(dir, 'mix.jsonl');
    const w = run('product-mix-trace', '--out', trace, '--requests', '300', '--seed', '3');
    assert.equal(w.code, 0, w.stderr);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("measures kvgate's capacity on the trace, replays it at the fraction and compares with the peers left", () => {
    const json = join(dir, 'out.json');
    const r = run('light-load', '--trace', trace, '--fractions', '0.5', '--skip', 'sglang-cache-aware,llm-d,llm-d-precise,llm-d-legacy,aibrix', '--json', json);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /mix: kvgate's capacity/);
    const out = JSON.parse(readFileSync(json, 'utf8')) as Out;
    assert.equal(out.rows.length, 1, 'only the trace runs when --only is not given');
    const row = out.rows[0]!;
    assert.equal(row.workload, 'mix');
    assert.equal(row.fraction, 0.5);
    const capacity = Number.parseFloat(out.capacities[0]!.split(' ')[1]!);
    assert.ok(Math.abs(row.rate - capacity / 2) < 0.06, `${row.rate} is half of ${capacity} (printed to 0.1)`);
    assert.deepEqual(row.ratios.map((x) => x.metric), ['TTFT p50', 'TTFT p99', 'TPOT p99', 'E2E p99']);
    for (const x of row.ratios) {
      assert.equal(x.peer, 'dynamo');
      assert.ok(x.best > 0 && Math.abs(x.ratio - x.kvgate / x.best) < 1e-9, JSON.stringify(x));
    }
    assert.match(r.stdout, /\| mix \| 0\.5 × capacity \|/);
    assert.match(r.stdout, /every trace whole/);
  });

  it('refuses a trace that is not there, a --set that is not a kvgate knob and a knob kvgate bench does not know', () => {
    const missing = run('light-load', '--trace', join(dir, 'nope.jsonl'));
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /--trace: no such file .*nope\.jsonl/);
    const notKvgate = run('light-load', '--trace', trace, '--set', 'dynamo.x=1');
    assert.equal(notKvgate.code, 2);
    assert.match(notKvgate.stderr, /--set takes kvgate\.KNOB=VALUE/);
    const unknownKnob = run('light-load', '--trace', trace, '--fractions', '0.5', '--skip', 'sglang-cache-aware,llm-d,llm-d-precise,llm-d-legacy,aibrix', '--set', 'kvgate.noSuchKnob=1');
    assert.equal(unknownKnob.code, 2, unknownKnob.stderr);
    assert.match(unknownKnob.stderr, /bench light-load: kvgate bench .* failed/);
    assert.doesNotMatch(unknownKnob.stderr, /at main/, 'a clear message, not a stack trace');
  });
});
