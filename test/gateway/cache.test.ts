/** The response cache end to end, in memory: real simulated workers, a real gateway, loopback only. */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Gateway } from '../../src/gateway/gateway.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { metricValue, MODEL, parseSse, post, startGateway, startSims, startStub, streamText, workerStandIn } from './helpers.js';

const CHAT = '/v1/chat/completions';
const chat = (content: string, extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  messages: [
    { role: 'system', content: 'Answer from the context.' },
    { role: 'user', content },
  ],
  max_tokens: 16,
  temperature: 0,
  ...extra,
});

let sims: SimWorker[];
let gw: Gateway;
let url: string;
/** Health probes that a loaded test machine cannot fail by being slow. */
const CALM = { health: { intervalMs: 2000, failuresToMarkDown: 10 } };
const upstream = () => sims.reduce((n, s) => n + s.stats().requests, 0);
const metric = async (name: string, labels: Record<string, string> = {}) =>
  metricValue(await (await fetch(url + '/metrics')).text(), name, labels) ?? 0;

before(async () => {
  sims = await startSims(2);
  ({ gw, url } = await startGateway(
    sims.map((s) => s.url),
    {
      ...CALM,
      cache: { enabled: true },
      // A max_tokens past the worker's context must reach the worker (its 400 is what is tested).
      caps: { maxTokens: 100_000_000, maxTotalTokens: 100_000_000 },
      tenants: [
        { id: 'acme', keys: [{ value: 'sk-acme-0001' }] },
        { id: 'globex', keys: [{ value: 'sk-globex-01' }], cache: { sampled: true } },
        { id: 'brief', keys: [{ value: 'sk-brief-001' }], cache: { ttlMs: 150 } },
        { id: 'tiny', keys: [{ value: 'sk-tiny-0001' }], cache: { maxEntryBytes: 200 } },
        { id: 'off', keys: [{ value: 'sk-off-00001' }], cache: { enabled: false } },
      ],
      admin: { keys: [{ value: 'sk-admin-001' }] },
    },
  ));
});

after(async () => {
  await gw.close();
  await Promise.all(sims.map((s) => s.close()));
});

const ACME = { authorization: 'Bearer sk-acme-0001' };
const GLOBEX = { authorization: 'Bearer sk-globex-01' };

