/**
 * LoRA adapters (pools[].adapters, vLLM --lora-modules): requests naming an adapter are routed to
 * the workers serving it and relayed unchanged; the adapter's prompts are cached apart from the
 * base model's, in the workers (vLLM keys the blocks by the adapter) and in the router's index.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { ConfigError, parseConfig } from '../../src/config/index.js';
import { startSimWorker } from '../../src/sim/worker/server.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { estimateTokenizer } from '../../src/tokenizer/index.js';
import { bpeTokenizerJson, HELLO_WORLD_MERGES, HELLO_WORLD_VOCAB } from '../tokenizer/fixtures.js';
import { metricValue, MODEL, post, startGateway, waitFor } from './helpers.js';

const ADAPTERS = ['sql-lora', 'chat-lora'];

/** The problems parseConfig reports for `raw`, one line each ([] when it is valid). */
function problems(raw: unknown): string[] {
  try {
    parseConfig(raw);
    return [];
  } catch (e) {
    return (e as ConfigError).problems;
  }
}

test('an adapter is listed with its parent, routed, cached apart from the base model, and limited per tenant', async () => {
  const sims = await Promise.all([0, 1].map(() => startSimWorker({ port: 0, model: MODEL, adapters: ADAPTERS, speed: 100 })));
  const started = await startGateway([], {
    pools: [{ name: 'main', model: MODEL, adapters: ADAPTERS, workers: sims.map((s, i) => ({ url: s.url, id: `w${i}` })) }],
    tenants: [
      { id: 'all', keys: [{ value: 'sk-all-tenant' }] },
      { id: 'sql', keys: [{ value: 'sk-sql-tenant' }], models: ['sql-lora'] },
    ],
  } as never).catch(async (e: unknown) => {
    for (const s of sims) await s.close();
    throw e;
  });
  const { gw, url } = started;
  const ALL = { authorization: 'Bearer sk-all-tenant' };
  const SQL = { authorization: 'Bearer sk-sql-tenant' };
  try {
    const models = (await (await fetch(url + '/v1/models', { headers: ALL })).json()) as { data: Array<{ id: string; parent?: string }> };
    assert.deepEqual(models.data.map((m) => [m.id, m.parent]), [[MODEL, undefined], ['sql-lora', MODEL], ['chat-lora', MODEL]]);
    const one = await fetch(url + '/v1/models/chat-lora', { headers: ALL });
    assert.equal(((await one.json()) as { parent: string }).parent, MODEL);
    const sqlOnly = (await (await fetch(url + '/v1/models', { headers: SQL })).json()) as { data: Array<{ id: string }> };
    assert.deepEqual(sqlOnly.data.map((m) => m.id), ['sql-lora']);

    const system = 'You translate questions about the orders table into SQL. '.repeat(40);
    const ask = (model: string, headers = ALL) =>
      post(url + '/v1/chat/completions', { model, max_tokens: 3, messages: [{ role: 'system', content: system }, { role: 'user', content: 'orders today?' }] }, headers);
    const first = await ask('sql-lora');
    assert.equal(first.status, 200, first.text);
    assert.equal(first.json.model, 'sql-lora', 'the worker ran the adapter the request named');
    assert.equal(first.headers.get('x-kvgate-prefix-hit'), '0.000');
    const again = await ask('sql-lora');
    assert.equal(again.headers.get('x-kvgate-worker'), first.headers.get('x-kvgate-worker'), "the adapter's cached prefix draws it back");
    assert.ok(Number(again.headers.get('x-kvgate-prefix-hit')) > 0.9);
    assert.ok(again.json.usage.prompt_tokens_details.cached_tokens > 0);
    // The same prompt under the base model or another adapter has nothing cached: the router
    // expects no hit, and the worker has none.
    for (const other of [MODEL, 'chat-lora']) {
      const r = await ask(other);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers.get('x-kvgate-prefix-hit'), '0.000', `${other} is not served from sql-lora's blocks`);
      assert.equal(r.json.usage.prompt_tokens_details.cached_tokens, 0, `${other} found no cached block`);
    }
    const stream = await post(url + '/v1/chat/completions', { model: 'chat-lora', max_tokens: 3, stream: true, messages: [{ role: 'user', content: 'hi' }] }, ALL);
    assert.match(stream.text, /"model":"chat-lora"/);
    assert.match(stream.text, /data: \[DONE\]/);

    // A tenant limited to one adapter: that adapter only.
    assert.equal((await ask('sql-lora', SQL)).status, 200);
    for (const denied of [MODEL, 'chat-lora', 'other-lora']) {
      const r = await ask(denied, SQL);
      assert.equal(r.status, 404, denied);
      assert.equal(r.json.error.code, 'model_not_found');
    }
    const metrics = await (await fetch(url + '/metrics')).text();
    assert.equal(metricValue(metrics, 'kvgate_requests_total', { route: 'chat', model: 'sql-lora', status: '200' }), 3);
  } finally {
    await gw.close();
    for (const s of sims) await s.close();
  }
});

