/**
 * plainChatRequest against the schema it stands in for: on random chat requests, valid and not,
 * whatever it accepts the schema accepts, with the same output down to the order of the fields
 * (a changed body is re-serialised from it); everything else it leaves to the schema.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { plainChatRequest } from '../../src/api/plain-chat.js';
import { chatCompletionRequestSchema } from '../../src/api/schemas.js';
import { seededRng } from '../../src/util/rng.js';

const ABSENT = Symbol('absent');

const VALUES: Record<string, unknown[]> = {
  model: ['m', 'llama', '', 5, null],
  stream: [true, false, null, 'yes'],
  stream_options: [null, { include_usage: true }, { include_usage: false, zz: 1 }, { zz: 1 }, { include_usage: 'x' }, [], 3],
  max_tokens: [1, 16, 0, -1, 2.5, null, 1e300, '5', 2 ** 53 + 2],
  temperature: [0, 2, 0.7, 2.1, -0.1, null, '1'],
  top_p: [0, 1, 0.9, 1.1, null],
  n: [1, 128, 129, 0, null, 1.5],
  stop: ['x', ['a'], null, 5, []],
  presence_penalty: [-2, 2, 0.5, 3, null],
  frequency_penalty: [0, -2.5, null],
  seed: [0, -5, 1.5, null, 2 ** 60],
  user: ['u', 5, null],
  priority: [1, -1, 0, 1.5, null, 'high'],
  max_completion_tokens: [5, 0, null, -3],
  add_generation_prompt: [true, false, null],
  continue_final_message: [true, false, 1],
  add_special_tokens: [true, false, 'x'],
  documents: [[{ a: 'b' }], null, [{ a: 1 }]],
  chat_template: ['{{x}}', null, 5],
  chat_template_kwargs: [{ a: 1 }, null, 5],
  zz_unknown: [1, 'x', { deep: [1, 2] }, null],
  tools: [[{ type: 'function', function: { name: 'f' } }]],
};

function pick<T>(rand: () => number, xs: readonly T[]): T {
  return xs[Math.floor(rand() * xs.length)]!;
}

function message(rand: () => number): unknown {
  if (rand() < 0.03) return pick(rand, [null, 'hi', 5, ['x']]);
  const fields: Array<[string, unknown]> = [];
  // Mostly what clients send; now and then what the plain copy leaves to the schema, or what both refuse.
  const odd = rand() < 0.15;
  const role = pick<unknown>(rand, odd ? ['bot', ABSENT, 5, 'user'] : ['system', 'user', 'assistant', 'tool', 'developer', 'function']);
  const content = pick<unknown>(rand, odd ? [[{ type: 'text', text: 'x' }], 5, { text: 'x' }, ABSENT] : ['hi', 'a longer text', '', null, ABSENT]);
  const name = pick<unknown>(rand, odd ? ['n', 5] : [ABSENT, ABSENT, 'n']);
  if (role !== ABSENT) fields.push(['role', role]);
  if (content !== ABSENT) fields.push(['content', content]);
  if (name !== ABSENT) fields.push(['name', name]);
  if (rand() < 0.2) fields.push(['tool_call_id', 'call_1']);
  if (rand() < 0.1) fields.push(['tool_calls', [{ id: 'c', type: 'function' }]]);
  // Any order: the schema's output has its own.
  fields.sort(() => rand() - 0.5);
  return Object.fromEntries(fields);
}

function request(rand: () => number): unknown {
  const fields: Array<[string, unknown]> = [];
  for (const [k, vs] of Object.entries(VALUES)) {
    // Most requests carry a few fields, mostly valid values (the first ones).
    if (k !== 'model' && rand() < 0.8) continue;
    if (k === 'model' && rand() < 0.03) continue;
    fields.push([k, rand() < 0.85 ? vs[0] : pick(rand, vs)]);
  }
  const shape = rand();
  if (shape > 0.03) fields.push(['messages', shape < 0.06 ? [] : shape < 0.08 ? 'hi' : Array.from({ length: 1 + Math.floor(rand() * 4) }, () => message(rand))]);
  fields.sort(() => rand() - 0.5);
  return Object.fromEntries(fields);
}

test('whatever the plain copy accepts, the schema accepts with the same output, field order included', () => {
  const rand = seededRng(49);
  let accepted = 0;
  let leftToSchema = 0;
  for (let i = 0; i < 20_000; i++) {
    const input = request(rand);
    const before = JSON.stringify(input);
    const plain = plainChatRequest(input);
    const z = chatCompletionRequestSchema.safeParse(input);
    assert.equal(JSON.stringify(input), before, 'the input is left as it was');
    if (plain === null) {
      if (z.success) leftToSchema++;
      continue;
    }
    accepted++;
    assert.ok(z.success, `the schema refuses what the copy accepted: ${before}`);
    assert.equal(JSON.stringify(plain), JSON.stringify(z.data), `the same output for ${before}`);
    assert.deepEqual(plain, z.data);
  }
  // Both sides were exercised: plain requests taken, and shapes left to the schema that it accepts.
  assert.ok(accepted > 2000, `accepted ${accepted}`);
  assert.ok(leftToSchema > 500, `left to the schema ${leftToSchema}`);
});

test('a request as a client sends it is taken by the plain copy; a __proto__ field is left to the schema', () => {
  const body = JSON.parse('{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi","name":"ann"}],"max_tokens":16,"stream":true,"stream_options":{"include_usage":true},"temperature":0.2,"x_vendor":{"a":1}}') as unknown;
  const plain = plainChatRequest(body);
  assert.ok(plain !== null);
  assert.equal(JSON.stringify(plain), JSON.stringify(chatCompletionRequestSchema.parse(body)));
  assert.equal(plainChatRequest(JSON.parse('{"model":"m","messages":[{"role":"user","content":"hi"}],"__proto__":{"x":1}}')), null);
  assert.equal(plainChatRequest(JSON.parse('{"model":"m","messages":[{"role":"user","content":"hi","__proto__":{"x":1}}]}')), null);
  // The schema's refinement stays the schema's.
  assert.equal(plainChatRequest({ model: 'm', messages: [{ role: 'user', content: 'x' }], continue_final_message: true, add_generation_prompt: true }), null);
});
