/**
 * The simulated SGLang worker's own routes (`kvgate sim --engine sglang`) and vLLM's
 * /inference/v1/generate: the shapes SGLang and vLLM answer in, and how much of the prompt each
 * reads from the prefix cache when logprobs are asked for.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { startSimWorker, type SimWorker } from '../../../src/sim/worker/server.js';

const ids = Array.from({ length: 100 }, (_, i) => 1000 + i);
const closers: SimWorker[] = [];
after(async () => {
  for (const w of closers) await w.close();
});

async function call(url: string, body: unknown): Promise<{ status: number; json: any }> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, json: await r.json().catch(() => null) };
}

describe('simulated SGLang worker', () => {
  it('/generate reuses the cached prompt up to logprob_start_len and pads the first input logprob with null', async () => {
    const w = await startSimWorker({ engine: 'sglang', speed: 100, numGpuBlocks: 500 });
    closers.push(w);
    const warm = await call(`${w.url}/generate`, { input_ids: ids, sampling_params: { max_new_tokens: 3, temperature: 0 } });
    assert.equal(warm.status, 200);
    assert.deepEqual(Object.keys(warm.json).sort(), ['meta_info', 'output_ids', 'text']);
    assert.deepEqual(warm.json.meta_info.finish_reason, { type: 'length', length: 3 });
    assert.equal(warm.json.meta_info.cached_tokens, 0);

    // Scoring three new tokens after the 100 cached ones from position 99: the match stops at 99.
    const r = await call(`${w.url}/generate`, {
      input_ids: [...ids, 5, 6, 7],
      return_logprob: true,
      logprob_start_len: 99,
      top_logprobs_num: 2,
      return_text_in_logprobs: true,
      sampling_params: { max_new_tokens: 1, temperature: 0 },
    });
    assert.equal(r.status, 200);
    const m = r.json.meta_info;
    assert.equal(m.cached_tokens, 96, 'whole 16-token pages up to logprob_start_len');
    assert.equal(m.input_token_logprobs.length, 4);
    assert.deepEqual(m.input_token_logprobs[0].slice(0, 2), [null, 1099]);
    assert.deepEqual(m.input_token_logprobs.slice(1).map((t: unknown[]) => t[1]), [5, 6, 7]);
    assert.equal(m.input_top_logprobs[0], null);
    assert.equal(m.input_top_logprobs[1].length, 2);
    assert.equal(typeof m.input_top_logprobs[1][0][2], 'string');
    assert.equal(m.output_token_logprobs[0][1], r.json.output_ids[0]);

    // From position 10 only the first 10 tokens may come from the cache.
    const early = await call(`${w.url}/generate`, { input_ids: [...ids, 5, 6, 7], return_logprob: true, logprob_start_len: 10, sampling_params: { max_new_tokens: 1 } });
    assert.equal(early.json.meta_info.cached_tokens, 0);
    assert.equal(early.json.meta_info.input_top_logprobs, undefined, 'no top logprobs unless asked');

    assert.equal((await call(`${w.url}/generate`, { sampling_params: {} })).json.error.message, 'Either text or input_ids should be provided.');
    assert.equal((await call(`${w.url}/generate`, { input_ids: ids, return_logprob: true, logprob_start_len: 100 })).status, 400);
    const text = await call(`${w.url}/generate`, { text: 'hello there', sampling_params: { max_new_tokens: 2 } });
    assert.equal(text.status, 200);
    assert.equal(text.json.meta_info.prompt_tokens > 0, true);
  });

  it("serves SGLang's /v1/tokenize and /get_model_info, not vLLM's own routes", async () => {
    const w = await startSimWorker({ engine: 'sglang', speed: 100, numGpuBlocks: 200 });
    closers.push(w);
    const t = await call(`${w.url}/v1/tokenize`, { prompt: 'a b c' });
    assert.equal(t.status, 200);
    assert.equal(t.json.count, t.json.tokens.length);
    assert.equal((await call(`${w.url}/v1/tokenize`, { messages: [{ role: 'user', content: 'x' }] })).status, 400);
    for (const path of ['/tokenize', '/inference/v1/generate', '/reset_prefix_cache']) assert.equal((await call(`${w.url}${path}`, {})).status, 404, path);
    const info = (await (await fetch(`${w.url}/get_model_info`)).json()) as { is_generation: boolean };
    assert.equal(info.is_generation, true);
    const models = (await (await fetch(`${w.url}/v1/models`)).json()) as { data: Array<{ owned_by: string }> };
    assert.equal(models.data[0]?.owned_by, 'sglang');
  });
});

describe("simulated vLLM worker's /inference/v1/generate", () => {
  it('skips the cache for prompt logprobs unless told not to; rows of cached positions are empty', async () => {
    const w = await startSimWorker({ speed: 100, numGpuBlocks: 500 });
    closers.push(w);
    await call(`${w.url}/inference/v1/generate`, { token_ids: ids, sampling_params: { max_tokens: 1, temperature: 0 } });
    const sp = { max_tokens: 1, temperature: 0, prompt_logprobs: 1, logprobs: 0 };
    const skip = await call(`${w.url}/inference/v1/generate`, { token_ids: [...ids, 5, 6], sampling_params: sp });
    assert.equal(skip.status, 200);
    assert.equal(skip.json.prompt_logprobs.filter((e: unknown) => e === null).length, 1, 'every position scored');
    const read = await call(`${w.url}/inference/v1/generate`, { token_ids: [...ids, 5, 6], sampling_params: { ...sp, skip_reading_prefix_cache: false } });
    const pl = read.json.prompt_logprobs;
    assert.equal(pl.length, 102);
    assert.ok(pl.slice(0, 97).every((e: unknown) => e === null), 'positions 1…96 came from the cache');
    assert.ok('5' in pl[100] && '6' in pl[101]);
    const c = read.json.choices[0];
    assert.equal(c.token_ids.length, 1);
    assert.equal(c.logprobs.content[0].logprob <= 0, true);
    assert.equal(c.finish_reason, 'length');
    assert.equal((await call(`${w.url}/inference/v1/generate`, { sampling_params: {} })).status, 400);
  });
});