test('max_loras: an adapter stays on the worker it runs on, the next adapter takes the other worker', async () => {
  // vLLM's default --max-loras 1: a worker runs one adapter's requests at a time.
  const sims = await Promise.all([0, 1].map(() => startSimWorker({ port: 0, model: MODEL, adapters: ADAPTERS, speed: 2 })));
  const started = await startGateway([], {
    pools: [{ name: 'main', model: MODEL, adapters: ADAPTERS, workers: sims.map((s, i) => ({ url: s.url, id: `w${i}` })) }],
  } as never).catch(async (e: unknown) => {
    for (const s of sims) await s.close();
    throw e;
  });
  const { gw, url } = started;
  try {
    await waitFor(() => gw.registry.workers.every((w) => w.snapshot?.lora?.maxLoras === 1));
    const ask = (model: string, i: number) =>
      post(url + '/v1/chat/completions', { model, max_tokens: 20, messages: [{ role: 'user', content: `question ${i}` }] });
    // Sent together, two of each: spread by load alone they would share both workers, and each
    // worker would run one adapter while the other's request waited for its slot.
    const answers = await Promise.all(['sql-lora', 'sql-lora', 'chat-lora', 'chat-lora'].map(ask));
    for (const a of answers) assert.equal(a.status, 200, a.text);
    const where = answers.map((a) => a.headers.get('x-kvgate-worker'));
    assert.equal(where[0], where[1], 'both sql-lora requests on one worker');
    assert.equal(where[2], where[3], 'both chat-lora requests on one worker');
    assert.notEqual(where[0], where[2], 'the two adapters on different workers');
    const admin = (await (await fetch(url + '/admin/workers')).json()) as Array<{ adapters: string[]; unlistedAdapters: string[]; lora: { maxLoras: number } | null; inflightAdapters: Record<string, number> }>;
    assert.deepEqual(admin[0]!.adapters, ADAPTERS);
    assert.equal(admin[0]!.lora?.maxLoras, 1);
    assert.deepEqual(admin[0]!.inflightAdapters, {}, 'nothing in flight once all are answered');
    assert.deepEqual(admin[0]!.unlistedAdapters, []);
  } finally {
    await gw.close();
    for (const s of sims) await s.close();
  }
});

