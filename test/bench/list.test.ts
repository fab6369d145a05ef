import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';

const CLI = resolve(dirname(fileURLToPath(import.meta.url)), '../../src/cli.js');

function bench(...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, 'bench', ...args], { encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

test("--list shows kvgate's knobs under their groups, in order", () => {
  const r = bench('--list');
  assert.equal(r.code, 0, r.stderr);
  const kvgate = r.stdout.slice(r.stdout.indexOf('\n  kvgate '), r.stdout.indexOf('\n  sglang-cache-aware '));
  const headings = [...kvgate.matchAll(/^ {4}(\w+): /gm)].map((m) => m[1]);
  assert.deepEqual(headings, ['weights', 'picker', 'decode', 'stall', 'kvFit', 'learning', 'index']);
  // Each knob sits under its group's heading.
  assert.ok(kvgate.indexOf('    stall: ') < kvgate.indexOf('      stallModel: linear'));
  assert.ok(kvgate.indexOf('      stallModel: linear') < kvgate.indexOf('    kvFit: '));
  assert.ok(!kvgate.includes('readHeadroom'));
});

test('--set with a removed kvgate knob fails, saying it was removed', () => {
  const r = bench('--workload', 'mixed', '--size', '20', '--workers', '2', '--policy', 'kvgate', '--set', 'kvgate.readHeadroom=true');
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /readHeadroom was removed/);
});
