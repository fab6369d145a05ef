import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { remainderChunks, StreamAssembler } from '../../src/cache/assemble.js';
import { incompleteReason, renderJson, renderSse, type CacheEntry, type CompletionBody } from '../../src/cache/entry.js';
import { parseSse } from '../support.js';

const chat: CompletionBody = {
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 1700000000,
  model: 'm',
  choices: [
    {
      index: 0,
      message: {
        role: 'assistant',
        content: 'Hello world',
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{"q":"sky"}' } }],
      },
      logprobs: { content: [{ token: 'Hello', logprob: -0.1 }, { token: ' world', logprob: -0.2 }] },
      finish_reason: 'tool_calls',
    },
    { index: 1, message: { role: 'assistant', content: 'Bye' }, logprobs: null, finish_reason: 'stop' },
  ],
  usage: { prompt_tokens: 5, completion_tokens: 4, total_tokens: 9 },
};
const chatEntry: CacheEntry = { v: 1, tenant: 't', route: 'chat', storedAt: 0, body: chat };

const comp: CompletionBody = {
  id: 'cmpl-1',
  object: 'text_completion',
  created: 1700000000,
  model: 'm',
  choices: [{ index: 0, text: 'one two', logprobs: { tokens: ['one', ' two'], token_logprobs: [-1, -2], top_logprobs: [null, null], text_offset: [0, 3] }, finish_reason: 'length', stop_reason: null }],
  usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
};
const compEntry: CacheEntry = { v: 1, tenant: 't', route: 'completions', storedAt: 0, body: comp };

/** Feed an SSE text in awkward pieces (splitting events and a UTF-8 sequence). */
function assemble(route: 'chat' | 'completions', text: string, piece = 7): StreamAssembler {
  const a = new StreamAssembler(route);
  const bytes = Buffer.from(text);
  for (let i = 0; i < bytes.length; i += piece) a.push(bytes.subarray(i, i + piece));
  return a;
}

