/** Requests through the gateway against real simulated workers give what the workers give directly. */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Gateway } from '../../src/gateway/gateway.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { MODEL, parseSse, post, startGateway, startSims, startStub, streamText, waitFor, workerStandIn } from './helpers.js';

let sims: SimWorker[];
let gw: Gateway;
let url: string;

before(async () => {
  sims = await startSims(2);
  // Caps raised: the worker's own 400 for a max_tokens past its context is what is tested below.
  ({ gw, url } = await startGateway(sims.map((s) => s.url), { caps: { maxTokens: 100_000_000, maxTotalTokens: 100_000_000 } }));
});

after(async () => {
  await gw.close();
  await Promise.all(sims.map((s) => s.close()));
});

const chat = { model: MODEL, messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Name three rivers.' }], max_tokens: 24, temperature: 0 };
const completion = { model: MODEL, prompt: 'Once upon a time in a quiet village', max_tokens: 20, temperature: 0 };

test('non-streaming chat: same answer as the worker, routing headers set', async () => {
  const direct = await post(sims[0]!.url + '/v1/chat/completions', chat);
  const via = await post(url + '/v1/chat/completions', chat, { 'x-request-id': 'req-123' });
  assert.equal(via.status, 200);
  assert.equal(via.json.choices[0].message.content, direct.json.choices[0].message.content);
  assert.ok(via.json.choices[0].message.content.length > 0);
  assert.match(via.headers.get('x-kvgate-worker')!, /^w[01]$/);
  assert.match(via.headers.get('x-kvgate-prefix-hit')!, /^[01]\.\d{3}$/);
  // kvgate's own id names the response and the upstream request; the client's is echoed apart.
  const id = via.headers.get('x-request-id')!;
  assert.match(id, /^[0-9a-f-]{36}$/);
  assert.equal(via.json.id, `chatcmpl-${id}`);
  assert.equal(via.headers.get('x-client-request-id'), 'req-123');
  assert.equal(via.json.usage.completion_tokens, direct.json.usage.completion_tokens);
});

test('non-streaming completion: same text as the worker', async () => {
  const direct = await post(sims[1]!.url + '/v1/completions', completion);
  const via = await post(url + '/v1/completions', completion);
  assert.equal(via.status, 200);
  assert.equal(via.json.choices[0].text, direct.json.choices[0].text);
});

test('streaming chat: SSE relayed with [DONE], usage passes through with include_usage', async () => {
  const body = { ...chat, stream: true, stream_options: { include_usage: true } };
  const direct = await post(sims[0]!.url + '/v1/chat/completions', body);
  const via = await post(url + '/v1/chat/completions', body);
  assert.equal(via.status, 200);
  assert.match(via.headers.get('content-type')!, /^text\/event-stream/);
  const events = parseSse(via.text);
  assert.equal(events.at(-1), '[DONE]');
  assert.equal(streamText(events), streamText(parseSse(direct.text)));
  const usage = events.find((e) => e !== '[DONE]' && e.usage);
  assert.ok(usage, 'a usage chunk is relayed');
  assert.equal(usage.usage.completion_tokens, 24);
});

test('streaming completion: same text as the worker', async () => {
  const body = { ...completion, stream: true };
  const direct = await post(sims[1]!.url + '/v1/completions', body);
  const via = await post(url + '/v1/completions', body);
  const events = parseSse(via.text);
  assert.equal(events.at(-1), '[DONE]');
  assert.equal(streamText(events), streamText(parseSse(direct.text)));
  assert.ok(streamText(events).length > 0);
});

test('load spreads over both workers and every decision is released', async () => {
  const seen = new Set<string>();
  await Promise.all(
    Array.from({ length: 12 }, async (_, i) => {
      const r = await post(url + '/v1/completions', { ...completion, prompt: `prompt ${i}`, max_tokens: 8 });
      assert.equal(r.status, 200);
      seen.add(r.headers.get('x-kvgate-worker')!);
    }),
  );
  assert.deepEqual([...seen].sort(), ['w0', 'w1']);
  assert.equal(gw.router.openCount, 0);
  for (const w of gw.registry.workers) assert.equal(w.inflightCount, 0);
});

test('GET /v1/models lists the fleet’s model in OpenAI list shape, with the max_model_len its workers report', async () => {
  const direct = (await (await fetch(sims[0]!.url + '/v1/models')).json()) as any;
  const limit = direct.data[0].max_model_len;
  assert.ok(Number.isInteger(limit) && limit > 0);
  await waitFor(() => gw.registry.workers.every((w) => w.maxModelLen === limit));
  const r = await fetch(url + '/v1/models');
  const body = (await r.json()) as any;
  assert.equal(body.object, 'list');
  assert.deepEqual(body.data.map((m: any) => m.id), [MODEL]);
  assert.equal(body.data[0].object, 'model');
  assert.equal(body.data[0].max_model_len, limit);
  const one = (await (await fetch(`${url}/v1/models/${MODEL}`)).json()) as any;
  assert.equal(one.max_model_len, limit);
});

test('a worker that lists no max_model_len leaves it out; beside one that does, the reported one stands', async () => {
  const standIn = await startStub(workerStandIn((_req, _raw, res) => res.end()));
  const lone = await startGateway([standIn.url]);
  const mixed = await startGateway([standIn.url, sims[0]!.url]);
  try {
    const limit = ((await (await fetch(sims[0]!.url + '/v1/models')).json()) as any).data[0].max_model_len;
    await waitFor(() => lone.gw.registry.workers[0]!.maxModelLen === null && mixed.gw.registry.workers.every((w) => w.maxModelLen !== undefined));
    const a = (await (await fetch(lone.url + '/v1/models')).json()) as any;
    assert.equal('max_model_len' in a.data[0], false);
    const b = (await (await fetch(mixed.url + '/v1/models')).json()) as any;
    assert.equal(b.data[0].max_model_len, limit);
    const admin = (await (await fetch(lone.url + '/admin/workers')).json()) as any[];
    assert.equal(admin[0].maxModelLen, null);
  } finally {
    await lone.gw.close();
    await mixed.gw.close();
    await standIn.close();
  }
});

test('worker 4xx (prompt too long): same status and message, in OpenAI’s shape with a string code', async () => {
  const direct = await post(sims[0]!.url + '/v1/completions', { ...completion, max_tokens: 10_000_000 });
  assert.ok(direct.status >= 400 && direct.status < 500, `worker answered ${direct.status}`);
  assert.equal(typeof direct.json.error.code, 'number', 'vLLM’s own shape has a numeric code');
  const via = await post(url + '/v1/completions', { ...completion, max_tokens: 10_000_000 });
  assert.equal(via.status, direct.status);
  assert.deepEqual(Object.keys(via.json), ['error']);
  assert.deepEqual(Object.keys(via.json.error).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(via.json.error.message, direct.json.error.message);
  assert.equal(via.json.error.type, 'invalid_request_error');
  assert.equal(typeof via.json.error.code, 'string');
});

test('the routing policy learns how long answers run from the relayed bytes (usage, or a stream’s events)', async () => {
  const stub = await startStub(
    workerStandIn((_req, raw, res) => {
      const body = JSON.parse(raw);
      if (!body.stream) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: 'x', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage: { prompt_tokens: 30, total_tokens: 37, completion_tokens: 7 } }));
        return;
      }
      // No usage: 20 token events after the role event, each written apart, ending mid-event.
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const ev = (delta: object) => `data: ${JSON.stringify({ id: 'x', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`;
      res.write(ev({ role: 'assistant', content: '' }));
      for (let i = 0; i < 20; i++) {
        const e = ev({ content: `w${i} ` });
        res.write(e.slice(0, -1));
        res.write('\n');
      }
      res.end('data: [DONE]\n\n');
    }),
  );
  const { gw, url } = await startGateway([stub.url]);
  const learned = async () => ((await (await fetch(url + '/admin/workers')).json()) as any[])[0].kvgate.outputLength;
  try {
    assert.deepEqual(await learned(), { classes: 0, unseenRatio: null });
    const ask = (content: string, stream: boolean) =>
      post(url + '/v1/chat/completions', { model: MODEL, stream, max_tokens: 100, messages: [{ role: 'user', content }] });
    const a = await ask('Classify the sentiment of this sentence, in one word: the river was calm and wide today.', false);
    assert.equal(a.status, 200);
    assert.deepEqual(await learned(), { classes: 1, unseenRatio: 0.07 });
    const b = await ask('Write a short poem about mountains in winter, with snow and quiet valleys below them.', true);
    assert.equal(b.status, 200);
    assert.equal(parseSse(b.text).length, 22);
    assert.deepEqual(await learned(), { classes: 2, unseenRatio: 0.135 }, 'the mean of 7/100 and 20/100');
  } finally {
    await gw.close();
    await stub.close();
  }
});
