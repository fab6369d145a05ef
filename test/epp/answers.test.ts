/**
 * What kvgate's EPP answers itself, as ImmediateResponses (errors in OpenAI's shape with a dropped
 * reason, response-cache hits), and what it refuses at the protocol level with a gRPC error: bytes
 * that are no ProcessingRequest, messages out of order, a body mode it does not serve. The server
 * keeps serving after each.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { BodySendMode } from '../../src/epp/descriptor.js';
import { proxyExchange, type ExtProcStream } from '../../src/epp/ext-proc-client.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { parseSse } from '../support.js';
import { MODEL, startEpp, startSims, waitFor } from './helpers.js';

let sims: SimWorker[];
let e: Awaited<ReturnType<typeof startEpp>>;

const KEY_A = 'sk-epp-tenant-a';
const KEY_LIMITED = 'sk-epp-tenant-limited';

before(async () => {
  sims = await startSims(2);
  e = await startEpp(
    sims.map((s) => s.url),
    {
      tenants: [
        { id: 'a', keys: [{ value: KEY_A }], models: [MODEL] },
        { id: 'limited', keys: [{ value: KEY_LIMITED }], limits: { requestsPerMinute: 2 } },
      ],
      limits: { maxBodyBytes: 64 * 1024 },
      cache: { enabled: true, store: 'memory' },
    },
  );
  await waitFor(() => e.epp.registry.workers.every((w) => w.snapshot !== null));
});

after(async () => {
  await e.close();
  await Promise.all(sims.map((s) => s.close()));
});

const HEADERS = { ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json' };
const chat = (extra: Record<string, unknown> = {}) => ({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'What is a KV cache?' }], ...extra });

async function ask(body: Buffer | string, headers: Record<string, string> = {}) {
  const s = e.client.open();
  s.requestHeaders({ ...HEADERS, ...headers });
  s.requestBody(Buffer.from(body));
  const a = await s.readAnswer();
  if (a.immediate === null) {
    // Picked: the proxy's response ends the request.
    s.responseHeaders(200, {}, { endOfStream: true });
    await s.next();
    s.end();
  }
  const status = await s.status;
  return { a, status, error: a.immediate && a.immediate.status >= 400 ? JSON.parse(a.immediate.body.toString()).error : null };
}

const auth = (key: string) => ({ authorization: `Bearer ${key}` });

test('refusals are ImmediateResponses with the gateway status, OpenAI error body and a dropped reason', async () => {
  const cases: Array<[string, Buffer | string, Record<string, string>, number, string, string]> = [
    ['bad JSON', '{"model":', auth(KEY_A), 400, 'invalid_json', 'rejected-bad-request'],
    ['missing messages', JSON.stringify({ model: MODEL }), auth(KEY_A), 400, 'invalid_value', 'rejected-bad-request'],
    ['no key', JSON.stringify(chat()), {}, 401, 'invalid_api_key', 'rejected-unauthorized'],
    ['wrong key', JSON.stringify(chat()), auth('sk-nobody'), 401, 'invalid_api_key', 'rejected-unauthorized'],
    ['unknown model', JSON.stringify(chat({ model: 'no-such-model' })), auth(KEY_A), 404, 'model_not_found', 'rejected-model-not-found'],
    ['body too large', JSON.stringify(chat({ messages: [{ role: 'user', content: 'x'.repeat(70_000) }] })), auth(KEY_A), 413, 'request_too_large', 'rejected-bad-request'],
    ['not JSON', 'hello', { ...auth(KEY_A), 'content-type': 'text/plain' }, 415, 'unsupported_media_type', 'rejected-bad-request'],
  ];
  for (const [name, body, headers, status, code, reason] of cases) {
    const { a, status: grpc, error } = await ask(body, headers);
    assert.equal(a.immediate?.status, status, name);
    assert.equal(error.code, code, name);
    assert.deepEqual(Object.keys(error).sort(), ['code', 'message', 'param', 'type'], name);
    assert.equal(a.immediate.headers['x-kvgate-request-dropped-reason'], reason, name);
    assert.equal(a.immediate.headers['content-type'], 'application/json', name);
    assert.equal(a.immediate.headers.connection, undefined, `${name}: the proxy owns the connection`);
    assert.equal(grpc.code, 0, `${name}: the stream ends cleanly`);
  }
  assert.equal(e.epp.router.openCount, 0);
});

test("a tenant's rate limit is answered 429 with Retry-After, retryable, before any worker is picked", async () => {
  const statuses: number[] = [];
  for (let i = 0; i < 3; i++) {
    const x = await proxyExchange(e.client, { path: '/v1/chat/completions', body: Buffer.from(JSON.stringify(chat({ messages: [{ role: 'user', content: `q${i}` }] }))), headers: auth(KEY_LIMITED) });
    statuses.push(x.answer.immediate?.status ?? x.status);
    if (i === 2) {
      assert.equal(x.answer.immediate!.headers['x-kvgate-request-dropped-reason'], 'rejected-rate-limited');
      assert.ok(Number(x.answer.immediate!.headers['retry-after']) >= 1);
      assert.equal(JSON.parse(x.answer.immediate!.body.toString()).error.code, 'rate_limit_exceeded');
    }
  }
  assert.deepEqual(statuses, [200, 200, 429]);
});

test("with tenant keys configured, the client's key is removed from what the proxy passes on", async () => {
  const x = await proxyExchange(e.client, { path: '/v1/chat/completions', body: Buffer.from(JSON.stringify(chat())), headers: auth(KEY_A) });
  assert.equal(x.status, 200);
  assert.deepEqual(x.answer.removeHeaders, ['authorization']);
});

test('a response-cache hit is answered by kvgate itself, as JSON or as the SSE replay, and reaches no worker', async () => {
  const body = chat({ temperature: 0, messages: [{ role: 'user', content: 'Define prefix caching in one line.' }] });
  const first = await proxyExchange(e.client, { path: '/v1/chat/completions', body: Buffer.from(JSON.stringify(body)), headers: auth(KEY_A) });
  assert.equal(first.status, 200);
  const served = JSON.parse(first.upstream.toString());
  await waitFor(async () => (await ask(JSON.stringify(body), auth(KEY_A))).a.immediate !== null, 5_000);
  const workerRequests = async () => {
    let n = 0;
    for (const w of sims) n += sampleTotal(await (await fetch(`${w.url}/metrics`)).text(), 'vllm:request_success_total');
    return n;
  };
  const before = await workerRequests();
  assert.ok(before >= 1, 'the workers count the requests they serve');
  const { a } = await ask(JSON.stringify(body), auth(KEY_A));
  assert.equal(a.immediate!.status, 200);
  assert.equal(a.immediate!.headers['x-kvgate-cache'], 'hit');
  assert.equal(a.endpoint, null, 'no endpoint: the proxy answers the client itself');
  const hit = JSON.parse(a.immediate!.body.toString());
  assert.equal(hit.choices[0].message.content, served.choices[0].message.content);
  const sse = await ask(JSON.stringify({ ...body, stream: true }), auth(KEY_A));
  assert.match(sse.a.immediate!.headers['content-type']!, /^text\/event-stream/);
  const events = parseSse(sse.a.immediate!.body.toString());
  assert.equal(events.at(-1), '[DONE]');
  assert.equal(events.slice(0, -1).map((ev) => ev.choices?.[0]?.delta?.content ?? '').join(''), served.choices[0].message.content);
  assert.equal(await workerRequests(), before, 'no worker saw the hits');
});

/** The sum of every sample of `name` in a /metrics text. */
function sampleTotal(text: string, name: string): number {
  let n = 0;
  for (const line of text.split('\n')) if (line.startsWith(`${name}{`) || line.startsWith(`${name} `)) n += Number(line.slice(line.lastIndexOf(' ') + 1));
  return n;
}

