/** OpenAI's Responses API (`POST /v1/responses`) through the gateway, against simulated vLLM workers. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { MODEL, metricValue, post, startGateway, startSims, startStub } from './helpers.js';

/** A Responses stream's events: [type, data] in order. */
function events(text: string): Array<{ type: string; data: any }> {
  const out: Array<{ type: string; data: any }> = [];
  for (const block of text.split('\n\n')) {
    if (block.trim() === '') continue;
    const type = /^event: (.*)$/m.exec(block)?.[1];
    const data = /^data: (.*)$/m.exec(block)?.[1];
    assert.ok(type !== undefined && data !== undefined, `malformed event: ${block}`);
    out.push({ type, data: JSON.parse(data) });
  }
  return out;
}

test('a response, whole and streamed, through the gateway: routed, relayed, counted', async () => {
  const sims = await startSims(2);
  const { gw, url } = await startGateway(sims.map((s) => s.url));
  try {
    const r = await post(url + '/v1/responses', { model: MODEL, instructions: 'Be brief.', input: 'Name a prime number.', max_output_tokens: 8 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.object, 'response');
    assert.match(r.json.id, /^resp_/);
    assert.match(r.json.status, /^(completed|incomplete)$/);
    const text = r.json.output[0].content[0].text;
    assert.equal(typeof text, 'string');
    assert.ok(r.json.usage.output_tokens >= 1 && r.json.usage.output_tokens <= 8);
    assert.equal(r.json.instructions, 'Be brief.');
    assert.match(r.headers.get('x-kvgate-worker') ?? '', /^w[01]$/);

    const s = await post(url + '/v1/responses', { model: MODEL, input: [{ role: 'user', content: [{ type: 'input_text', text: 'Count to three.' }] }], max_output_tokens: 12, stream: true });
    assert.equal(s.status, 200, s.text);
    assert.match(s.headers.get('content-type') ?? '', /text\/event-stream/);
    const ev = events(s.text);
    assert.deepEqual(ev.slice(0, 4).map((e) => e.type), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    const last = ev.at(-1)!;
    assert.match(last.type, /^response\.(completed|incomplete)$/);
    const deltas = ev.filter((e) => e.type === 'response.output_text.delta').map((e) => e.data.delta).join('');
    assert.equal(deltas, last.data.response.output[0].content[0].text);
    assert.deepEqual(ev.map((e) => e.data.sequence_number), ev.map((_, i) => i));
    assert.equal(metricValue(await (await fetch(url + '/metrics')).text(), 'kvgate_requests_total', { route: 'responses', model: MODEL, status: '200' }), 2);
  } finally {
    await gw.close();
    for (const s of sims) await s.close();
  }
});

test('a continuation (previous_response_id) goes to the worker that produced the response', async () => {
  const sims = await startSims(3);
  const { gw, url } = await startGateway(sims.map((s) => s.url));
  try {
    const first = await post(url + '/v1/responses', { model: MODEL, input: 'Start a story.', max_output_tokens: 4 });
    assert.equal(first.status, 200, first.text);
    const home = first.headers.get('x-kvgate-worker');
    const streamed = await post(url + '/v1/responses', { model: MODEL, input: 'Start another.', max_output_tokens: 4, stream: true });
    const streamedId = events(streamed.text)[0]!.data.response.id as string;
    const streamedHome = streamed.headers.get('x-kvgate-worker');
    const seen = new Set<string>();
    for (let i = 0; i < 12; i++) {
      // Distinct inputs: nothing but the pin keeps them on one worker.
      const r = await post(url + '/v1/responses', { model: MODEL, input: `Go on, part ${i} ${'x'.repeat(i * 40)}`, max_output_tokens: 2, previous_response_id: first.json.id });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers.get('x-kvgate-worker'), home);
      const t = await post(url + '/v1/responses', { model: MODEL, input: `And ${i}`, max_output_tokens: 2, previous_response_id: streamedId });
      assert.equal(t.headers.get('x-kvgate-worker'), streamedHome);
      // A response this gateway never saw is routed as any request.
      const u = await post(url + '/v1/responses', { model: MODEL, input: `Other ${i} ${'y'.repeat(i * 50)}`, max_output_tokens: 2, previous_response_id: `resp_unknown${i}` });
      assert.equal(u.status, 200, u.text);
      seen.add(u.headers.get('x-kvgate-worker')!);
    }
    assert.ok(seen.size >= 2, `unpinned requests all went to ${[...seen]}`);
  } finally {
    await gw.close();
    for (const s of sims) await s.close();
  }
});

test('bad Responses requests are refused in OpenAI’s shape, naming the field', async () => {
  const sims = await startSims(1);
  const { gw, url } = await startGateway(sims.map((s) => s.url), { caps: { maxTokens: 100 } });
  try {
    const cases: Array<[unknown, number, string | null, string]> = [
      [{ model: MODEL }, 400, 'input', 'invalid_value'],
      [{ model: MODEL, input: [] }, 400, 'input', 'invalid_value'],
      [{ model: MODEL, input: 'x', max_output_tokens: 0 }, 400, 'max_output_tokens', 'invalid_value'],
      [{ model: MODEL, input: 'x', max_output_tokens: 1000 }, 400, 'max_output_tokens', 'limit_exceeded'],
      [{ model: 'nope', input: 'x' }, 404, 'model', 'model_not_found'],
    ];
    for (const [body, status, param, code] of cases) {
      const r = await post(url + '/v1/responses', body);
      assert.equal(r.status, status, `${JSON.stringify(body)}: ${r.text}`);
      assert.equal(r.json.error.param, param, JSON.stringify(body));
      assert.equal(r.json.error.code, code, JSON.stringify(body));
      assert.equal(typeof r.json.error.message, 'string');
    }
    const get = await fetch(url + '/v1/responses');
    assert.equal(get.status, 405);
  } finally {
    await gw.close();
    for (const s of sims) await s.close();
  }
});

/** A worker stand-in that stores its responses, as vLLM does with its store on. */
function storingWorker(name: string): (req: IncomingMessage, res: ServerResponse) => void {
  const stored = new Set<string>();
  let n = 0;
  const json = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  return (req, res) => {
    const url = req.url ?? '/';
    const m = /^\/v1\/responses\/([^/?]+)(\/cancel)?(\?.*)?$/.exec(url);
    if (m) {
      if (!stored.has(m[1]!)) return json(res, 404, { error: { message: `Response with id '${m[1]}' not found.`, type: 'NotFoundError', param: null, code: 404 } });
      if (m[2]) return json(res, 200, { id: m[1], object: 'response', status: 'cancelled', from: name });
      if (m[3]?.includes('stream=true')) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        return res.end(`event: response.completed\ndata: ${JSON.stringify({ type: 'response.completed', response: { id: m[1], from: name } })}\n\n`);
      }
      return json(res, 200, { id: m[1], object: 'response', status: 'completed', from: name });
    }
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      return res.end(url === '/metrics' ? '' : 'ok');
    }
    req.resume();
    req.on('end', () => {
      const id = `resp_${name}_${n++}`;
      stored.add(id);
      json(res, 200, { id, object: 'response', status: 'completed', output: [], usage: { input_tokens: 3, output_tokens: 1, total_tokens: 4 }, user: null });
    });
  };
}

