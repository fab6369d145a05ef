/** The simulated worker against a client that does not read, and its smaller vLLM surfaces. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startSimWorker } from '../../../src/sim/worker/server.js';
import { parseSse, postStream, waitFor } from './helpers.js';

const MODEL = 'llama-3.1-8b';

function texts(events: any[]): string[] {
  const t: string[] = [];
  for (const e of events) if (e !== '[DONE]') for (const c of e.choices) t[c.index] = (t[c.index] ?? '') + c.text;
  return t;
}

test('a client that stops reading holds back the stream: output is merged, not buffered, and arrives whole', async () => {
  const w = await startSimWorker({ model: MODEL, speed: 200 });
  try {
    const body = { model: MODEL, prompt: 'Tell me a long story', n: 128, max_tokens: 400, temperature: 0, ignore_eos: true, stream: true };
    const free = await postStream(w, '/v1/completions', body);
    const r = await fetch(w.url + '/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const reader = r.body!.getReader();
    const dec = new TextDecoder();
    let raw = dec.decode((await reader.read()).value, { stream: true });
    // The client reads nothing more while the engine finishes every sequence (~4 MB of SSE).
    await waitFor(() => w.stats().inFlight === 0, 30_000);
    const buffered = w.stats().bufferedBytes;
    assert.ok(buffered < 256 * 1024, `${buffered} bytes buffered for a client that does not read`);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      raw += dec.decode(value, { stream: true });
    }
    const paused = parseSse(raw);
    assert.deepEqual(texts(paused), texts(free.events), 'the same text, whatever the pace');
    assert.equal(paused.at(-1), '[DONE]');
    // What was held back went out merged: far fewer chunks than one per token per choice. (Not
    // compared with the free read: a reader slowed by a busy machine gets merged chunks too.)
    const tokens = body.n * body.max_tokens;
    assert.ok(paused.length < tokens / 2, `${paused.length} chunks for ${tokens} tokens`);
  } finally {
    await w.close();
  }
});

test('GET /v1/models/{id} and --api-key as vLLM has them', async () => {
  const w = await startSimWorker({ model: MODEL, speed: 100, apiKey: 'k-123' });
  try {
    const auth = { authorization: 'Bearer k-123' };
    assert.equal((await fetch(w.url + '/v1/models/' + MODEL)).status, 401);
    const ok = await fetch(w.url + '/v1/models/' + MODEL, { headers: auth });
    assert.equal(ok.status, 200);
    assert.equal(((await ok.json()) as any).id, MODEL);
    const nf = await fetch(w.url + '/v1/models/other', { headers: auth });
    assert.equal(nf.status, 404);
    assert.equal((await fetch(w.url + '/health')).status, 200, '/health stays open');
  } finally {
    await w.close();
  }
});

test('LoRA adapters as vLLM serves them: listed with root and parent, accepted as model, named in answers', async () => {
  const w = await startSimWorker({ model: MODEL, speed: 100, adapters: ['sql-lora'] });
  try {
    const list = (await (await fetch(w.url + '/v1/models')).json()) as { data: Array<{ id: string; root: string; parent: string | null; max_model_len?: number }> };
    assert.deepEqual(list.data.map((m) => [m.id, m.root, m.parent, typeof m.max_model_len]), [
      [MODEL, MODEL, null, 'number'],
      ['sql-lora', '/adapters/sql-lora', MODEL, 'undefined'],
    ]);
    assert.equal(((await (await fetch(w.url + '/v1/models/sql-lora')).json()) as { parent: string }).parent, MODEL);
    const post = (body: unknown, path = '/v1/completions') =>
      fetch(w.url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const c = await post({ model: 'sql-lora', prompt: 'SELECT', max_tokens: 2 });
    assert.equal(c.status, 200);
    assert.equal(((await c.json()) as { model: string }).model, 'sql-lora');
    const e = await post({ model: 'sql-lora', input: 'x' }, '/v1/embeddings');
    assert.equal(((await e.json()) as { model: string }).model, 'sql-lora');
    assert.equal((await post({ model: 'other-lora', prompt: 'SELECT', max_tokens: 2 })).status, 404);
  } finally {
    await w.close();
  }
});