describe('entries: rendering and assembling', () => {
  it('a chat answer rendered as SSE assembles back into the same answer', () => {
    const sse = renderSse(chatEntry, true);
    const events = parseSse(sse);
    assert.equal(events.at(-1), '[DONE]');
    assert.equal(events[0].object, 'chat.completion.chunk');
    assert.deepEqual(events[0].choices[0].delta, { role: 'assistant', content: '' });
    assert.deepEqual(events.at(-2).choices, []);
    assert.deepEqual(events.at(-2).usage, chat.usage);
    assert.equal(events[1].choices[0].delta.tool_calls[0].index, 0);
    const a = assemble('chat', sse);
    assert.ok(a.complete);
    const back = a.build();
    assert.deepEqual(back.choices, chat.choices);
    assert.deepEqual(back.usage, chat.usage);
    assert.equal(back.id, chat.id);
    assert.equal(back.object, 'chat.completion');
    assert.equal(JSON.parse(renderJson(chatEntry)).choices[0].message.content, 'Hello world');
  });

  it('without include_usage there is no usage chunk; a completion round-trips too', () => {
    assert.ok(!renderSse(chatEntry, false).includes('"usage"'));
    const a = assemble('completions', renderSse(compEntry, true), 3);
    assert.deepEqual(a.build().choices, comp.choices);
  });

  it('merges token-by-token deltas, tool-call fragments and logprobs', () => {
    const ev = (o: unknown) => `data: ${JSON.stringify(o)}\n\n`;
    const base = { id: 'x', object: 'chat.completion.chunk', created: 1, model: 'm' };
    const text =
      ev({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' } }] }) +
      ev({ ...base, choices: [{ index: 0, delta: { content: 'Hé' }, logprobs: { content: [{ token: 'Hé' }] } }] }) +
      ev({ ...base, choices: [{ index: 0, delta: { content: 'llo' }, logprobs: { content: [{ token: 'llo' }] } }] }) +
      ev({ ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: 'c1', type: 'function', function: { name: 'f', arguments: '{"a"' } }] } }] }) +
      ev({ ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: ':1}' } }] }, finish_reason: 'tool_calls' }] }) +
      ': a comment\n\n' +
      'data: [DONE]\n\n';
    const a = assemble('chat', text, 5);
    assert.ok(a.complete);
    const c = a.build().choices[0]!;
    assert.equal(c.message!.content, 'Héllo');
    assert.deepEqual(c.message!.tool_calls, [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }]);
    assert.deepEqual(c.logprobs, { content: [{ token: 'Hé' }, { token: 'llo' }] });
  });

  it('is incomplete without [DONE], with an error event, or with an unfinished choice', () => {
    const sse = renderSse(chatEntry, false);
    assert.equal(assemble('chat', sse.replace('data: [DONE]\n\n', '')).complete, false);
    const err = assemble('chat', sse.replace('data: [DONE]\n\n', 'data: {"error":{"message":"boom"}}\n\n'));
    assert.equal(err.complete, false);
    assert.equal(err.failed, 'error event');
    assert.equal(assemble('chat', 'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n').complete, false);
    assert.equal(assemble('chat', 'data: {not json}\n\ndata: [DONE]\n\n').complete, false);
  });

  it('incompleteReason accepts normal endings only', () => {
    assert.equal(incompleteReason(chat, 'chat'), null);
    assert.equal(incompleteReason({ ...chat, choices: [{ ...chat.choices[0]!, finish_reason: 'abort' }] }, 'chat'), 'finish_reason abort');
    assert.equal(incompleteReason({ error: { message: 'x' } }, 'chat'), 'error body');
    assert.equal(incompleteReason({ choices: [] }, 'chat'), 'no choices');
    assert.equal(incompleteReason(chat, 'completions'), 'bad choice');
    const list = { object: 'list', data: [{ index: 0, embedding: [0.6, 0.8] }, { index: 1, embedding: 'AAAA' }] };
    assert.equal(incompleteReason(list, 'embeddings'), null);
    assert.equal(incompleteReason({ data: [] }, 'embeddings'), 'no data');
    assert.equal(incompleteReason({ data: [{ index: 0 }] }, 'embeddings'), 'bad item');
    assert.equal(incompleteReason(chat, 'embeddings'), 'no data');
    assert.equal(incompleteReason({ error: { message: 'x' } }, 'embeddings'), 'error body');
  });

  it('remainderChunks completes what was sent, or refuses when it is not a prefix', () => {
    const sent: CompletionBody = {
      id: 'chatcmpl-1',
      created: 1,
      model: 'm',
      choices: [
        { index: 0, message: { role: 'assistant', content: 'Hel', tool_calls: [] }, logprobs: { content: [{ token: 'Hello', logprob: -0.1 }] }, finish_reason: null },
        { index: 1, message: { role: 'assistant', content: 'Bye' }, logprobs: null, finish_reason: 'stop' },
      ],
    };
    const rest = remainderChunks(sent, chat, 'chat')!;
    assert.ok(rest);
    assert.equal(rest.length, 1, 'choice 1 was already complete');
    const c = (rest[0]!.choices as any[])[0];
    assert.equal(c.delta.content, 'lo world');
    assert.deepEqual(c.delta.tool_calls, [{ index: 0, id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{"q":"sky"}' } }]);
    assert.deepEqual(c.logprobs, { content: [{ token: ' world', logprob: -0.2 }] });
    assert.equal(c.finish_reason, 'tool_calls');
    // What was sent plus the remainder assembles into the full answer.
    const a = new StreamAssembler('chat');
    a.push(Buffer.from(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { role: 'assistant', content: 'Hel' }, logprobs: { content: [{ token: 'Hello', logprob: -0.1 }] } }] })}\n\n`));
    for (const r of rest) a.push(Buffer.from(`data: ${JSON.stringify(r)}\n\n`));
    assert.equal(a.build().choices[0]!.message!.content, 'Hello world');
    const wrong = { ...sent, choices: [{ ...sent.choices[0]!, message: { role: 'assistant', content: 'Help' } }] };
    assert.equal(remainderChunks(wrong, chat, 'chat'), null);
    const compSent: CompletionBody = { choices: [{ index: 0, text: 'one', logprobs: { tokens: ['one'], token_logprobs: [-1], top_logprobs: [null], text_offset: [0] }, finish_reason: null }] };
    const cr = remainderChunks(compSent, comp, 'completions')!;
    assert.equal((cr[0]!.choices as any[])[0].text, ' two');
    assert.deepEqual((cr[0]!.choices as any[])[0].logprobs.tokens, [' two']);
  });
});
