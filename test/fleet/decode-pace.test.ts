/** The recent TPOT of a worker's streamed answers (fleet/decode-pace.ts). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AnswerPace, DecodePace, PACE_TAU_MS } from '../../src/fleet/decode-pace.js';

test('the mean of recent inter-token times, recent ones weighing more', () => {
  const p = new DecodePace();
  assert.equal(p.msPerToken(0), undefined);
  for (let t = 10; t <= 1000; t += 10) p.observe(10, 1, t);
  assert.ok(Math.abs(p.msPerToken(1000)! - 10) < 1e-9);
  // The pace slows to 50 ms a token: within a few time constants the figure follows.
  for (let t = 1050; t <= 1000 + 4 * PACE_TAU_MS; t += 50) p.observe(50, 1, t);
  const after = p.msPerToken(1000 + 4 * PACE_TAU_MS)!;
  assert.ok(after > 45 && after < 50, `${after}`);
  // Two tokens in one chunk 40 ms after the last: 20 ms each.
  const q = new DecodePace();
  for (let t = 40; t <= 1000; t += 40) q.observe(40, 2, t);
  assert.ok(Math.abs(q.msPerToken(1000)! - 20) < 1e-9);
});

test('one answer at any pace keeps a figure while it streams; it fades within a second of the last token', () => {
  for (const gap of [5, 70, 400]) {
    const p = new DecodePace();
    let t = 0;
    while (t < 1000) p.observe(gap, 1, (t += gap));
    // Just before the next token is due, the figure is still there.
    assert.ok(Math.abs(p.msPerToken(t + gap - 1)! - gap) < 1e-9, `gap ${gap}`);
    assert.equal(p.msPerToken(t + 1000 + gap), undefined, `gap ${gap}`);
  }
});

test('ignores observations without tokens, negative gaps and time going back', () => {
  const p = new DecodePace();
  p.observe(30, 0, 100);
  p.observe(-1, 1, 100);
  assert.equal(p.msPerToken(100), undefined);
  for (let t = 30; t <= 600; t += 30) p.observe(30, 1, t);
  p.observe(30, 1, 500); // an observation stamped before the last: counted, nothing decays back
  assert.ok(Math.abs(p.msPerToken(600)! - 30) < 1e-9);
});

test('an answer counts the time between its chunks and the events each brought; the first chunk only marks', () => {
  const p = new DecodePace();
  const a = new AnswerPace();
  a.chunk(p, 1, 1000); // the first token: its wait was TTFT
  assert.equal(p.msPerToken(1000), undefined);
  let events = 1;
  for (let t = 1025; t <= 1500; t += 25) a.chunk(p, ++events, t);
  assert.ok(Math.abs(p.msPerToken(1500)! - 25) < 1e-9);
  // A chunk with no new event (part of one split across chunks) neither counts nor moves the mark.
  a.chunk(p, events, 1510);
  a.chunk(p, events + 1, 1525);
  assert.ok(Math.abs(p.msPerToken(1525)! - 25) < 1e-9);
});
