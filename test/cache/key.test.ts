import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { canonicalJson, IGNORED_FIELDS, keyHash, parseCacheControl, samplingOf, storeKey } from '../../src/cache/key.js';

const BASE = {
  model: 'llama-3.1-8b',
  messages: [
    { role: 'system', content: 'You answer from the context.' },
    { role: 'user', content: [{ type: 'text', text: 'Context: the sky is blue.' }, { type: 'text', text: 'What colour is the sky?' }] },
  ],
  temperature: 0,
  max_tokens: 64,
};

describe('cache keys', () => {
  it('canonicalise: key order never matters, array order does', () => {
    assert.equal(canonicalJson({ b: 1, a: { d: [1, 2], c: 'x' } }), '{"a":{"c":"x","d":[1,2]},"b":1}');
    const shuffled = JSON.parse('{"max_tokens":64,"temperature":0,"messages":[{"content":"You answer from the context.","role":"system"},{"content":[{"text":"Context: the sky is blue.","type":"text"},{"type":"text","text":"What colour is the sky?"}],"role":"user"}],"model":"llama-3.1-8b"}');
    assert.equal(keyHash('t', 'chat', shuffled), keyHash('t', 'chat', BASE));
    assert.notEqual(canonicalJson([1, 2]), canonicalJson([2, 1]));
    // Whitespace, escapes and number spelling vanish in JSON.parse.
    assert.equal(keyHash('t', 'chat', JSON.parse('{ "model" : "m", "temperature": 0.0, "prompt": "caf\\u00e9" }')), keyHash('t', 'chat', { model: 'm', temperature: 0, prompt: 'café' }));
  });

  it('change with everything that determines the answer', () => {
    const k = keyHash('t', 'chat', BASE);
    const variants: Array<Record<string, unknown>> = [
      { model: 'other' },
      { messages: [BASE.messages[0], { role: 'user', content: [{ type: 'text', text: 'Context: the sky is green.' }, { type: 'text', text: 'What colour is the sky?' }] }] },
      { messages: [{ role: 'developer', content: 'You answer from the context.' }, BASE.messages[1]] },
      { messages: [...BASE.messages, { role: 'assistant', content: 'Blue.' }] },
      { messages: [BASE.messages[0], { role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:x' } }] }] },
      { temperature: 0.7 },
      { top_p: 0.5 },
      { max_tokens: 65 },
      { stop: ['\n'] },
      { seed: 1 },
      { n: 2 },
      { logprobs: true },
      { top_logprobs: 3 },
      { presence_penalty: 0.1 },
      { frequency_penalty: 0.1 },
      { logit_bias: { '50256': -100 } },
      { tools: [{ type: 'function', function: { name: 'f', parameters: {} } }] },
      { tool_choice: 'none' },
      { response_format: { type: 'json_object' } },
      { top_k: 1 },
      { max_completion_tokens: 64 },
    ];
    const seen = new Set([k]);
    for (const v of variants) {
      const h = keyHash('t', 'chat', { ...BASE, ...v });
      assert.ok(!seen.has(h), `${JSON.stringify(v)} must change the key`);
      seen.add(h);
    }
    assert.notEqual(keyHash('t', 'completions', BASE), k, 'the route is part of the key');
    assert.notEqual(keyHash('u', 'chat', BASE), k, 'the tenant is part of the key');
  });

  it('ignore how the answer is delivered and who asked', () => {
    const k = keyHash('t', 'chat', BASE);
    for (const v of [{ stream: true }, { stream_options: { include_usage: true } }, { user: 'alice' }, { priority: -1 }, { metadata: { a: 1 } }, { store: false }, { request_id: 'x' }, { stop: null }, { seed: null }]) {
      assert.equal(keyHash('t', 'chat', { ...BASE, ...v }), k, JSON.stringify(v));
    }
    assert.ok(IGNORED_FIELDS.has('stream'));
  });

  it('namespace store keys per tenant', () => {
    assert.equal(storeKey('kvgate:cache:', 'acme', 'ab12'), 'kvgate:cache:acme:ab12');
  });

  it('tell deterministic requests from sampled ones', () => {
    assert.equal(samplingOf({ temperature: 0 }), 'greedy');
    assert.equal(samplingOf({ temperature: 0.8, seed: 7 }), 'seeded');
    assert.equal(samplingOf({ seed: 0 }), 'seeded');
    assert.equal(samplingOf({}), 'sampled', 'the default temperature is 1');
    assert.equal(samplingOf({ temperature: 0.2 }), 'sampled');
    assert.equal(samplingOf({ temperature: 0.2, seed: 1.5 }), 'sampled');
  });

  it('parse Cache-Control', () => {
    assert.deepEqual(parseCacheControl(undefined), { noStore: false, noCache: false, maxAgeS: null });
    assert.deepEqual(parseCacheControl('No-Cache'), { noStore: false, noCache: true, maxAgeS: null });
    assert.deepEqual(parseCacheControl('no-store, no-cache'), { noStore: true, noCache: true, maxAgeS: null });
    assert.deepEqual(parseCacheControl('max-age=60'), { noStore: false, noCache: false, maxAgeS: 60 });
    assert.deepEqual(parseCacheControl('max-age=0'), { noStore: false, noCache: true, maxAgeS: 0 });
    assert.deepEqual(parseCacheControl('max-age=abc'), { noStore: false, noCache: false, maxAgeS: null });
  });
});
