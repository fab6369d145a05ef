/**
 * Tenant isolation of cached prompts (cacheIsolation: tenant): identical prompts from two tenants
 * share nothing, neither on the workers (vLLM's cache_salt, honoured by the simulated workers) nor
 * in the gateway's routing. A tenant limited to some models (tenants[].models) can neither use nor list
 * the others.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODEL, post, startGateway, startSims } from './helpers.js';
import { startSimWorker } from '../../src/sim/worker/server.js';
import { Writable } from 'node:stream';
import { createLogger } from '../../src/telemetry/logger.js';

const SYSTEM = 'You are the support assistant of ACME Corp. '.repeat(40) + 'Internal escalation code: 7731.';
const ask = (q: string) => ({ model: MODEL, max_tokens: 2, temperature: 0, messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: q }] });
const A = { authorization: 'Bearer sk-tenant-a1' };
const B = { authorization: 'Bearer sk-tenant-b1' };
const tenants = [
  { id: 'a', keys: [{ value: 'sk-tenant-a1' }] },
  { id: 'b', keys: [{ value: 'sk-tenant-b1' }] },
];

async function run(isolation: 'none' | 'tenant') {
  const sims = await startSims(3);
  const { gw, url } = await startGateway([], {
    health: { intervalMs: 60_000 },
    scrape: { intervalMs: 60_000 },
    pools: [{ name: 'main', model: MODEL, cacheIsolation: isolation, workers: sims.map((s, i) => ({ url: s.url, id: `w${i}` })) }],
    tenants,
    cacheSalt: { secret: { value: 'test-secret' } },
  });
  try {
    const a1 = await post(url + '/v1/chat/completions', ask('first question'), A);
    const a2 = await post(url + '/v1/chat/completions', ask('second question'), A);
    const b1 = await post(url + '/v1/chat/completions', ask('first question'), B);
    for (const r of [a1, a2, b1]) assert.equal(r.status, 200, r.text);
    return {
      a2Cached: a2.json.usage.prompt_tokens_details?.cached_tokens ?? 0,
      b1Cached: b1.json.usage.prompt_tokens_details?.cached_tokens ?? 0,
      a2Hit: Number(a2.headers.get('x-kvgate-prefix-hit')),
      b1Hit: Number(b1.headers.get('x-kvgate-prefix-hit')),
      sameWorker: a1.headers.get('x-kvgate-worker') === b1.headers.get('x-kvgate-worker'),
    };
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
}

test('without isolation a second tenant’s identical prompt is routed to and served from the first tenant’s cached blocks', async () => {
  const r = await run('none');
  assert.ok(r.a2Cached > 0);
  assert.ok(r.b1Cached > 0, 'the leak the isolation closes');
  assert.ok(r.b1Hit > 0.5);
  assert.equal(r.sameWorker, true);
});

test('cacheIsolation: tenant — identical prompts from two tenants share nothing, by cached_tokens and by routing', async () => {
  const r = await run('tenant');
  assert.ok(r.a2Cached > 0, 'a tenant still hits its own cache');
  assert.ok(r.a2Hit > 0.5, 'and is routed to it');
  assert.equal(r.b1Cached, 0);
  assert.equal(r.b1Hit, 0);
});

test('the simulated worker honours cache_salt as vLLM does', async () => {
  const sim = await startSimWorker({ model: MODEL, speed: 100 });
  try {
    const body = (salt?: string) => ({ ...ask('q'), ...(salt ? { cache_salt: salt } : {}) });
    const cached = async (salt?: string) => (await post(sim.url + '/v1/chat/completions', body(salt))).json.usage.prompt_tokens_details?.cached_tokens ?? 0;
    assert.equal(await cached('s1'), 0);
    assert.ok((await cached('s1')) > 0, 'same salt: shared');
    assert.equal(await cached('s2'), 0, 'another salt: nothing shared');
    assert.equal(await cached(), 0, 'no salt: nothing shared with salted blocks');
  } finally {
    await sim.close();
  }
});

test('a client cannot choose its cache_salt on an isolated pool', async () => {
  const sims = await startSims(1);
  const { gw, url } = await startGateway([], {
    health: { intervalMs: 60_000 },
    scrape: { intervalMs: 60_000 },
    pools: [{ name: 'main', model: MODEL, cacheIsolation: 'tenant', workers: [{ url: sims[0]!.url, id: 'w0' }] }],
    tenants,
  });
  try {
    await post(url + '/v1/chat/completions', ask('q'), A);
    // B names a salt of its own choosing: the gateway replaces it with B's.
    const b = await post(url + '/v1/chat/completions', { ...ask('q'), cache_salt: 'anything' }, B);
    assert.equal(b.json.usage.prompt_tokens_details?.cached_tokens ?? 0, 0);
    const b2 = await post(url + '/v1/chat/completions', { ...ask('q'), cache_salt: 'something else' }, B);
    assert.ok((b2.json.usage.prompt_tokens_details?.cached_tokens ?? 0) > 0, 'B’s own salt, whatever B sent');
  } finally {
    await gw.close();
    await sims[0]!.close();
  }
});

test("a tenant limited to some models gets the others answered as models that do not exist, and lists only its own", async () => {
  const [small, large] = await Promise.all([MODEL, 'llama-3-8b'].map((model) => startSimWorker({ port: 0, model, speed: 100 })));
  const { gw, url } = await startGateway([], {
    health: { intervalMs: 60_000 },
    scrape: { intervalMs: 60_000 },
    pools: [
      { name: 'small', model: MODEL, workers: [{ url: small!.url, id: 's0' }] },
      { name: 'large', model: 'llama-3-8b', workers: [{ url: large!.url, id: 'l0' }] },
    ],
    tenants: [
      { id: 'a', keys: [{ value: 'sk-tenant-a1' }], models: [MODEL] },
      { id: 'b', keys: [{ value: 'sk-tenant-b1' }] },
    ],
  });
  try {
    const chat = (model: string) => ({ model, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });
    const denied = await post(url + '/v1/chat/completions', chat('llama-3-8b'), A);
    const missing = await post(url + '/v1/chat/completions', chat('no-such-model'), A);
    assert.equal(denied.status, 404);
    assert.deepEqual(Object.keys(denied.json.error).sort(), ['code', 'message', 'param', 'type']);
    assert.equal(denied.json.error.code, 'model_not_found');
    assert.equal(denied.json.error.param, 'model');
    // Told apart from a model that does not exist by nothing but its name.
    assert.equal(denied.json.error.message.replace('llama-3-8b', 'X'), missing.json.error.message.replace('no-such-model', 'X'));
    assert.equal((await post(url + '/v1/completions', { model: 'llama-3-8b', prompt: 'hi', max_tokens: 2 }, A)).status, 404);
    assert.equal((await post(url + '/v1/chat/completions', chat(MODEL), A)).status, 200);
    assert.equal((await post(url + '/v1/chat/completions', chat('llama-3-8b'), B)).status, 200);

    const list = async (h: Record<string, string>) =>
      ((await (await fetch(url + '/v1/models', { headers: h })).json()) as { data: Array<{ id: string }> }).data.map((m) => m.id).sort();
    assert.deepEqual(await list(A), [MODEL]);
    assert.deepEqual(await list(B), ['llama-3-8b', MODEL].sort());
    assert.deepEqual(await list({}), ['llama-3-8b', MODEL].sort(), 'without a key the list stays open');
    assert.equal((await fetch(url + '/v1/models/llama-3-8b', { headers: A })).status, 404);
    assert.equal((await fetch(url + '/v1/models/llama-3-8b', { headers: B })).status, 200);
  } finally {
    await gw.close();
    await Promise.all([small!.close(), large!.close()]);
  }
});

test('cacheIsolation: none with more than one tenant is warned about at start, naming the pools; tenant isolation or one tenant is not', async () => {
  const sims = await startSims(1);
  const tenants = [
    { id: 'a', keys: [{ value: 'sk-tenant-a-0001' }] },
    { id: 'b', keys: [{ value: 'sk-tenant-b-0001' }] },
  ];
  const warnings = async (isolation: 'none' | 'tenant', n: number): Promise<Array<{ msg: string; pools?: string[] }>> => {
    const lines: string[] = [];
    const logger = createLogger({ level: 'warn', destination: new Writable({ write: (c, _e, cb) => (lines.push(String(c)), cb()) }) });
    const { gw } = await startGateway(
      [],
      { pools: [{ name: 'main', model: MODEL, cacheIsolation: isolation, workers: [{ url: sims[0]!.url, id: 'w0' }] }], tenants: tenants.slice(0, n) } as never,
      { logger },
    );
    await gw.close();
    return lines.map((l) => JSON.parse(l)).filter((l) => /cacheIsolation: none/.test(l.msg));
  };
  try {
    const warned = await warnings('none', 2);
    assert.equal(warned.length, 1);
    assert.deepEqual(warned[0]!.pools, ['main']);
    assert.match(warned[0]!.msg, /cached_tokens/);
    assert.deepEqual(await warnings('tenant', 2), []);
    assert.deepEqual(await warnings('none', 1), []);
  } finally {
    for (const s of sims) await s.close();
  }
});
