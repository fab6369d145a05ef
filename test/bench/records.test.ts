import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';

const CLI = resolve(dirname(fileURLToPath(import.meta.url)), '../../src/cli.js');
const dir = mkdtempSync(join(tmpdir(), 'kvgate-bench-records-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function bench(...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, 'bench', ...args], { encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

type Row = Record<string, string>;

function readCsv(file: string): Row[] {
  const [head, ...lines] = readFileSync(file, 'utf8').trimEnd().split('\n');
  const cols = head!.split(',');
  return lines.map((l) => Object.fromEntries(l.split(',').map((v, i) => [cols[i]!, v])));
}

/** numpy's default percentile (linear interpolation), as the summary computes it. */
function percentile(values: number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  const pos = (p / 100) * (s.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.min(lo + 1, s.length - 1);
  return s[lo]! + (s[hi]! - s[lo]!) * (pos - lo);
}

const RUN = ['--workload', 'mixed', '--size', '300', '--rate', '20', '--workers', '3', '--seed', '4', '--policy', 'kvgate,round-robin', '--quiet'];

describe('kvgate bench --records', () => {
  it("writes every completed request of each policy's run, one file per policy, agreeing with the summary", () => {
    const json = join(dir, 'two.json');
    const r = bench(...RUN, '--jobs', '2', '--records', join(dir, 'two.csv'), '--json', json);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(existsSync(join(dir, 'two.csv')), false, 'several policies: one file each, not FILE');
    for (const p of JSON.parse(readFileSync(json, 'utf8')).policies) {
      const rows = readCsv(join(dir, `two-${p.name}.csv`));
      assert.equal(rows.length, p.completed, p.name);
      const ttft = rows.map((x) => Number(x.ttft_ms));
      const e2e = rows.map((x) => Number(x.e2e_ms));
      const tpot = rows.filter((x) => x.tpot_ms !== '').map((x) => Number(x.tpot_ms));
      for (const [q, key] of [[50, 'p50'], [99, 'p99']] as const) {
        assert.ok(Math.abs(percentile(ttft, q) - p.ttft_ms[key]) < 0.002, `${p.name} TTFT ${key}: ${percentile(ttft, q)} vs ${p.ttft_ms[key]}`);
        assert.ok(Math.abs(percentile(e2e, q) - p.e2e_ms[key]) < 0.002, `${p.name} E2E ${key}`);
        assert.ok(Math.abs(percentile(tpot, q) - p.tpot_ms[key]) < 0.002, `${p.name} TPOT ${key}`);
      }
      const workers = new Set(p.workers.map((w: { id: string }) => w.id));
      for (const x of rows) {
        assert.ok(workers.has(x.worker), `worker ${x.worker}`);
        assert.equal(x.source, 'worker');
        assert.equal(x.class, 'standard');
        assert.ok(Number(x.cached_tokens) <= Number(x.prompt_tokens) && Number(x.ttft_ms) <= Number(x.e2e_ms), JSON.stringify(x));
      }
    }
    // The same rows whether the policies ran on threads or one after another.
    assert.equal(bench(...RUN, '--jobs', '1', '--records', join(dir, 'one.csv')).code, 0);
    for (const name of ['kvgate', 'round-robin']) assert.equal(readFileSync(join(dir, `one-${name}.csv`), 'utf8'), readFileSync(join(dir, `two-${name}.csv`), 'utf8'));
  });

  it('one policy writes FILE itself; response-cache answers are marked and have no TPOT', () => {
    const file = join(dir, 'cache.csv');
    const json = join(dir, 'cache.json');
    const r = bench('--workload', 'shared-prefix', '--size', '300', '--rate', '20', '--workers', '2', '--policy', 'round-robin', '--repeat-fraction', '0.4', '--cache', 'on', '--records', file, '--json', json, '--quiet');
    assert.equal(r.code, 0, r.stderr);
    const p = JSON.parse(readFileSync(json, 'utf8')).policies[0];
    const rows = readCsv(file);
    const bySource = (s: string) => rows.filter((x) => x.source === s);
    assert.equal(bySource('cache').length, p.cache.hits);
    assert.equal(bySource('follower').length, p.cache.coalesced);
    assert.ok(p.cache.hits > 0);
    for (const x of bySource('cache')) assert.equal(x.tpot_ms, '');
    assert.equal(rows.length, p.completed);
  });

  it('names each request\'s priority class', () => {
    const file = join(dir, 'classes.csv');
    const json = join(dir, 'classes.json');
    const r = bench(...RUN.slice(0, -3), '--policy', 'kvgate', '--priority-mix', 'critical=0.3,sheddable=0.7', '--records', file, '--json', json, '--quiet');
    assert.equal(r.code, 0, r.stderr);
    const bp = JSON.parse(readFileSync(json, 'utf8')).policies[0].by_priority;
    const rows = readCsv(file);
    for (const cls of ['critical', 'standard', 'sheddable']) assert.equal(rows.filter((x) => x.class === cls).length, bp[cls].completed, cls);
  });

  it('refuses a FILE whose folder is not there before running anything', () => {
    const r = bench(...RUN, '--records', join(dir, 'no-such-folder', 'r.csv'));
    assert.equal(r.code, 2);
    assert.match(r.stderr, /--records .*no folder .*no-such-folder to write it in/);
  });
});