test('a configured adapter a worker does not list is reported, in /admin/workers and the log', async () => {
  // The worker serves sql-lora only; the config also names chat-lora.
  const sim = await startSimWorker({ port: 0, model: MODEL, adapters: ['sql-lora'], speed: 100 });
  const lines: string[] = [];
  const logger = createLogger({ level: 'warn', destination: new Writable({ write: (c, _e, cb) => (lines.push(String(c)), cb()) }) });
  const started = await startGateway([], { pools: [{ name: 'main', model: MODEL, adapters: ADAPTERS, workers: [{ url: sim.url, id: 'w0' }] }] } as never, { logger }).catch(async (e: unknown) => {
    await sim.close();
    throw e;
  });
  const { gw, url } = started;
  try {
    await waitFor(() => gw.registry.workers[0]!.unlistedAdapters.length > 0);
    const admin = (await (await fetch(url + '/admin/workers')).json()) as Array<{ unlistedAdapters: string[] }>;
    assert.deepEqual(admin[0]!.unlistedAdapters, ['chat-lora']);
    await waitFor(() => lines.some((l) => l.includes('configured LoRA adapters')));
    const r = await post(url + '/v1/chat/completions', { model: 'chat-lora', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r.status, 404, "the worker's own answer");
  } finally {
    await gw.close();
    await sim.close();
  }
});

test('adapters are checked: a base model\'s name, one adapter on two models, a cascade pool', () => {
  const pool = (name: string, model: string, adapters: string[]) => ({ name, model, adapters, workers: [{ url: `http://${name}:1` }] });
  assert.deepEqual(problems({ pools: [pool('a', 'm', ['x', 'y']), pool('b', 'm', ['x'])] }), []);
  assert.deepEqual(problems({ pools: [pool('a', 'm', ['n']), pool('b', 'n', [])] }), ["pools[0].adapters[0]: 'n' is a served model's own name"]);
  assert.deepEqual(problems({ pools: [pool('a', 'm', ['x']), pool('b', 'n', ['x'])] }), [
    "pools[1].adapters[0]: adapter 'x' is also served on model 'm': an adapter belongs to one base model",
  ]);
  assert.deepEqual(problems({ pools: [pool('a', 'm', ['x', 'x'])] }), ['pools[0].adapters: an adapter is listed twice']);
  assert.deepEqual(problems({ workers: [{ url: 'http://w:1', model: 'm', adapters: ['m'] }] }), ["workers[0].adapters[0]: 'm' is a served model's own name"]);
  // Aliases and tenants may name adapters.
  assert.deepEqual(problems({ pools: [pool('a', 'm', ['x'])], aliases: { 'ft:gpt-4o-mini:x': 'x' }, tenants: [{ id: 't', keys: [{ value: 'sk-tenant-t' }], models: ['x'] }] }), []);
  assert.deepEqual(
    problems({ pools: [pool('t', 'm', ['x']), pool('d', 'm-draft', [])], speculative: { cascades: [{ model: 'm', targetPool: 't', draftPool: 'd' }] } }),
    ["pools[0].adapters: pool 't' is in a speculative cascade, which does not serve adapters"],
  );
});

test('/admin/adapters loads an adapter on a pool at run time, routes it, and unloads it', async () => {
  // Two workers that take adapters at run time (vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING) and
  // one configured sql-lora; a second pool whose worker does not.
  const sims = await Promise.all([0, 1].map(() => startSimWorker({ port: 0, model: MODEL, adapters: ['sql-lora'], runtimeLoraUpdating: true, speed: 100 })));
  const plain = await startSimWorker({ port: 0, model: 'other-model', profile: MODEL, speed: 100 });
  const started = await startGateway([], {
    pools: [
      { name: 'main', model: MODEL, adapters: ['sql-lora'], workers: sims.map((s, i) => ({ url: s.url, id: `w${i}` })) },
      { name: 'other', model: 'other-model', workers: [{ url: plain.url, id: 'o0' }] },
    ],
    aliases: { 'my-alias': MODEL },
  } as never).catch(async (e: unknown) => {
    for (const s of [...sims, plain]) await s.close();
    throw e;
  });
  const { gw, url } = started;
  const admin = url + '/admin/adapters';
  const ask = (model: string) => post(url + '/v1/chat/completions', { model, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });
  const del = async (query: string) => {
    const r = await fetch(`${admin}?${query}`, { method: 'DELETE' });
    return { status: r.status, json: (await r.json()) as any };
  };
  try {
    assert.deepEqual(((await (await fetch(admin)).json()) as { data: unknown[] }).data, [
      { id: 'sql-lora', parent: MODEL, workers: [{ id: 'w0', pool: 'main', configured: true }, { id: 'w1', pool: 'main', configured: true }] },
    ]);
    assert.equal((await ask('rt-lora')).status, 404, 'not loaded yet');

    // Bad requests are refused before any worker is asked.
    const bad = async (body: unknown, status: number, code: string, param: string | null) => {
      const r = await post(admin, body);
      assert.equal(r.status, status, r.text);
      assert.equal(r.json.error.code, code, r.text);
      assert.equal(r.json.error.param, param, r.text);
    };
    await bad('{not json', 400, 'invalid_json', null);
    await bad({ name: 'rt-lora', pool: 'main' }, 400, 'invalid_value', 'path');
    await bad({ name: 'rt-lora', path: '/a', pool: 'main', extra: 1 }, 400, 'invalid_value', 'body');
    await bad({ name: 'rt-lora', path: '/a' }, 400, 'invalid_value', 'pool');
    await bad({ name: 'rt-lora', path: '/a', pool: 'nope' }, 404, 'pool_not_found', 'pool');
    await bad({ name: 'rt-lora', path: '/a', workers: ['w0', 'nope'] }, 404, 'worker_not_found', 'workers');
    await bad({ name: 'rt-lora', path: '/a', workers: ['w0', 'o0'] }, 400, 'invalid_value', 'workers');
    await bad({ name: 'other-model', path: '/a', pool: 'main' }, 409, 'adapter_conflict', 'name');
    await bad({ name: 'my-alias', path: '/a', pool: 'main' }, 409, 'adapter_conflict', 'name');
    assert.equal(gw.registry.forModel('rt-lora'), undefined);

    // Loaded on the pool: routed at once, listed with its parent, by the workers with its path.
    const load = await post(admin, { name: 'rt-lora', path: '/adapters/rt', pool: 'main' });
    assert.equal(load.status, 200, load.text);
    assert.deepEqual(load.json, { id: 'rt-lora', parent: MODEL, loaded: ['w0', 'w1'], failed: [] });
    const r = await ask('rt-lora');
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.model, 'rt-lora');
    const listed = (await (await fetch(url + '/v1/models/rt-lora')).json()) as { parent: string };
    assert.equal(listed.parent, MODEL);
    const workerCard = ((await (await fetch(sims[0]!.url + '/v1/models')).json()) as { data: Array<{ id: string; root: string; parent: string }> }).data.find((m) => m.id === 'rt-lora');
    assert.deepEqual([workerCard?.root, workerCard?.parent], ['/adapters/rt', MODEL]);
    const workers = (await (await fetch(url + '/admin/workers')).json()) as Array<{ adapters: string[]; loadedAdapters: string[] }>;
    assert.deepEqual([workers[0]!.adapters, workers[0]!.loadedAdapters], [['sql-lora', 'rt-lora'], ['rt-lora']]);
    // Loading it again is no error: vLLM's "already loaded" counts as loaded.
    const again = await post(admin, { name: 'rt-lora', path: '/adapters/rt', workers: ['w1'] });
    assert.deepEqual([again.status, again.json.loaded], [200, ['w1']]);

    // A worker without the runtime routes: its 404 is reported, nothing is routed there.
    const refused = await post(admin, { name: 'o-lora', path: '/a', pool: 'other' });
    assert.equal(refused.status, 502, refused.text);
    assert.equal(refused.json.error.code, 'adapter_load_failed');
    assert.match(refused.json.error.message, /o0: 404/);
    assert.equal(gw.registry.forModel('o-lora'), undefined);

    // Unloaded: not routed, not listed; a configured adapter is not unloaded here.
    assert.deepEqual((await del('name=sql-lora')).json.error.code, 'adapter_configured');
    assert.equal((await del('name=sql-lora')).status, 409);
    assert.deepEqual(await del('name=rt-lora&worker=w0'), { status: 200, json: { id: 'rt-lora', unloaded: ['w0'], failed: [], configured: [] } });
    assert.deepEqual(gw.registry.forModel('rt-lora')?.map((w) => w.id), ['w1']);
    assert.equal((await del('name=rt-lora')).status, 200);
    assert.equal(gw.registry.forModel('rt-lora'), undefined);
    const gone = await ask('rt-lora');
    assert.deepEqual([gone.status, gone.json.error.code], [404, 'model_not_found']);
    assert.equal((await del('name=rt-lora')).status, 404);
    assert.equal((await del('')).status, 400);
    const ids = ((await (await fetch(sims[1]!.url + '/v1/models')).json()) as { data: Array<{ id: string }> }).data.map((m) => m.id);
    assert.deepEqual(ids, [MODEL, 'sql-lora']);
    // The base model and the configured adapter were served throughout.
    assert.equal((await ask('sql-lora')).status, 200);
    assert.equal((await ask(MODEL)).status, 200);
  } finally {
    await gw.close();
    for (const s of [...sims, plain]) await s.close();
  }
});