test('a stored response is retrieved and cancelled at the worker that holds it', async () => {
  const stubs = await Promise.all(['a', 'b', 'c'].map(async (name) => startStub(storingWorker(name))));
  const { gw, url } = await startGateway(stubs.map((s) => s.url));
  try {
    const made: Array<{ id: string; worker: string }> = [];
    for (let i = 0; i < 6; i++) {
      const r = await post(url + '/v1/responses', { model: MODEL, input: `request ${i} ${'z'.repeat(i * 30)}`, max_output_tokens: 1 });
      assert.equal(r.status, 200, r.text);
      made.push({ id: r.json.id, worker: (r.json.id as string).split('_')[1]! });
    }
    for (const m of made) {
      const g = await fetch(`${url}/v1/responses/${m.id}`);
      assert.equal(g.status, 200);
      assert.equal(((await g.json()) as { from: string }).from, m.worker);
      const s = await fetch(`${url}/v1/responses/${m.id}?stream=true`);
      assert.match(s.headers.get('content-type') ?? '', /text\/event-stream/);
      assert.match(await s.text(), new RegExp(`"from":"${m.worker}"`));
      const c = await fetch(`${url}/v1/responses/${m.id}/cancel`, { method: 'POST' });
      assert.equal(((await c.json()) as { status: string }).status, 'cancelled');
    }
    const unknown = await fetch(`${url}/v1/responses/resp_never_made`);
    assert.equal(unknown.status, 404);
    const body = (await unknown.json()) as { error: { code: string; param: string } };
    assert.equal(body.error.code, 'response_not_found');
    assert.equal(body.error.param, 'response_id');
    assert.equal((await fetch(`${url}/v1/responses/${made[0]!.id}`, { method: 'DELETE' })).status, 405);
    assert.equal((await fetch(`${url}/v1/responses/${made[0]!.id}/cancel`)).status, 405);
    assert.equal((await fetch(`${url}/v1/responses/x/y/z`)).status, 404);
    assert.match(unknown.headers.get('x-request-id') ?? '', /^[0-9a-f-]{36}$/);
    // Counted as requests are, by what they were: 12 retrievals and 6 cancels at the holding
    // workers' model, the unknown id (and the DELETE) with no model, the bad path as a lookup.
    await new Promise((r) => setTimeout(r, 20)); // the last answers' accounting runs after their end
    const metrics = await (await fetch(url + '/metrics')).text();
    const count = (route: string, model: string, status: string): number | undefined => metricValue(metrics, 'kvgate_requests_total', { route, model, status });
    assert.equal(count('responses_retrieve', MODEL, '200'), 12);
    assert.equal(count('responses_cancel', MODEL, '200'), 6);
    assert.equal(count('responses_retrieve', 'unknown', '404'), 1);
    assert.equal(count('responses_retrieve', 'unknown', '405'), 1);
    assert.equal(count('responses_cancel', 'unknown', '405'), 1);
    assert.equal(count('responses_lookup', 'unknown', '404'), 1);
  } finally {
    await gw.close();
    for (const s of stubs) await s.close();
  }
});

