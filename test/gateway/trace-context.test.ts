/** A client's W3C trace context reaches the worker, and the request's log line names its trace. */
import assert from 'node:assert/strict';
import type { IncomingHttpHeaders } from 'node:http';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { createLogger } from '../../src/telemetry/logger.js';
import { MODEL, post, startGateway, startStub, waitFor, workerStandIn } from './helpers.js';

const TP = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

test('traceparent and tracestate are passed on to the worker; an invalid one is dropped; the log names the trace', async () => {
  const seen: IncomingHttpHeaders[] = [];
  const worker = await startStub(
    workerStandIn((req, _body, res) => {
      seen.push(req.headers);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: 'x', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } }));
    }),
  );
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l));
      cb();
    },
  });
  const { gw, url } = await startGateway([worker.url], {}, { logger: createLogger({ level: 'info', destination: sink }) });
  try {
    const body = { model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 };
    const traced = await post(url + '/v1/chat/completions', body, { traceparent: TP, tracestate: 'congo=t61rcWkgMzE' });
    assert.equal(traced.status, 200, traced.text);
    assert.equal(seen[0]!.traceparent, TP);
    assert.equal(seen[0]!.tracestate, 'congo=t61rcWkgMzE');
    assert.equal(seen[0]!['x-request-id'], traced.headers.get('x-request-id'));

    assert.equal((await post(url + '/v1/chat/completions', body, { traceparent: 'not-a-trace', tracestate: 'a=b' })).status, 200);
    assert.equal(seen[1]!.traceparent, undefined);
    assert.equal(seen[1]!.tracestate, undefined);
    assert.equal((await post(url + '/v1/chat/completions', body)).status, 200);
    assert.equal(seen[2]!.traceparent, undefined);

    await waitFor(() => lines.filter((l) => l.msg === 'request').length === 3);
    const requests = lines.filter((l) => l.msg === 'request');
    assert.deepEqual(requests.map((l) => l.traceId), ['4bf92f3577b34da6a3ce929d0e0e4736', undefined, undefined]);
  } finally {
    await gw.close();
    await worker.close();
  }
});