test('adapters a worker loads or unloads by itself are followed through its /v1/models, unless discovery is off', async () => {
  const sims = await Promise.all([0, 1].map(() => startSimWorker({ port: 0, model: MODEL, runtimeLoraUpdating: true, speed: 100 })));
  const started = await startGateway([], {
    pools: [
      { name: 'found', model: MODEL, workers: [{ url: sims[0]!.url, id: 'w0' }] },
      { name: 'fixed', model: MODEL, discoverAdapters: false, workers: [{ url: sims[1]!.url, id: 'w1' }] },
    ],
    // Frequent probes re-read the model lists soon; a worker is taken out only after 2 s of missed
    // probes (not a few slow ones on a busy machine: the test is not about health).
    health: { intervalMs: 50, timeoutMs: 45, failuresToMarkDown: 40, modelsIntervalMs: 100 },
  } as never).catch(async (e: unknown) => {
    for (const s of sims) await s.close();
    throw e;
  });
  const { gw, url } = started;
  const onWorker = (s: { url: string }, path: string, body: unknown) => post(s.url + path, body);
  try {
    for (const s of sims) {
      const r = await onWorker(s, '/v1/load_lora_adapter', { lora_name: 'self-lora', lora_path: '/adapters/self' });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.text, "Success: LoRA adapter 'self-lora' added successfully.");
    }
    await waitFor(() => gw.registry.forModel('self-lora') !== undefined, 5000);
    assert.deepEqual(gw.registry.forModel('self-lora')!.map((w) => w.id), ['w0'], "only the discovering pool's worker");
    const r = await post(url + '/v1/chat/completions', { model: 'self-lora', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get('x-kvgate-worker'), 'w0');

    const again = await onWorker(sims[0]!, '/v1/load_lora_adapter', { lora_name: 'self-lora', lora_path: '/adapters/self' });
    assert.deepEqual([again.status, again.json.error.message], [400, "The lora adapter 'self-lora' has already been loaded."]);
    const off = await onWorker(sims[0]!, '/v1/unload_lora_adapter', { lora_name: 'self-lora' });
    assert.equal(off.status, 200, off.text);
    await waitFor(() => gw.registry.forModel('self-lora') === undefined, 5000);
    const missing = await onWorker(sims[0]!, '/v1/unload_lora_adapter', { lora_name: 'self-lora' });
    assert.deepEqual([missing.status, missing.json.error.message], [404, "The lora adapter 'self-lora' cannot be found."]);
    const gone = await post(url + '/v1/chat/completions', { model: 'self-lora', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });
    assert.deepEqual([gone.status, gone.json.error.code], [404, 'model_not_found']);
  } finally {
    await gw.close();
    for (const s of sims) await s.close();
  }
});