test("a tenant can neither retrieve, cancel nor continue another tenant's response", async () => {
  let posts = 0;
  const store = storingWorker('a');
  const stub = await startStub((req, res) => {
    if (req.method === 'POST' && req.url === '/v1/responses') posts++;
    store(req, res);
  });
  const A = { authorization: 'Bearer sk-tenant-a1' };
  const B = { authorization: 'Bearer sk-tenant-b1' };
  const { gw, url } = await startGateway([stub.url], {
    tenants: [
      { id: 'a', keys: [{ value: 'sk-tenant-a1' }] },
      { id: 'b', keys: [{ value: 'sk-tenant-b1' }] },
    ],
  });
  try {
    const made = await post(url + '/v1/responses', { model: MODEL, input: 'A private conversation.', max_output_tokens: 1 }, A);
    assert.equal(made.status, 200, made.text);
    const id = made.json.id as string;
    for (const [path, method] of [[`/v1/responses/${id}`, 'GET'], [`/v1/responses/${id}?stream=true`, 'GET'], [`/v1/responses/${id}/cancel`, 'POST']] as const) {
      const r = await fetch(url + path, { method, headers: B });
      assert.equal(r.status, 404, `${method} ${path}`);
      const e = ((await r.json()) as { error: { code: string; param: string } }).error;
      assert.deepEqual([e.code, e.param], ['response_not_found', 'response_id']);
    }
    const before = posts;
    const stolen = await post(url + '/v1/responses', { model: MODEL, input: 'Go on.', max_output_tokens: 1, previous_response_id: id }, B);
    assert.equal(stolen.status, 404, stolen.text);
    assert.deepEqual([stolen.json.error.code, stolen.json.error.param], ['response_not_found', 'previous_response_id']);
    assert.equal(stolen.json.error.message, `Response with id '${id}' not found.`);
    assert.equal(posts, before, 'no worker was asked');
    // Its own tenant still can.
    assert.equal((await fetch(`${url}/v1/responses/${id}`, { headers: A })).status, 200);
    assert.equal((await post(url + '/v1/responses', { model: MODEL, input: 'Go on.', max_output_tokens: 1, previous_response_id: id }, A)).status, 200);
    // While its worker is drained, a continuation is told so, not sent where the response is not.
    gw.registry.get('w0')!.draining = true;
    const drained = await post(url + '/v1/responses', { model: MODEL, input: 'Go on.', max_output_tokens: 1, previous_response_id: id }, A);
    assert.equal(drained.status, 503, drained.text);
    assert.equal(drained.json.error.code, 'no_worker_available');
    assert.match(drained.json.error.message, /holds response .* \(w0\) is not taking requests now \(draining\)/);
    assert.ok(Number(drained.headers.get('retry-after')) >= 1);
  } finally {
    await gw.close();
    await stub.close();
  }
});

