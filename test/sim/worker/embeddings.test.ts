/** The simulated worker's /v1/embeddings: vLLM's shape, vectors from the tokens, engine time, errors. */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { ServerResponse } from 'node:http';
import { embed, EMBEDDING_DIM, writeEmbeddingsAnswer } from '../../../src/sim/worker/embeddings.js';
import { startSimWorker, type SimWorker } from '../../../src/sim/worker/server.js';
import { estimateTokenizer } from '../../../src/tokenizer/index.js';
import { metricValue, postJson, scrape } from './helpers.js';

const MODEL = 'llama-3.1-8b';
let w: SimWorker;

before(async () => {
  w = await startSimWorker({ model: MODEL, speed: 200, maxModelLen: 512 });
});

after(async () => {
  await w.close();
});

test('answers vLLM shape: one unit vector per input, in order, with prompt-only usage', async () => {
  const input = ['alpha beta gamma', 'delta'];
  const { status, json } = await postJson(w, '/v1/embeddings', { model: MODEL, input });
  assert.equal(status, 200, JSON.stringify(json));
  assert.match(json.id, /^embd-/);
  assert.equal(json.object, 'list');
  assert.equal(json.model, MODEL);
  assert.equal(json.data.length, 2);
  const first = estimateTokenizer.encode('alpha beta gamma');
  assert.deepEqual(json.data[0].embedding, Array.from(embed(first)));
  const second = estimateTokenizer.encode('delta');
  assert.deepEqual(json.data[1].embedding, Array.from(embed(second)));
  assert.equal(json.data[1].object, 'embedding');
  const n = first.length + second.length;
  assert.deepEqual(json.usage, { prompt_tokens: n, total_tokens: n, completion_tokens: 0, prompt_tokens_details: null });
  const ids = await postJson(w, '/v1/embeddings', { input: [[11, 12, 13, 14], [15]] });
  assert.deepEqual(ids.json.data.map((d: { embedding: number[] }) => d.embedding), [Array.from(embed([11, 12, 13, 14])), Array.from(embed([15]))]);
});

test('base64 is the float32 vector; dimensions truncates and renormalises', async () => {
  const { json } = await postJson(w, '/v1/embeddings', { input: 'one two', encoding_format: 'base64', dimensions: 16 });
  const b = Buffer.from(json.data[0].embedding, 'base64');
  const v = Array.from({ length: b.length / 4 }, (_, i) => b.readFloatLE(i * 4));
  assert.equal(v.length, 16);
  assert.ok(Math.abs(v.reduce((s, x) => s + x * x, 0) - 1) < 1e-5);
  assert.deepEqual(v, Array.from(embed(estimateTokenizer.encode('one two'), 16)));
});

test('inputs run through the engine: counted as requests, prefixes cached for the next', async () => {
  const text = 'a long shared document about routing '.repeat(20);
  const before = metricValue(await scrape(w), 'vllm:prefix_cache_hits_total', { model_name: MODEL }) ?? 0;
  assert.equal((await postJson(w, '/v1/embeddings', { input: text })).status, 200);
  assert.equal((await postJson(w, '/v1/embeddings', { input: text })).status, 200);
  const m = await scrape(w);
  assert.ok((metricValue(m, 'vllm:prefix_cache_hits_total', { model_name: MODEL }) ?? 0) > before, 'the second input hit the cache');
});

test('errors: another model 404, empty input 400, too long 400, too many dimensions 400', async () => {
  assert.equal((await postJson(w, '/v1/embeddings', { model: 'other', input: 'x' })).status, 404);
  const empty = await postJson(w, '/v1/embeddings', { input: [] });
  assert.equal(empty.status, 400);
  assert.equal(empty.json.error.param, 'input');
  const long = await postJson(w, '/v1/embeddings', { input: ['short', 'word '.repeat(2000)] });
  assert.equal(long.status, 400);
  // vLLM's wording for an embeddings input over max_model_len (serving_engine.py).
  assert.match(long.json.error.message, /^This model's maximum context length is 512 tokens\. However, you requested \d+ tokens in the input for embedding generation\./);
  const dims = await postJson(w, '/v1/embeddings', { input: 'x', dimensions: EMBEDDING_DIM + 1 });
  assert.equal(dims.status, 400);
  assert.equal(dims.json.error.param, 'dimensions');
});

test('a large answer is written in pieces, never one string, and parses as one JSON answer', async () => {
  const input = Array.from({ length: 2_000 }, (_, i) => `input ${i % 50}`);
  const r = await fetch(w.url + '/v1/embeddings', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input }) });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('content-length'), null, 'streamed, not sized up front');
  const json = (await r.json()) as { data: Array<{ index: number; embedding: number[] }>; usage: { prompt_tokens: number } };
  assert.equal(json.data.length, 2_000);
  assert.deepEqual(json.data[1_999]!.embedding, Array.from(embed(estimateTokenizer.encode(input[1_999]!))));
  assert.ok(json.usage.prompt_tokens > 0);
  assert.equal((await fetch(w.url + '/health')).status, 200);
});

test('writeEmbeddingsAnswer: each write holds a bounded number of vectors', async () => {
  const writes: string[] = [];
  const fake = {
    destroyed: false,
    writeHead: () => fake,
    write: (s: string) => (writes.push(s), true),
    end: (s: string) => void writes.push(s),
    on: () => fake,
    off: () => fake,
  };
  const prompts = Array.from({ length: 1_000 }, (_, i) => [i + 1, i + 2]);
  await writeEmbeddingsAnswer(fake as unknown as ServerResponse, { id: 'embd-x', created: 1, model: MODEL, prompts, dims: EMBEDDING_DIM, format: 'float' });
  assert.ok(writes.length >= 1_000 / 64, `${writes.length} writes`);
  assert.ok(Math.max(...writes.map((s) => s.length)) < 1_000_000);
  const whole = JSON.parse(writes.join(''));
  assert.equal(whole.data.length, 1_000);
  assert.deepEqual(Object.keys(whole), ['id', 'object', 'created', 'model', 'data', 'usage']);
});
