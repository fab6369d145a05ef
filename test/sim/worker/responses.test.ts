/** The simulated worker's `POST /v1/responses`, in the Responses API's shapes. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startSimWorker } from '../../../src/sim/worker/server.js';

const MODEL = 'llama-3.1-8b';

test('answers a response whole or as typed events, cut at max_output_tokens as incomplete', async () => {
  const w = await startSimWorker({ port: 0, model: MODEL, speed: 100 });
  const post = (body: unknown) => fetch(w.url + '/v1/responses', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  try {
    const r = await post({ model: MODEL, input: 'Tell me a long story about a gateway.', max_output_tokens: 5, temperature: 0 });
    assert.equal(r.status, 200);
    const j = (await r.json()) as any;
    assert.equal(j.object, 'response');
    assert.equal(j.usage.output_tokens <= 5, true);
    if (j.usage.output_tokens === 5) {
      assert.equal(j.status, 'incomplete');
      assert.deepEqual(j.incomplete_details, { reason: 'max_output_tokens' });
    }
    assert.equal(j.output[0].role, 'assistant');
    // The same request streamed: the same text (temperature 0), in events.
    const s = await post({ model: MODEL, input: 'Tell me a long story about a gateway.', max_output_tokens: 5, temperature: 0, stream: true });
    const text = await s.text();
    assert.ok(!text.includes('[DONE]'));
    const blocks = text.split('\n\n').filter((b) => b.trim() !== '');
    const done = JSON.parse(/^data: (.*)$/m.exec(blocks.at(-1)!)![1]!);
    assert.equal(done.response.output[0].content[0].text, j.output[0].content[0].text);
    assert.equal(done.response.usage.output_tokens, j.usage.output_tokens);
    // Input items: messages with parts, a function call and its output.
    const items = await post({
      model: MODEL,
      instructions: 'Use tools.',
      input: [
        { role: 'user', content: [{ type: 'input_text', text: 'Weather?' }] },
        { type: 'function_call', name: 'weather', arguments: '{}', call_id: 'c1' },
        { type: 'function_call_output', call_id: 'c1', output: 'sunny' },
      ],
      max_output_tokens: 3,
    });
    assert.equal(items.status, 200);
    // vLLM's errors: the model and a missing input.
    assert.equal((await post({ model: 'other', input: 'x' })).status, 404);
    const bad = await post({ model: MODEL });
    assert.equal(bad.status, 400);
  } finally {
    await w.close();
  }
});