test('discovery is on by default, off where configured and in a speculative cascade\'s pools', () => {
  const c = parseConfig({
    pools: [
      { name: 'a', model: 'm', workers: [{ url: 'http://a:1' }] },
      { name: 'b', model: 'm', discoverAdapters: false, workers: [{ url: 'http://b:1' }] },
      { name: 't', model: 't', workers: [{ url: 'http://t:1' }] },
      { name: 'd', model: 't-draft', workers: [{ url: 'http://d:1' }] },
    ],
    speculative: { cascades: [{ model: 't', targetPool: 't', draftPool: 'd' }] },
  });
  assert.deepEqual(c.workers.map((w) => [w.pool, w.discoverAdapters]), [['a', true], ['b', false], ['t', false], ['d', false]]);
  assert.equal(c.health.modelsIntervalMs, 10_000);
  assert.deepEqual(problems({ pools: [{ name: 'a', model: 'm', resolveAdapters: '(', workers: [{ url: 'http://a:1' }] }] }), ['pools[0].resolveAdapters: not a valid regular expression']);
  assert.deepEqual(
    problems({
      pools: [
        { name: 't', model: 't', resolveAdapters: 'x-.*', workers: [{ url: 'http://t:1' }] },
        { name: 'd', model: 't-draft', workers: [{ url: 'http://d:1' }] },
      ],
      speculative: { cascades: [{ model: 't', targetPool: 't', draftPool: 'd' }] },
    }),
    ["pools[0].resolveAdapters: pool 't' is in a speculative cascade, which does not serve adapters"],
  );
  assert.equal(parseConfig({ workers: [{ url: 'http://w:1', model: 'm', resolveAdapters: 'x-.*' }] }).workers[0]!.resolveAdapters, 'x-.*');
});

