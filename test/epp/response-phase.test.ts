/**
 * The response direction of kvgate's EPP: the worker's answer passes through the stream (here
 * fetched from a real simulated worker, as the proxy would), is echoed chunk by chunk, and is
 * accounted as the gateway accounts what it relays; whatever ends the stream releases the pick.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { proxyExchange } from '../../src/epp/ext-proc-client.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { parseSse } from '../support.js';
import { endpointOfUrl, metricValue, MODEL, startEpp, startSims, waitFor } from './helpers.js';

// gc() for the test of what a streaming request holds.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

let sims: SimWorker[];
let e: Awaited<ReturnType<typeof startEpp>>;

before(async () => {
  sims = await startSims(2);
  e = await startEpp(sims.map((s) => s.url));
  await waitFor(() => e.epp.registry.workers.every((w) => w.snapshot !== null));
});

after(async () => {
  await e.close();
  await Promise.all(sims.map((s) => s.close()));
});

const metrics = async (): Promise<string> => (await fetch(`${e.metrics}/metrics`)).text();
const released = (): boolean => e.epp.router.openCount === 0 && e.epp.registry.workers.every((w) => w.inflightCount === 0);
const chat = (extra: Record<string, unknown> = {}, content = 'Tell me about paged attention.') =>
  Buffer.from(JSON.stringify({ model: MODEL, max_tokens: 12, messages: [{ role: 'user', content }], ...extra }));

test('a JSON answer is echoed byte for byte and counted: requests, tokens, the reservation released', async () => {
  const before = await metrics();
  const x = await proxyExchange(e.client, { path: '/v1/chat/completions', body: chat() });
  assert.equal(x.status, 200);
  assert.deepEqual(x.echoed, x.upstream);
  assert.equal(x.grpc.code, 0);
  const usage = JSON.parse(x.upstream.toString()).usage;
  assert.equal(usage.completion_tokens, 12);
  const after = await metrics();
  const delta = (name: string, labels: Record<string, string>) => (metricValue(after, name, labels) ?? 0) - (metricValue(before, name, labels) ?? 0);
  assert.equal(delta('kvgate_requests_total', { route: 'chat', model: MODEL, status: '200' }), 1);
  assert.equal(delta('kvgate_generation_tokens_total', { model: MODEL }), 12);
  assert.equal(delta('kvgate_prompt_tokens_total', { model: MODEL }), usage.prompt_tokens);
  assert.equal(delta('kvgate_epp_streams_total', { outcome: 'picked' }), 1);
  assert.ok(released());
});

test('a streamed answer is echoed event by event; its first token gives a TTFT and the router learns it', async () => {
  const before = await metrics();
  const x = await proxyExchange(e.client, { path: '/v1/chat/completions', body: chat({ stream: true, stream_options: { include_usage: true } }) });
  assert.equal(x.status, 200);
  assert.deepEqual(x.echoed, x.upstream);
  const events = parseSse(x.upstream.toString());
  assert.equal(events.at(-1), '[DONE]');
  const after = await metrics();
  const delta = (name: string, labels: Record<string, string>) => (metricValue(after, name, labels) ?? 0) - (metricValue(before, name, labels) ?? 0);
  assert.equal(delta('kvgate_request_ttft_seconds_count', { route: 'chat', model: MODEL }), 1);
  assert.equal(delta('kvgate_generation_tokens_total', { model: MODEL }), 12);
  assert.ok(released());
});

test('a streamed answer gives its worker a recent TPOT, as one the gateway relays does (admission reads it)', async () => {
  // Workers at a third of real time, so that the answer's tokens come one chunk at a time.
  const slow = await startSims(2, { speed: 0.3 });
  const p = await startEpp(slow.map((s) => s.url));
  try {
    await waitFor(() => p.epp.registry.workers.every((w) => w.snapshot !== null));
    const x = await proxyExchange(p.client, { path: '/v1/chat/completions', body: chat({ stream: true, max_tokens: 40, ignore_eos: true }) });
    assert.equal(x.status, 200);
    const now = performance.now();
    const paced = p.epp.registry.workers.map((w) => w.recentTpotMs(now)).filter((t) => t !== undefined);
    assert.equal(paced.length, 1, 'the worker that served it, only');
    assert.ok(paced[0]! > 1 && paced[0]! < 1000, `${paced[0]} ms per token`);
  } finally {
    await p.close();
    await Promise.all(slow.map((s) => s.close()));
  }
});

test('the proxy cancelling the stream mid-response releases the reservation at once', async () => {
  const before = await metrics();
  const s = e.client.open();
  s.requestHeaders({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json' });
  s.requestBody(chat({ stream: true, max_tokens: 500 }));
  const a = await s.readAnswer();
  const w = e.epp.registry.workers.find((x) => endpointOfUrl(x.url) === a.endpoint)!;
  assert.equal(w.inflightCount, 1);
  assert.equal(e.epp.router.openCount, 1);
  s.responseHeaders(200, { 'content-type': 'text/event-stream' });
  await s.next();
  s.responseBody(Buffer.from('data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'), false);
  await s.next();
  s.cancel();
  await waitFor(released, 5_000);
  const after = await metrics();
  assert.equal((metricValue(after, 'kvgate_epp_streams_total', { outcome: 'cancelled' }) ?? 0) - (metricValue(before, 'kvgate_epp_streams_total', { outcome: 'cancelled' }) ?? 0), 1);
  assert.equal((metricValue(after, 'kvgate_requests_total', { route: 'chat', status: '499' }) ?? 0) - (metricValue(before, 'kvgate_requests_total', { route: 'chat', status: '499' }) ?? 0), 1);
});

test('the proxy cancelling while kvgate still reads the body, or closing early after the pick, leaves nothing reserved', async () => {
  const s1 = e.client.open();
  s1.requestHeaders({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json' });
  s1.send({ request_body: { body: chat().subarray(0, 10), end_of_stream: false } });
  s1.cancel();
  const s2 = e.client.open();
  s2.requestHeaders({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json' });
  s2.requestBody(chat());
  await s2.readAnswer();
  assert.equal(e.epp.router.openCount, 1);
  s2.end();
  assert.equal((await s2.status).code, 0);
  await waitFor(released, 5_000);
});

test('when the proxy reports another endpoint served the request, the reservation and the prompt move there', async () => {
  const system = 'You are the archivist of a seed bank. Answer with catalogue numbers and storage temperatures. '.repeat(40);
  const body = (q: string) => Buffer.from(JSON.stringify({ model: MODEL, max_tokens: 4, messages: [{ role: 'system', content: system }, { role: 'user', content: q }] }));
  const s = e.client.open();
  s.requestHeaders({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json' });
  s.requestBody(body('Where is accession 4411?'));
  const a = await s.readAnswer();
  const picked = e.epp.registry.workers.find((x) => endpointOfUrl(x.url) === a.endpoint)!;
  const other = e.epp.registry.workers.find((x) => x !== picked)!;
  const otherEndpoint = endpointOfUrl(other.url);
  // The proxy retried at the other worker and says so with the response headers.
  const r = await fetch(`http://${otherEndpoint}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: a.body });
  s.responseHeaders(r.status, { 'content-type': 'application/json' }, { served: otherEndpoint });
  await s.next();
  assert.equal(picked.inflightCount, 0, 'the pick no longer holds the request');
  assert.equal(other.inflightCount, 1, 'the endpoint that served it does');
  const text = Buffer.from(await r.arrayBuffer());
  s.responseBody(text, true);
  const echo = await s.next();
  assert.deepEqual(Buffer.from(echo!.response_body!.response!.body_mutation!.streamed_response!.body!), text);
  s.end();
  await s.status;
  assert.ok(released());
  assert.equal(metricValue(await metrics(), 'kvgate_epp_served_elsewhere_total', {}), 1);
  // The prompt's blocks are on the worker that served it: the same prefix is picked there.
  for (let i = 0; i < 3; i++) {
    const x = await proxyExchange(e.client, { path: '/v1/chat/completions', body: body(`And accession ${i}?`) });
    assert.equal(x.answer.endpoint, otherEndpoint);
  }
});

/**
 * A streamed chat request through the stream up to its answer's first event: the pick, the
 * worker's whole answer fetched from the picked worker, its headers and first event passed back.
 */