describe('response cache (in memory)', () => {
  it('answers a repeated temperature-0 request from the cache, byte for byte, without a worker', async () => {
    const body = chat('What is a KV cache?');
    const a = await post(url + CHAT, body, ACME);
    assert.equal(a.status, 200, a.text);
    assert.equal(a.headers.get('x-kvgate-cache'), 'miss');
    const n = upstream();
    const b = await post(url + CHAT, body, ACME);
    assert.equal(b.status, 200, b.text);
    assert.equal(b.headers.get('x-kvgate-cache'), 'hit');
    assert.equal(b.headers.get('age'), '0');
    assert.equal(b.headers.get('x-kvgate-worker'), null, 'no worker was involved');
    assert.equal(upstream(), n);
    assert.equal(b.text, a.text, 'the replayed JSON is the stored answer, byte for byte');
    // Key order in the request does not matter.
    const reordered = JSON.parse(JSON.stringify({ temperature: 0, max_tokens: 16, messages: body.messages, model: MODEL }));
    assert.equal((await post(url + CHAT, reordered, ACME)).headers.get('x-kvgate-cache'), 'hit');
  });

  it('replays a JSON-filled answer as SSE and an SSE-filled answer as JSON', async () => {
    const body = chat('Stream me later', { max_tokens: 12 });
    const json = await post(url + CHAT, body, ACME);
    assert.equal(json.headers.get('x-kvgate-cache'), 'miss');
    const n = upstream();
    const s = await post(url + CHAT, { ...body, stream: true, stream_options: { include_usage: true } }, ACME);
    assert.equal(s.headers.get('x-kvgate-cache'), 'hit');
    assert.match(s.headers.get('content-type') ?? '', /text\/event-stream/);
    const events = parseSse(s.text);
    assert.equal(events.at(-1), '[DONE]');
    assert.equal(streamText(events), json.json.choices[0].message.content);
    assert.deepEqual(events.at(-2).usage, json.json.usage, 'include_usage gets the usage chunk');
    assert.equal(events[0].object, 'chat.completion.chunk');
    const plain = parseSse((await post(url + CHAT, { ...body, stream: true }, ACME)).text);
    assert.ok(plain.every((e) => e === '[DONE]' || e.usage === undefined), 'no usage chunk unless asked');
    assert.equal(upstream(), n);

    // Filled by a stream (with usage), answered as JSON: same content as a worker gives.
    const sbody = chat('JSON me later', { max_tokens: 12, stream: true, stream_options: { include_usage: true } });
    const first = await post(url + CHAT, sbody, ACME);
    assert.equal(first.headers.get('x-kvgate-cache'), 'miss');
    const m = upstream();
    const j = await post(url + CHAT, { ...sbody, stream: false, stream_options: undefined }, ACME);
    assert.equal(j.headers.get('x-kvgate-cache'), 'hit');
    assert.equal(upstream(), m);
    assert.equal(j.json.object, 'chat.completion');
    assert.equal(j.json.choices[0].message.content, streamText(parseSse(first.text)));
    assert.equal(j.json.choices[0].finish_reason, 'length');
    assert.equal(j.json.usage.completion_tokens, 12);
    const direct = await post(sims[0]!.url + CHAT, { ...sbody, stream: false, stream_options: undefined });
    assert.equal(j.json.choices[0].message.content, direct.json.choices[0].message.content);
  });

  it('a stream filled without usage serves streams, not JSON (which needs usage): the JSON miss refills it', async () => {
    const body = chat('No usage here', { max_tokens: 8, stream: true });
    assert.equal((await post(url + CHAT, body, ACME)).headers.get('x-kvgate-cache'), 'miss');
    assert.equal((await post(url + CHAT, body, ACME)).headers.get('x-kvgate-cache'), 'hit');
    assert.equal((await post(url + CHAT, { ...body, stream: false }, ACME)).headers.get('x-kvgate-cache'), 'miss');
    assert.equal((await post(url + CHAT, { ...body, stream: false }, ACME)).headers.get('x-kvgate-cache'), 'hit');
    assert.equal((await post(url + CHAT, { ...body, stream_options: { include_usage: true } }, ACME)).headers.get('x-kvgate-cache'), 'hit');
  });

  it('caches completions and seeded requests; bypasses sampled ones unless the tenant opts in', async () => {
    const comp = { model: MODEL, prompt: 'Once upon a time', max_tokens: 6, temperature: 0 };
    assert.equal((await post(url + '/v1/completions', comp, ACME)).headers.get('x-kvgate-cache'), 'miss');
    const hit = await post(url + '/v1/completions', { ...comp, stream: true }, ACME);
    assert.equal(hit.headers.get('x-kvgate-cache'), 'hit');
    assert.equal(parseSse(hit.text)[0].object, 'text_completion');
    const seeded = chat('Seeded', { temperature: 0.9, seed: 42 });
    assert.equal((await post(url + CHAT, seeded, ACME)).headers.get('x-kvgate-cache'), 'miss');
    assert.equal((await post(url + CHAT, seeded, ACME)).headers.get('x-kvgate-cache'), 'hit');
    const sampled = chat('Sampled', { temperature: undefined });
    for (let i = 0; i < 2; i++) {
      const n = upstream();
      assert.equal((await post(url + CHAT, sampled, ACME)).headers.get('x-kvgate-cache'), 'bypass');
      assert.equal(upstream(), n + 1);
    }
    assert.equal((await post(url + CHAT, sampled, GLOBEX)).headers.get('x-kvgate-cache'), 'miss');
    assert.equal((await post(url + CHAT, sampled, GLOBEX)).headers.get('x-kvgate-cache'), 'hit', 'globex caches sampled requests');
    const off = { authorization: 'Bearer sk-off-00001' };
    assert.equal((await post(url + CHAT, chat('off'), off)).headers.get('x-kvgate-cache'), 'bypass');
    assert.equal((await post(url + CHAT, chat('off'), off)).headers.get('x-kvgate-cache'), 'bypass');
  });

  it('never shows one tenant another tenant’s entry, even for byte-identical requests', async () => {
    const raw = JSON.stringify(chat('Our quarterly numbers are in the context. Summarise them.'));
    const a1 = await post(url + CHAT, raw, ACME);
    assert.equal(a1.headers.get('x-kvgate-cache'), 'miss');
    assert.equal((await post(url + CHAT, raw, ACME)).headers.get('x-kvgate-cache'), 'hit');
    const n = upstream();
    const g1 = await post(url + CHAT, raw, GLOBEX);
    assert.equal(g1.headers.get('x-kvgate-cache'), 'miss', 'globex does not see acme’s entry');
    assert.equal(upstream(), n + 1);
    assert.equal((await post(url + CHAT, raw, GLOBEX)).headers.get('x-kvgate-cache'), 'hit');
    // Dropping acme's entries leaves globex's.
    const del = await fetch(url + '/admin/cache?tenant=acme', { method: 'DELETE', headers: { authorization: 'Bearer sk-admin-001' } });
    assert.equal(del.status, 200);
    const d = (await del.json()) as { deleted: number; tenant: string };
    assert.equal(d.tenant, 'acme');
    assert.ok(d.deleted >= 1);
    assert.equal((await post(url + CHAT, raw, ACME)).headers.get('x-kvgate-cache'), 'miss');
    assert.equal((await post(url + CHAT, raw, GLOBEX)).headers.get('x-kvgate-cache'), 'hit');
  });

  it('never serves a stale answer when the RAG context changes', async () => {
    const q = 'Question: what colour is the sky?';
    const v1 = chat(`Context: the sky is blue.\n${q}`);
    const v2 = chat(`Context: the sky is green.\n${q}`);
    assert.equal((await post(url + CHAT, v1, ACME)).headers.get('x-kvgate-cache'), 'miss');
    assert.equal((await post(url + CHAT, v2, ACME)).headers.get('x-kvgate-cache'), 'miss');
    const sys2 = { ...v1, messages: [{ role: 'system', content: 'Answer briefly.' }, v1.messages[1]] };
    assert.equal((await post(url + CHAT, sys2, ACME)).headers.get('x-kvgate-cache'), 'miss');
    assert.equal((await post(url + CHAT, { ...v1, max_tokens: 17 }, ACME)).headers.get('x-kvgate-cache'), 'miss');
  });

  it('honours Cache-Control: no-store bypasses, no-cache refreshes, max-age bounds the age', async () => {
    const body = chat('Cache control');
    const ns = await post(url + CHAT, body, { ...ACME, 'cache-control': 'no-store' });
    assert.equal(ns.headers.get('x-kvgate-cache'), 'bypass');
    assert.equal((await post(url + CHAT, body, ACME)).headers.get('x-kvgate-cache'), 'miss', 'no-store stored nothing');
    const n = upstream();
    const nc = await post(url + CHAT, body, { ...ACME, 'cache-control': 'no-cache' });
    assert.equal(nc.headers.get('x-kvgate-cache'), 'miss');
    assert.equal(upstream(), n + 1, 'no-cache skips the lookup');
    assert.equal((await post(url + CHAT, body, ACME)).headers.get('x-kvgate-cache'), 'hit');
    assert.equal((await post(url + CHAT, body, { ...ACME, 'cache-control': 'max-age=3600' })).headers.get('x-kvgate-cache'), 'hit');
    assert.ok((await metric('kvgate_cache_requests_total', { result: 'refresh' })) >= 1);
  });

  it('expires entries after the tenant’s TTL and refuses entries over its size cap', async () => {
    const brief = { authorization: 'Bearer sk-brief-001' };
    const body = chat('Short-lived');
    assert.equal((await post(url + CHAT, body, brief)).headers.get('x-kvgate-cache'), 'miss');
    assert.equal((await post(url + CHAT, body, brief)).headers.get('x-kvgate-cache'), 'hit');
    await new Promise((r) => setTimeout(r, 200));
    assert.equal((await post(url + CHAT, body, brief)).headers.get('x-kvgate-cache'), 'miss');
    const tiny = { authorization: 'Bearer sk-tiny-0001' };
    const before = await metric('kvgate_cache_stores_total', { outcome: 'too_large' });
    const big = await post(url + CHAT, chat('A long answer please', { max_tokens: 64 }), tiny);
    assert.equal(big.status, 200);
    assert.equal(big.json.usage.completion_tokens, 64, 'served whole');
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(await metric('kvgate_cache_stores_total', { outcome: 'too_large' }), before + 1);
    assert.equal((await post(url + CHAT, chat('A long answer please', { max_tokens: 64 }), tiny)).headers.get('x-kvgate-cache'), 'miss');
  });

  it('does not store answers that did not complete normally', async () => {
    const bad = await post(url + CHAT, chat('too long', { max_tokens: 10_000_000 }), ACME);
    assert.equal(bad.status, 400, 'the worker refuses a max_tokens beyond its context');
    assert.equal((await post(url + CHAT, chat('too long', { max_tokens: 10_000_000 }), ACME)).headers.get('x-kvgate-cache'), 'miss');
  });

  it('requires a key when keys are configured: 401 in OpenAI’s shape, before any worker is asked', async () => {
    const n = upstream();
    for (const h of [{}, { authorization: 'Bearer sk-wrong-000' }, { authorization: 'sk-acme-0001' }] as Array<Record<string, string>>) {
      const r = await post(url + CHAT, chat('who am I'), h);
      assert.equal(r.status, 401);
      assert.deepEqual(Object.keys(r.json.error).sort(), ['code', 'message', 'param', 'type']);
      assert.equal(r.json.error.code, 'invalid_api_key');
      assert.equal(r.json.error.type, 'invalid_request_error');
      assert.equal(r.json.error.param, null);
      assert.match(r.headers.get('www-authenticate') ?? '', /^Bearer/);
    }
    assert.equal(upstream(), n);
    assert.equal(await metric('kvgate_requests_total', { route: 'chat', model: 'unknown', status: '401' }), 3);
  });

  it('guards /admin/* with the admin key; GET /admin/cache reports, DELETE clears', async () => {
    assert.equal((await fetch(url + '/admin/cache')).status, 401);
    assert.equal((await fetch(url + '/admin/workers', { headers: ACME })).status, 403);
    assert.equal((await fetch(url + '/admin/cache', { method: 'DELETE', headers: ACME })).status, 403);
    const admin = { authorization: 'Bearer sk-admin-001' };
    assert.equal((await fetch(url + '/admin/workers', { headers: admin })).status, 200);
    assert.equal((await fetch(url + '/metrics')).status, 200, '/metrics open (admin.openMetrics, as the test helpers set it)');
    const st = (await (await fetch(url + '/admin/cache', { headers: admin })).json()) as Record<string, any>;
    assert.equal(st.store, 'memory');
    assert.ok(st.entries > 0);
    assert.ok(st.requests.hit > 0);
    assert.equal((await fetch(url + '/admin/cache?tenant=nobody', { method: 'DELETE', headers: admin })).status, 404);
    assert.equal((await fetch(url + '/admin/cache', { method: 'POST', headers: admin })).status, 405);
    const del = (await (await fetch(url + '/admin/cache', { method: 'DELETE', headers: admin })).json()) as { deleted: number; tenant: null };
    assert.ok(del.deleted > 0);
    assert.equal(del.tenant, null);
    assert.equal(await metric('kvgate_cache_entries', { store: 'memory' }), 0);
    assert.equal((await post(url + CHAT, chat('What is a KV cache?'), ACME)).headers.get('x-kvgate-cache'), 'miss');
  });

  it('exports the cache metrics', async () => {
    const text = await (await fetch(url + '/metrics')).text();
    for (const r of ['hit', 'miss', 'bypass']) assert.ok((metricValue(text, 'kvgate_cache_requests_total', { result: r }) ?? 0) > 0, r);
    const ratio = metricValue(text, 'kvgate_cache_hit_ratio')!;
    assert.ok(ratio > 0 && ratio < 1);
    assert.ok((metricValue(text, 'kvgate_cache_store_seconds_count', { op: 'get', store: 'memory' }) ?? 0) > 0);
    assert.ok((metricValue(text, 'kvgate_cache_stores_total', { outcome: 'stored' }) ?? 0) > 0);
    assert.equal(metricValue(text, 'kvgate_cache_store_up', { store: 'memory' }), 1);
    assert.ok(metricValue(text, 'kvgate_cache_bytes', { store: 'memory' }) !== undefined);
  });
});

