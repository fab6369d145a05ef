/** Client disconnects, pacing and shutdown of the simulated worker. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { startSimWorker } from '../../../src/sim/worker/server.js';
import { metricValue, postJson, scrape, waitFor } from './helpers.js';

const MODEL = 'llama-3.1-8b';
const L = { model_name: MODEL, engine: '0' };

/** Start a long stream, read its first content chunk, and return the reader and abort handle. */
async function openStream(url: string, body: unknown) {
  const ac = new AbortController();
  const r = await fetch(url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: ac.signal,
  });
  assert.equal(r.status, 200);
  const reader = r.body!.getReader();
  let text = '';
  while (!text.includes('"content":"', text.indexOf('"role"') + 30)) {
    const { value, done } = await reader.read();
    if (done) break;
    text += Buffer.from(value).toString('utf8');
  }
  return { ac, reader, text };
}

test('a client disconnect mid-stream aborts the engine request and counts as abort', async () => {
  const w = await startSimWorker({ model: MODEL, speed: 50 });
  try {
    const body = { messages: [{ role: 'user', content: 'tell me everything' }], max_tokens: 2000, ignore_eos: true, stream: true };
    const { ac, text } = await openStream(w.url, body);
    assert.ok(text.includes('"role":"assistant"'));
    assert.equal(w.engine.stats().running, 1);
    ac.abort();
    await waitFor(async () => metricValue(await scrape(w), 'vllm:request_success_total', { ...L, finished_reason: 'abort' }) === 1);
    const metrics = await scrape(w);
    assert.equal(metricValue(metrics, 'vllm_sim:client_disconnects_total', L), 1);
    assert.equal(metricValue(metrics, 'vllm:num_requests_running', L), 0);
    assert.equal(w.engine.stats().running + w.engine.stats().waiting, 0);
    assert.equal(w.engine.stats().finished.abort, 1);
    // Far fewer than 2000 tokens were generated: the engine stopped when the client left.
    assert.ok(w.engine.stats().generationTokens < 500);
    const { computedPromptTokens, ...counts } = w.stats();
    assert.deepEqual(counts, { requests: 1, clientAborts: 1, inFlight: 0, bufferedBytes: 0 });
    assert.ok(computedPromptTokens > 0);
  } finally {
    await w.close();
  }
});

test('a client that gives up on a non-streaming request aborts it too', async () => {
  const w = await startSimWorker({ model: MODEL, speed: 20 });
  try {
    const ac = new AbortController();
    const p = fetch(w.url + '/v1/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'a long answer please', max_tokens: 3000, ignore_eos: true }),
      signal: ac.signal,
    }).catch((e: unknown) => e);
    await waitFor(() => w.engine.stats().running === 1);
    ac.abort();
    await p;
    await waitFor(() => w.stats().clientAborts === 1);
    assert.equal(w.engine.stats().running, 0);
  } finally {
    await w.close();
  }
});

test('steps are paced by the time model divided by speed', async () => {
  const w = await startSimWorker({ model: MODEL, speed: 10 });
  try {
    const t0 = performance.now();
    const r = await postJson(w, '/v1/completions', { prompt: 'pace me', max_tokens: 40, ignore_eos: true });
    const wallMs = performance.now() - t0;
    assert.equal(r.json.usage.completion_tokens, 40);
    const text = await scrape(w);
    const e2eModelled = metricValue(text, 'vllm:e2e_request_latency_seconds_sum', L)! * 1000;
    // 40 decode steps of an 8B model on an H100 take ~0.3 s modelled → ~30 ms at speed 10.
    assert.ok(e2eModelled > 200 && e2eModelled < 600, `modelled e2e ${e2eModelled} ms`);
    assert.ok(wallMs >= e2eModelled / 10 * 0.8, `wall ${wallMs} ms is not faster than modelled/speed`);
    assert.ok(wallMs < e2eModelled / 10 + 200, `wall ${wallMs} ms keeps up with modelled/speed`);
  } finally {
    await w.close();
  }
});

test('close() ends in-flight streams and releases the port', async () => {
  const w = await startSimWorker({ model: MODEL, speed: 5 });
  const body = { messages: [{ role: 'user', content: 'never ending' }], max_tokens: 5000, ignore_eos: true, stream: true };
  const { reader, text: head } = await openStream(w.url, body);
  await w.close();
  let rest = '';
  for (;;) {
    const { value, done } = await reader.read().catch(() => ({ value: undefined, done: true }));
    if (done) break;
    rest += Buffer.from(value).toString('utf8');
  }
  const all = head + rest;
  assert.ok(!all.includes('[DONE]'), 'a cut stream does not claim completion');
  assert.match(all, /"error":\{"message":"The server is shutting down\."/);
  // The port is free again.
  await new Promise<void>((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(w.port, '127.0.0.1', () => s.close(() => resolve()));
  });
  // Closing twice is harmless.
  await w.close();
});
