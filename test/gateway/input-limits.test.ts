/**
 * What a request body may be before the gateway charges anything for it: nesting depth (400 before
 * parsing, the reservation never leaks, shutdown stays prompt) and the embeddings caps.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MAX_JSON_DEPTH, jsonNestsDeeperThan } from '../../src/api/json-depth.js';
import { MODEL, post, startGateway, startSims } from './helpers.js';

/** A chat body with `depth` nested arrays in a field kvgate does not know. */
function nestedChat(model: string, depth: number): string {
  return `{"model":${JSON.stringify(model)},"max_tokens":4,"temperature":0,"messages":[{"role":"user","content":"hi"}],"x_extra":${'['.repeat(depth)}${']'.repeat(depth)}}`;
}

test('jsonNestsDeeperThan: counts arrays and objects, not brackets inside strings', () => {
  assert.equal(jsonNestsDeeperThan(Buffer.from('[[[]]]'), 3), false);
  assert.equal(jsonNestsDeeperThan(Buffer.from('[[[[]]]]'), 3), true);
  assert.equal(jsonNestsDeeperThan(Buffer.from('{"a":{"b":[{}]}}'), 3), true);
  assert.equal(jsonNestsDeeperThan(Buffer.from('{"a":"[[[[[[[[\\"[[[["}'), 3), false);
  assert.equal(jsonNestsDeeperThan(Buffer.from(`{"a":${'['.repeat(MAX_JSON_DEPTH - 1)}${']'.repeat(MAX_JSON_DEPTH - 1)}}`)), false);
  assert.equal(jsonNestsDeeperThan(Buffer.from(`{"a":${'['.repeat(MAX_JSON_DEPTH)}${']'.repeat(MAX_JSON_DEPTH)}}`)), true);
});

