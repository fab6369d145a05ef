import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { OutputLengthLearner } from '../../../../../src/scheduler/policies/kvgate/learners/output-length.js';
import { request, seq } from '../../../helpers.js';

const model = (maxClasses = 100) => new OutputLengthLearner({ alpha: 0.1, maxClasses });
/** A prompt of `template` (its first 64 tokens name its class) and a suffix of its own. */
const prompt = (template: number, suffix: number) => [...seq(template * 1000, 64), ...seq(900_000 + suffix * 100, 30)];

describe('OutputLengthLearner', () => {
  it('expects max_tokens until it has seen an answer', () => {
    const m = model();
    assert.equal(m.expected(request(prompt(1, 0), { maxTokens: 300 })), 300);
    assert.deepEqual(m.describe(), { classes: 0, unseenRatio: null });
  });

  it('learns per class the share of max_tokens answers use, and a separate share for first-seen prompts', () => {
    const m = model();
    // A classifier template: 4 of 400 tokens; one-off documents: 300 of 400.
    for (let i = 0; i < 5; i++) m.onComplete(request(prompt(1, i), { maxTokens: 400 }), 4);
    for (let i = 0; i < 5; i++) m.onComplete(request(prompt(100 + i, 0), { maxTokens: 400 }), 300);
    assert.equal(m.expected(request(prompt(1, 99), { maxTokens: 400 })), 4, 'same template, new suffix');
    assert.equal(m.expected(request(prompt(1, 99), { maxTokens: 4096 })), 41, 'the share scales with the cap');
    // A prompt never seen: what first-seen prompts answered (the classifier's first answer among them).
    const unseen = m.describe().unseenRatio!;
    assert.ok(unseen > 0.6 && unseen < 0.75, String(unseen));
    assert.equal(m.expected(request(prompt(555, 0), { maxTokens: 400 })), Math.round(unseen * 400));
    assert.equal(m.describe().classes, 6);
  });

  it('changes nothing where max_tokens is the exact answer length', () => {
    const m = model();
    for (let i = 0; i < 20; i++) m.onComplete(request(prompt(i % 3, i), { maxTokens: 10 + i * 7 }), 10 + i * 7);
    for (const n of [1, 17, 500, 9000]) assert.equal(m.expected(request(prompt(1, 50), { maxTokens: n })), n);
    assert.equal(m.expected(request(prompt(77, 0), { maxTokens: 123 })), 123);
  });

  it('averages evenly at first, then follows recent answers', () => {
    const m = model();
    const r = () => request(prompt(3, 0), { maxTokens: 1000 });
    m.onComplete(r(), 100);
    m.onComplete(r(), 300);
    assert.equal(m.expected(r()), 200, 'a running mean of the first answers');
    for (let i = 0; i < 60; i++) m.onComplete(r(), 800);
    assert.ok(m.expected(r()) > 790, 'recent answers dominate');
  });

  it('expects at least one token; prompts under one block have no class of their own', () => {
    const m = model();
    m.onComplete(request(seq(1, 8), { maxTokens: 1000 }), 0);
    assert.equal(m.expected(request(seq(1, 8), { maxTokens: 1000 })), 1);
    assert.deepEqual(m.describe(), { classes: 0, unseenRatio: 0 });
  });

  it('a class answered hundreds of times weighs a new answer by alpha, as a plain running average would', () => {
    const m = model();
    const r = () => request(prompt(4, 0), { maxTokens: 1000 });
    let want = 0;
    for (let i = 1; i <= 400; i++) {
      const out = (i * 37) % 1000;
      m.onComplete(r(), out);
      want += Math.max(0.1, 1 / i) * (out / 1000 - want);
    }
    assert.equal(m.expected(request(prompt(4, 1), { maxTokens: 1_000_000 })), Math.round(want * 1_000_000));
    assert.throws(() => new OutputLengthLearner({ alpha: 0.001, maxClasses: 10 }), /alpha must be in/);
  });

  it('forgets the least recently answered class beyond its bound', () => {
    const m = model(2);
    m.onComplete(request(prompt(1, 0), { maxTokens: 100 }), 10);
    m.onComplete(request(prompt(2, 0), { maxTokens: 100 }), 20);
    m.onComplete(request(prompt(1, 1), { maxTokens: 100 }), 10); // class 1 answered again: most recent
    m.onComplete(request(prompt(3, 0), { maxTokens: 100 }), 30); // evicts class 2
    assert.equal(m.describe().classes, 2);
    assert.equal(m.expected(request(prompt(1, 5), { maxTokens: 100 })), 10);
    assert.equal(m.expected(request(prompt(2, 5), { maxTokens: 100 })), Math.round(m.describe().unseenRatio! * 100));
  });
});
