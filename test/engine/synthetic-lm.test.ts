import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createSampler, createSyntheticLm, fixedSampler, hashSampler, TOP_K } from '../../src/engine/synthetic-lm.js';
import { COMMA_ID, EOS_TOKEN_ID, NEWLINE_ID, PERIOD_ID, VOCAB_SIZE } from '../../src/tokenizer/vocabulary.js';
import { seededRng } from '../../src/util/rng.js';

/** What the engine passes a sampler: the prompt and the tokens generated so far. */
function ctx(prompt: ArrayLike<number>, output: readonly number[]): { prompt: ArrayLike<number>; output: { ids: readonly number[]; length: number } } {
  return { prompt, output: { ids: output, length: output.length } };
}

const lm = createSyntheticLm('llama-3.1-8b');

function logSumExp(xs: ArrayLike<number>): number {
  let m = -Infinity;
  for (let i = 0; i < xs.length; i++) m = Math.max(m, xs[i]!);
  let s = 0;
  for (let i = 0; i < xs.length; i++) s += Math.exp(xs[i]! - m);
  return m + Math.log(s);
}

test('distributions are deterministic, normalised, sorted, in the vocabulary, and depend on the model', () => {
  const rng = seededRng(3);
  const other = createSyntheticLm('llama-3.1-70b');
  let differ = 0;
  for (let i = 0; i < 500; i++) {
    const ctx = [Math.floor(rng() * VOCAB_SIZE), Math.floor(rng() * VOCAB_SIZE), Math.floor(rng() * (VOCAB_SIZE - 3))];
    const d = lm.distribution(ctx);
    assert.deepEqual(lm.distribution(ctx), d);
    assert.deepEqual(createSyntheticLm('llama-3.1-8b').distribution(ctx), d);
    assert.equal(d.tokens.length, TOP_K);
    assert.equal(new Set(d.tokens).size, TOP_K);
    assert.ok(Math.abs(logSumExp(d.logprobs)) < 1e-9);
    for (let k = 1; k < TOP_K; k++) assert.ok(d.logprobs[k]! <= d.logprobs[k - 1]!);
    for (const t of d.tokens) assert.ok((t >= 0 && t < VOCAB_SIZE) || t === EOS_TOKEN_ID);
    // Only the last two tokens matter.
    assert.deepEqual(lm.distribution([7, ...ctx]), d);
    if (other.distribution(ctx).tokens[0] !== d.tokens[0]) differ++;
  }
  assert.ok(differ > 400, `models should differ: ${differ}`);
});

test('sentence structure: EOS only after a period, no punctuation twice in a row', () => {
  for (let t = 0; t < 300; t++) {
    const afterWord = lm.distribution([t, t + 1]);
    assert.ok(!afterWord.tokens.includes(EOS_TOKEN_ID));
    assert.ok(afterWord.tokens.includes(PERIOD_ID));
    const afterPeriod = lm.distribution([t, PERIOD_ID]);
    assert.ok(afterPeriod.tokens.includes(EOS_TOKEN_ID));
    for (const p of [PERIOD_ID, COMMA_ID]) assert.ok(!afterPeriod.tokens.includes(p));
    assert.ok(!lm.distribution([t, COMMA_ID]).tokens.includes(COMMA_ID));
  }
});

test('natural completions run tens to a few hundred tokens', () => {
  const lengths: number[] = [];
  for (let r = 0; r < 300; r++) {
    const { sampler } = createSampler(lm, { seed: r });
    const prompt = [r % 100, (r * 7) % 100];
    const output: number[] = [];
    while (output.length < 5000) {
      const t = sampler(ctx(prompt, output));
      output.push(t);
      if (t === EOS_TOKEN_ID) break;
    }
    lengths.push(output.length);
  }
  const mean = lengths.reduce((a, b) => a + b, 0) / lengths.length;
  assert.ok(mean > 30 && mean < 300, `mean ${mean}`);
  assert.ok(Math.max(...lengths) < 5000);
});