test('deeply nested bodies on tenant-isolated, aliased, prioritised and cacheable requests: 400, nothing charged, shutdown prompt', async () => {
  const sims = await startSims(2);
  const { gw, url } = await startGateway([], {
    pools: [{ name: 'main', model: MODEL, cacheIsolation: 'tenant', workers: sims.map((s, i) => ({ url: s.url, id: `w${i}` })) }],
    tenants: [
      { id: 'acme', keys: [{ value: 'sk-acme-0001' }] },
      { id: 'batch', keys: [{ value: 'sk-batch-0001' }], priority: 'sheddable' },
    ],
    admin: { keys: [{ value: 'sk-admin-0001' }] },
    aliases: { 'gpt-4o-mini': MODEL },
    admission: { vllmPriority: { pools: ['main'], values: { critical: -10, standard: 0, sheddable: 10 } } },
    cache: { enabled: true },
  });
  let closed = false;
  try {
    const acme = { authorization: 'Bearer sk-acme-0001' };
    for (const model of [MODEL, 'gpt-4o-mini']) {
      for (const depth of [MAX_JSON_DEPTH + 1, 100_000]) {
        const r = await post(url + '/v1/chat/completions', nestedChat(model, depth), acme);
        assert.equal(r.status, 400, r.text);
        assert.equal(r.json.error.type, 'invalid_request_error');
        assert.equal(r.json.error.code, 'nesting_too_deep');
        assert.match(r.json.error.message, new RegExp(`more than ${MAX_JSON_DEPTH} levels`));
      }
    }
    const emb = await post(url + '/v1/embeddings', `{"model":"${MODEL}","input":"x","x_extra":${'['.repeat(100_000)}${']'.repeat(100_000)}}`, acme);
    assert.equal(emb.status, 400, emb.text);
    assert.equal(emb.json.error.code, 'nesting_too_deep');

    // Nesting within the limit is served (the body re-serialised with the tenant's salt).
    const ok = await post(url + '/v1/chat/completions', nestedChat('gpt-4o-mini', 20), acme);
    assert.equal(ok.status, 200, ok.text);

    // Nothing was left charged: every worker is at in-flight 0.
    assert.equal(gw.router.openCount, 0);
    const workers = (await (await fetch(url + '/admin/workers', { headers: { authorization: 'Bearer sk-admin-0001' } })).json()) as Array<{ inflight: number }>;
    assert.ok(workers.length === 2);
    for (const w of workers) assert.equal(w.inflight, 0, JSON.stringify(workers));

    // A sheddable tenant's small request is still served.
    const small = await post(url + '/v1/chat/completions', { model: MODEL, max_tokens: 64, messages: [{ role: 'user', content: 'a small ask' }] }, { authorization: 'Bearer sk-batch-0001' });
    assert.equal(small.status, 200, small.text);

    const t0 = performance.now();
    await gw.close();
    closed = true;
    assert.ok(performance.now() - t0 < 3_000, `shutdown took ${Math.round(performance.now() - t0)} ms`);
  } finally {
    if (!closed) await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});

test('/v1/embeddings caps: too many inputs or too many tokens in all are 400 limit_exceeded naming input; pool and tenant caps lower them', async () => {
  const sims = await startSims(2);
  const { gw, url } = await startGateway([], {
    pools: [{ name: 'main', model: MODEL, caps: { maxEmbeddingTokens: 5_000 }, workers: sims.map((s, i) => ({ url: s.url, id: `w${i}` })) }],
    tenants: [
      { id: 'acme', keys: [{ value: 'sk-acme-0001' }] },
      { id: 'tiny', keys: [{ value: 'sk-tiny-0001' }], caps: { maxEmbeddingInputs: 2 } as Record<string, number> },
    ],
    caps: { maxEmbeddingInputs: 100 },
  });
  try {
    const acme = { authorization: 'Bearer sk-acme-0001' };
    // The red team's request: 100,000 short inputs (~700 KB), once past every cap.
    const flood = await post(url + '/v1/embeddings', { model: MODEL, input: Array.from({ length: 100_000 }, (_, i) => `w${i % 97}`) }, acme);
    assert.equal(flood.status, 400, flood.text);
    assert.equal(flood.json.error.code, 'limit_exceeded');
    assert.equal(flood.json.error.param, 'input');
    assert.match(flood.json.error.message, /100000 inputs, more than the 100 allowed/);

    // Under the input cap, over the pool's token cap (token ids: counted exactly).
    const ids = Array.from({ length: 50 }, () => Array.from({ length: 200 }, (_, j) => 100 + j));
    const tokens = await post(url + '/v1/embeddings', { model: MODEL, input: ids }, acme);
    assert.equal(tokens.status, 400, tokens.text);
    assert.equal(tokens.json.error.param, 'input');
    assert.match(tokens.json.error.message, /10000 tokens, more than the 5000 allowed/);

    // The tenant's lower cap.
    const three = await post(url + '/v1/embeddings', { model: MODEL, input: ['a', 'b', 'c'] }, { authorization: 'Bearer sk-tiny-0001' });
    assert.equal(three.status, 400, three.text);
    assert.match(three.json.error.message, /3 inputs, more than the 2 allowed/);

    // Within the caps: served; and nothing stays charged.
    const fine = await post(url + '/v1/embeddings', { model: MODEL, input: ids.slice(0, 20) }, acme);
    assert.equal(fine.status, 200, fine.text);
    assert.equal(fine.json.data.length, 20);
    assert.equal(gw.router.openCount, 0);
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});

test('/v1/embeddings: an input over the worker\'s context is its 400, relayed as it is, and no worker dies', async () => {
  const sims = await startSims(2);
  const { gw, url } = await startGateway(sims.map((s) => s.url));
  try {
    // The simulated model's context is 131,072 tokens (llama-3.1-8b); one input of 140,000 ids is
    // within the gateway's caps (300,000 tokens) but over it.
    const r = await post(url + '/v1/embeddings', { model: MODEL, input: Array.from({ length: 140_000 }, (_, i) => 100 + (i % 5_000)) });
    assert.equal(r.status, 400, r.text);
    assert.match(r.json.error.message, /maximum context length is \d+ tokens\. However, you requested 140000 tokens in the input for embedding generation/);
    for (const s of sims) assert.equal((await fetch(s.url + '/health')).status, 200);
    const after = await post(url + '/v1/embeddings', { model: MODEL, input: 'still here' });
    assert.equal(after.status, 200, after.text);
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});

test('a pick whose request fails before its attempt settles is released: a body that cannot be serialised, a pick check that throws', async () => {
  const sims = await startSims(2);
  const { gw, url } = await startGateway(sims.map((s) => s.url));
  try {
    // A stage changes the body into something JSON.stringify refuses (a BigInt) on one request,
    // and makes the pick's check throw on another: both fail after the stages, once routing is next.
    gw.use({
      name: 'test-faults',
      handle(ctx) {
        const fault = ctx.req.headers['x-test-fault'];
        if (fault === 'serialise') {
          (ctx.body as Record<string, unknown>).x_big = 10n;
          ctx.bodyModified = true;
        } else if (fault === 'check') {
          ctx.checkPick = () => {
            throw new Error('pick check failed');
          };
        }
        return 'continue';
      },
    });
    const chat = { model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] };
    for (const fault of ['serialise', 'check', 'serialise', 'check']) {
      const r = await post(url + '/v1/chat/completions', chat, { 'x-test-fault': fault });
      assert.equal(r.status, 500, r.text);
      assert.equal(r.json.error.type, 'server_error');
    }
    assert.equal(gw.router.openCount, 0, 'no reservation left open');
    for (const w of gw.registry.workers) assert.equal(w.inflightCount, 0, `${w.id} in flight`);
    const ok = await post(url + '/v1/chat/completions', chat);
    assert.equal(ok.status, 200, ok.text);
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});