async function streamToFirstToken(body: Buffer) {
  const s = e.client.open();
  s.requestHeaders({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json' });
  s.requestBody(body);
  const a = await s.readAnswer();
  const picked = e.epp.registry.workers.find((x) => endpointOfUrl(x.url) === a.endpoint)!;
  const other = e.epp.registry.workers.find((x) => x !== picked)!;
  const r = await fetch(`${picked.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: a.body });
  const text = Buffer.from(await r.arrayBuffer());
  const first = text.indexOf('\n\n') + 2;
  s.responseHeaders(r.status, { 'content-type': 'text/event-stream' });
  await s.next();
  s.responseBody(text.subarray(0, first), false);
  await s.next();
  return { s, picked, other, text, first };
}

test("a streamed answer lets go of the prompt's token ids at its first token; a served endpoint reported after it still takes the reservation", async () => {
  // The live policy's route, wrapped to see the request it routes (as a plugin would).
  const policy = e.epp.router.policy;
  const route = policy.route.bind(policy);
  let ids: WeakRef<object> | null = null;
  let routed: { promptTokens: ArrayLike<number> } | null = null;
  policy.route = (req, workers, ctx) => {
    if (ids === null) {
      ids = new WeakRef(req.promptTokens as object);
      routed = req;
    }
    return route(req, workers, ctx);
  };
  try {
    const long = 'Catalogue every accession of the seed bank with its storage temperature. '.repeat(300);
    const { s, picked, other, text, first } = await streamToFirstToken(chat({ stream: true }, long));
    const count = routed!.promptTokens.length;
    assert.ok(count > 2000);
    // The answer has begun: its prompt's ids are no longer held, their count is.
    await new Promise((r) => setImmediate(r));
    gc();
    assert.equal(ids!.deref(), undefined, 'the token ids are still reachable while the answer streams');
    assert.equal(routed!.promptTokens.length, count);
    // The proxy reports, with a later chunk, that the other endpoint served it: the reservation
    // moves there, routed from the length and the block hashes kept at the decision.
    const elsewhere = metricValue(await metrics(), 'kvgate_epp_served_elsewhere_total', {}) ?? 0;
    const second = text.indexOf('\n\n', first) + 2;
    s.responseBody(text.subarray(first, second), false, endpointOfUrl(other.url));
    await s.next();
    assert.equal(picked.inflightCount, 0, 'the pick no longer holds the request');
    assert.equal(other.inflightCount, 1, 'the endpoint that served it does');
    assert.equal(metricValue(await metrics(), 'kvgate_epp_served_elsewhere_total', {}), elsewhere + 1);
    s.responseBody(text.subarray(second), true);
    await s.next();
    s.end();
    await s.status;
    assert.ok(released(), 'nothing left reserved');
  } finally {
    policy.route = route;
  }
});

test('a policy that reads a token id when the served endpoint is reported after the first token leaves the request uncharged, not failed', async () => {
  const policy = e.epp.router.policy;
  const route = policy.route.bind(policy);
  let calls = 0;
  policy.route = (req, workers, ctx) => {
    // The re-route reads an id, which is let go by then.
    if (++calls === 2) void req.promptTokens[0];
    return route(req, workers, ctx);
  };
  try {
    const { s, other, text, first } = await streamToFirstToken(chat({ stream: true }));
    s.responseBody(text.subarray(first), true, endpointOfUrl(other.url));
    const echo = await s.next();
    assert.deepEqual(Buffer.from(echo!.response_body!.response!.body_mutation!.streamed_response!.body!), text.subarray(first));
    s.end();
    await s.status;
    assert.equal(calls, 2, 'the served endpoint was routed to');
    assert.ok(released(), 'nothing left reserved');
  } finally {
    policy.route = route;
  }
});
