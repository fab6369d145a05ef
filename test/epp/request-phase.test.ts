/**
 * The request direction of kvgate's EPP, driven message by message as Envoy's ext_proc filter
 * drives it (FULL_DUPLEX_STREAMED unless a test says otherwise), against real simulated workers:
 * what is answered, in which order, and the body passed on byte for byte.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { BodySendMode } from '../../src/epp/descriptor.js';
import { MAX_BODY_CHUNK } from '../../src/epp/stream.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { endpointOfUrl, MODEL, startEpp, startSims, waitFor } from './helpers.js';

let sims: SimWorker[];
let e: Awaited<ReturnType<typeof startEpp>>;
let endpoints: string[];

before(async () => {
  sims = await startSims(3);
  e = await startEpp(sims.map((s) => s.url));
  endpoints = sims.map((s) => endpointOfUrl(s.url));
  await waitFor(() => e.epp.registry.workers.every((w) => w.snapshot !== null));
});

after(async () => {
  await e.close();
  await Promise.all(sims.map((s) => s.close()));
});

const POST = { ':method': 'POST', ':path': '/v1/chat/completions', ':authority': 'gw.test', 'content-type': 'application/json' };

/** A chat request whose JSON body is exactly `bytes` long (the padding is in the user message). */
function chatBody(bytes: number): Buffer {
  const base = JSON.stringify({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: '' }] });
  const pad = 'lorem ipsum '.repeat(Math.ceil(bytes / 12)).slice(0, bytes - base.length);
  const b = Buffer.from(JSON.stringify({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: pad }] }));
  assert.equal(b.length, bytes);
  return b;
}

/** Releases what a pick reserved: the proxy's response (headers with end_of_stream), then the stream closed. */
async function finishStream(s: ReturnType<typeof e.client.open>): Promise<void> {
  s.responseHeaders(200, {}, { endOfStream: true });
  await s.next();
  s.end();
  assert.equal((await s.status).code, 0);
}

test('headers, then the body in chunks: nothing is answered until the last chunk; then the pick, then the body as it came', async () => {
  const s = e.client.open();
  const body = chatBody(1024);
  s.requestHeaders(POST);
  s.send({ request_body: { body: body.subarray(0, 300), end_of_stream: false } });
  s.send({ request_body: { body: body.subarray(300, 700), end_of_stream: false } });
  // A picker that answered before the whole body would be answering on a partial prompt.
  await assert.rejects(s.next(300), /no ext_proc answer/);
  s.send({ request_body: { body: body.subarray(700), end_of_stream: true } });
  const a = await s.readAnswer();
  assert.equal(a.immediate, null);
  assert.ok(endpoints.includes(a.endpoint!), `picked ${a.endpoint}, one of ${endpoints.join(', ')}`);
  assert.equal(a.metadataEndpoint, a.endpoint, 'the dynamic metadata names the same endpoint as the header');
  assert.equal(a.clearRouteCache, true);
  assert.equal(a.setHeaders['content-length'], undefined, 'an unchanged body keeps its Content-Length');
  // The first message answers the request headers; the body follows as streamed responses.
  assert.ok(a.messages[0]!.request_headers, 'the pick is the request-headers response');
  assert.ok(a.messages.slice(1).every((m) => m.request_body?.response?.body_mutation?.streamed_response), 'then only streamed body chunks');
  assert.deepEqual(a.body, body);
  assert.equal(a.chunks.length, 1);
  const picked = e.epp.registry.workers.find((w) => endpointOfUrl(w.url) === a.endpoint)!;
  assert.equal(picked.inflightCount, 1, 'the pick is reserved until the response ends');
  await finishStream(s);
  assert.equal(picked.inflightCount, 0);
});

test('a 300 KB body is passed on whole, re-chunked within 62,000 bytes, end_of_stream on the last chunk only', async () => {
  const s = e.client.open();
  const body = chatBody(300 * 1024);
  s.requestHeaders(POST);
  s.requestBody(body, 100_000);
  const a = await s.readAnswer();
  assert.ok(a.endpoint);
  assert.deepEqual(a.body, body);
  assert.equal(a.chunks.length, Math.ceil(body.length / MAX_BODY_CHUNK));
  assert.ok(a.chunks.every((c) => c.length <= MAX_BODY_CHUNK && c.length > 0));
  const eos = a.messages.map((m) => m.request_body?.response?.body_mutation?.streamed_response?.end_of_stream === true);
  assert.deepEqual(eos.slice(1), [...Array(a.chunks.length - 1).fill(false), true]);
  await finishStream(s);
});

