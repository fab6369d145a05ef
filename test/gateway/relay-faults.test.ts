/** Worker faults the relay must not pass on: a request that kills its worker, a stream cut short, a huge Retry-After. */
import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { test } from 'node:test';
import { MAX_UPSTREAM_RETRY_AFTER_SECONDS } from '../../src/gateway/pipeline/relay-attempt.js';
import { MODEL, metricValue, post, startGateway, startStub, workerStandIn } from './helpers.js';

const quietFleet = { health: { intervalMs: 60_000 }, scrape: { intervalMs: 60_000 }, policy: { name: 'round-robin' } };

function completion(res: ServerResponse): void {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ id: 'cmpl-1', object: 'text_completion', model: MODEL, choices: [{ index: 0, text: 'ok', finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }));
}

/** A worker that dies (drops the connection, then refuses all) on a request whose prompt says POISON. */
async function startMortal() {
  let got = 0;
  let dead = false;
  const stub = await startStub(
    workerStandIn((req, body, res) => {
      got++;
      if (dead || body.includes('POISON')) {
        dead = true;
        req.socket.destroy();
        return;
      }
      completion(res);
    }),
  );
  return { ...stub, got: () => got, dead: () => dead };
}

test('a request whose worker dies serving it alone is not retried on another: 502 upstream_worker_failed_on_request', async () => {
  const a = await startMortal();
  const b = await startMortal();
  const { gw, url } = await startGateway([a.url, b.url], { ...quietFleet, retry: { attempts: 2 } });
  try {
    const r = await post(url + '/v1/completions', { model: MODEL, prompt: 'POISON pill', max_tokens: 4 });
    assert.equal(r.status, 502);
    assert.equal(r.json.error.code, 'upstream_worker_failed_on_request');
    assert.equal(r.json.error.type, 'upstream_error');
    assert.match(r.json.error.message, /not retried/);
    assert.equal(a.got() + b.got(), 1, 'one worker saw it');
    assert.equal([a, b].filter((w) => w.dead()).length, 1, 'the other worker is still up');
    // Nothing else lost: the survivor serves what comes next (the dead one fails over as before).
    for (let i = 0; i < 4; i++) {
      const ok = await post(url + '/v1/completions', { model: MODEL, prompt: `fine ${i}`, max_tokens: 4 });
      assert.equal(ok.status, 200, ok.text);
    }
    const m = await (await fetch(url + '/metrics')).text();
    const died = ['w0', 'w1'].map((w) => metricValue(m, 'kvgate_upstream_failures_total', { worker: w, reason: 'worker_died' }) ?? 0);
    assert.equal(died[0]! + died[1]!, 1);
    assert.equal(gw.router.openCount, 0);
  } finally {
    await gw.close();
    await a.close();
    await b.close();
  }
});

test('a worker that exits on a request sent over a kept-alive connection: not retried elsewhere either', async () => {
  // The gateway's pool sends a request again once when a reused connection closes unanswered (an
  // idle-timeout race); here the resend finds the worker gone, and the request stays unretried.
  const mk = async () => {
    let got = 0;
    const w: { got: () => number; exited: boolean; stub?: Awaited<ReturnType<typeof startStub>> } = { got: () => got, exited: false };
    w.stub = await startStub(
      workerStandIn((req, body, res) => {
        got++;
        if (body.includes('POISON')) {
          w.exited = true;
          w.stub!.server.close();
          w.stub!.server.closeAllConnections();
          return;
        }
        completion(res);
      }),
    );
    return w;
  };
  const a = await mk();
  const b = await mk();
  const { gw, url } = await startGateway([a.stub!.url, b.stub!.url], { ...quietFleet, retry: { attempts: 2 } });
  try {
    for (let i = 0; i < 4; i++) assert.equal((await post(url + '/v1/completions', { model: MODEL, prompt: `warm ${i}`, max_tokens: 4 })).status, 200);
    const before = a.got() + b.got();
    const r = await post(url + '/v1/completions', { model: MODEL, prompt: 'POISON pill', max_tokens: 4 });
    assert.equal(r.status, 502, r.text);
    assert.equal(r.json.error.code, 'upstream_worker_failed_on_request');
    assert.equal(a.got() + b.got(), before + 1);
    assert.equal([a, b].filter((w) => w.exited).length, 1);
    assert.equal(gw.router.openCount, 0);
  } finally {
    await gw.close();
    for (const w of [a, b]) if (!w.exited) await w.stub!.close();
  }
});

