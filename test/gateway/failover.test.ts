/** Workers dying before and during requests, clients leaving mid-stream. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODEL, metricValue, parseSse, post, startGateway, startSims, startStub, waitFor } from './helpers.js';

const quietFleet = { health: { intervalMs: 60_000 }, scrape: { intervalMs: 60_000 } };

/** Read a streaming response until `until` holds for the text so far; returns the reader and text. */
async function readUntil(body: ReadableStream<Uint8Array>, until: (text: string) => boolean) {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let text = '';
  while (!until(text)) {
    const { value, done } = await reader.read();
    if (done) break;
    text += dec.decode(value, { stream: true });
  }
  return { reader, text, dec };
}

async function readRest(r: Awaited<ReturnType<typeof readUntil>>): Promise<string> {
  let text = r.text;
  for (;;) {
    const { value, done } = await r.reader.read();
    if (done) return text;
    text += r.dec.decode(value, { stream: true });
  }
}

test('a worker that died before the request is retried on another', async () => {
  const sims = await startSims(2);
  const { gw, url } = await startGateway(sims.map((s) => s.url), { ...quietFleet, policy: { name: 'round-robin' } });
  try {
    await sims[0]!.close();
    for (let i = 0; i < 4; i++) {
      const r = await post(url + '/v1/completions', { model: MODEL, prompt: `hello ${i}`, max_tokens: 4 });
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('x-kvgate-worker'), 'w1');
    }
    const m = await (await fetch(url + '/metrics')).text();
    assert.ok((metricValue(m, 'kvgate_upstream_failures_total', { worker: 'w0', reason: 'connect' }) ?? 0) >= 1);
    assert.equal(gw.router.openCount, 0);
  } finally {
    await gw.close();
    await sims[1]!.close();
  }
});

test('a worker that crashes mid-stream: the client gets an SSE error event and the stream ends without [DONE]', async () => {
  const stub = await startStub((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n');
    // Half an event, then the process "dies".
    res.write('data: {"choices":[{"ind');
    setTimeout(() => res.socket?.destroy(), 30);
  });
  const { gw, url } = await startGateway([stub.url], quietFleet);
  try {
    const r = await post(url + '/v1/chat/completions', { model: MODEL, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r.status, 200);
    const blocks = r.text.split('\n\n').filter((b) => b.trim() !== '');
    const last = JSON.parse(blocks.at(-1)!.slice('data: '.length));
    assert.equal(last.error.code, 'upstream_stream_error');
    assert.equal(last.error.type, 'upstream_error');
    assert.ok(!r.text.includes('[DONE]'));
    const m = await (await fetch(url + '/metrics')).text();
    assert.equal(metricValue(m, 'kvgate_requests_total', { route: 'chat', model: MODEL, status: '502' }), 1);
    assert.equal(gw.router.openCount, 0);
  } finally {
    await gw.close();
    await stub.close();
  }
});

test('a simulated worker shut down mid-stream: the stream ends with an error event, no hang', async () => {
  const sims = await startSims(1, { speed: 5 });
  const { gw, url } = await startGateway([sims[0]!.url], quietFleet);
  try {
    const res = await fetch(url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, stream: true, messages: [{ role: 'user', content: 'tell me a long story' }], max_tokens: 4000, ignore_eos: true }),
    });
    assert.equal(res.status, 200);
    const partial = await readUntil(res.body!, (t) => t.split('\n\n').length > 3);
    await sims[0]!.close();
    const text = await readRest(partial);
    const events = parseSse(text);
    const last = events.at(-1);
    assert.ok(last === '[DONE]' ? events.some((e) => e?.error) : last.error, 'an error event reaches the client');
    assert.equal(gw.router.openCount, 0);
  } finally {
    await gw.close();
  }
});

test('a client that disconnects mid-stream aborts the request at the worker', async () => {
  const sims = await startSims(1, { speed: 5 });
  const { gw, url } = await startGateway([sims[0]!.url], quietFleet);
  try {
    const ac = new AbortController();
    const res = await fetch(url + '/v1/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, stream: true, prompt: 'a very long story begins', max_tokens: 4000, ignore_eos: true }),
      signal: ac.signal,
    });
    await readUntil(res.body!, (t) => t.split('\n\n').length > 3);
    ac.abort();
    await waitFor(async () => {
      const m = await (await fetch(sims[0]!.url + '/metrics')).text();
      return (metricValue(m, 'vllm:request_success_total', { finished_reason: 'abort' }) ?? 0) >= 1;
    }, 5000);
    await waitFor(() => gw.router.openCount === 0);
    await waitFor(async () => {
      const m = await (await fetch(url + '/metrics')).text();
      return metricValue(m, 'kvgate_requests_total', { route: 'completions', model: MODEL, status: '499' }) === 1;
    });
    assert.equal(sims[0]!.stats().inFlight, 0);
  } finally {
    await gw.close();
    await sims[0]!.close();
  }
});

test('a request waiting on a worker that fails its health probes is retried elsewhere, not left to its deadline', async () => {
  let healthy = true;
  const hung = await startStub((req, res) => {
    if (req.url === '/health') {
      res.writeHead(healthy ? 200 : 503);
      res.end();
      return;
    }
    req.resume(); // accepts the request, never answers
  });
  const sims = await startSims(1);
  const { gw, url } = await startGateway([hung.url, sims[0]!.url], {
    policy: { name: 'round-robin' },
    health: { intervalMs: 150, failuresToMarkDown: 2 },
    scrape: { intervalMs: 60_000 },
  });
  try {
    const t0 = Date.now();
    const pending = post(url + '/v1/completions', { model: MODEL, prompt: 'hello', max_tokens: 3 });
    await waitFor(() => gw.registry.workers[0]!.inflightCount === 1);
    healthy = false;
    const r = await pending;
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('x-kvgate-worker'), 'w1');
    assert.ok(Date.now() - t0 < 3000);
    const m = await (await fetch(url + '/metrics')).text();
    assert.equal(metricValue(m, 'kvgate_upstream_failures_total', { worker: 'w0', reason: 'worker_down' }), 1);
  } finally {
    await gw.close();
    await hung.close();
    await sims[0]!.close();
  }
});

test('a worker that fails mid-JSON: the client’s body is cut, never passed off as complete', async () => {
  const stub = await startStub((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '200' });
    res.write('{"id":"cmpl-1","choices":[{"text":"Hel');
    setTimeout(() => res.socket?.destroy(), 30);
  });
  const { gw, url } = await startGateway([stub.url], quietFleet);
  try {
    const res = await fetch(url + '/v1/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: 'hello', max_tokens: 4 }),
    });
    assert.equal(res.status, 200);
    await assert.rejects(res.text());
    await waitFor(async () => {
      const m = await (await fetch(url + '/metrics')).text();
      return metricValue(m, 'kvgate_requests_total', { route: 'completions', model: MODEL, status: '502' }) === 1;
    });
    const m = await (await fetch(url + '/metrics')).text();
    assert.equal(metricValue(m, 'kvgate_upstream_failures_total', { worker: 'w0', reason: 'stream_error' }), 1);
    assert.equal(gw.router.openCount, 0);
  } finally {
    await gw.close();
    await stub.close();
  }
});
