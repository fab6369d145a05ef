/** speculative.cascades in the config: pools checked at load, defaults filled in. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, parseConfig } from '../../src/config/index.js';

const pools = [
  { name: 'target', model: 'big', workers: [{ url: 'http://127.0.0.1:9001' }] },
  { name: 'draft', model: 'small', workers: [{ url: 'http://127.0.0.1:9002' }] },
];

function problems(cascades: unknown[]): string[] {
  try {
    parseConfig({ pools, speculative: { cascades } });
    return [];
  } catch (e) {
    if (e instanceof ConfigError) return e.problems;
    throw e;
  }
}

test('a cascade gets its defaults', () => {
  const c = parseConfig({ pools, speculative: { cascades: [{ model: 'big', targetPool: 'target', draftPool: 'draft' }] } });
  assert.deepEqual(c.speculative.cascades, [{ model: 'big', targetPool: 'target', draftPool: 'draft', k: 4, topLogprobs: 20 }]);
  assert.equal(c.speculative.callTimeoutMs, 10_000);
  assert.deepEqual(parseConfig({ pools }).speculative.cascades, []);
});

test('a cascade must name existing pools, the target serving its model, and distinct pools', () => {
  assert.deepEqual(problems([{ model: 'big', targetPool: 'nope', draftPool: 'draft' }]), ["speculative.cascades[0].targetPool: no pool named 'nope'"]);
  assert.deepEqual(problems([{ model: 'big', targetPool: 'target', draftPool: 'nope' }]), ["speculative.cascades[0].draftPool: no pool named 'nope'"]);
  assert.match(problems([{ model: 'small', targetPool: 'target', draftPool: 'draft' }])[0]!, /must serve model 'small' only/);
  assert.deepEqual(problems([{ model: 'big', targetPool: 'target', draftPool: 'target' }]), ['speculative.cascades[0].draftPool: must differ from targetPool']);
  assert.match(problems([{ model: 'big', targetPool: 'target', draftPool: 'draft', k: 0 }])[0]!, /^speculative\.cascades\[0\]\.k: /);
  assert.match(problems([{ model: 'big', targetPool: 'target', draftPool: 'draft', topLogprobs: 21 }])[0]!, /^speculative\.cascades\[0\]\.topLogprobs: /);
  assert.match(
    problems([
      { model: 'big', targetPool: 'target', draftPool: 'draft' },
      { model: 'big', targetPool: 'target', draftPool: 'draft' },
    ])[0]!,
    /model 'big' has two cascades/,
  );
});

test('a draft call’s deadline: defaults, and a clear error for a bad value', () => {
  assert.deepEqual(parseConfig({ pools }).speculative.draftDeadline, { floorMs: 250, factor: 4 });
  assert.deepEqual(parseConfig({ pools, speculative: { draftDeadline: { floorMs: 100 } } }).speculative.draftDeadline, { floorMs: 100, factor: 4 });
  const bad = (draftDeadline: unknown): string[] => {
    try {
      parseConfig({ pools, speculative: { draftDeadline } as never });
      return [];
    } catch (e) {
      if (e instanceof ConfigError) return e.problems;
      throw e;
    }
  };
  assert.match(bad({ factor: 0.5 })[0]!, /^speculative\.draftDeadline\.factor: /);
  assert.match(bad({ floorMs: -1 })[0]!, /^speculative\.draftDeadline\.floorMs: /);
  assert.match(bad({ floor: 10 })[0]!, /^speculative\.draftDeadline: .*floor/);
});
