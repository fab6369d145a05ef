/** OutputText: a group of streamed tokens with one text, ended by end-of-sequence or a stop token id. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { OutputText } from '../../src/speculative/output.js';

const EOS = 9;
const STOP_ID = 8;
const out = () => new OutputText({ maxTokens: 100, stop: [], stopTokenIds: new Set([STOP_ID]), eosTokenIds: new Set([EOS]) });

test('a group’s text is kept when the group ends on end-of-sequence', () => {
  const o = out();
  assert.equal(o.append([1], ' a'), 1);
  assert.equal(o.append([2, 3, 4, EOS], ' b c d.'), 4);
  assert.equal(o.text, ' a b c d.');
  assert.equal(o.finishReason, 'stop');
  assert.equal(o.tokens.length, 5);
});

test('… and when it ends on a stop token id', () => {
  const o = out();
  assert.equal(o.append([2, 3, STOP_ID], ' b c'), 3);
  assert.equal(o.text, ' b c');
  assert.equal(o.stopReason, STOP_ID);
});

test('a group without an ending keeps its text on its last token; per-token texts are unchanged', () => {
  const o = out();
  o.append([2, 3], ' b c');
  o.append([4, EOS], [' d', '']);
  assert.equal(o.text, ' b c d');
  assert.equal(o.finishReason, 'stop');
});
