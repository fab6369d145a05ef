/** `hf:` tokenizers on worker threads: the same ids as in place, and nothing lost when a thread dies. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { loadHfTokenizer } from '../../src/tokenizer/hf.js';
import { HfTokenizerThreads, ThreadLostError } from '../../src/tokenizer/hf-threads.js';
import { estimateTokenizer } from '../../src/tokenizer/estimate.js';
import { HELLO_WORLD_BPE, withTokenizerDir } from './fixtures.js';
import { createPromptTokenizer, OFF_THREAD_FROM_CHARS, TokenizerRegistry, type TokenizerStats } from '../../src/tokenizer/registry.js';

const WORDS = ['hello', 'world', 'held', 'hold', 'lower', 'howl', 'dew', 'roll', 'x', 'he'];

/** A text of about `chars` characters from WORDS (some letters outside the vocabulary), seeded. */
function text(chars: number, seed: number): string {
  let s = '';
  let x = seed;
  while (s.length < chars) {
    x = (x * 1103515245 + 12345) % 2147483648;
    s += WORDS[x % WORDS.length] + (x % 7 === 0 ? '\n' : ' ');
  }
  return s;
}

/** Runs `f` with the path of the hello/world tokenizer.json in a temporary directory. */
function withTokenizerFile(f: (path: string) => Promise<void>): Promise<void> {
  return withTokenizerDir({ 'tokenizer.json': HELLO_WORLD_BPE }, (dir) => f(join(dir, 'tokenizer.json')));
}

test('long prompts tokenized on threads get the same ids as on the event loop; short ones stay in place', async () => {
  await withTokenizerFile(async (path) => {
    const inPlace = await loadHfTokenizer(path);
    const reg = await TokenizerRegistry.create({ m: `hf:${path}` }, { threads: 2 });
    try {
      const t = reg.for('m');
      assert.equal(t.offThread!(text(OFF_THREAD_FROM_CHARS - 10, 1).slice(0, OFF_THREAD_FROM_CHARS - 1), { model: 'm' }), null, 'a short text is not sent to a thread');
      const texts = Array.from({ length: 40 }, (_, i) => text(OFF_THREAD_FROM_CHARS + i * 997, i + 1));
      // All at once: both threads busy, answers matched to their prompts.
      const results = await Promise.all(texts.map((s, i) => t.offThread!(s, { model: 'm', addSpecialTokens: i % 2 === 0 })!));
      for (let i = 0; i < texts.length; i++) {
        assert.equal(results[i]!.degraded, undefined);
        assert.deepEqual(Array.from(results[i]!.tokens), inPlace.encode(texts[i]!, i % 2 === 0), `text ${i}`);
      }
      // tokenize() takes the same way for a long text.
      const viaTokenize = await t.tokenize(texts[3]!, { model: 'm' });
      assert.deepEqual(Array.from(viaTokenize.tokens), inPlace.encode(texts[3]!));
      assert.equal(reg.stats.threadFallbacks, 0);
      assert.equal(reg.stats.threadPrompts, texts.length + 1);
    } finally {
      await reg.close();
    }
  });
});

