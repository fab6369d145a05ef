/** The simulated worker's OpenAI surface over real HTTP: shapes, determinism, usage, logprobs, stops, errors. */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startSimWorker, type SimWorker } from '../../../src/sim/worker/server.js';
import { estimateTokenizer, renderChat } from '../../../src/tokenizer/index.js';
import { longPrompt, postJson, postStream } from './helpers.js';

const MODEL = 'llama-3.1-8b';
const PROMPT = 'The gateway routes each request to the worker whose cache holds its prefix';

let w: SimWorker;

before(async () => {
  w = await startSimWorker({ model: MODEL, speed: 200, maxModelLen: 512 });
});

after(async () => {
  await w.close();
});

describe('POST /v1/completions', () => {
  test('returns text, vLLM fields and usage that match the tokenizer', async () => {
    const { status, json } = await postJson(w, '/v1/completions', { model: MODEL, prompt: PROMPT, max_tokens: 12, seed: 7 });
    assert.equal(status, 200);
    assert.match(json.id, /^cmpl-/);
    assert.equal(json.object, 'text_completion');
    assert.equal(json.model, MODEL);
    assert.equal(json.choices.length, 1);
    const c = json.choices[0];
    assert.equal(c.index, 0);
    assert.equal(typeof c.text, 'string');
    assert.ok(c.text.length > 0);
    assert.equal(c.logprobs, null);
    assert.ok(c.finish_reason === 'length' || c.finish_reason === 'stop');
    const promptTokens = estimateTokenizer.encode(PROMPT).length;
    assert.equal(json.usage.prompt_tokens, promptTokens);
    // The text re-tokenizes to the generated tokens; an EOS (finish 'stop') is counted but has no text.
    const textTokens = estimateTokenizer.encode(c.text).length;
    assert.equal(json.usage.completion_tokens, textTokens + (c.finish_reason === 'stop' ? 1 : 0));
    if (c.finish_reason === 'length') assert.equal(json.usage.completion_tokens, 12);
    assert.equal(json.usage.total_tokens, promptTokens + json.usage.completion_tokens);
    assert.equal(typeof json.usage.prompt_tokens_details.cached_tokens, 'number');
  });

  test('defaults to 16 tokens, as vLLM does for completions', async () => {
    const { json } = await postJson(w, '/v1/completions', { prompt: PROMPT, seed: 3, ignore_eos: true });
    assert.equal(json.usage.completion_tokens, 16);
    assert.equal(json.choices[0].finish_reason, 'length');
  });

  test('same request twice gives the same text; another seed gives another text', async () => {
    const body = { model: MODEL, prompt: PROMPT, max_tokens: 30, temperature: 1, seed: 11, ignore_eos: true };
    const a = await postJson(w, '/v1/completions', body);
    const b = await postJson(w, '/v1/completions', body);
    const c = await postJson(w, '/v1/completions', { ...body, seed: 12 });
    assert.equal(a.json.choices[0].text, b.json.choices[0].text);
    assert.notEqual(a.json.choices[0].text, c.json.choices[0].text);
  });

  test('greedy sampling ignores the seed', async () => {
    const body = { prompt: PROMPT, max_tokens: 20, temperature: 0 };
    const a = await postJson(w, '/v1/completions', { ...body, seed: 1 });
    const b = await postJson(w, '/v1/completions', { ...body, seed: 2 });
    assert.equal(a.json.choices[0].text, b.json.choices[0].text);
  });

  test('a token-id prompt is the same as its text', async () => {
    const ids = estimateTokenizer.encode(PROMPT);
    const a = await postJson(w, '/v1/completions', { prompt: PROMPT, max_tokens: 10, seed: 5 });
    const b = await postJson(w, '/v1/completions', { prompt: ids, max_tokens: 10, seed: 5 });
    assert.equal(b.status, 200);
    assert.equal(a.json.choices[0].text, b.json.choices[0].text);
    assert.equal(b.json.usage.prompt_tokens, ids.length);
  });

  test('an array of prompts gives one choice per prompt', async () => {
    const { status, json } = await postJson(w, '/v1/completions', { prompt: [PROMPT, 'A second prompt'], max_tokens: 5, ignore_eos: true });
    assert.equal(status, 200);
    assert.deepEqual(json.choices.map((c: any) => c.index), [0, 1]);
    const single = await postJson(w, '/v1/completions', { prompt: 'A second prompt', max_tokens: 5, ignore_eos: true });
    assert.equal(json.choices[1].text, single.json.choices[0].text);
    assert.equal(json.usage.completion_tokens, 10);
  });

  test('n samples: n choices, the first as with n=1, the prompt counted once', async () => {
    const body = { prompt: PROMPT, max_tokens: 12, seed: 31, ignore_eos: true };
    const one = await postJson(w, '/v1/completions', body);
    const three = await postJson(w, '/v1/completions', { ...body, n: 3 });
    assert.equal(three.status, 200);
    const texts = three.json.choices.map((c: any) => c.text);
    assert.deepEqual(three.json.choices.map((c: any) => c.index), [0, 1, 2]);
    assert.equal(texts[0], one.json.choices[0].text);
    assert.equal(new Set(texts).size, 3);
    assert.equal(three.json.usage.prompt_tokens, one.json.usage.prompt_tokens);
    assert.equal(three.json.usage.completion_tokens, 36);
    const again = await postJson(w, '/v1/completions', { ...body, n: 3 });
    assert.deepEqual(again.json.choices.map((c: any) => c.text), texts);
    const s = await postStream(w, '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], n: 2, max_tokens: 4 });
    const roles = s.events.filter((e) => e !== '[DONE]' && e.choices[0]?.delta?.role === 'assistant');
    assert.deepEqual(roles.map((e) => e.choices[0].index).sort(), [0, 1]);
  });

  test('echo prepends the prompt', async () => {
    const plain = await postJson(w, '/v1/completions', { prompt: PROMPT, max_tokens: 8, seed: 9 });
    const echoed = await postJson(w, '/v1/completions', { prompt: PROMPT, max_tokens: 8, seed: 9, echo: true });
    assert.equal(echoed.json.choices[0].text, PROMPT + plain.json.choices[0].text);
  });

  test('logprobs in the legacy format: tokens, token_logprobs, top_logprobs, text_offset', async () => {
    const { json } = await postJson(w, '/v1/completions', { prompt: PROMPT, max_tokens: 10, seed: 2, logprobs: 3, ignore_eos: true });
    const c = json.choices[0];
    const lp = c.logprobs;
    assert.equal(lp.tokens.length, 10);
    assert.equal(lp.token_logprobs.length, 10);
    assert.equal(lp.top_logprobs.length, 10);
    assert.equal(lp.text_offset.length, 10);
    assert.equal(lp.tokens.join(''), c.text);
    for (let i = 0; i < 10; i++) {
      assert.ok(lp.token_logprobs[i] <= 0);
      const top = lp.top_logprobs[i];
      const keys = Object.keys(top);
      assert.ok(keys.length >= 3 && keys.length <= 4, `top_logprobs has the 3 best plus the sampled token: ${keys}`);
      assert.equal(top[lp.tokens[i]], lp.token_logprobs[i]);
      assert.equal(lp.text_offset[i], lp.tokens.slice(0, i).join('').length);
    }
  });

  test('echo with logprobs covers the prompt, the first prompt token having none', async () => {
    const { json } = await postJson(w, '/v1/completions', { prompt: PROMPT, max_tokens: 4, seed: 2, logprobs: 1, echo: true, ignore_eos: true });
    const lp = json.choices[0].logprobs;
    const n = estimateTokenizer.encode(PROMPT).length;
    assert.equal(lp.tokens.length, n + 4);
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    assert.equal(lp.tokens.join(''), json.choices[0].text);
    assert.equal(lp.text_offset[n], PROMPT.length);
  });

  test('a stop string ends the text before it, with finish_reason stop and stop_reason', async () => {
    const body = { prompt: PROMPT, max_tokens: 40, seed: 21, ignore_eos: true };
    const full = (await postJson(w, '/v1/completions', body)).json.choices[0].text as string;
    const words = full.split(' ').filter((x) => x.length >= 3);
    const stop = words[Math.floor(words.length / 2)]!;
    const cut = full.indexOf(stop);
    const { json } = await postJson(w, '/v1/completions', { ...body, stop: [stop] });
    const c = json.choices[0];
    assert.equal(c.text, full.slice(0, cut));
    assert.equal(c.finish_reason, 'stop');
    assert.equal(c.stop_reason, stop);
    // The token that completed the stop string was generated and is counted.
    assert.equal(json.usage.completion_tokens, estimateTokenizer.encode(full.slice(0, cut + stop.length)).length);
    // Streaming never shows any part of the stop string.
    const s = await postStream(w, '/v1/completions', { ...body, stop });
    const streamed = s.events.filter((e) => e !== '[DONE]').map((e) => e.choices[0].text).join('');
    assert.equal(streamed, full.slice(0, cut));
  });

  test('stop_token_ids end the sequence on that token', async () => {
    const body = { prompt: PROMPT, max_tokens: 30, seed: 4, ignore_eos: true, logprobs: 0 };
    const full = (await postJson(w, '/v1/completions', body)).json.choices[0];
    const tokens = estimateTokenizer.encode(full.text);
    const stopId = tokens[5]!;
    const first = tokens.indexOf(stopId);
    const { json } = await postJson(w, '/v1/completions', { ...body, stop_token_ids: [stopId] });
    assert.equal(json.choices[0].finish_reason, 'stop');
    assert.equal(json.choices[0].stop_reason, stopId);
    assert.equal(json.choices[0].text, estimateTokenizer.decode(tokens.slice(0, first)));
    assert.equal(json.usage.completion_tokens, first + 1);
  });

  test('streaming sends the same text in chunks, then usage, then [DONE]', async () => {
    const body = { prompt: PROMPT, max_tokens: 15, seed: 8, stream_options: { include_usage: true } };
    const plain = await postJson(w, '/v1/completions', { prompt: PROMPT, max_tokens: 15, seed: 8 });
    const s = await postStream(w, '/v1/completions', body);
    assert.equal(s.status, 200);
    assert.match(s.contentType ?? '', /^text\/event-stream/);
    assert.ok(s.raw.endsWith('data: [DONE]\n\n'));
    const events = s.events.slice(0, -1);
    const usageChunk = events.pop();
    assert.deepEqual(usageChunk.choices, []);
    assert.deepEqual(usageChunk.usage, plain.json.usage);
    assert.ok(events.length >= 2, 'one chunk per step');
    for (const e of events) {
      assert.equal(e.object, 'text_completion');
      assert.equal(e.id, events[0].id);
      assert.equal('usage' in e, false);
    }
    assert.equal(events.map((e) => e.choices[0].text).join(''), plain.json.choices[0].text);
    assert.equal(events.at(-1).choices[0].finish_reason, plain.json.choices[0].finish_reason);
    assert.ok(events.slice(0, -1).every((e) => e.choices[0].finish_reason === null));
  });
});

describe('POST /v1/chat/completions', () => {
  const messages = [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'Where should this request go?' },
  ];

  test('answers with an assistant message and usage that matches the chat template', async () => {
    const { status, json } = await postJson(w, '/v1/chat/completions', { model: MODEL, messages, max_tokens: 20, seed: 1 });
    assert.equal(status, 200);
    assert.match(json.id, /^chatcmpl-/);
    assert.equal(json.object, 'chat.completion');
    const c = json.choices[0];
    assert.equal(c.message.role, 'assistant');
    assert.equal(typeof c.message.content, 'string');
    assert.equal(json.usage.prompt_tokens, estimateTokenizer.encode(renderChat(messages)).length);
    assert.equal(json.usage.completion_tokens, estimateTokenizer.encode(c.message.content).length + (c.finish_reason === 'stop' ? 1 : 0));
  });

  test('max_completion_tokens wins over max_tokens; without either it runs to EOS', async () => {
    const a = await postJson(w, '/v1/chat/completions', { messages, max_tokens: 20, max_completion_tokens: 6, ignore_eos: true });
    assert.equal(a.json.usage.completion_tokens, 6);
    const b = await postJson(w, '/v1/chat/completions', { messages, seed: 3 });
    assert.equal(b.json.choices[0].finish_reason, 'stop');
  });

  test('deterministic: same request, same content', async () => {
    const body = { messages, max_tokens: 25, seed: 99, temperature: 0.8, top_p: 0.9 };
    const a = await postJson(w, '/v1/chat/completions', body);
    const b = await postJson(w, '/v1/chat/completions', body);
    assert.equal(a.json.choices[0].message.content, b.json.choices[0].message.content);
  });

  test('logprobs: one entry per token with bytes and top_logprobs', async () => {
    const { json } = await postJson(w, '/v1/chat/completions', { messages, max_tokens: 8, seed: 5, logprobs: true, top_logprobs: 2, ignore_eos: true });
    const content = json.choices[0].logprobs.content;
    assert.equal(content.length, 8);
    assert.equal(content.map((x: any) => x.token).join(''), json.choices[0].message.content);
    for (const x of content) {
      assert.deepEqual(x.bytes, [...Buffer.from(x.token, 'utf8')]);
      assert.ok(x.logprob <= 0);
      assert.equal(x.top_logprobs.length, 2);
      assert.ok(x.top_logprobs[0].logprob >= x.top_logprobs[1].logprob);
      assert.ok(x.top_logprobs[0].logprob >= x.logprob);
    }
    const none = await postJson(w, '/v1/chat/completions', { messages, max_tokens: 3 });
    assert.equal(none.json.choices[0].logprobs, null);
  });

  test('top_logprobs without logprobs is refused', async () => {
    const { status, json } = await postJson(w, '/v1/chat/completions', { messages, top_logprobs: 2 });
    assert.equal(status, 400);
    assert.equal(json.error.type, 'BadRequestError');
  });

  test('tools and tool_choice are checked as vLLM checks them; a valid tool request is answered in text', async () => {
    const weather = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } };
    const refused: Array<[Record<string, unknown>, string | null, RegExp]> = [
      [{ tools: 'x' }, 'tools', /./],
      [{ tools: [{ type: 'function' }] }, 'tools[0].function', /./],
      [{ tools: [] }, 'tools', /must not be an empty array/],
      [{ tool_choice: 'auto' }, 'tool_choice', /When using `tool_choice`, `tools` must be set/],
      [{ tools: [weather], tool_choice: 'sometimes' }, 'tool_choice', /Only named tools/],
      [{ tools: [weather], tool_choice: { type: 'function', function: 'get_weather' } }, 'tool_choice.function', /Correct usage/],
      [{ tools: [weather], tool_choice: { type: 'function', function: {} } }, 'tool_choice.function.name', /Expected field `name`/],
      [{ tools: [weather], tool_choice: { type: 'function', function: { name: 'get_time' } } }, 'tool_choice', /does not match any of the specified `tools`/],
    ];
    for (const [extra, param, message] of refused) {
      const { status, json } = await postJson(w, '/v1/chat/completions', { messages, max_tokens: 3, ...extra });
      assert.equal(status, 400, JSON.stringify(extra));
      assert.equal(json.error.param, param, JSON.stringify(extra));
      assert.match(json.error.message, message, JSON.stringify(extra));
    }
    for (const tool_choice of [undefined, 'none', 'auto', 'required', { type: 'function', function: { name: 'get_weather' } }]) {
      const { status, json } = await postJson(w, '/v1/chat/completions', { messages, max_tokens: 3, tools: [weather], tool_choice });
      assert.equal(status, 200, JSON.stringify(tool_choice));
      assert.equal(typeof json.choices[0].message.content, 'string');
    }
    // "none" ignores whatever tools say.
    assert.equal((await postJson(w, '/v1/chat/completions', { messages, max_tokens: 3, tool_choice: 'none' })).status, 200);
  });

  test('streaming: role first, content deltas, finish, usage chunk, [DONE]', async () => {
    const body = { messages, max_tokens: 12, seed: 4, stream_options: { include_usage: true } };
    const plain = await postJson(w, '/v1/chat/completions', { messages, max_tokens: 12, seed: 4 });
    const s = await postStream(w, '/v1/chat/completions', body);
    assert.equal(s.events.at(-1), '[DONE]');
    const events = s.events.slice(0, -1);
    const usageChunk = events.pop();
    assert.deepEqual(usageChunk.choices, []);
    assert.deepEqual(usageChunk.usage, plain.json.usage);
    assert.equal(events[0].object, 'chat.completion.chunk');
    assert.deepEqual(events[0].choices[0].delta, { role: 'assistant', content: '' });
    const content = events.slice(1).map((e) => e.choices[0].delta.content).join('');
    assert.equal(content, plain.json.choices[0].message.content);
    assert.equal(events.at(-1).choices[0].finish_reason, plain.json.choices[0].finish_reason);
    assert.ok(events.slice(0, -1).every((e) => e.choices[0].finish_reason === null));
  });

  test('streaming without include_usage has no usage chunk', async () => {
    const s = await postStream(w, '/v1/chat/completions', { messages, max_tokens: 3 });
    assert.ok(s.events.slice(0, -1).every((e) => e.choices.length === 1 && !('usage' in e)));
  });
});

