/** The gateway with every write held to the end of its turn (as under saturation) answers exactly as without. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { request } from 'node:http';
import { setHoldMode } from '../../src/http/write-batch.js';
import { MODEL, parseSse, post, startGateway, startSims, streamText } from './helpers.js';

const chat = { model: MODEL, messages: [{ role: 'user', content: 'Name three rivers.' }], max_tokens: 24, temperature: 0 };

test('held writes: JSON, streams, thirty requests at once, a worker 4xx and a client leaving mid-stream', async (t) => {
  const [sim] = await startSims(1);
  t.after(() => sim!.close());
  const direct = await post(sim!.url + '/v1/chat/completions', chat);
  const directStream = await post(sim!.url + '/v1/chat/completions', { ...chat, stream: true });
  for (const batchWrites of [true, false]) {
    setHoldMode('always');
    const { gw, url } = await startGateway([sim!.url], { server: { batchWrites }, caps: { maxTokens: 100_000_000, maxTotalTokens: 100_000_000 } });
    try {
      const a = await post(url + '/v1/chat/completions', chat);
      assert.equal(a.status, 200);
      assert.match(a.headers.get('x-request-id') ?? '', /^[0-9a-f-]{36}$/);
      assert.equal(a.json.choices[0].message.content, direct.json.choices[0].message.content);

      const many = await Promise.all(Array.from({ length: 30 }, (_, i) => post(url + '/v1/chat/completions', { ...chat, stream: i % 2 === 0 })));
      for (const [i, r] of many.entries()) {
        assert.equal(r.status, 200);
        if (i % 2 === 0) assert.equal(streamText(parseSse(r.text)), streamText(parseSse(directStream.text)));
        else assert.equal(r.json.choices[0].message.content, direct.json.choices[0].message.content);
      }

      const bad = await post(url + '/v1/chat/completions', { ...chat, max_tokens: 10_000_000 });
      assert.equal(bad.status, 400);
      assert.ok(bad.headers.get('x-request-id'));

      // A client that leaves after the first event: the gateway stays up and serves the next one.
      await new Promise<void>((resolve, reject) => {
        const u = new URL(url + '/v1/chat/completions');
        const req = request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
          res.once('data', () => {
            req.destroy();
            resolve();
          });
        });
        req.on('error', (e) => (req.destroyed ? resolve() : reject(e)));
        req.end(JSON.stringify({ ...chat, max_tokens: 400, stream: true }));
      });
      const after = await post(url + '/v1/chat/completions', chat);
      assert.equal(after.status, 200);
    } finally {
      await gw.close();
      setHoldMode('auto');
    }
  }
});
