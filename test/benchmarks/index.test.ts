import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const DISPATCHER = join(ROOT, 'dist/benchmarks/index.js');

function bench(...args: string[]) {
  const r = spawnSync(process.execPath, [DISPATCHER, ...args], { encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** The benchmark names `--help` lists, one per line after the usage line. */
function listed(): string[] {
  const r = bench('--help');
  assert.equal(r.code, 0, r.stderr);
  return r.stdout.split('\n').filter((l) => /^ {2}\S/.test(l)).map((l) => l.trim().split(/\s+/)[0]!);
}

describe('npm run bench (benchmarks/index.ts)', () => {
  it('--help lists every benchmark script under benchmarks/, one line each', () => {
    const names = listed();
    assert.ok(names.includes('policies') && names.includes('soak'), names.join(' '));
    // Every top-level benchmarks/*.ts is a benchmark except the dispatcher and the shared helpers.
    const helpers = new Set(['index', 'harness', 'route-prompts', 'doc-tables', 'spec-load', 'peers']);
    const scripts = readdirSync(join(ROOT, 'benchmarks')).filter((f) => f.endsWith('.ts')).map((f) => f.slice(0, -3)).filter((f) => !helpers.has(f));
    const source = readFileSync(join(ROOT, 'benchmarks/index.ts'), 'utf8');
    for (const s of scripts) assert.ok(source.includes(`file: '${s}'`), `benchmarks/${s}.ts is not listed`);
    assert.equal(names.length, scripts.length);
  });

  it('runs the named benchmark with the arguments after its name', () => {
    const r = bench('engine-step', '8', '40');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /steps/);
  });

  it('kv-events maps every event a small simulated fleet publishes', () => {
    const r = bench('kv-events', '--workers', '2', '--size', '40', '--rounds', '1');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /decode, map, index: .* blocks\/s/);
    assert.match(r.stdout, /; 0 events unmapped\)/);
    assert.equal(bench('kv-events', '--workers', '0').code, 1);
  });

  it('an unknown name exits 2 with the list', () => {
    const r = bench('no-such-bench');
    assert.equal(r.code, 2);
    assert.match(r.stderr, /unknown benchmark 'no-such-bench'/);
    assert.match(r.stderr, /policies/);
  });

  it('package.json has one bench script, no bench:NAME copies', () => {
    const scripts = Object.keys(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts as Record<string, string>);
    assert.ok(scripts.includes('bench'));
    assert.deepEqual(scripts.filter((s) => s.startsWith('bench:')), []);
  });
});
