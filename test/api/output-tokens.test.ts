import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { OutputTokenCounter } from '../../src/api/output-tokens.js';
import { TAIL_AT_BOUNDARY, updateTail } from '../../src/api/sse.js';

/** A counter fed `parts` as relayed chunks, as the relay feeds it (the tail before each chunk). */
function fed(parts: string[], stream: boolean): OutputTokenCounter {
  const c = new OutputTokenCounter();
  let tail = TAIL_AT_BOUNDARY;
  for (const p of parts) {
    const b = Buffer.from(p);
    c.chunk(b, stream, tail);
    tail = updateTail(tail, b);
  }
  return c;
}

function count(parts: string[], kind: 'chat' | 'completions' | 'responses', stream: boolean): number | undefined {
  return fed(parts, stream).total(kind, stream);
}

const ev = (o: unknown) => `data: ${JSON.stringify(o)}\n\n`;
const chatStream = (tokens: number, finishApart: boolean) => [
  ev({ choices: [{ delta: { role: 'assistant', content: '' } }] }),
  ...Array.from({ length: tokens }, (_, i) => ev({ choices: [{ delta: { content: `t${i}` }, finish_reason: !finishApart && i === tokens - 1 ? 'length' : null }] })),
  ...(finishApart ? [ev({ choices: [{ delta: {}, finish_reason: 'stop' }] })] : []),
  'data: [DONE]\n\n',
];

describe('OutputTokenCounter', () => {
  it('reads usage.completion_tokens from a JSON answer, in one chunk or split anywhere', () => {
    const body = JSON.stringify({ id: 'x', choices: [{ message: { content: 'say "completion_tokens": 99' } }], usage: { prompt_tokens: 12, total_tokens: 19, completion_tokens: 7 } });
    assert.equal(count([body], 'chat', false), 7);
    for (let cut = 1; cut < body.length; cut += 7) assert.equal(count([body.slice(0, cut), body.slice(cut)], 'chat', false), 7, `cut at ${cut}`);
    assert.equal(count([JSON.stringify({ choices: [] })], 'completions', false), undefined, 'no usage: unknown');
  });

  it('counts a stream’s token events (not the chat role event or [DONE]), however the bytes are cut', () => {
    const whole = chatStream(20, false).join('');
    assert.equal(count([whole], 'chat', true), 20);
    assert.equal(count(chatStream(20, true), 'chat', true), 21, 'a separate finish event counts as one more (never fewer)');
    for (let cut = 1; cut < whole.length; cut += 3) assert.equal(count([whole.slice(0, cut), whole.slice(cut)], 'chat', true), 20, `cut at ${cut}`);
    const completions = [...Array.from({ length: 5 }, (_, i) => ev({ choices: [{ text: `t${i}` }] })), 'data: [DONE]\n\n'];
    assert.equal(count(completions, 'completions', true), 5);
    // n = 2: a role event opens each answer.
    const two = [
      ev({ choices: [{ index: 0, delta: { role: 'assistant', content: '' } }] }),
      ev({ choices: [{ index: 1, delta: { role: 'assistant', content: '' } }] }),
      ...Array.from({ length: 6 }, (_, i) => ev({ choices: [{ index: i % 2, delta: { content: `t${i}` } }] })),
      'data: [DONE]\n\n',
    ];
    assert.equal(fed(two, true).total('chat', true, 2), 6);
  });

  it('a Responses API answer: usage.output_tokens of the JSON or of the stream’s last event, nothing counted without it', () => {
    const usage = { input_tokens: 12, input_tokens_details: { cached_tokens: 0 }, output_tokens: 9, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 21 };
    const body = JSON.stringify({ id: 'resp_1', object: 'response', output: [{ content: [{ type: 'output_text', text: 'x "output_tokens": 55' }] }], usage, user: null });
    assert.equal(count([body], 'responses', false), 9);
    const sse = (type: string, o: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...o })}\n\n`;
    const stream = [
      sse('response.created', { response: { id: 'resp_1', usage: null } }),
      ...Array.from({ length: 9 }, (_, i) => sse('response.output_text.delta', { delta: `t${i}` })),
      sse('response.completed', { response: { id: 'resp_1', usage, user: null } }),
    ];
    assert.equal(count(stream, 'responses', true), 9);
    assert.equal(count(stream.slice(0, -1), 'responses', true), undefined, 'no usage: its events are not one per token');
  });

  it('prefers a stream’s usage (include_usage) to its event count', () => {
    const parts = [...chatStream(3, false).slice(0, -1), ev({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 12, total_tokens: 17 } }), 'data: [DONE]\n\n'];
    assert.equal(count(parts, 'chat', true), 12);
  });

  it('reads the prompt tokens from usage (prompt_tokens, a Responses answer’s input_tokens), and none without usage', () => {
    const prompt = (parts: string[], kind: 'chat' | 'completions' | 'responses', stream: boolean): number | undefined => fed(parts, stream).promptTotal(kind);
    // vLLM's usage also names prompt_tokens_details, which must not be read as the count.
    const body = JSON.stringify({ choices: [{ message: { content: 'x' } }], usage: { prompt_tokens: 4321, total_tokens: 4328, completion_tokens: 7, prompt_tokens_details: { cached_tokens: 4096 } } });
    assert.equal(prompt([body], 'chat', false), 4321);
    assert.equal(fed([body], false).cachedPromptTotal(), 4096);
    assert.equal(fed([JSON.stringify({ usage: { prompt_tokens: 3, completion_tokens: 1 } })], false).cachedPromptTotal(), undefined, 'no details: unknown');
    for (let cut = 1; cut < body.length; cut += 11) assert.equal(prompt([body.slice(0, cut), body.slice(cut)], 'completions', false), 4321, `cut at ${cut}`);
    const withUsage = [...chatStream(3, false).slice(0, -1), ev({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 } }), 'data: [DONE]\n\n'];
    assert.equal(prompt(withUsage, 'chat', true), 5);
    assert.equal(prompt(chatStream(3, false), 'chat', true), undefined, 'a stream without usage says nothing');
    const responses = JSON.stringify({ id: 'resp_1', output: [], usage: { input_tokens: 42, input_tokens_details: { cached_tokens: 0 }, output_tokens: 9, total_tokens: 51 } });
    assert.equal(prompt([responses], 'responses', false), 42);
  });
});
