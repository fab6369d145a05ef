/** Through the gateway: an `hf:` tokenizer's long prompts are tokenized on its thread and routed on those ids. */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { MODEL, metricValue, post, startGateway, startSims } from './helpers.js';

/** A small BPE tokenizer.json (letters, merges up to 'hello' and 'world'). */
const BPE_JSON = {
  version: '1.0',
  added_tokens: [],
  normalizer: null,
  pre_tokenizer: { type: 'Whitespace' },
  post_processor: null,
  decoder: null,
  model: {
    type: 'BPE',
    unk_token: null,
    vocab: { h: 1, e: 2, l: 3, o: 4, w: 5, r: 6, d: 7, he: 8, ll: 9, hell: 10, hello: 11, wo: 12, wor: 13, worl: 14, world: 15 },
    merges: ['h e', 'l l', 'he ll', 'hell o', 'w o', 'wo r', 'wor l', 'worl d'],
  },
};

test('hf: with a thread: long prompts are tokenized there, routed on their ids, and counted', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'kvgate-gw-tok-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const path = join(dir, 'tokenizer.json');
  await writeFile(path, JSON.stringify(BPE_JSON));
  const [sim] = await startSims(1);
  t.after(() => sim!.close());
  const { gw, url } = await startGateway([sim!.url], { tokenizers: { default: `hf:${path}`, threads: 1 } });
  t.after(() => gw.close());

  const counter = async (name: string): Promise<number> => metricValue(await (await fetch(url + '/metrics')).text(), name) ?? NaN;
  const long = { model: MODEL, messages: [{ role: 'user', content: 'hello world held '.repeat(200) }], max_tokens: 4 };
  const first = await post(url + '/v1/chat/completions', long);
  assert.equal(first.status, 200, first.text);
  assert.equal(await counter('kvgate_tokenizer_thread_prompts_total'), 1);
  // The same prompt again: the router has the first one's blocks, hashed over the thread's ids.
  const second = await post(url + '/v1/chat/completions', long);
  assert.equal(second.status, 200);
  assert.ok(Number(second.headers.get('x-kvgate-prefix-hit')) > 0.5, `prefix hit ${second.headers.get('x-kvgate-prefix-hit')}`);
  // A short prompt stays on the event loop.
  const short = await post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 });
  assert.equal(short.status, 200);
  assert.equal(await counter('kvgate_tokenizer_thread_prompts_total'), 2);
  assert.equal(await counter('kvgate_tokenizer_thread_fallbacks_total'), 0);
});

test('hf: with a thread and a policy that never reads the ids: a long prompt is still counted off the event loop', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'kvgate-gw-tok-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const path = join(dir, 'tokenizer.json');
  await writeFile(path, JSON.stringify(BPE_JSON));
  const [sim] = await startSims(1);
  t.after(() => sim!.close());
  const { gw, url } = await startGateway([sim!.url], { tokenizers: { default: `hf:${path}`, threads: 1 }, policy: { name: 'round-robin' } });
  t.after(() => gw.close());
  const r = await post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hello world held '.repeat(200) }], max_tokens: 4 });
  assert.equal(r.status, 200, r.text);
  const text = await (await fetch(url + '/metrics')).text();
  assert.equal(metricValue(text, 'kvgate_tokenizer_thread_prompts_total'), 1, 'admission read the length: tokenized on the thread');
});

test('tokenizers.threads is validated', async () => {
  await assert.rejects(startGateway([], { tokenizers: { threads: -1 } }), /tokenizers\.threads/);
});
