import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';
import { help } from '../../src/cli/bench.js';

const CLI = resolve(dirname(fileURLToPath(import.meta.url)), '../../src/cli.js');
const dir = mkdtempSync(join(tmpdir(), 'kvgate-replicas-cli-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function bench(...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, 'bench', ...args], { encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const SMALL = ['--workload', 'shared-prefix', '--size', '300', '--workers', '4', '--policy', 'kvgate', '--quiet'];

describe('kvgate bench --replicas', () => {
  it('documents its flags in --help', () => {
    for (const f of ['replicas', 'replica-sharing', 'sharing-delay-ms', 'share-load']) assert.ok(help.includes(`--${f}`), `--${f} missing from help`);
  });

  it('answers bad combinations with exit status 2', () => {
    const cases: Array<[string[], RegExp]> = [
      [['--replicas', '0'], /--replicas must be an integer ≥ 1/],
      [['--replicas', '2', '--replica-sharing', 'maybe'], /--replica-sharing must be on or off/],
      [['--replica-sharing', 'on'], /apply to --replicas only/],
      [['--replicas', '2', '--sharing-delay-ms', '5'], /applies to --replica-sharing on only/],
      [['--replicas', '2', '--admission', 'on'], /not simulated with --admission on/],
      [['--replicas', '2', '--share-load', 'on'], /applies to --replica-sharing on only/],
    ];
    for (const [args, re] of cases) {
      const r = bench(...SMALL, ...args);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, re);
    }
  });

  it('records the replica setup in the JSON and runs every request', () => {
    const out = join(dir, 'r.json');
    const r = bench(...SMALL, '--replicas', '3', '--replica-sharing', 'on', '--sharing-delay-ms', '20', '--share-load', 'on', '--json', out);
    assert.equal(r.code, 0, r.stderr);
    const j = JSON.parse(readFileSync(out, 'utf8'));
    assert.deepEqual(j.replicas, { count: 3, sharing: true, sharing_delay_ms: 20, share_load: true });
    assert.equal(j.policies[0].completed, 300);
  });
});
