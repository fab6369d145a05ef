/**
 * What the pick sets for the proxy when the body changed (an alias resolved) and when the worker
 * has credentials and headers of its own, in both body modes; and the same answer again for the
 * next request to the same worker (the answers are encoded once and kept).
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { BodySendMode } from '../../src/epp/descriptor.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { endpointOfUrl, MODEL, startEpp, startSims, waitFor } from './helpers.js';

let sims: SimWorker[];
let e: Awaited<ReturnType<typeof startEpp>>;

before(async () => {
  sims = await startSims(2);
  e = await startEpp([], {
    pools: [{ name: 'main', model: MODEL, apiKey: { value: 'worker-secret' }, headers: { 'x-team': 'infra' }, workers: sims.map((s, i) => ({ url: s.url, id: `w${i}` })) }],
    aliases: { 'gpt-4o-mini': MODEL },
  });
  await waitFor(() => e.epp.registry.workers.every((w) => w.snapshot !== null));
});

after(async () => {
  await e.close();
  await Promise.all(sims.map((s) => s.close()));
});

const POST = { ':method': 'POST', ':path': '/v1/chat/completions', ':authority': 'gw.test', 'content-type': 'application/json', authorization: 'Bearer client-key' };
const chat = (model: string, content: string): Buffer => Buffer.from(JSON.stringify({ model, max_tokens: 2, messages: [{ role: 'user', content }] }));

async function finish(s: ReturnType<typeof e.client.open>): Promise<void> {
  s.responseHeaders(200, {}, { endOfStream: true });
  await s.next();
  s.end();
  assert.equal((await s.status).code, 0);
}

test("an alias resolved: the body passed on names the served model, with its Content-Length; the worker's key and headers are set", async () => {
  const body = chat('gpt-4o-mini', 'hello there');
  for (const mode of [BodySendMode.FULL_DUPLEX_STREAMED, BodySendMode.BUFFERED]) {
    const s = e.client.open();
    s.requestHeaders(POST, { bodyMode: { request: mode, response: mode } });
    if (mode === BodySendMode.BUFFERED) assert.ok((await s.next())?.request_headers, 'BUFFERED: the headers answered first');
    s.requestBody(body);
    const a = await s.readAnswer();
    const passed = JSON.parse(a.body.toString()) as { model: string; messages: unknown };
    assert.equal(passed.model, MODEL, `${mode}: the alias is resolved in the body passed on`);
    assert.deepEqual(passed.messages, [{ role: 'user', content: 'hello there' }]);
    assert.equal(a.setHeaders['content-length'], String(a.body.length), `${mode}: the new Content-Length`);
    assert.equal(a.setHeaders.authorization, 'Bearer worker-secret', `${mode}: the pool's key replaces the client's`);
    assert.equal(a.setHeaders['x-team'], 'infra');
    assert.deepEqual(a.removeHeaders, [], 'nothing to remove: the worker key is set over the client one');
    assert.ok(sims.map((x) => endpointOfUrl(x.url)).includes(a.endpoint!));
    assert.equal(a.metadataEndpoint, a.endpoint);
    await finish(s);
  }
});

test('a UTF-8 byte order mark before the JSON: the body passed on is the JSON without it, with its Content-Length', async () => {
  const json = chat(MODEL, 'from PowerShell');
  const s = e.client.open();
  s.requestHeaders(POST);
  s.requestBody(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), json]));
  const a = await s.readAnswer();
  assert.equal(a.body[0], 0x7b, 'the body begins with its JSON');
  assert.deepEqual(JSON.parse(a.body.toString()), JSON.parse(json.toString()));
  assert.equal(a.setHeaders['content-length'], String(a.body.length));
  await finish(s);
});

test('the body unchanged: no Content-Length, and the next request picked to the same worker gets the same answer', async () => {
  const seen = new Map<string, string>();
  for (let i = 0; i < 8; i++) {
    const s = e.client.open();
    s.requestHeaders(POST);
    const body = chat(MODEL, `question ${i % 2}`);
    s.requestBody(body);
    const a = await s.readAnswer();
    assert.deepEqual(a.body, body, 'the body as it came');
    assert.equal(a.setHeaders['content-length'], undefined);
    assert.equal(a.setHeaders.authorization, 'Bearer worker-secret');
    assert.equal(a.setHeaders['x-team'], 'infra');
    assert.equal(a.clearRouteCache, true);
    const answer = JSON.stringify(a.messages[0]);
    const before = seen.get(a.endpoint!);
    if (before !== undefined) assert.equal(answer, before, 'the same answer for the same worker');
    seen.set(a.endpoint!, answer);
    await finish(s);
  }
  assert.equal(e.epp.router.openCount, 0);
});
