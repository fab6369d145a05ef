import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ConfigError, DEFAULT_POLICY_NAME, loadConfigFile, parseConfig } from '../../src/config/index.js';
import { WorkerRegistry } from '../../src/fleet/registry.js';
import { createGateway } from '../../src/gateway/gateway.js';
import { createLogger } from '../../src/telemetry/logger.js';

const problems = (input: unknown): string[] => {
  try {
    parseConfig(input);
  } catch (e) {
    assert.ok(e instanceof ConfigError);
    return e.problems;
  }
  assert.fail('expected a ConfigError');
};

test('defaults fill everything but the workers', () => {
  const c = parseConfig({ pools: [{ name: 'target', model: 'm', workers: [{ url: 'http://127.0.0.1:8000/' }, { url: 'http://10.0.0.2:8000', id: 'b', numGpuBlocks: 100 }] }] });
  assert.deepEqual(c.listen, { host: '127.0.0.1', port: 8080 });
  assert.deepEqual(c.workers, [
    { id: '127.0.0.1:8000', url: 'http://127.0.0.1:8000', pool: 'target', model: 'm', discoverAdapters: true, numGpuBlocks: undefined, blockSize: undefined, upstreamHeaders: undefined },
    { id: 'b', url: 'http://10.0.0.2:8000', pool: 'target', model: 'm', discoverAdapters: true, numGpuBlocks: 100, blockSize: undefined, upstreamHeaders: undefined },
  ]);
  assert.deepEqual(c.caps, { maxN: 16, maxTokens: 32_768, maxTotalTokens: 65_536, maxRequestMs: 1_800_000, maxEmbeddingInputs: 2_048, maxEmbeddingTokens: 300_000 });
  assert.equal(c.server.headersTimeoutMs, 10_000);
  assert.equal(c.server.bodyTimeoutMs, 30_000);
  assert.equal(c.server.routingHeaders, false);
  assert.deepEqual(c.server.corsOrigins, []);
  assert.equal(c.shutdown.drainDelayMs, 5_000);
  assert.equal(c.outlier.enabled, true);
  assert.equal(c.pools.get('target')?.cacheIsolation, 'none');
  assert.equal(c.timeouts.firstByteMs, 30_000);
  assert.equal(c.timeouts.minTokensPerSecond, 5);
  assert.equal(c.timeouts.requestMs, undefined);
  assert.equal(c.scrape.intervalMs, 1000);
  assert.equal(c.scrape.timeoutMs, 800);
  assert.equal(c.scrape.staleAfterMs, 5000);
  assert.equal(c.health.failuresToMarkDown, 3);
  assert.equal(c.health.modelsIntervalMs, 10_000);
  assert.equal(c.policy.name, DEFAULT_POLICY_NAME);
  assert.equal(c.limits.maxBodyBytes, 4 * 1024 * 1024);
  assert.equal(c.retry.attempts, 1);
});

test('a flat workers list works too', () => {
  const c = parseConfig({ workers: [{ url: 'http://a:1', model: 'm' }, { url: 'http://b:1', model: 'd', pool: 'draft', id: 'x' }] });
  assert.deepEqual(
    c.workers.map((w) => [w.id, w.pool, w.model]),
    [['a:1', 'default', 'm'], ['x', 'draft', 'd']],
  );
});

