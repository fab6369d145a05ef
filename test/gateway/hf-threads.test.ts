/** Through the gateway: an `hf:` tokenizer's long prompts are tokenized on its thread and routed on those ids. */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import type { RawConfig } from '../../src/config/index.js';
import { bpeTokenizerJson, HELLO_WORLD_MERGES, HELLO_WORLD_VOCAB } from '../tokenizer/fixtures.js';
import { MODEL, metricValue, post, startGateway, startSims } from './helpers.js';

/** A gateway in front of one simulated worker with the hello/world tokenizer (no special tokens) as `hf:`, one thread. */
async function hfGateway(t: TestContext, extra: Partial<RawConfig> = {}): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'kvgate-gw-tok-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const path = join(dir, 'tokenizer.json');
  await writeFile(path, JSON.stringify(bpeTokenizerJson(HELLO_WORLD_VOCAB, HELLO_WORLD_MERGES, false)));
  const [sim] = await startSims(1);
  t.after(() => sim!.close());
  const { gw, url } = await startGateway([sim!.url], { tokenizers: { default: `hf:${path}`, threads: 1 }, ...extra });
  t.after(() => gw.close());
  return url;
}

test('hf: with a thread: long prompts are tokenized there, routed on their ids, and counted', async (t) => {
  const url = await hfGateway(t);

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
  const url = await hfGateway(t, { policy: { name: 'round-robin' } } as Partial<RawConfig>);
  const r = await post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hello world held '.repeat(200) }], max_tokens: 4 });
  assert.equal(r.status, 200, r.text);
  const text = await (await fetch(url + '/metrics')).text();
  assert.equal(metricValue(text, 'kvgate_tokenizer_thread_prompts_total'), 1, 'admission read the length: tokenized on the thread');
});

test('tokenizers.threads is validated', async () => {
  await assert.rejects(startGateway([], { tokenizers: { threads: -1 } }), /tokenizers\.threads/);
});
