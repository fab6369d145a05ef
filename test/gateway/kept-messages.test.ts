/** Through the gateway: a long message sent again is not tokenized again, and /metrics says so. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODEL, metricValue, post, startGateway, startSims } from './helpers.js';

test('a conversation resent with a new turn: its long messages are kept, the new one tokenized', async (t) => {
  const [sim] = await startSims(1);
  t.after(() => sim!.close());
  const { gw, url } = await startGateway([sim!.url]);
  t.after(() => gw.close());
  const counts = async (): Promise<{ hits: number; misses: number }> => {
    const text = await (await fetch(url + '/metrics')).text();
    return {
      hits: metricValue(text, 'kvgate_tokenizer_kept_message_hits_total') ?? NaN,
      misses: metricValue(text, 'kvgate_tokenizer_kept_message_misses_total') ?? NaN,
    };
  };
  const before = await counts();
  const system = { role: 'system', content: `A long system prompt, unique to this test ${Date.now()}: ${'follow the rules. '.repeat(40)}` };
  const turn1 = { role: 'user', content: `First question, long enough to be kept: ${'why is the sky blue? '.repeat(20)}` };
  const first = await post(url + '/v1/chat/completions', { model: MODEL, messages: [system, turn1], max_tokens: 4 });
  assert.equal(first.status, 200);
  const mid = await counts();
  assert.equal(mid.misses - before.misses, 2);
  assert.equal(mid.hits - before.hits, 0);
  const second = await post(url + '/v1/chat/completions', {
    model: MODEL,
    messages: [system, turn1, { role: 'assistant', content: 'Short answer.' }, { role: 'user', content: `And then? ${'tell me more. '.repeat(30)}` }],
    max_tokens: 4,
  });
  assert.equal(second.status, 200);
  const after = await counts();
  assert.equal(after.hits - mid.hits, 2, 'the system message and the first turn were kept');
  assert.equal(after.misses - mid.misses, 1, 'only the new long turn was tokenized (the short answer is never kept)');
  const kept = metricValue(await (await fetch(url + '/metrics')).text(), 'kvgate_tokenizer_kept_ids') ?? NaN;
  assert.ok(kept > 300, `ids kept: ${kept}`);
});

test('tokenizers.keptIds: 0 keeps no ids, and the gauge says so', async (t) => {
  const [sim] = await startSims(1);
  t.after(() => sim!.close());
  const { gw, url } = await startGateway([sim!.url], { tokenizers: { keptIds: 0 } });
  t.after(() => gw.close());
  const system = { role: 'system', content: `Another long system prompt ${Date.now()}: ${'keep nothing. '.repeat(40)}` };
  for (let i = 0; i < 2; i++) {
    const r = await post(url + '/v1/chat/completions', { model: MODEL, messages: [system, { role: 'user', content: `question ${i}` }], max_tokens: 4 });
    assert.equal(r.status, 200);
  }
  const text = await (await fetch(url + '/metrics')).text();
  assert.equal(metricValue(text, 'kvgate_tokenizer_kept_ids'), 0);
});