test('a request with no body (GET /v1/models) is picked at its headers, by load, and answered with the headers response alone', async () => {
  const s = e.client.open();
  s.requestHeaders({ ':method': 'GET', ':path': '/v1/models', ':authority': 'gw.test' }, { endOfStream: true });
  const a = await s.readAnswer(false);
  assert.ok(endpoints.includes(a.endpoint!));
  assert.equal(a.messages.length, 1);
  assert.ok(a.messages[0]!.request_headers);
  await assert.rejects(s.next(200), /no ext_proc answer/, 'no body chunk follows');
  await finishStream(s);
});

test('subset hints: only the listed endpoints are picked, as a list or a comma-separated string; absent means any', async () => {
  const pick = async (subset: string[] | string | undefined): Promise<string> => {
    const s = e.client.open();
    s.requestHeaders(POST, { subset });
    s.requestBody(chatBody(600));
    const a = await s.readAnswer();
    assert.equal(a.immediate, null, JSON.stringify(a.immediate));
    await finishStream(s);
    return a.endpoint!;
  };
  for (let i = 0; i < 4; i++) assert.equal(await pick([endpoints[2]!]), endpoints[2]);
  for (let i = 0; i < 4; i++) assert.ok([endpoints[0], endpoints[1]].includes(await pick(`${endpoints[0]}, ${endpoints[1]}`)));
  // Unknown endpoints beside a known one are ignored.
  assert.equal(await pick(['10.255.0.1:8000', endpoints[1]!]), endpoints[1]);
  const seen = new Set<string>();
  for (let i = 0; i < 12; i++) seen.add(await pick(undefined));
  assert.ok(seen.size >= 1 && [...seen].every((x) => endpoints.includes(x)));
});

test('an empty subset hint, or one naming no endpoint kvgate knows, is answered 503 with the dropped reason', async () => {
  for (const subset of [[], '', ['10.255.0.1:8000', '10.255.0.2:8000']] as Array<string[] | string>) {
    const s = e.client.open();
    s.requestHeaders(POST, { subset });
    s.requestBody(chatBody(600));
    const a = await s.readAnswer();
    assert.equal(a.immediate?.status, 503, `subset ${JSON.stringify(subset)}`);
    assert.equal(a.immediate.headers['x-kvgate-request-dropped-reason'], 'rejected-no-endpoints');
    assert.equal(a.immediate.headers['content-type'], 'application/json');
    const err = JSON.parse(a.immediate.body.toString()).error;
    assert.equal(err.code, 'no_endpoint_in_subset');
    assert.deepEqual(Object.keys(err).sort(), ['code', 'message', 'param', 'type']);
    assert.equal((await s.status).code, 0, 'an ImmediateResponse closes the stream cleanly');
  }
  assert.ok(e.epp.registry.workers.every((w) => w.inflightCount === 0), 'nothing stays reserved');
});

test('request trailers end the body: the last body chunk then carries no end_of_stream and the trailers are answered', async () => {
  const s = e.client.open();
  const body = chatBody(2048);
  s.requestHeaders(POST);
  s.requestBody(body, 1000, false);
  s.requestTrailers({ 'x-trailer': '1' });
  const msgs = [];
  for (;;) {
    const m = (await s.next())!;
    msgs.push(m);
    if (m.request_trailers) break;
  }
  assert.ok(msgs[0]!.request_headers?.response?.header_mutation, 'the pick first');
  const chunks = msgs.slice(1, -1).map((m) => m.request_body!.response!.body_mutation!.streamed_response!);
  assert.ok(chunks.every((c) => c.end_of_stream !== true));
  assert.deepEqual(Buffer.concat(chunks.map((c) => Buffer.from(c.body ?? []))), body);
  await finishStream(s);
});

test('BUFFERED mode: the headers are answered at once, the pick comes in the body response', async () => {
  const s = e.client.open();
  const body = chatBody(5000);
  s.requestHeaders(POST, { bodyMode: { request: BodySendMode.BUFFERED, response: BodySendMode.BUFFERED } });
  const first = await s.next();
  assert.ok(first?.request_headers, 'a CONTINUE for the headers, before the body is sent');
  assert.equal(first.request_headers.response?.header_mutation ?? null, null);
  s.send({ request_body: { body, end_of_stream: true } });
  const a = await s.readAnswer();
  assert.ok(endpoints.includes(a.endpoint!));
  assert.ok(a.messages[0]!.request_body, 'the pick is the body response');
  assert.equal(a.metadataEndpoint, a.endpoint);
  s.responseHeaders(200, {});
  assert.ok((await s.next())?.response_headers);
  s.responseBody(Buffer.from('{"choices":[]}'), true);
  const rb = await s.next();
  assert.ok(rb?.response_body, 'BUFFERED: a body response, no streamed echo');
  assert.equal(rb.response_body.response?.body_mutation ?? null, null);
  s.end();
  assert.equal((await s.status).code, 0);
});