test('adapters loaded on demand (resolveAdapters): a matching name reaches the workers, which load it or answer 404', async () => {
  // The workers resolve cust-<digits> (vLLM's LoRA resolvers); the pool routes any cust-* name there.
  const sims = await Promise.all([0, 1].map(() => startSimWorker({ port: 0, model: MODEL, loraResolver: 'cust-[0-9]+', speed: 100 })));
  const started = await startGateway([], {
    pools: [{ name: 'main', model: MODEL, resolveAdapters: 'cust-.*', workers: sims.map((s, i) => ({ url: s.url, id: `w${i}` })) }],
    // Frequent probes re-read the model lists soon; a worker is taken out only after 2 s of missed
    // probes (not a few slow ones on a busy machine: the test is not about health).
    health: { intervalMs: 50, timeoutMs: 45, failuresToMarkDown: 40, modelsIntervalMs: 100 },
  } as never).catch(async (e: unknown) => {
    for (const s of sims) await s.close();
    throw e;
  });
  const { gw, url } = started;
  const system = 'You answer questions about this customer\'s orders. '.repeat(40);
  const ask = (model: string) => post(url + '/v1/chat/completions', { model, max_tokens: 2, messages: [{ role: 'system', content: system }, { role: 'user', content: 'hi' }] });
  try {
    assert.equal((await fetch(url + '/v1/models/cust-7')).status, 404, 'not listed before a worker has it');
    const first = await ask('cust-7');
    assert.equal(first.status, 200, first.text);
    assert.equal(first.json.model, 'cust-7');
    const holder = first.headers.get('x-kvgate-worker')!;
    // Listed once the worker that loaded it says so; still routable to both (either can load it).
    await waitFor(() => gw.registry.serving('cust-7') !== undefined, 5000);
    assert.deepEqual(gw.registry.serving('cust-7')!.map((w) => w.id), [holder]);
    assert.deepEqual(gw.registry.forModel('cust-7')!.map((w) => w.id).sort(), ['w0', 'w1']);
    const listed = (await (await fetch(url + '/v1/models/cust-7')).json()) as { parent: string; pools: string[] };
    assert.deepEqual([listed.parent, listed.pools], [MODEL, ['main']]);
    // Its cached prompt draws the next request to the worker that has it.
    assert.equal((await ask('cust-7')).headers.get('x-kvgate-worker'), holder);
    // A name the workers cannot resolve: their 404, counted without the name as a label.
    const unknown = await ask('cust-abc');
    assert.equal(unknown.status, 404, unknown.text);
    assert.match(unknown.text, /cust-abc/);
    // A name the pool does not resolve never reaches a worker.
    const other = await ask('nope-1');
    assert.deepEqual([other.status, other.json.error.code], [404, 'model_not_found']);
    const metrics = await (await fetch(url + '/metrics')).text();
    assert.equal(metricValue(metrics, 'kvgate_requests_total', { route: 'chat', model: 'cust-7', status: '200' }), 2);
    assert.ok(!metrics.includes('cust-abc') && !metrics.includes('nope-1'), 'unserved names are not label values');
    assert.equal(metricValue(metrics, 'kvgate_requests_total', { route: 'chat', model: 'unknown', status: '404' }), 2);
  } finally {
    await gw.close();
    for (const s of sims) await s.close();
  }
});

test("an adapter's prompts are tokenized with its base model's tokenizer (tokenizers.models names base models)", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'kvgate-lora-tok-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const path = join(dir, 'tokenizer.json');
  await writeFile(path, JSON.stringify(bpeTokenizerJson(HELLO_WORLD_VOCAB, HELLO_WORLD_MERGES, false)));
  const sim = await startSimWorker({ port: 0, model: MODEL, adapters: ['sql-lora'], speed: 100 });
  t.after(() => sim.close());
  const { gw, url } = await startGateway([], {
    pools: [{ name: 'main', model: MODEL, adapters: ['sql-lora'], workers: [{ url: sim.url, id: 'w0' }] }],
    tokenizers: { models: { [MODEL]: `hf:${path}` }, threads: 0 },
  } as never);
  t.after(() => gw.close());
  const seen = new Map<string, number[]>();
  gw.use({ name: 'peek', handle: (ctx) => (seen.set(ctx.model, Array.from(ctx.routeRequest.promptTokens)), 'continue') });
  for (const model of [MODEL, 'sql-lora']) assert.equal((await post(url + '/v1/completions', { model, prompt: 'hello world hello', max_tokens: 2 })).status, 200);
  assert.deepEqual(seen.get('sql-lora'), seen.get(MODEL));
  assert.notDeepEqual(seen.get(MODEL), estimateTokenizer.encode('hello world hello'), 'the hf: tokenizer, not the default estimate');
});

