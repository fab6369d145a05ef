/**
 * Same seed, same figures: a small `kvgate bench` run and the ideal hit pass give exactly the
 * figures stored when they were last checked, so a change to the engine model, the workload
 * generators, the ideal-hit pass or the run loop that moves any figure fails here. The run uses
 * round-robin and least-load, which read nothing a routing change would touch. The fuller check,
 * every policy and the engine's other paths against another build, is
 * `npm run bench -- sim-identity`.
 *
 * Only the fixture's own fields are compared, so a field added to the results later does not
 * break the test. To refresh the fixture after a change meant to move the figures:
 *   node dist/src/cli.js bench --workload mixed --size 300 --workers 4 --seed 7 \
 *     --policy round-robin,least-load --omit-wall-time --quiet --jobs 1 --json test/fixtures/sim/mixed-300-rr-ll.json
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';
import { benchRequests } from '../../src/bench/run.js';
import { idealHitRate } from '../../src/bench/ideal-hit.js';
import { expandSessions } from '../../src/workload/sessions.js';
import { workloadSource } from '../../src/workload/workloads.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const CLI = resolve(HERE, '../../src/cli.js');
// Fixtures are not compiled: read them from the source tree.
const FIXTURE = resolve(HERE, '../../../test/fixtures/sim/mixed-300-rr-ll.json');
const dir = mkdtempSync(join(tmpdir(), 'kvgate-sim-fixture-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Assert that `got` has every field of `want` with the same value (deeply; arrays whole). */
function assertHasFields(got: unknown, want: unknown, path: string): void {
  if (want !== null && typeof want === 'object' && !Array.isArray(want)) {
    assert.ok(got !== null && typeof got === 'object', `${path}: expected an object`);
    for (const [k, v] of Object.entries(want)) assertHasFields((got as Record<string, unknown>)[k], v, `${path}.${k}`);
  } else if (Array.isArray(want)) {
    assert.ok(Array.isArray(got), `${path}: expected an array`);
    assert.equal(got.length, want.length, `${path}: length`);
    want.forEach((v, i) => assertHasFields(got[i], v, `${path}[${i}]`));
  } else {
    assert.deepEqual(got, want, path);
  }
}

describe('same seed, same figures', () => {
  it('a small bench run gives the stored figures', () => {
    const out = join(dir, 'run.json');
    const r = spawnSync(
      process.execPath,
      [CLI, 'bench', '--workload', 'mixed', '--size', '300', '--workers', '4', '--seed', '7', '--policy', 'round-robin,least-load', '--omit-wall-time', '--quiet', '--jobs', '1', '--json', out],
      { encoding: 'utf8', timeout: 120_000 },
    );
    assert.equal(r.status, 0, r.stderr);
    assertHasFields(JSON.parse(readFileSync(out, 'utf8')), JSON.parse(readFileSync(FIXTURE, 'utf8')), 'results');
  });

  it('the ideal hit pass gives the stored hit tokens, exact and past its bound', () => {
    const cases: Array<[string, number, number, number]> = [
      // workload, prompt tokens, hit tokens with the default bound, hit tokens kept to 4,096 blocks
      ['mixed', 5272468, 1428320, 583408],
      ['agentic', 9000421, 8434960, 4833200],
      ['rollouts', 1524197, 504400, 497632],
    ];
    for (const [w, prompt, hit, bounded] of cases) {
      const src = workloadSource(w, { size: 1500, seed: 3 });
      const exact = idealHitRate(expandSessions(benchRequests(src, { rateScale: 1 })), 16);
      assert.deepEqual([exact.promptTokens, exact.hitTokens], [prompt, hit], w);
      const small = idealHitRate(expandSessions(benchRequests(src, { rateScale: 1 })), 16, 0, undefined, 4096);
      assert.deepEqual([small.promptTokens, small.hitTokens], [prompt, bounded], `${w}, 4,096 blocks`);
    }
  });
});
