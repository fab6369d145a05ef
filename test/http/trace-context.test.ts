import assert from 'node:assert/strict';
import { test } from 'node:test';
import { traceContextOf } from '../../src/http/trace-context.js';

const TP = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

test('a valid traceparent is passed on with its tracestate; anything the spec calls invalid is dropped whole', () => {
  assert.deepEqual(traceContextOf({ traceparent: TP, tracestate: 'congo=t61rcWkgMzE' }), {
    headers: { traceparent: TP, tracestate: 'congo=t61rcWkgMzE' },
    traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
  });
  assert.deepEqual(traceContextOf({ traceparent: TP }), { headers: { traceparent: TP }, traceId: '4bf92f3577b34da6a3ce929d0e0e4736' });
  // A later version may carry more fields; version 00 may not.
  const v1 = '01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra';
  assert.equal(traceContextOf({ traceparent: v1 })?.headers.traceparent, v1);
  for (const bad of [
    `${TP}-extra`,
    TP.toUpperCase(),
    'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    '00-00000000000000000000000000000000-00f067aa0ba902b7-01',
    '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01',
    '00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01',
    'hello',
    '',
  ]) {
    assert.equal(traceContextOf({ traceparent: bad, tracestate: 'a=b' }), null, bad);
  }
  assert.equal(traceContextOf({ tracestate: 'a=b' }), null);
  // A tracestate past 512 characters is dropped, the traceparent kept.
  assert.deepEqual(traceContextOf({ traceparent: TP, tracestate: 'a='.padEnd(600, 'x') })?.headers, { traceparent: TP });
});