describe('errors in vLLM shape', () => {
  test('prompt longer than max_model_len → 400 with the context-length message', async () => {
    const { status, json } = await postJson(w, '/v1/completions', { model: MODEL, prompt: longPrompt(600), max_tokens: 4 });
    assert.equal(status, 400);
    assert.equal(json.error.type, 'BadRequestError');
    assert.equal(json.error.code, 400);
    assert.match(json.error.message, /maximum context length is 512 tokens/);
  });

  test('prompt plus max_tokens over max_model_len → 400', async () => {
    const { status, json } = await postJson(w, '/v1/completions', { prompt: longPrompt(400), max_tokens: 200 });
    assert.equal(status, 400);
    assert.match(json.error.message, /maximum context length/);
  });

  test('unknown model → 404 NotFoundError', async () => {
    const { status, json } = await postJson(w, '/v1/chat/completions', { model: 'gpt-4', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(status, 404);
    assert.equal(json.error.type, 'NotFoundError');
    assert.equal(json.error.code, 404);
    assert.match(json.error.message, /gpt-4/);
  });

  test('malformed JSON → 400', async () => {
    const r = await fetch(w.url + '/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"prompt": ' });
    assert.equal(r.status, 400);
    const json: any = await r.json();
    assert.equal(json.error.type, 'BadRequestError');
    assert.deepEqual(Object.keys(json.error).sort(), ['code', 'message', 'param', 'type']);
  });

  test('a UTF-8 byte order mark before the JSON is taken, as Python\'s json.loads under vLLM takes it', async () => {
    const body = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(JSON.stringify({ model: MODEL, prompt: PROMPT, max_tokens: 2 }))]);
    const r = await fetch(w.url + '/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    assert.equal(r.status, 200);
    assert.equal(((await r.json()) as any).object, 'text_completion');
    // Anywhere else it is not JSON.
    const r2 = await fetch(w.url + '/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: Buffer.concat([Buffer.from(' '), body]) });
    assert.equal(r2.status, 400);
  });

  test('invalid fields → 400 naming the field', async () => {
    const a = await postJson(w, '/v1/completions', { prompt: PROMPT, temperature: -1 });
    assert.equal(a.status, 400);
    assert.equal(a.json.error.param, 'temperature');
    const b = await postJson(w, '/v1/chat/completions', { messages: 'hello' });
    assert.equal(b.status, 400);
    assert.equal(b.json.error.param, 'messages');
    const c = await postJson(w, '/v1/completions', { prompt: PROMPT, n: 0 });
    assert.equal(c.status, 400);
    assert.equal(c.json.error.param, 'n');
    const d = await postJson(w, '/v1/completions', { prompt: PROMPT, logprobs: 21 });
    assert.equal(d.status, 400);
    const e = await postJson(w, '/v1/completions', { prompt: '' });
    assert.equal(e.status, 400);
    const f = await postJson(w, '/v1/chat/completions', { messages: [{ role: 'user', content: PROMPT }], response_format: { type: 'xml' } });
    assert.equal(f.status, 400);
    assert.equal(f.json.error.param, 'response_format.type');
    const g = await postJson(w, '/v1/completions', { prompt: PROMPT, max_tokens: 2, response_format: { type: 'json_object' } });
    assert.equal(g.status, 200);
  });

  test('unknown route → 404, wrong method → 405', async () => {
    assert.equal((await fetch(w.url + '/v1/nothing')).status, 404);
    assert.equal((await fetch(w.url + '/v1/completions')).status, 405);
  });
});

describe('other vLLM routes', () => {
  test('the x-request-id header names the request', async () => {
    const r = await fetch(w.url + '/v1/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-request-id': 'abc123' },
      body: JSON.stringify({ prompt: PROMPT, max_tokens: 2 }),
    });
    assert.equal(r.headers.get('x-request-id'), 'abc123');
    assert.equal(((await r.json()) as any).id, 'cmpl-abc123');
  });

  test('GET /health → 200 with an empty body', async () => {
    const r = await fetch(w.url + '/health');
    assert.equal(r.status, 200);
    assert.equal(await r.text(), '');
  });

  test('GET /v1/models lists the served model with max_model_len', async () => {
    const json: any = await (await fetch(w.url + '/v1/models')).json();
    assert.equal(json.object, 'list');
    assert.equal(json.data.length, 1);
    assert.equal(json.data[0].id, MODEL);
    assert.equal(json.data[0].object, 'model');
    assert.equal(json.data[0].owned_by, 'vllm');
    assert.equal(json.data[0].max_model_len, 512);
  });

  test('POST /tokenize (prompt or messages) and /detokenize', async () => {
    const a = await postJson(w, '/tokenize', { model: MODEL, prompt: PROMPT });
    assert.equal(a.status, 200);
    assert.deepEqual(a.json.tokens, estimateTokenizer.encode(PROMPT));
    assert.equal(a.json.count, a.json.tokens.length);
    assert.equal(a.json.max_model_len, 512);
    const messages = [{ role: 'user', content: 'hello' }];
    const b = await postJson(w, '/tokenize', { messages });
    assert.deepEqual(b.json.tokens, estimateTokenizer.encode(renderChat(messages)));
    const c = await postJson(w, '/detokenize', { tokens: a.json.tokens });
    assert.equal(c.json.prompt, PROMPT);
    const d = await postJson(w, '/tokenize', { model: 'other', prompt: 'x' });
    assert.equal(d.status, 404);
  });
});