async function refused(send: (s: ExtProcStream) => void): Promise<{ code: number; details: string }> {
  const s = e.client.open();
  send(s);
  await assert.rejects(s.next(), (err: { code?: number }) => typeof err.code === 'number');
  return s.status;
}

test('malformed protobuf and messages out of order end the stream with a gRPC error; the server keeps serving', async () => {
  const ok = async () => {
    const x = await proxyExchange(e.client, { path: '/v1/chat/completions', body: Buffer.from(JSON.stringify(chat())), headers: auth(KEY_A) });
    assert.equal(x.status, 200);
  };
  // Field 2 (request_headers) announces 255 bytes and brings two.
  let st = await refused((s) => s.sendRaw(Buffer.from([0x12, 0xff, 0x01, 0x0a, 0x00])));
  assert.equal(st.code, 3, st.details);
  assert.match(st.details, /malformed ProcessingRequest/);
  await ok();
  st = await refused((s) => s.sendRaw(Buffer.alloc(0)));
  assert.equal(st.code, 3);
  assert.match(st.details, /must carry one of/);
  st = await refused((s) => s.send({ request_body: { body: Buffer.from('{}'), end_of_stream: true } }));
  assert.equal(st.code, 9);
  assert.match(st.details, /out of order: got request_body, expected request_headers/);
  st = await refused((s) => {
    s.requestHeaders({ ...HEADERS, ...auth(KEY_A) });
    s.requestHeaders({ ...HEADERS, ...auth(KEY_A) });
  });
  assert.equal(st.code, 9);
  st = await refused((s) => {
    s.requestHeaders({ ...HEADERS, ...auth(KEY_A) });
    s.responseHeaders(200);
  });
  assert.equal(st.code, 9);
  assert.match(st.details, /got response_headers/);
  st = await refused((s) => s.requestHeaders(HEADERS, { bodyMode: { request: BodySendMode.STREAMED, response: BodySendMode.NONE } }));
  assert.equal(st.code, 12);
  // Out of order after a pick: the pick's reservation is released with the stream.
  const s = e.client.open();
  s.requestHeaders({ ...HEADERS, ...auth(KEY_A) });
  s.requestBody(Buffer.from(JSON.stringify(chat())));
  await s.readAnswer();
  assert.equal(e.epp.router.openCount, 1);
  s.responseBody(Buffer.from('x'), true);
  assert.equal((await s.status).code, 9);
  await waitFor(() => e.epp.router.openCount === 0, 2_000);
  await ok();
});
