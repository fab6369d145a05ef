/** Both relay clients (kvgate's own pool, the default, and undici's) serve the same answers. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseConfig } from '../../src/config/index.js';
import { MODEL, parseSse, post, startGateway, startSims, streamText } from './helpers.js';

const chat = { model: MODEL, messages: [{ role: 'user', content: 'Name three rivers.' }], max_tokens: 16, temperature: 0 };

test('relay client: kvgate and undici relay the same JSON and SSE answers; an unknown client is a config error', async () => {
  const [sim] = await startSims(1);
  const direct = await post(sim!.url + '/v1/chat/completions', chat);
  const directStream = await post(sim!.url + '/v1/chat/completions', { ...chat, stream: true });
  try {
    for (const client of ['kvgate', 'undici'] as const) {
      const { gw, url } = await startGateway([sim!.url], { upstream: { client }, caps: { maxTokens: 100_000_000, maxTotalTokens: 100_000_000 } });
      try {
        const a = await post(url + '/v1/chat/completions', chat);
        assert.equal(a.status, 200, client);
        assert.equal(a.json.choices[0].message.content, direct.json.choices[0].message.content, client);
        const s = await post(url + '/v1/chat/completions', { ...chat, stream: true });
        const events = parseSse(s.text);
        assert.equal(events.at(-1), '[DONE]', client);
        assert.equal(streamText(events), streamText(parseSse(directStream.text)), client);
        // A worker's 4xx is relayed in OpenAI's shape through either client.
        const bad = await post(url + '/v1/chat/completions', { ...chat, max_tokens: 10_000_000 });
        assert.equal(bad.status, 400, client);
        assert.match(bad.json.error.message, /context|max_tokens|token/i, client);
      } finally {
        await gw.close();
      }
    }
  } finally {
    await sim!.close();
  }
  assert.throws(() => parseConfig({ upstream: { client: 'curl' } }), /upstream\.client/);
});
