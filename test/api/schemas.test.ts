import assert from 'node:assert/strict';
import { test } from 'node:test';
import { chatCompletionRequestSchema, completionRequestSchema, validate } from '../../src/api/schemas.js';
import { formatPath } from '../../src/util/field-path.js';

test('valid requests pass with unknown fields kept', () => {
  const chat = validate(chatCompletionRequestSchema, {
    model: 'm',
    messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }, { role: 'assistant', content: null, tool_calls: [] }],
    stream: true,
    stream_options: { include_usage: true },
    max_completion_tokens: 5,
    top_k: 40,
    continue_final_message: true,
    chat_template_kwargs: { enable_thinking: false },
    documents: [{ title: 't', text: 'x' }],
  });
  assert.ok(chat.ok);
  assert.equal((chat.value as Record<string, unknown>)['top_k'], 40);
  for (const prompt of ['text', ['a', 'b'], [1, 2, 3], [[1], [2, 3]]]) {
    assert.ok(validate(completionRequestSchema, { model: 'm', prompt }).ok, JSON.stringify(prompt));
  }
});

test('problems name the field', () => {
  const cases: Array<[unknown, string]> = [
    [{ messages: [{ role: 'user', content: 'x' }] }, 'model'],
    [{ model: 'm' }, 'messages'],
    [{ model: 'm', messages: [] }, 'messages'],
    [{ model: 'm', messages: [{ role: 'user', content: 1 }] }, 'messages[0].content'],
    [{ model: 'm', messages: [{ role: 'user' }], temperature: 3 }, 'temperature'],
    [{ model: 'm', messages: [{ role: 'user' }], stream: 'yes' }, 'stream'],
    [{ model: 'm', messages: [{ role: 'user' }], n: 0 }, 'n'],
    [{ model: 'm', messages: [{ role: 'user' }], stop: [1] }, 'stop'],
    [{ model: 'm', messages: [{ role: 'user' }], chat_template_kwargs: 'x' }, 'chat_template_kwargs'],
    [{ model: 'm', messages: [{ role: 'user' }], documents: [{ text: 1 }] }, 'documents[0].text'],
    [{ model: 'm', messages: [{ role: 'user' }], add_generation_prompt: 'yes' }, 'add_generation_prompt'],
    [{ model: 'm', messages: [{ role: 'user' }], continue_final_message: true, add_generation_prompt: true }, 'continue_final_message'],
  ];
  for (const [body, param] of cases) {
    const r = validate(chatCompletionRequestSchema, body);
    assert.equal(r.ok, false, JSON.stringify(body));
    if (!r.ok) {
      assert.equal(r.param, param);
      assert.match(r.message, new RegExp(param.replace(/[[\]]/g, '\\$&')));
    }
  }
  const r = validate(completionRequestSchema, { model: 'm', prompt: [1, 'a'] });
  assert.equal(r.ok, false);
  if (!r.ok) assert.equal(r.param, 'prompt');
});

test('formatPath', () => {
  assert.equal(formatPath(['messages', 0, 'content', 2, 'text']), 'messages[0].content[2].text');
  assert.equal(formatPath([]), '');
});