test('a worker dropping a connection while it has other requests is not blamed on one: the request is retried', async () => {
  // w0 drops every POST once it holds two; w1 answers.
  const held: ServerResponse[] = [];
  const flaky = await startStub(
    workerStandIn((req, _body, res) => {
      held.push(res);
      if (held.length === 2) for (const h of held) h.socket?.destroy();
    }),
  );
  const good = await startStub(workerStandIn((_req, _body, res) => completion(res)));
  const { gw, url } = await startGateway([flaky.url, good.url], { ...quietFleet, retry: { attempts: 2 } });
  try {
    // Round-robin from w0: requests 1 and 3 go to w0, which dies holding both.
    const rs = await Promise.all([0, 1, 2].map((i) => post(url + '/v1/completions', { model: MODEL, prompt: `p${i}`, max_tokens: 4 })));
    assert.deepEqual(rs.map((r) => r.status), [200, 200, 200], rs.map((r) => r.text).join('\n'));
    assert.equal(gw.router.openCount, 0);
  } finally {
    await gw.close();
    await flaky.close();
    await good.close();
  }
});

test('a stream the worker ends without [DONE] ends with an SSE error event', async () => {
  const stub = await startStub(
    workerStandIn((_req, _body, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n');
      res.end('data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n');
    }),
  );
  const { gw, url } = await startGateway([stub.url], quietFleet);
  try {
    const r = await post(url + '/v1/chat/completions', { model: MODEL, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r.status, 200);
    assert.ok(r.text.includes('"Hel"'), 'what came is relayed');
    assert.ok(!r.text.includes('[DONE]'));
    const blocks = r.text.split('\n\n').filter((b) => b.trim() !== '');
    const last = JSON.parse(blocks.at(-1)!.slice('data: '.length));
    assert.equal(last.error.code, 'upstream_stream_truncated');
    const m = await (await fetch(url + '/metrics')).text();
    assert.equal(metricValue(m, 'kvgate_upstream_failures_total', { worker: 'w0', reason: 'truncated' }), 1);
    assert.equal(gw.router.openCount, 0);
  } finally {
    await gw.close();
    await stub.close();
  }
});

test('a complete stream, its [DONE] split over chunks, is relayed untouched', async () => {
  const stub = await startStub(
    workerStandIn((_req, _body, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\ndata: [DO');
      setTimeout(() => res.end('NE]\n\n'), 20);
    }),
  );
  const { gw, url } = await startGateway([stub.url], quietFleet);
  try {
    const r = await post(url + '/v1/chat/completions', { model: MODEL, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r.status, 200);
    assert.ok(r.text.endsWith('data: [DONE]\n\n'));
    assert.ok(!r.text.includes('"error"'));
  } finally {
    await gw.close();
    await stub.close();
  }
});

test('a worker’s huge Retry-After is clamped before it reaches the client', async () => {
  const stub = await startStub(
    workerStandIn((_req, _body, res) => {
      res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '999999' });
      res.end('{"error":{"message":"busy","type":"rate_limit_error","code":429}}');
    }),
  );
  const { gw, url } = await startGateway([stub.url], quietFleet);
  try {
    const r = await post(url + '/v1/completions', { model: MODEL, prompt: 'hi', max_tokens: 4 });
    assert.equal(r.status, 503);
    assert.equal(r.json.error.code, 'upstream_overloaded');
    assert.equal(r.headers.get('retry-after'), String(MAX_UPSTREAM_RETRY_AFTER_SECONDS));
  } finally {
    await gw.close();
    await stub.close();
  }
});

test('the first-byte timeout stretches to a long prompt’s prefill; a short prompt still times out', async () => {
  // Every stream's first byte comes 800 ms after its request.
  const slow = await startStub(
    workerStandIn((_req, _body, res) => {
      setTimeout(() => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end('data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"ok"}}]}\n\ndata: [DONE]\n\n');
      }, 800);
    }),
  );
  const { gw, url } = await startGateway([slow.url], { ...quietFleet, outlier: { enabled: false }, timeouts: { firstByteMs: 300 }, retry: { attempts: 0 } });
  try {
    // About 6,000 tokens: 0.6 s of prefill at the default 10,000 tokens/s, 2.4 s allowed (factor 4).
    const long = 'the of and to in is was for on that '.repeat(600);
    const r = await post(url + '/v1/chat/completions', { model: MODEL, stream: true, messages: [{ role: 'user', content: long }] });
    assert.equal(r.status, 200, r.text);
    assert.ok(r.text.endsWith('data: [DONE]\n\n'));
    const short = await post(url + '/v1/chat/completions', { model: MODEL, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(short.status, 504, short.text);
    assert.match(short.json.error.message, /within 300 ms/);
    assert.equal(gw.router.openCount, 0);
  } finally {
    await gw.close();
    await slow.close();
  }
});