test('sampling: reproducible with a seed, greedy at temperature 0, logprobs recorded', () => {
  const gen = (opts: Parameters<typeof createSampler>[1], n = 50) => {
    const s = createSampler(lm, opts);
    const prompt = [11, 22, 33];
    const output: number[] = [];
    for (let i = 0; i < n; i++) output.push(s.sampler(ctx(prompt, output)));
    return { output, logprobs: s.logprobs };
  };
  assert.deepEqual(gen({ seed: 1 }).output, gen({ seed: 1 }).output);
  assert.notDeepEqual(gen({ seed: 1 }).output, gen({ seed: 2 }).output);
  assert.deepEqual(gen({}).output, gen({}).output, 'deterministic per prompt without a seed');
  const greedy = gen({ temperature: 0, topLogprobs: 3 });
  greedy.output.forEach((t, i) => {
    const ctx = [11, 22, 33, ...greedy.output.slice(0, i)];
    const d = lm.distribution(ctx);
    assert.equal(t, d.tokens[0]);
    const lp = greedy.logprobs[i]!;
    assert.equal(lp.token, t);
    assert.equal(lp.logprob, d.logprobs[0]);
    assert.equal(lp.top.length, 3);
    assert.equal(lp.top[0]!.token, t);
  });
  // A tight nucleus only ever picks from the head of the distribution.
  const nucleus = gen({ seed: 9, topP: 0.3 }, 200);
  nucleus.output.forEach((t, i) => {
    const d = lm.distribution([11, 22, 33, ...nucleus.output.slice(0, i)]);
    let acc = 0;
    let keep = 0;
    while (acc < 0.3) acc += Math.exp(d.logprobs[keep++]!);
    assert.ok(d.tokens.subarray(0, keep).includes(t));
  });
});

test('a draft model agrees with its target about `fidelity` of the time', () => {
  for (const fidelity of [0.6, 0.9]) {
    const draft = createSyntheticLm('llama-3.2-1b', { draftOf: 'llama-3.1-8b', fidelity });
    let agree = 0;
    const n = 4000;
    for (let i = 0; i < n; i++) {
      const ctx = [i % 4000, (i * 13) % 4000];
      if (draft.distribution(ctx).tokens[0] === lm.distribution(ctx).tokens[0]) agree++;
    }
    const rate = agree / n;
    assert.ok(Math.abs(rate - fidelity) < 0.06, `fidelity ${fidelity}: agreement ${rate}`);
  }
});

test('bench samplers are cheap, deterministic and never emit EOS', () => {
  const h = hashSampler('x');
  const output: number[] = [];
  for (let i = 0; i < 1000; i++) output.push(h(ctx([1], output)));
  assert.ok(!output.includes(EOS_TOKEN_ID));
  assert.ok(output.every((t) => t >= 0 && t < PERIOD_ID && t !== NEWLINE_ID));
  assert.equal(h(ctx([], output.slice(0, 5))), output[5]);
  const f = fixedSampler([4, 5]);
  assert.deepEqual([0, 1, 2].map((n) => f(ctx([], new Array<number>(n).fill(0)))), [4, 5, 4]);
});

test('greedy decoding usually ends with EOS', () => {
  let ended = 0;
  const runs = 200;
  for (let r = 0; r < runs; r++) {
    const { sampler } = createSampler(lm, { temperature: 0, recordLogprobs: false });
    const prompt = [(r * 37) % 4000, (r * 101) % 4000];
    const output: number[] = [];
    while (output.length < 2000) {
      const t = sampler(ctx(prompt, output));
      output.push(t);
      if (t === EOS_TOKEN_ID) {
        ended++;
        break;
      }
    }
  }
  assert.ok(ended / runs > 0.7, `only ${ended}/${runs} greedy runs ended`);
});
