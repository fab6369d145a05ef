/**
 * The simulated worker's scoring path, as vLLM's completions API has it: token-id prompts,
 * `prompt_logprobs` (one dict per prompt position: the prompt token and the top alternatives, with
 * logprob, rank and decoded text), `return_tokens_as_token_ids`, `return_token_ids`, and prefix
 * caching skipped for requests that want prompt logprobs (vLLM V1).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createSyntheticLm, fidelityForAcceptance, measureAcceptance } from '../../../src/engine/synthetic-lm.js';
import { startSimWorker, type SimWorker } from '../../../src/sim/worker/server.js';
import { estimateTokenizer } from '../../../src/tokenizer/index.js';
import { parseSse } from '../../support.js';

const MODEL = 'llama-3.1-8b';
let w: SimWorker;

async function complete(body: Record<string, unknown>): Promise<{ status: number; json: any; text: string }> {
  const r = await fetch(`${w.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL, ...body }) });
  const text = await r.text();
  let json: any = null;
  try {
    json = JSON.parse(text);
  } catch {
    // SSE
  }
  return { status: r.status, json, text };
}

const prompt = estimateTokenizer.encode('The quick brown fox jumps over the lazy dog and then it runs away into the forest to find a place to sleep for the night.');

describe('the simulated worker scores prompts like vLLM', () => {
  before(async () => {
    w = await startSimWorker({ model: MODEL, speed: 200 });
  });
  after(async () => {
    await w.close();
  });

  it('returns prompt_logprobs: null first, then the prompt token and the top-N per position, with ranks', async () => {
    const r = await complete({ prompt, max_tokens: 1, prompt_logprobs: 5, temperature: 0 });
    assert.equal(r.status, 200, r.text);
    const pl = r.json.choices[0].prompt_logprobs;
    assert.equal(pl.length, prompt.length);
    assert.equal(pl[0], null);
    const lm = createSyntheticLm(MODEL);
    for (let i = 1; i < prompt.length; i++) {
      const entry = pl[i];
      const d = lm.distribution(prompt, i);
      // The prompt token is always there; the top 5 too.
      assert.ok(String(prompt[i]) in entry, `position ${i} lacks its prompt token`);
      for (let k = 0; k < 5; k++) {
        const e = entry[String(d.tokens[k])];
        assert.ok(e, `position ${i} lacks rank ${k + 1}`);
        assert.equal(e.rank, k + 1);
        assert.ok(Math.abs(e.logprob - d.logprobs[k]!) < 1e-9);
        assert.equal(e.decoded_token, estimateTokenizer.idToPiece(d.tokens[k]!));
      }
      assert.ok(Object.keys(entry).length <= 6);
    }
  });

  it('names logprob tokens token_id:N with return_tokens_as_token_ids, and returns token_ids with return_token_ids', async () => {
    const r = await complete({ prompt, max_tokens: 4, logprobs: 3, return_tokens_as_token_ids: true, return_token_ids: true, temperature: 0, ignore_eos: true });
    assert.equal(r.status, 200, r.text);
    const c = r.json.choices[0];
    assert.deepEqual(c.prompt_token_ids, prompt);
    assert.equal(c.token_ids.length, 4);
    assert.deepEqual(c.logprobs.tokens, c.token_ids.map((id: number) => `token_id:${id}`));
    for (const top of c.logprobs.top_logprobs) for (const k of Object.keys(top)) assert.match(k, /^token_id:\d+$/);
    // Greedy: the first generated token is the most likely one after the prompt.
    assert.equal(c.token_ids[0], createSyntheticLm(MODEL).distribution(prompt).tokens[0]);
  });

  it('refuses prompt_logprobs on a stream and above the logprob limit, with vLLM messages', async () => {
    const a = await complete({ prompt, max_tokens: 1, prompt_logprobs: 1, stream: true });
    assert.equal(a.status, 400);
    assert.match(a.json.error.message, /prompt_logprobs` are not available when `stream=True`/);
    const b = await complete({ prompt, max_tokens: 1, prompt_logprobs: 21 });
    assert.equal(b.status, 400);
    assert.match(b.json.error.message, /greater than max allowed: 20/);
  });

  it('computes the whole prompt of a request with prompt_logprobs, even when it is cached', async () => {
    const long = estimateTokenizer.encode('a cached prefix of some length '.repeat(20));
    const plain1 = await complete({ prompt: long, max_tokens: 1 });
    const plain2 = await complete({ prompt: long, max_tokens: 1 });
    assert.ok(plain2.json.usage.prompt_tokens_details.cached_tokens >= 16, JSON.stringify(plain2.json.usage));
    const scored = await complete({ prompt: long, max_tokens: 1, prompt_logprobs: 1 });
    assert.equal(scored.json.usage.prompt_tokens_details.cached_tokens, 0);
    assert.equal(plain1.status, 200);
  });

  it('streams token_ids per chunk and prompt_token_ids in the first', async () => {
    const r = await complete({ prompt, max_tokens: 5, stream: true, return_token_ids: true, temperature: 0, ignore_eos: true });
    const events = parseSse(r.text).filter((e) => e !== '[DONE]');
    assert.deepEqual(events[0].choices[0].prompt_token_ids, prompt);
    const ids = events.flatMap((e) => e.choices[0].token_ids ?? []);
    assert.equal(ids.length, 5);
    assert.equal(events.filter((e) => 'prompt_token_ids' in e.choices[0]).length, 1);
  });
});

describe('a draft model reproduces a configured acceptance rate', () => {
  it('fidelityForAcceptance lands the measured acceptance on the target, at several rates', () => {
    const target = createSyntheticLm('llama-3.1-70b');
    for (const alpha of [0.3, 0.5, 0.7, 0.9]) {
      const f = fidelityForAcceptance('llama-3.1-70b', 'llama-3.1-8b', alpha);
      const draft = createSyntheticLm('llama-3.1-8b', { draftOf: 'llama-3.1-70b', fidelity: f });
      // Measured on another walk than the calibration's.
      const got = measureAcceptance(target, draft, 1, 6000, 99);
      assert.ok(Math.abs(got - alpha) < 0.03, `alpha ${alpha}: measured ${got}`);
    }
  });

  it('refuses an acceptance rate the synthetic draft cannot reach', () => {
    assert.throws(() => fidelityForAcceptance('llama-3.1-70b', 'llama-3.1-8b', 0.99), /out of reach/);
  });
});