test('a Responses stream’s TTFT and the router’s first token come with its first output, not with the response’s announcement', async () => {
  // Real-time workers: an 8,000-token input takes a visible time to prefill, and vLLM (as the
  // simulated worker) announces the response before it starts.
  const sims = await startSims(1, { speed: 1 });
  const lines: any[] = [];
  const { Writable } = await import('node:stream');
  const { createLogger } = await import('../../src/telemetry/logger.js');
  const sink = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l));
      cb();
    },
  });
  const { gw, url } = await startGateway(sims.map((s) => s.url), {}, { logger: createLogger({ level: 'info', destination: sink }) });
  try {
    const input = Array.from({ length: 8000 }, (_, i) => `w${i % 997}`).join(' ');
    const t0 = performance.now();
    const res = await fetch(url + '/v1/responses', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, input, max_output_tokens: 4, stream: true }),
    });
    assert.equal(res.status, 200);
    let text = '';
    let createdAt = -1;
    let outputAt = -1;
    let prefillPendingAtAnnouncement = -1;
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
      if (createdAt < 0 && text.includes('event: response.created')) {
        createdAt = performance.now() - t0;
        // The router still counts the prompt as waiting for its prefill.
        prefillPendingAtAnnouncement = gw.registry.workers[0]!.inflightPrefillTokens;
      }
      if (outputAt < 0 && text.includes('event: response.output_item.added')) outputAt = performance.now() - t0;
    }
    assert.ok(createdAt >= 0 && outputAt >= 0, text.slice(0, 300));
    const gap = outputAt - createdAt;
    assert.ok(gap > 30, `the prefill between announcement and first output took ${gap.toFixed(1)} ms`);
    assert.ok(prefillPendingAtAnnouncement >= 8000, `prefill tokens the router counted at the announcement: ${prefillPendingAtAnnouncement}`);
    assert.equal(gw.registry.workers[0]!.inflightPrefillTokens, 0);
    await new Promise((r) => setTimeout(r, 50));
    const line = lines.find((l) => l.msg === 'request' && l.route === 'responses')!;
    // The gateway's TTFT is the time to the first output (at least most of the prefill's gap),
    // not to the announcement that came first.
    assert.ok(line.ttftMs > createdAt + gap / 2, `TTFT ${line.ttftMs} ms; announced at ${createdAt.toFixed(1)}, first output at ${outputAt.toFixed(1)}`);
    assert.ok(line.ttftMs <= outputAt + 5, `TTFT ${line.ttftMs} ms, first output seen at ${outputAt.toFixed(1)}`);
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});

test('after a gateway restart, a continuation whose owner is not known is refused, not sent to the worker that still holds it', async () => {
  let posts = 0;
  const store = storingWorker('a');
  const stub = await startStub((req, res) => {
    if (req.method === 'POST' && req.url === '/v1/responses') posts++;
    store(req, res);
  });
  const A = { authorization: 'Bearer sk-tenant-a1' };
  const B = { authorization: 'Bearer sk-tenant-b1' };
  const tenants = [
    { id: 'a', keys: [{ value: 'sk-tenant-a1' }] },
    { id: 'b', keys: [{ value: 'sk-tenant-b1' }] },
  ];
  const first = await startGateway([stub.url], { tenants });
  let made: Awaited<ReturnType<typeof post>>;
  try {
    made = await post(first.url + '/v1/responses', { model: MODEL, input: 'A private conversation.', max_output_tokens: 1 }, A);
    assert.equal(made.status, 200, made.text);
  } finally {
    await first.gw.close();
  }
  // A new gateway process over the same worker: it has not seen the response.
  const { gw, url } = await startGateway([stub.url], { tenants });
  try {
    const id = made.json.id as string;
    const before = posts;
    for (const who of [B, A]) {
      const r = await post(url + '/v1/responses', { model: MODEL, input: 'Go on.', max_output_tokens: 1, previous_response_id: id }, who);
      assert.equal(r.status, 404, r.text);
      assert.deepEqual([r.json.error.code, r.json.error.param, r.json.error.type], ['response_not_found', 'previous_response_id', 'invalid_request_error']);
      assert.equal(r.json.error.message, `Response with id '${id}' not found.`);
    }
    assert.equal(posts, before, 'no worker was asked');
    // A fresh conversation still works.
    assert.equal((await post(url + '/v1/responses', { model: MODEL, input: 'Hello again.', max_output_tokens: 1 }, A)).status, 200);
  } finally {
    await gw.close();
    await stub.close();
  }
});