/**
 * A worker standing in for vLLM with a deterministic answer: `tokens` chunks of "w<i> ", one every
 * `gapMs`. While `breakNext` is set, the next streamed answer is cut after `breakAfter` chunks.
 */
function deterministicWorker(o: { tokens: number; gapMs: number }) {
  const state = { requests: 0, breakNext: false, breakAfter: 3 };
  const handler = workerStandIn((_req, raw, res) => {
    state.requests++;
    const body = JSON.parse(raw) as { stream?: boolean; stream_options?: { include_usage?: boolean } };
    const base = { id: `chatcmpl-${state.requests}`, object: 'chat.completion.chunk', created: 1, model: MODEL };
    const usage = { prompt_tokens: 5, completion_tokens: o.tokens, total_tokens: 5 + o.tokens };
    if (!body.stream) {
      setTimeout(() => {
        const text = Array.from({ length: o.tokens }, (_, i) => `w${i} `).join('');
        const out = JSON.stringify({ ...base, object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'length' }], usage });
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
        res.end(out);
      }, o.gapMs * o.tokens);
      return;
    }
    const cut = state.breakNext ? state.breakAfter : -1;
    state.breakNext = false;
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] })}\n\n`);
    let i = 0;
    const tick = (): void => {
      if (i === cut) {
        res.destroy();
        return;
      }
      const last = i === o.tokens - 1;
      res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: { content: `w${i} ` }, finish_reason: last ? 'length' : null }] })}\n\n`);
      i++;
      if (!last) return void setTimeout(tick, o.gapMs);
      if (body.stream_options?.include_usage) res.write(`data: ${JSON.stringify({ ...base, choices: [], usage })}\n\n`);
      res.end('data: [DONE]\n\n');
    };
    setTimeout(tick, o.gapMs);
  });
  return { state, handler };
}

