import assert from 'node:assert/strict';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { test } from 'node:test';
import { freshOutcome, LiveRequestContext, type RequestOutcome } from '../../src/request/context.js';

test('a new request context starts with the outcome a sub-request gets from freshOutcome()', () => {
  const ctx = new LiveRequestContext('id', null, false, 'chat', '/v1/chat/completions', {} as IncomingMessage, {} as ServerResponse, 0, Buffer.alloc(0));
  const fresh = freshOutcome();
  const keys = Object.keys(fresh) as (keyof RequestOutcome)[];
  assert.deepEqual(Object.fromEntries(keys.map((k) => [k, ctx[k]])), fresh);
  assert.notEqual(ctx.taps, new LiveRequestContext('id2', null, false, 'chat', '/', {} as IncomingMessage, {} as ServerResponse, 0, Buffer.alloc(0)).taps, 'each context has its own lists');
});
