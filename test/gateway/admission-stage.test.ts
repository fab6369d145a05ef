/** What a finished request counts against its tenant's tokens per minute (usedTokens). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { RequestContext } from '../../src/request/context.js';
import { usedTokens } from '../../src/gateway/pipeline/admission-stage.js';

const ended = (o: Partial<RequestContext>): RequestContext =>
  ({ usage: null, status: 200, ttftMs: null, workerId: null, ...o }) as RequestContext;

test('an answer counts its usage: the prompt from it where it says, else the count reserved by', () => {
  assert.equal(usedTokens(ended({ usage: { promptTokens: 120, outputTokens: 30 }, ttftMs: 5, workerId: 'w0' }), 100), 150);
  assert.equal(usedTokens(ended({ usage: { promptTokens: null, outputTokens: 30 }, ttftMs: 5, workerId: 'w0' }), 100), 130);
  // A stream the client left after 12 tokens.
  assert.equal(usedTokens(ended({ usage: { promptTokens: null, outputTokens: 12 }, status: 499, ttftMs: 5, workerId: 'w0' }), 100), 112);
});

test('no answer counts nothing, unless the client or the deadline ended it at a worker; an answer with no count keeps its reservation', () => {
  assert.equal(usedTokens(ended({ status: 503 }), 100), 0, 'shed before routing');
  assert.equal(usedTokens(ended({ status: 502, workerId: 'w0' }), 100), 0, 'every worker failed it');
  assert.equal(usedTokens(ended({ status: 400, ttftMs: 3, workerId: 'w0' }), 100), 0, "the worker's own 400, relayed");
  assert.equal(usedTokens(ended({ status: 499, workerId: 'w0' }), 100), 100, 'the client left while the worker had it');
  assert.equal(usedTokens(ended({ status: 504, workerId: 'w0' }), 100), 100, 'its deadline passed at the worker');
  assert.equal(usedTokens(ended({ status: 499 }), 100), 0, 'the client left before routing');
  assert.equal(usedTokens(ended({ status: 200, ttftMs: 4, workerId: 'w0' }), 100), undefined);
});
