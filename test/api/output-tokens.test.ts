import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { OutputTokenCounter } from '../../src/api/output-tokens.js';
import { TAIL_AT_BOUNDARY, updateTail } from '../../src/api/sse.js';

/** Feed `parts` as relayed chunks, as the relay does (the tail before each chunk). */
function count(parts: string[], kind: 'chat' | 'completions', stream: boolean): number | undefined {
  const c = new OutputTokenCounter();
  let tail = TAIL_AT_BOUNDARY;
  for (const p of parts) {
    const b = Buffer.from(p);
    c.chunk(b, stream, tail);
    tail = updateTail(tail, b);
  }
  return c.total(kind, stream);
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
  });

  it('prefers a stream’s usage (include_usage) to its event count', () => {
    const parts = [...chatStream(3, false).slice(0, -1), ev({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 12, total_tokens: 17 } }), 'data: [DONE]\n\n'];
    assert.equal(count(parts, 'chat', true), 12);
  });
});