/** Read an SSE response as it arrives; resolves each time `n` events have arrived. */
async function openStream(u: string, body: unknown, headers: Record<string, string> = {}) {
  const r = await fetch(u, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  let text = '';
  const decoder = new TextDecoder();
  const reader = r.body!.getReader();
  const done = (async () => {
    for (;;) {
      const { value, done: end } = await reader.read();
      if (end) break;
      text += decoder.decode(value, { stream: true });
    }
    return text;
  })();
  return {
    status: r.status,
    headers: r.headers,
    done,
    cancel: () => reader.cancel(),
    events: async (n: number) => {
      while (text.split('\n\n').length - 1 < n) await new Promise((res) => setTimeout(res, 5));
    },
  };
}

describe('single-flight', () => {
  it('concurrent identical misses send one request upstream; streaming followers get the same chunks as they arrive', async () => {
    const w = deterministicWorker({ tokens: 12, gapMs: 40 });
    const stub = await startStub(w.handler);
    const g = await startGateway([stub.url], { ...CALM, cache: { enabled: true } });
    try {
      const body = { model: MODEL, messages: [{ role: 'user', content: 'together' }], max_tokens: 12, temperature: 0, stream: true };
      const leader = await openStream(g.url + CHAT, body);
      await leader.events(3);
      const follower = await openStream(g.url + CHAT, body);
      const withUsage = await openStream(g.url + CHAT, { ...body, stream_options: { include_usage: true } });
      const json = post(g.url + CHAT, { ...body, stream: false });
      const [lt, ft, ut, jr] = await Promise.all([leader.done, follower.done, withUsage.done, json]);
      assert.equal(w.state.requests, 2, 'the leader, and the request that needs usage the leader will not have');
      assert.equal(leader.headers.get('x-kvgate-cache'), 'miss');
      assert.equal(follower.headers.get('x-kvgate-cache'), 'hit');
      assert.equal(ft, lt, 'the follower got the leader’s chunks, byte for byte');
      assert.equal(withUsage.headers.get('x-kvgate-cache'), 'miss');
      assert.ok(ut.includes('"usage"'));
      assert.equal(jr.headers.get('x-kvgate-cache'), 'hit', 'the JSON request joined the include_usage stream');
      assert.equal(jr.json.choices[0].message.content, streamText(parseSse(lt)));
      assert.ok((metricValue(await (await fetch(g.url + '/metrics')).text(), 'kvgate_cache_requests_total', { result: 'coalesced' }) ?? 0) >= 2);
    } finally {
      await g.gw.close();
      await stub.close();
    }
  });

  it('a follower whose leader fails is never sent a broken answer: it completes from its own request', async () => {
    const w = deterministicWorker({ tokens: 10, gapMs: 15 });
    const stub = await startStub(w.handler);
    const g = await startGateway([stub.url], { ...CALM, cache: { enabled: true }, retry: { attempts: 0 }, circuitBreaker: { failuresToOpen: 100 } });
    try {
      const body = { model: MODEL, messages: [{ role: 'user', content: 'fragile' }], max_tokens: 10, temperature: 0, stream: true };
      w.state.breakNext = true;
      w.state.breakAfter = 5;
      const leader = await openStream(g.url + CHAT, body);
      await leader.events(2);
      const follower = await openStream(g.url + CHAT, body);
      const jsonFollower = post(g.url + CHAT, { ...body, stream: false, stream_options: { include_usage: true } });
      const [lt, ft, jr] = await Promise.all([leader.done, follower.done, jsonFollower]);
      assert.match(lt, /"error"/, 'the leader’s own client sees the failure');
      assert.ok(!lt.includes('[DONE]'));
      assert.equal(follower.status, 200);
      const events = parseSse(ft);
      assert.equal(events.at(-1), '[DONE]', 'the follower’s answer is complete');
      assert.ok(events.every((e) => e === '[DONE]' || e.error === undefined));
      assert.equal(streamText(events), Array.from({ length: 10 }, (_, i) => `w${i} `).join(''));
      assert.equal(jr.status, 200);
      assert.equal(jr.json.choices[0].message.content, streamText(events));
      // The completed answer was stored.
      assert.equal((await post(g.url + CHAT, body)).headers.get('x-kvgate-cache'), 'hit');
    } finally {
      await g.gw.close();
      await stub.close();
    }
  });

  it('followers keep their answer when the leader’s client goes away', async () => {
    const w = deterministicWorker({ tokens: 10, gapMs: 15 });
    const stub = await startStub(w.handler);
    const g = await startGateway([stub.url], { ...CALM, cache: { enabled: true } });
    try {
      const body = { model: MODEL, messages: [{ role: 'user', content: 'impatient' }], max_tokens: 10, temperature: 0, stream: true };
      const leader = await openStream(g.url + CHAT, body);
      await leader.events(3);
      const follower = await openStream(g.url + CHAT, body);
      await follower.events(3);
      await leader.cancel();
      const ft = await follower.done;
      const events = parseSse(ft);
      assert.equal(events.at(-1), '[DONE]');
      assert.equal(streamText(events), Array.from({ length: 10 }, (_, i) => `w${i} `).join(''));
    } finally {
      await g.gw.close();
      await stub.close();
    }
  });

  it('a streamed miss cut mid-way is not stored', async () => {
    const w = deterministicWorker({ tokens: 6, gapMs: 5 });
    const stub = await startStub(w.handler);
    const g = await startGateway([stub.url], { ...CALM, cache: { enabled: true }, retry: { attempts: 0 } });
    try {
      const body = { model: MODEL, messages: [{ role: 'user', content: 'cut' }], max_tokens: 6, temperature: 0, stream: true };
      w.state.breakNext = true;
      w.state.breakAfter = 2;
      const r = await post(g.url + CHAT, body);
      assert.match(r.text, /"error"/);
      const again = await post(g.url + CHAT, body);
      assert.equal(again.headers.get('x-kvgate-cache'), 'miss');
      assert.ok(again.text.endsWith('data: [DONE]\n\n'));
      assert.equal((await post(g.url + CHAT, body)).headers.get('x-kvgate-cache'), 'hit');
    } finally {
      await g.gw.close();
      await stub.close();
    }
  });
});

describe('response cache switched on per tenant', () => {
  it('serves from the cache only for the tenants that turn it on when cache.enabled is false', async () => {
    const w = await startSims(1);
    const g = await startGateway(w.map((s) => s.url), {
      ...CALM,
      tenants: [
        { id: 'on', keys: [{ value: 'sk-on-000001' }], cache: { enabled: true } },
        { id: 'plain', keys: [{ value: 'sk-plain-001' }] },
      ],
    });
    try {
      const on = { authorization: 'Bearer sk-on-000001' };
      const plain = { authorization: 'Bearer sk-plain-001' };
      assert.equal((await post(g.url + CHAT, chat('per tenant'), on)).headers.get('x-kvgate-cache'), 'miss');
      assert.equal((await post(g.url + CHAT, chat('per tenant'), on)).headers.get('x-kvgate-cache'), 'hit');
      assert.equal((await post(g.url + CHAT, chat('per tenant'), plain)).headers.get('x-kvgate-cache'), 'bypass');
    } finally {
      await g.gw.close();
      await Promise.all(w.map((s) => s.close()));
    }
  });
});
