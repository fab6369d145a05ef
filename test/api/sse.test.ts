import assert from 'node:assert/strict';
import { test } from 'node:test';
import { errors } from '../../src/api/errors.js';
import { atEventBoundary, sseErrorEvent, TAIL_AT_BOUNDARY, updateTail } from '../../src/api/sse.js';

const tailOf = (...chunks: string[]) => chunks.reduce((t, c) => updateTail(t, Buffer.from(c)), TAIL_AT_BOUNDARY);

test('event boundaries are tracked across chunk splits', () => {
  assert.equal(atEventBoundary(TAIL_AT_BOUNDARY), true);
  assert.equal(atEventBoundary(tailOf('data: x\n\n')), true);
  assert.equal(atEventBoundary(tailOf('data: x\n')), false);
  assert.equal(atEventBoundary(tailOf('data: x\n', '\n')), true);
  assert.equal(atEventBoundary(tailOf('data: x', '\n', '\n')), true);
  assert.equal(atEventBoundary(tailOf('data: x\n\n', 'data: {"a"')), false);
  assert.equal(atEventBoundary(tailOf('data: x\n\n', '')), true);
});

test('error events carry the OpenAI error body', () => {
  const ev = sseErrorEvent(errors.deadline('too slow'));
  assert.ok(ev.startsWith('data: ') && ev.endsWith('\n\n'));
  assert.deepEqual(JSON.parse(ev.slice(6)), { error: { message: 'too slow', type: 'timeout_error', param: null, code: 'deadline_exceeded' } });
});