test('a thread that dies (out of its heap): what it held is rejected, the next prompts are refused until it is back, then served', async () => {
  await withTokenizerFile(async (path) => {
    // A heap bound a long prompt fits in and a 40-million-character one does not. The thread takes
    // seconds to fill it on a busy machine: the time limit (10 s by default) is set far beyond,
    // so that it is the heap that ends the thread.
    const threads = await HfTokenizerThreads.start({ path, threads: 1, heapMb: 32, timeoutMs: 120_000 });
    try {
      const running = (): number => threads.running;
      assert.equal(running(), 1);
      const inPlace = await loadHfTokenizer(path);
      const s = text(200_000, 7);
      assert.deepEqual(Array.from(await threads.encode(s)), inPlace.encode(s));
      const held = threads.encode(text(40_000_000, 8));
      // The threads do not hold the process open (the gateway's server does): this test must.
      const open = setInterval(() => {}, 1000);
      await assert.rejects(held, (e) => e instanceof ThreadLostError && /tokenizer thread exited \(code 1: ERR_WORKER_OUT_OF_MEMORY\)/.test(e.message)).finally(() => clearInterval(open));
      assert.equal(threads.pending, 0);
      await assert.rejects(threads.encode('hello'), /no tokenizer thread is running/);
      // A new thread loads the tokenizer file again: seconds on a busy machine.
      const until = Date.now() + 30_000;
      while (running() === 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
      assert.equal(running(), 1, 'started again');
      assert.equal(threads.restarts, 1);
      assert.deepEqual(Array.from(await threads.encode('hello world')), [0, 11, 15]);
    } finally {
      await threads.close();
    }
    await assert.rejects(threads.encode('hello'), /closed/);
  });
});

test('a thread that spends too long on one prompt is ended; that prompt is routed on the estimate, the thread comes back', async () => {
  await withTokenizerFile(async (path) => {
    const stats: TokenizerStats = { remoteCalls: 0, remoteFailures: 0, lastRemoteError: null, threadPrompts: 0, threadFallbacks: 0 };
    const exits: string[] = [];
    const t = await createPromptTokenizer(`hf:${path}`, { threads: 1, stats, threadTimeoutMs: 150, onThreadExit: (_spec, m) => exits.push(m) });
    try {
      // Far more than 150 ms of work for the thread (about 0.8 s).
      const slow = text(3_000_000, 9);
      const started = Date.now();
      const r = await t.tokenize(slow, { model: 'm' });
      assert.ok(Date.now() - started < 2_000, 'given up on, not waited for');
      assert.equal(r.tokenizer, 'estimate');
      assert.match(r.degraded ?? '', /over 150 ms on one prompt/);
      assert.deepEqual(Array.from(r.tokens), estimateTokenizer.encode(slow));
      assert.equal(stats.threadFallbacks, 1);
      assert.equal(exits.length, 1);
      // Started again: a prompt it can finish in time is served there, with the model's ids.
      const ok = text(2_000, 10);
      let served = null;
      for (const until = Date.now() + 30_000; Date.now() < until; ) {
        const x = await t.tokenize(ok, { model: 'm' });
        if (x.degraded === undefined) {
          served = x;
          break;
        }
        await new Promise((res) => setTimeout(res, 50));
      }
      assert.ok(served !== null, 'the thread came back');
      assert.deepEqual(Array.from(served.tokens), (await loadHfTokenizer(path)).encode(ok));
    } finally {
      await t.close!();
    }
  });
});

test('without a thread the prompt is tokenized on the event loop, counted, with the same ids', async () => {
  await withTokenizerFile(async (path) => {
    const stats: TokenizerStats = { remoteCalls: 0, remoteFailures: 0, lastRemoteError: null, threadPrompts: 0, threadFallbacks: 0 };
    const t = await createPromptTokenizer(`hf:${path}`, { threads: 1, stats });
    await t.close!();
    const s = text(5_000, 3);
    const r = await t.tokenize(s, { model: 'm' });
    assert.deepEqual(Array.from(r.tokens), (await loadHfTokenizer(path)).encode(s));
    assert.match(r.degraded ?? '', /closed/);
    assert.equal(stats.threadFallbacks, 1);
  });
});

test('threads: 0 keeps everything on the event loop; a file a thread cannot load is refused at start', async () => {
  await withTokenizerFile(async (path) => {
    const t = await createPromptTokenizer(`hf:${path}`, { threads: 0 });
    assert.equal(t.offThread!(text(50_000, 2), { model: 'm' }), null);
    await assert.rejects(HfTokenizerThreads.start({ path: path + '.missing', threads: 1 }), /cannot read tokenizer file/);
  });
});
