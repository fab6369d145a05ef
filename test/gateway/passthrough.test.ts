import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODEL, metricValue, post, startGateway, startSims, startStub, workerStandIn } from './helpers.js';

test('/tokenize and /detokenize reach a worker of the model and come back as it answers', async () => {
  const sims = await startSims(2);
  const { gw, url } = await startGateway(sims.map((s) => s.url), { server: { routingHeaders: true } });
  try {
    const body = { model: MODEL, prompt: 'The gateway routes by prefix.' };
    const direct = await post(sims[0]!.url + '/tokenize', body);
    const via = await post(url + '/tokenize', body);
    assert.equal(via.status, 200, via.text);
    assert.deepEqual(via.json, direct.json);
    assert.match(via.headers.get('x-kvgate-worker') ?? '', /./);
    const chat = await post(url + '/tokenize', { model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(chat.status, 200, chat.text);
    assert.ok(chat.json.count > 0);
    // Nothing to route on but the model: still served.
    const back = await post(url + '/detokenize', { model: MODEL, tokens: via.json.tokens });
    assert.equal(back.status, 200, back.text);
    assert.equal(typeof back.json.prompt, 'string');
    const m = await (await fetch(url + '/metrics')).text();
    assert.equal(metricValue(m, 'kvgate_requests_total', { route: 'tokenize', model: MODEL, status: '200' }), 2);
    assert.equal(metricValue(m, 'kvgate_requests_total', { route: 'detokenize', model: MODEL, status: '200' }), 1);
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});

test('/v1/rerank, /score, /pooling, /classify: the body goes to the worker byte for byte, on its path', async () => {
  const seen: Array<{ path: string; body: string }> = [];
  const stub = await startStub(
    workerStandIn((req, raw, res) => {
      seen.push({ path: req.url ?? '', body: raw });
      if (req.url === '/classify') {
        // The worker refuses: relayed in OpenAI's shape, not retried elsewhere.
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'this model does not classify', type: 'BadRequestError', param: null, code: 400 } }));
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: 'rerank-1', results: [{ index: 1, relevance_score: 0.9 }], echo: req.url }));
    }),
  );
  const { gw, url } = await startGateway([stub.url]);
  try {
    const rerank = `{"model":"${MODEL}","query":"which river is longest?","documents":["the Nile","the Amazon"],"top_n":1}`;
    const r = await fetch(url + '/v1/rerank', { method: 'POST', headers: { 'content-type': 'application/json' }, body: rerank });
    assert.equal(r.status, 200);
    const j = (await r.json()) as { results: unknown[]; echo: string };
    assert.equal(j.echo, '/v1/rerank');
    assert.deepEqual(seen.at(-1), { path: '/v1/rerank', body: rerank });
    for (const path of ['/score', '/pooling']) {
      const sent = JSON.stringify({ model: MODEL, text_1: 'a', text_2: ['b', 'c'], extra: { kept: true } });
      const x = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: sent });
      assert.equal(x.status, 200, path);
      assert.deepEqual(seen.at(-1), { path, body: sent });
    }
    const refused = await post(url + '/classify', { model: MODEL, input: 'x' });
    assert.equal(refused.status, 400);
    assert.equal(refused.json.error.type, 'invalid_request_error');
    assert.equal(seen.filter((s) => s.path === '/classify').length, 1, 'a 4xx is not retried');
    const m = await (await fetch(url + '/metrics')).text();
    assert.equal(metricValue(m, 'kvgate_requests_total', { route: 'rerank', model: MODEL, status: '200' }), 1);
    assert.equal(metricValue(m, 'kvgate_requests_total', { route: 'classify', model: MODEL, status: '400' }), 1);
  } finally {
    await gw.close();
    await stub.close();
  }
});

test('passthrough endpoints: a model is needed to route, and it must be served', async () => {
  const sims = await startSims(1);
  const { gw, url } = await startGateway(sims.map((s) => s.url));
  try {
    const noModel = await post(url + '/tokenize', { prompt: 'x' });
    assert.equal(noModel.status, 400);
    assert.equal(noModel.json.error.param, 'model');
    assert.match(noModel.json.error.message, /routes by model/);
    const unknown = await post(url + '/v1/score', { model: 'nope', text_1: 'a', text_2: 'b' });
    assert.equal(unknown.status, 404);
    assert.equal(unknown.json.error.param, 'model');
    const notObject = await post(url + '/rerank', [1, 2]);
    assert.equal(notObject.status, 400);
    const get = await fetch(url + '/tokenize');
    assert.equal(get.status, 405);
    assert.equal(get.headers.get('allow'), 'POST');
    // A path vLLM does not serve is a 404 in OpenAI's shape.
    const none = await post(url + '/v1/audio/speech', { model: MODEL, input: 'x' });
    assert.equal(none.status, 404);
    assert.equal(typeof none.json.error.message, 'string');
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});
