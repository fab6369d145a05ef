/** `engine: vllm | sglang` on pools and workers: defaults, inheritance, and what an SGLang pool cannot be asked for. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, parseConfig } from '../../src/config/index.js';

const problems = (raw: object): string[] => {
  try {
    parseConfig(raw as never, {});
  } catch (e) {
    if (e instanceof ConfigError) return e.problems;
    throw e;
  }
  return [];
};

test('workers are vLLM unless their pool or they say sglang; a worker overrides its pool', () => {
  const c = parseConfig({
    pools: [
      { name: 'v', model: 'm', workers: [{ url: 'http://10.0.0.1:8000' }] },
      { name: 's', model: 'm', engine: 'sglang', workers: [{ url: 'http://10.0.0.2:30000' }, { url: 'http://10.0.0.3:8000', engine: 'vllm' }] },
    ],
    workers: [{ url: 'http://10.0.0.4:30000', model: 'm', pool: 'flat', engine: 'sglang' }],
  } as never, {});
  assert.deepEqual(
    c.workers.map((w) => [w.url, w.engine ?? 'vllm']),
    [
      ['http://10.0.0.1:8000', 'vllm'],
      ['http://10.0.0.2:30000', 'sglang'],
      ['http://10.0.0.3:8000', 'vllm'],
      ['http://10.0.0.4:30000', 'sglang'],
    ],
  );
});

test('an unknown engine, vLLM priority values sent to SGLang, and an SGLang draft pool are refused with the field named', () => {
  assert.match(problems({ pools: [{ name: 'p', model: 'm', engine: 'trtllm', workers: [{ url: 'http://10.0.0.1:8000' }] }] })[0]!, /^pools\[0\]\.engine: .*"vllm"\|"sglang"/);
  const sg = { name: 's', model: 'm', engine: 'sglang', workers: [{ url: 'http://10.0.0.2:30000' }] };
  const v = { name: 'v', model: 'm', workers: [{ url: 'http://10.0.0.1:8000' }] };
  assert.match(problems({ pools: [v, sg], admission: { vllmPriority: { pools: ['v', 's'] } } }).join('\n'), /admission\.vllmPriority\.pools\[1\]: pool 's' runs SGLang/);
  assert.match(problems({ pools: [v, sg], admission: { vllmPriority: { pools: ['*'] } } }).join('\n'), /admission\.vllmPriority\.pools\[0\]: pool 's' runs SGLang.*not '\*'/);
  assert.deepEqual(problems({ pools: [v, sg], admission: { vllmPriority: { pools: ['v'] } } }), []);
  const draft = { name: 'd', model: 'small', engine: 'sglang', workers: [{ url: 'http://10.0.0.3:30000' }] };
  assert.match(
    problems({ pools: [v, draft], speculative: { cascades: [{ model: 'm', targetPool: 'v', draftPool: 'd' }] } }).join('\n'),
    /speculative\.cascades\[0\]\.draftPool: pool 'd' has SGLang workers/,
  );
  // An SGLang target is fine.
  assert.deepEqual(problems({ pools: [sg, { ...draft, engine: 'vllm' }], speculative: { cascades: [{ model: 'm', targetPool: 's', draftPool: 'd' }] } }), []);
});
