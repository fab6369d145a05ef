import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODEL, metricValue, post, startGateway, startSims } from './helpers.js';

const cosine = (a: number[], b: number[]): number => a.reduce((s, x, i) => s + x * b[i]!, 0);

test('/v1/embeddings: routed to a worker of the model and relayed as the worker answers', async () => {
  const sims = await startSims(2);
  const { gw, url } = await startGateway(sims.map((s) => s.url), { server: { routingHeaders: true } });
  try {
    const r = await post(url + '/v1/embeddings', { model: MODEL, input: ['the cat sat on the mat', 'the cat sat on a mat', 'quarterly revenue grew'] });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.object, 'list');
    assert.equal(r.json.data.length, 3);
    assert.deepEqual(r.json.data.map((d: any) => d.index), [0, 1, 2]);
    const [a, b, c] = r.json.data.map((d: any) => d.embedding as number[]);
    assert.equal(a.length, 256);
    assert.ok(Math.abs(cosine(a, a) - 1) < 1e-4, 'unit vectors');
    assert.ok(cosine(a, b) > cosine(a, c), 'close inputs get close vectors');
    assert.ok(r.json.usage.prompt_tokens > 0);
    assert.equal(r.json.usage.total_tokens, r.json.usage.prompt_tokens);
    assert.match(r.headers.get('x-kvgate-worker') ?? '', /./, 'a worker was picked');
    assert.match(r.headers.get('x-request-id') ?? '', /^[0-9a-f-]{36}$/);

    // The same input again: the same vector (and its prefix cached on the worker that has it).
    const again = await post(url + '/v1/embeddings', { model: MODEL, input: 'the cat sat on the mat', encoding_format: 'base64', dimensions: 8 });
    assert.equal(again.status, 200, again.text);
    const bytes = Buffer.from(again.json.data[0].embedding, 'base64');
    assert.equal(bytes.length, 8 * 4);

    const m = await (await fetch(url + '/metrics')).text();
    assert.equal(metricValue(m, 'kvgate_requests_total', { route: 'embeddings', model: MODEL, status: '200' }), 2);
    // Their inputs are counted as the workers' usage says; they write no output tokens.
    assert.equal(metricValue(m, 'kvgate_prompt_tokens_total', { model: MODEL, tenant: 'default' }), r.json.usage.prompt_tokens + again.json.usage.prompt_tokens);
    assert.equal(metricValue(m, 'kvgate_generation_tokens_total', { model: MODEL, tenant: 'default' }), undefined);
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});

test('/v1/embeddings: bad requests get OpenAI errors naming the field, before any worker is asked', async () => {
  const sims = await startSims(1);
  const { gw, url } = await startGateway(sims.map((s) => s.url));
  try {
    const cases: Array<[unknown, number, string | null, string]> = [
      [{ model: MODEL }, 400, 'input', 'invalid_request_error'],
      [{ model: MODEL, input: [] }, 400, 'input', 'invalid_request_error'],
      [{ model: MODEL, input: 'x', encoding_format: 'hex' }, 400, 'encoding_format', 'invalid_request_error'],
      [{ model: MODEL, input: 'x', dimensions: 0 }, 400, 'dimensions', 'invalid_request_error'],
      [{ input: 'x' }, 400, 'model', 'invalid_request_error'],
      [{ model: 'no-such-model', input: 'x' }, 404, 'model', 'invalid_request_error'],
    ];
    for (const [body, status, param, type] of cases) {
      const r = await post(url + '/v1/embeddings', body);
      assert.equal(r.status, status, `${JSON.stringify(body)}: ${r.text}`);
      assert.equal(r.json.error.type, type);
      assert.equal(r.json.error.param, param, r.text);
      assert.equal(typeof r.json.error.message, 'string');
    }
    const get = await fetch(url + '/v1/embeddings');
    assert.equal(get.status, 405);
    assert.equal(get.headers.get('allow'), 'POST');
    // A worker's own refusal (more dimensions than its model has) is relayed as it is: a 400.
    const tooMany = await post(url + '/v1/embeddings', { model: MODEL, input: 'x', dimensions: 100_000 });
    assert.equal(tooMany.status, 400, tooMany.text);
    assert.match(tooMany.json.error.message, /dimensions/);
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});

test('/v1/embeddings with the response cache: a repeat is answered without a worker, per tenant, whatever the sampling fields', async () => {
  const sims = await startSims(2);
  const { gw, url } = await startGateway(sims.map((s) => s.url), {
    cache: { enabled: true },
    tenants: [
      { id: 'acme', keys: [{ value: 'sk-acme-0001' }] },
      { id: 'globex', keys: [{ value: 'sk-globex-01' }] },
    ],
  });
  const upstream = () => sims.reduce((n, s) => n + s.stats().requests, 0);
  const ACME = { authorization: 'Bearer sk-acme-0001' };
  const GLOBEX = { authorization: 'Bearer sk-globex-01' };
  try {
    const body = { model: MODEL, input: ['first document', 'second document'] };
    const miss = await post(url + '/v1/embeddings', body, ACME);
    assert.equal(miss.status, 200, miss.text);
    assert.equal(miss.headers.get('x-kvgate-cache'), 'miss');
    assert.equal(upstream(), 2, 'one engine request per input');
    const hit = await post(url + '/v1/embeddings', { ...body, user: 'someone else' }, ACME);
    assert.equal(hit.status, 200);
    assert.equal(hit.headers.get('x-kvgate-cache'), 'hit');
    assert.equal(hit.text, miss.text, 'the same answer, byte for byte');
    assert.equal(upstream(), 2, 'no worker asked');
    // Another tenant never shares an entry; another encoding or dimension is another answer.
    assert.equal((await post(url + '/v1/embeddings', body, GLOBEX)).headers.get('x-kvgate-cache'), 'miss');
    assert.equal((await post(url + '/v1/embeddings', { ...body, dimensions: 8 }, ACME)).headers.get('x-kvgate-cache'), 'miss');
    assert.equal(upstream(), 6);
    // Identical requests at once: one goes to a worker, the others join it.
    const same = { model: MODEL, input: 'a third document, asked three times at once' };
    const three = await Promise.all([0, 1, 2].map(() => post(url + '/v1/embeddings', same, ACME)));
    for (const r of three) assert.equal(r.status, 200);
    assert.deepEqual(three.map((r) => r.headers.get('x-kvgate-cache')).sort(), ['hit', 'hit', 'miss']);
    assert.equal(upstream(), 7);
    // A worker's refusal is not stored.
    const bad = { model: MODEL, input: 'x', dimensions: 100_000 };
    assert.equal((await post(url + '/v1/embeddings', bad, ACME)).status, 400);
    assert.equal((await post(url + '/v1/embeddings', bad, ACME)).headers.get('x-kvgate-cache'), 'miss');
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});