test('errors name the field path', () => {
  assert.deepEqual(problems({ pools: [{ name: 'p', model: 'm', workers: [{ url: 'http://ok:1' }, { url: 'not a url' }] }] }), [
    'pools[0].workers[1].url: Invalid URL',
  ]);
  assert.match(problems({})[0]!, /^pools: at least one worker/);
  assert.match(problems({ pools: [{ name: 'p', model: 'm', workers: [{ url: 'http://a:1' }] }], listen: { port: 70000 } })[0]!, /^listen\.port: /);
  assert.match(problems({ pools: [{ name: 'p', model: 'm', workers: [{ url: 'http://a:1' }] }], scrape: { intervalMs: 100, timeoutMs: 200 } })[0]!, /^scrape\.timeoutMs: must be shorter/);
  assert.match(problems({ pools: [{ name: 'p', model: 'm', workers: [{ url: 'http://a:1' }] }], timeout: {} })[0]!, /timeout/);
  assert.match(
    problems({ pools: [{ name: 'p', model: 'm', workers: [{ url: 'http://a:1', id: 'x' }, { url: 'http://b:1', id: 'x' }] }] })[0]!,
    /^pools\[0\]\.workers\[1\]\.id: duplicate worker id 'x'/,
  );
  assert.match(problems({ pools: [{ name: 'p', model: 'm', workers: [{ url: 'http://a:1' }] }], timeouts: { minTokensPerSecond: 0 } })[0]!, /^timeouts\.minTokensPerSecond: /);
});