/** Names vLLM would take (it checks only that lora_name is non-empty) that must not become model names. */
const HOSTILE_NAMES = ['__proto__', '../../etc/passwd', 'a/../b', 'org//name', 'line\nbreak', 'bidi\u202Egnp.exe', 'zero\u200Bwidth', ' lead', 'x'.repeat(129), '-dash', ''];

test('hostile adapter names are refused: at /admin/adapters (load and unload), at config load, and in a worker\'s model list', async () => {
  const pool = (adapters: string[]) => ({ name: 'a', model: 'm', adapters, workers: [{ url: 'http://a:1' }] });
  for (const name of HOSTILE_NAMES) {
    const p = problems({ pools: [pool([name])] });
    assert.equal(p.length, 1, `${JSON.stringify(name)}: ${p.join('; ')}`);
    assert.match(p[0]!, /^pools\[0\]\.adapters\[0\]: an adapter name/);
  }
  assert.deepEqual(problems({ pools: [pool(['org/sql-lora', 'sql-lora:v2', 'a.b_c-d', 'x'.repeat(128)])] }), []);

  const sim = await startSimWorker({ port: 0, model: MODEL, runtimeLoraUpdating: true, speed: 100 });
  const started = await startGateway([], {
    pools: [{ name: 'main', model: MODEL, workers: [{ url: sim.url, id: 'w0' }] }],
    // Frequent probes re-read the model lists soon; a worker is taken out only after 2 s of missed
    // probes (not a few slow ones on a busy machine: the test is not about health).
    health: { intervalMs: 50, timeoutMs: 45, failuresToMarkDown: 40, modelsIntervalMs: 100 },
  } as never).catch(async (e: unknown) => {
    await sim.close();
    throw e;
  });
  const { gw, url } = started;
  try {
    for (const name of HOSTILE_NAMES) {
      const r = await post(url + '/admin/adapters', { name, path: '/adapters/x', pool: 'main' });
      assert.equal(r.status, 400, `${JSON.stringify(name)}: ${r.text}`);
      assert.deepEqual([r.json.error.code, r.json.error.param], ['invalid_value', 'name']);
      if (name === '') continue;
      const d = await fetch(`${url}/admin/adapters?name=${encodeURIComponent(name)}`, { method: 'DELETE' });
      assert.equal(d.status, 400, JSON.stringify(name));
    }
    const badPath = await post(url + '/admin/adapters', { name: 'ok-lora', path: '/adapters/x\n[INFO] forged', pool: 'main' });
    assert.deepEqual([badPath.status, badPath.json.error.param], [400, 'path']);
    // Nothing reached the worker.
    const listed = ((await (await fetch(sim.url + '/v1/models')).json()) as { data: Array<{ id: string }> }).data.map((m) => m.id);
    assert.deepEqual(listed, [MODEL]);

    // Loaded on the worker behind the gateway's back: listed there, never routed.
    for (const name of ['__proto__', '../../etc/passwd', 'good-lora']) {
      const r = await post(sim.url + '/v1/load_lora_adapter', { lora_name: name, lora_path: '/adapters/x' });
      assert.equal(r.status, 200, r.text);
    }
    await waitFor(() => gw.registry.forModel('good-lora') !== undefined, 5000);
    assert.equal(gw.registry.forModel('__proto__'), undefined);
    assert.equal(gw.registry.forModel('../../etc/passwd'), undefined);
    for (const model of ['__proto__', '../../etc/passwd', 'constructor', 'toString']) {
      const r = await post(url + '/v1/chat/completions', { model, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });
      assert.deepEqual([r.status, r.json.error.code], [404, 'model_not_found'], model);
    }
    const models = ((await (await fetch(url + '/v1/models')).json()) as { data: Array<{ id: string }> }).data.map((m) => m.id);
    assert.deepEqual(models, [MODEL, 'good-lora']);
  } finally {
    await gw.close();
    await sim.close();
  }
});