test('loadConfigFile reads YAML and JSON and reports unreadable files', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-config-'));
  try {
    writeFileSync(join(dir, 'a.yaml'), 'pools:\n  - name: p\n    model: m\n    workers:\n      - url: http://127.0.0.1:9000\nretry:\n  attempts: 0\n');
    assert.equal(loadConfigFile(join(dir, 'a.yaml')).retry.attempts, 0);
    writeFileSync(join(dir, 'b.json'), JSON.stringify({ workers: [{ url: 'http://x:1', model: 'm' }] }));
    assert.equal(loadConfigFile(join(dir, 'b.json')).workers.length, 1);
    writeFileSync(join(dir, 'c.yaml'), 'pools: [unclosed\n');
    assert.throws(() => loadConfigFile(join(dir, 'c.yaml')), ConfigError);
    assert.throws(() => loadConfigFile(join(dir, 'missing.yaml')), /cannot read/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the example config in examples/ is valid', () => {
  const c = loadConfigFile(new URL('../../../examples/kvgate.yaml', import.meta.url).pathname);
  assert.ok(c.workers.length > 0);
});

test('per-worker KV-event endpoints are collected by worker id and checked', () => {
  const c = parseConfig({
    pools: [{ name: 'p', model: 'm', workers: [{ url: 'http://a:1', kvEvents: { endpoint: 'tcp://a:5557', replayEndpoint: 'tcp://a:5558' } }, { url: 'http://b:1' }] }],
    workers: [{ url: 'http://c:1', model: 'm', id: 'c', kvEvents: { endpoint: 'tcp://c:5557', topic: 'kv' } }],
  });
  assert.deepEqual(c.kvEvents, [
    { workerId: 'a:1', endpoint: 'tcp://a:5557', replayEndpoint: 'tcp://a:5558' },
    { workerId: 'c', endpoint: 'tcp://c:5557', topic: 'kv' },
  ]);
  assert.match(
    problems({ pools: [{ name: 'p', model: 'm', workers: [{ url: 'http://a:1', kvEvents: { endpoint: 'a:5557' } }] }] })[0]!,
    /^pools\[0\]\.workers\[0\]\.kvEvents\.endpoint: expected a ZeroMQ endpoint/,
  );
});

test('tokenizer specs are checked per model', () => {
  const c = parseConfig({ workers: [{ url: 'http://a:1', model: 'm' }], tokenizers: { models: { m: 'remote' } } });
  assert.deepEqual(c.tokenizers, { default: 'estimate', models: { m: 'remote' }, remoteTimeoutMs: 250, threads: 1, keptIds: 1 << 20, strictParity: false });
  assert.equal(parseConfig({ workers: [{ url: 'http://a:1', model: 'm' }], tokenizers: { strictParity: true } }).tokenizers.strictParity, true);
  assert.match(problems({ workers: [{ url: 'http://a:1', model: 'm' }], tokenizers: { strictParity: 'yes' } })[0]!, /^tokenizers\.strictParity: /);
  assert.match(problems({ workers: [{ url: 'http://a:1', model: 'm' }], tokenizers: { threads: 1.5 } })[0]!, /^tokenizers\.threads: /);
  assert.match(problems({ workers: [{ url: 'http://a:1', model: 'm' }], tokenizers: { models: { m: 'sentencepiece' } } })[0]!, /^tokenizers\.models\.m: unknown tokenizer/);
  assert.match(problems({ workers: [{ url: 'http://a:1', model: 'm' }], tokenizers: { default: 'hf:' } })[0]!, /^tokenizers\.default: /);
});

test('a policy’s own metrics interval applies unless the config sets one; unknown policies are config errors', async () => {
  const base = { workers: [{ url: 'http://127.0.0.1:9', model: 'm' }] };
  const logger = createLogger({ level: 'silent' });
  const interval = async (extra: object) => {
    const gw = createGateway(parseConfig({ ...base, ...extra }), { logger });
    const v = gw.scraper.intervalMs;
    await gw.close();
    return v;
  };
  assert.equal(await interval({ policy: { name: 'llm-d-legacy' } }), 50);
  assert.equal(await interval({ policy: { name: 'llm-d-legacy' }, scrape: { intervalMs: 1000 } }), 1000);
  assert.equal(await interval({ policy: { name: 'least-load' } }), 1000);
  assert.throws(() => createGateway(parseConfig({ ...base, policy: { name: 'nope' } }), { logger }), (e: unknown) => e instanceof ConfigError && /^policy\.name: unknown policy 'nope'/.test(e.problems[0]!));
});

test('policy options are checked at load against the named policy’s own options, defaults filled in', () => {
  const base = { workers: [{ url: 'http://127.0.0.1:9', model: 'm' }] };
  const c = parseConfig({ ...base, policy: { name: 'dynamo', options: { prefillLoadScale: 2 } } });
  assert.deepEqual(c.policy.options, {
    prefillLoadScale: 2,
    overlapScoreCredit: 1,
    overlapScoreCreditDecay: 0,
    decodeActiveRequestWeight: 0,
    hostCacheHitWeight: 0.75,
    diskCacheHitWeight: 0.25,
    assumeKvReuse: true,
    indexMaxBytes: 256 * 1024 * 1024,
    maxWorkers: 1024,
  });
  // No name: the default policy, whose options these are.
  assert.equal(parseConfig({ ...base, policy: { options: { wPrefix: 2 } } }).policy.options.wPrefix, 2);
  assert.deepEqual(problems({ ...base, policy: { name: 'kvgate', options: { spillRelative: 'lots' } } }), [
    'policy.options.spillRelative: expected a number ≥ 0, got "lots"',
  ]);
  assert.deepEqual(problems({ ...base, policy: { name: 'kvgate', options: { whenNoneFits: 'some' } } }), [
    'policy.options.whenNoneFits: expected one of all, least-overfull, got "some"',
  ]);
  // An option of another policy is unknown to this one.
  assert.deepEqual(problems({ ...base, policy: { name: 'llm-d', options: { wPrefix: 2 } } }), ["policy.options: unknown field 'wPrefix'"]);
  assert.deepEqual(problems({ ...base, policy: { name: 'round-robin', options: { queueWeight: 1 } } }), [
    "policy.options: unknown field 'queueWeight'",
  ]);
});

test('the response cache: defaults, tenant overrides, and Redis settings checked at load', () => {
  const base = { workers: [{ url: 'http://a:1', model: 'm' }] };
  const c = parseConfig(base, {});
  assert.equal(c.cache.enabled, false);
  assert.equal(c.cache.store, 'memory');
  assert.equal(c.cache.ttlMs, 300_000);
  assert.equal(c.cache.memory.maxBytes, 256 * 1024 * 1024);
  assert.equal(c.cache.redis.url, undefined);
  assert.deepEqual(c.tenants, []);
  const fromEnv = parseConfig({ ...base, cache: { enabled: true, store: 'redis' } }, { REDIS_URL: 'redis://cache:6379/1' });
  assert.equal(fromEnv.cache.redis.url, 'redis://cache:6379/1');
  const explicit = parseConfig({ ...base, cache: { enabled: true, store: 'redis', redis: { url: 'rediss://h:6380' } } }, { REDIS_URL: 'redis://other' });
  assert.equal(explicit.cache.redis.url, 'rediss://h:6380');
  const t = parseConfig({ ...base, tenants: [{ id: 'a', keys: [{ value: 'sk-abcdefgh' }], cache: { ttlMs: 1000, sampled: true } }] }, {});
  assert.deepEqual(t.tenants[0]!.cache, { ttlMs: 1000, sampled: true });
  assert.equal(t.tenants[0]!.digests.length, 1);
  assert.throws(() => parseConfig({ ...base, cache: { enabled: true, store: 'redis' } }, {}), (e: ConfigError) => /^cache\.redis\.url: required when cache\.store is redis \(or set REDIS_URL\)/.test(e.problems[0]!));
  assert.match(problems({ ...base, cache: { store: 'disk' } })[0]!, /^cache\.store: /);
  assert.match(problems({ ...base, cache: { redis: { url: 'http://x' } } })[0]!, /^cache\.redis\.url: expected redis:\/\//);
  assert.match(problems({ ...base, cache: { redis: { keyPrefix: 'a*' } } })[0]!, /^cache\.redis\.keyPrefix: must not contain/);
  assert.match(problems({ ...base, cache: { ttlMs: 0 } })[0]!, /^cache\.ttlMs: /);
  assert.match(problems({ ...base, tenants: [{ id: 'a', keys: [{ value: 'sk-abcdefgh' }], cache: { ttl: 5 } }] })[0]!, /^tenants\[0\]\.cache: unknown field 'ttl'; did you mean 'ttlMs'\?$/);
});

test('a worker may declare its hardware: it reaches the worker’s state, its speed class and /admin/workers', () => {
  const c = parseConfig({
    pools: [{ name: 'target', model: 'm', workers: [{ url: 'http://127.0.0.1:8000', id: 'fast', hardware: 'h100' }, { url: 'http://127.0.0.1:8001', id: 'plain' }] }],
    workers: [{ url: 'http://127.0.0.1:8002', id: 'slow', model: 'm', pool: 'target', hardware: 'a10g' }],
  });
  assert.equal(c.workers.find((w) => w.id === 'fast')?.hardware, 'h100');
  assert.equal(c.workers.find((w) => w.id === 'slow')?.hardware, 'a10g');
  assert.ok(!('hardware' in c.workers.find((w) => w.id === 'plain')!));
  const reg = new WorkerRegistry(c.workers, { staleAfterMs: 5000, now: () => 0, breaker: { failuresToOpen: 5, coolDownMs: 60_000 } });
  const [fast, plain, slow] = ['fast', 'plain', 'slow'].map((id) => reg.get(id)!);
  assert.equal(reg.describe(fast!).hardware, 'h100');
  assert.equal(reg.describe(plain!).hardware, null);
  assert.equal(plain!.speedClass, 'target');
  assert.notEqual(fast!.speedClass, slow!.speedClass);
  assert.notEqual(fast!.speedClass, plain!.speedClass);
  assert.deepEqual(problems({ pools: [{ name: 'p', model: 'm', workers: [{ url: 'http://127.0.0.1:8000', hardware: '' }] }] }), [
    'pools[0].workers[0].hardware: Too small: expected string to have >=1 characters',
  ]);
});

test("a tenant's models must be served by some pool", () => {
  const base = { workers: [{ url: 'http://a:1', model: 'm' }] };
  const c = parseConfig({ ...base, tenants: [{ id: 't', keys: [{ value: 'sk-t-00000001' }], models: ['m'] }] });
  assert.deepEqual(c.tenants[0]!.models, ['m']);
  assert.equal(parseConfig({ ...base, tenants: [{ id: 't', keys: [{ value: 'sk-t-00000001' }] }] }).tenants[0]!.models, undefined);
  assert.deepEqual(problems({ ...base, tenants: [{ id: 't', keys: [{ value: 'sk-t-00000001' }], models: ['m', 'llama-70b'] }] }), [
    "tenants[0].models[1]: no pool serves model 'llama-70b'",
  ]);
  assert.match(problems({ ...base, tenants: [{ id: 't', keys: [{ value: 'sk-t-00000001' }], models: [] }] })[0]!, /^tenants\[0\]\.models: /);
});

test('shared.leaseMs: 15 s by default (renewed every 5 s while a request runs); under a second is refused', () => {
  const pools = [{ name: 'p', model: 'm', workers: [{ url: 'http://a:1' }] }];
  assert.equal(parseConfig({ pools }).shared.leaseMs, 15_000);
  assert.match(problems({ pools, shared: { leaseMs: 500 } })[0]!, /^shared\.leaseMs: must be at least 1000 ms/);
});

test('an unknown field names the nearest field its object has', () => {
  const base = { workers: [{ url: 'http://a:1', model: 'm' }] };
  assert.deepEqual(problems({ ...base, cache: { ttl: 5 } }), ["cache: unknown field 'ttl'; did you mean 'ttlMs'?"]);
  // Through arrays, defaults and the policy's alternatives: each object's own fields.
  assert.deepEqual(problems({ pools: [{ name: 'p', model: 'm', workers: [{ url: 'http://a:1', ulr: 'x' }] }] }), ["pools[0].workers[0]: unknown field 'ulr'; did you mean 'url'?"]);
  assert.deepEqual(problems({ ...base, health: { intervalMS: 100, failuresToMarkdown: 2 } }), [
    "health: unknown field 'intervalMS'; did you mean 'intervalMs'?",
    "health: unknown field 'failuresToMarkdown'; did you mean 'failuresToMarkDown'?",
  ]);
  assert.deepEqual(problems({ ...base, policy: { name: 'kvgate', options: { wprefix: 2 } } }), ["policy.options: unknown field 'wprefix'; did you mean 'wPrefix'?"]);
  // A knob of the default policy is not suggested for another policy's options.
  assert.deepEqual(problems({ ...base, policy: { name: 'round-robin', options: { wPrefx: 1 } } }), ["policy.options: unknown field 'wPrefx'"]);
  // Nothing close: no guess.
  assert.deepEqual(problems({ ...base, listen: { banana: 1 } }), ["listen: unknown field 'banana'"]);
  assert.deepEqual(problems({ ...base, cahce: {} }), ["unknown field 'cahce'; did you mean 'cache'?"]);
});

test('a worker without an id is named by its URL, so a change to the list renames no other worker', () => {
  const ids = (urls: string[]) => parseConfig({ pools: [{ name: 'p', model: 'm', workers: urls.map((url) => ({ url })) }] }).workers.map((w) => w.id);
  assert.deepEqual(ids(['http://10.0.0.1:8000', 'http://10.0.0.2:8000']), ['10.0.0.1:8000', '10.0.0.2:8000']);
  // A worker inserted first leaves the others' ids (their metric series, KV-event subscriptions) as they were.
  assert.deepEqual(ids(['http://10.0.0.9:8000', 'http://10.0.0.1:8000', 'http://10.0.0.2:8000']), ['10.0.0.9:8000', '10.0.0.1:8000', '10.0.0.2:8000']);
  // Default ports, a path, IPv6, and characters a label value is better without.
  assert.deepEqual(ids(['https://vllm.example.com/', 'http://gw.local/v1/', 'http://[::1]:8001', 'http://h:1/x~y']), [
    'vllm.example.com:443',
    'gw.local:80-v1',
    '::1:8001',
    'h:1-x-y',
  ]);
  // Named workers keep their names; two workers at one address must be named apart.
  assert.deepEqual(parseConfig({ workers: [{ url: 'http://a:1', model: 'm', id: 'first' }, { url: 'http://a:1', model: 'm' }] }).workers.map((w) => w.id), ['first', 'a:1']);
  assert.match(problems({ workers: [{ url: 'http://a:1', model: 'm' }, { url: 'http://a:1/', model: 'm' }] })[0]!, /^workers\[1\]\.url: duplicate worker id 'a:1'/);
});
