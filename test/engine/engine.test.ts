import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Engine } from '../../src/engine/engine.js';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import { chainRoot, hashBlock } from '../../src/kv/block-hash.js';
import { createSampler, createSyntheticLm, hashSampler } from '../../src/engine/synthetic-lm.js';
import { seededRng } from '../../src/util/rng.js';
import type { EngineConfig, StepResult, TokenSampler } from '../../src/engine/types.js';
import type { KvEvent } from '../../src/kv/events.js';
import type { OracleProbe } from '../../src/fleet/worker-state.js';

function config(over: Partial<EngineConfig> = {}): EngineConfig {
  return {
    ...buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', hashSeed: 42 }),
    blockSize: 4,
    numGpuBlocks: 64,
    maxNumSeqs: 8,
    maxNumBatchedTokens: 64,
    kvEvents: true,
    ...over,
  };
}

function tokens(n: number, salt: number): number[] {
  return Array.from({ length: n }, (_, i) => (i * 31 + salt * 977) % 4000);
}

function drain(engine: Engine, onStep?: (r: StepResult) => void, maxSteps = 100_000): StepResult[] {
  const out: StepResult[] = [];
  for (let i = 0; i < maxSteps && engine.hasWork(); i++) {
    const r = engine.step()!;
    out.push(r);
    onStep?.(r);
  }
  assert.equal(engine.hasWork(), false, 'engine did not drain');
  return out;
}

/** Counts sampler calls per request. */
function counting(id: string, calls: Map<string, number>): TokenSampler {
  const inner = hashSampler(id);
  return (ctx) => {
    calls.set(id, (calls.get(id) ?? 0) + 1);
    return inner(ctx);
  };
}

test('a request prefills, decodes one token per step and finishes with length', () => {
  const e = new Engine(config());
  e.add({ id: 'a', prompt: tokens(10, 1), maxTokens: 5, sampler: hashSampler('a'), ignoreEos: true });
  const steps = drain(e);
  assert.equal(steps.length, 5);
  assert.equal(steps[0]!.prefillTokens, 10);
  assert.deepEqual(steps[0]!.firstTokens, ['a']);
  assert.deepEqual(steps[0]!.started, [{ id: 'a', cachedPromptTokens: 0 }]);
  for (const s of steps.slice(1)) assert.equal(s.decodeTokens, 1);
  const idx = steps.flatMap((s) => s.tokens.map((t) => t.index));
  assert.deepEqual(idx, [0, 1, 2, 3, 4]);
  assert.deepEqual(steps[4]!.finished, [{ id: 'a', reason: 'length', promptTokens: 10, outputTokens: 5, cachedPromptTokens: 0 }]);
  const st = e.stats();
  assert.equal(st.generationTokens, 5);
  assert.equal(st.promptTokens, 10);
  assert.equal(st.freeBlocks, 64);
  assert.equal(st.kvUsage, 0);
  assert.ok(steps.every((s) => s.durationMs > 0));
});

test('EOS stops a request unless ignoreEos; stop counts in finished stats', () => {
  const eos = 9999;
  const stopAt3: TokenSampler = (ctx) => (ctx.output.length === 2 ? eos : 5);
  const e = new Engine(config());
  e.add({ id: 'stop', prompt: tokens(8, 2), maxTokens: 10, sampler: stopAt3, eosTokenId: eos });
  e.add({ id: 'ignore', prompt: tokens(8, 3), maxTokens: 10, sampler: stopAt3, eosTokenId: eos, ignoreEos: true });
  const fin = drain(e).flatMap((s) => s.finished);
  assert.deepEqual(fin.map((f) => [f.id, f.reason, f.outputTokens]), [['stop', 'stop', 3], ['ignore', 'length', 10]]);
  assert.deepEqual(e.stats().finished, { stop: 1, length: 1, abort: 0 });
});

test('the exact cache probe keys by adapter and cache_salt, as the blocks are', () => {
  const e = new Engine({ ...config(), maxLoras: 2 });
  const prompt = tokens(17, 4);
  e.add({ id: 'a', prompt, maxTokens: 2, sampler: hashSampler('a'), lora: 'x', cacheSalt: 's' });
  drain(e);
  assert.equal(e.cachedPrefixTokens(prompt, { lora: 'x', cacheSalt: 's' }), 16);
  for (const keys of [undefined, {}, { lora: 'x' }, { cacheSalt: 's' }, { lora: 'y', cacheSalt: 's' }]) assert.equal(e.cachedPrefixTokens(prompt, keys), 0, JSON.stringify(keys));
});

test('identical prefixes hit the cache: counted in tokens, last prompt token always computed', () => {
  const e = new Engine(config());
  const prompt = tokens(17, 4); // 4 full blocks + 1 token
  e.add({ id: 'a', prompt, maxTokens: 2, sampler: hashSampler('a') });
  drain(e);
  assert.equal(e.cachedPrefixTokens(prompt), 16);
  e.add({ id: 'b', prompt, maxTokens: 2, sampler: hashSampler('b') });
  const first = e.step()!;
  assert.deepEqual(first.started, [{ id: 'b', cachedPromptTokens: 16 }]);
  assert.equal(first.prefillTokens, 1);
  drain(e);
  // A prompt that is exactly 4 blocks can reuse only 3 of them: its last token must be computed.
  e.add({ id: 'c', prompt: prompt.slice(0, 16), maxTokens: 1, sampler: hashSampler('c') });
  const r = e.step()!;
  assert.deepEqual(r.started, [{ id: 'c', cachedPromptTokens: 12 }]);
  const st = e.stats();
  assert.equal(st.prefixQueries, 17 + 17 + 16);
  assert.equal(st.prefixHits, 16 + 12);
  // A prompt diverging in its second block hits only the first.
  const other = [...prompt];
  other[5] = 3999;
  assert.equal(e.cachedPrefixTokens(other), 4);
});

test('requests admitted in the same step share the blocks the first one is computing', () => {
  const e = new Engine(config());
  const prompt = tokens(20, 5);
  for (const id of ['a', 'b', 'c']) e.add({ id, prompt, maxTokens: 1, sampler: hashSampler(id) });
  const r = e.step()!;
  assert.deepEqual(r.started.map((s) => s.cachedPromptTokens), [0, 16, 16]);
  assert.equal(r.prefillTokens, 20 + 4 + 4);
});

test('output blocks are cached too: a follow-up turn quoting the answer hits past the prompt', () => {
  const e = new Engine(config());
  const prompt = tokens(8, 6);
  const out: number[] = [];
  e.add({ id: 'a', prompt, maxTokens: 12, sampler: hashSampler('a'), ignoreEos: true });
  drain(e, (r) => out.push(...r.tokens.map((t) => t.token)));
  // prompt (8) + 12 outputs = 20 tokens, of which the first 19 were computed: 4 full blocks.
  const next = [...prompt, ...out, ...tokens(6, 7)];
  assert.equal(e.cachedPrefixTokens(next), 16);
});

test('chunked prefill respects the token budget and emits the first token only at the end', () => {
  const e = new Engine(config({ maxNumBatchedTokens: 32 }));
  e.add({ id: 'long', prompt: tokens(100, 8), maxTokens: 3, sampler: hashSampler('long') });
  const steps = drain(e);
  assert.deepEqual(steps.map((s) => s.prefillTokens), [32, 32, 32, 4, 0, 0]);
  assert.deepEqual(steps.map((s) => s.firstTokens.length), [0, 0, 0, 1, 0, 0]);
  assert.equal(e.pendingPrefillTokens(), 0);
});

test('token budget, maxNumSeqs and block accounting hold under a random workload', () => {
  const cfg = config({ numGpuBlocks: 48, maxNumSeqs: 5, maxNumBatchedTokens: 40 });
  const e = new Engine(cfg);
  const rng = seededRng(7);
  const want = new Map<string, number>();
  const seen = new Map<string, number[]>();
  for (let i = 0; i < 40; i++) {
    const id = `r${i}`;
    const maxTokens = 1 + Math.floor(rng() * 30);
    want.set(id, maxTokens);
    seen.set(id, []);
    const shared = rng() < 0.5 ? tokens(12, 99) : [];
    e.add({ id, prompt: [...shared, ...tokens(1 + Math.floor(rng() * 40), i)], maxTokens, sampler: hashSampler(id), ignoreEos: true, priority: i % 3 });
  }
  drain(e, (r) => {
    assert.ok(r.prefillTokens + r.decodeTokens <= cfg.maxNumBatchedTokens);
    const st = e.stats();
    assert.ok(st.running <= cfg.maxNumSeqs);
    assert.ok(st.freeBlocks >= 0 && st.freeBlocks <= cfg.numGpuBlocks);
    // Blocks in use are exactly the distinct blocks held by live requests.
    const held = new Set<number>();
    for (const id of want.keys()) for (const b of e.blocksOf(id) ?? []) held.add(b);
    assert.equal(held.size, cfg.numGpuBlocks - st.freeBlocks);
    for (const t of r.tokens) seen.get(t.id)!.push(t.index);
  });
  for (const [id, n] of want) assert.deepEqual(seen.get(id), Array.from({ length: n }, (_, i) => i), id);
  assert.equal(e.stats().freeBlocks, cfg.numGpuBlocks);
  assert.equal(e.pendingPrefillTokens(), 0);
});

test('preemption when blocks run out: the victim is recomputed and still gets every token once', () => {
  const cfg = config({ numGpuBlocks: 16, maxNumSeqs: 4, maxNumBatchedTokens: 256 });
  const e = new Engine(cfg);
  const calls = new Map<string, number>();
  const ids = ['a', 'b', 'c'];
  // Each needs 2 prompt blocks + 10 output blocks at the end: 36 blocks wanted, 16 exist.
  for (const id of ids) e.add({ id, prompt: tokens(8, id.charCodeAt(0)), maxTokens: 40, sampler: counting(id, calls), ignoreEos: true });
  const got = new Map<string, number[]>(ids.map((id) => [id, []]));
  const preempted: string[] = [];
  drain(e, (r) => {
    preempted.push(...r.preempted);
    for (const t of r.tokens) got.get(t.id)!.push(t.index);
  });
  assert.ok(preempted.length > 0, 'expected preemptions');
  // The latest arrival is the first victim.
  assert.equal(preempted[0], 'c');
  assert.equal(e.stats().preemptions, preempted.length);
  // Every prompt fit in its first chunk: these were decodes outgrowing the cache, not prefills.
  assert.equal(e.stats().prefillPreemptions, 0);
  for (const id of ids) {
    assert.deepEqual(got.get(id), Array.from({ length: 40 }, (_, i) => i));
    assert.equal(calls.get(id), 40);
  }
  assert.equal(e.stats().finished.length, 3);
});

test('a long prompt admitted by its first chunk to a cache that cannot hold the rest preempts itself mid-prefill', () => {
  // 16 blocks of 4 tokens, 8-token steps. `a` decodes in 2–6 blocks; `b`'s 56-token prompt needs
  // 14 more: its first chunk is admitted, and the rest does not fit beside `a`.
  const e = new Engine(config({ numGpuBlocks: 16, maxNumBatchedTokens: 8 }));
  e.add({ id: 'a', prompt: tokens(8, 1), maxTokens: 16, sampler: hashSampler('a'), ignoreEos: true });
  e.step();
  e.add({ id: 'b', prompt: tokens(56, 2), maxTokens: 2, sampler: hashSampler('b'), ignoreEos: true });
  const preempted: string[] = [];
  drain(e, (r) => preempted.push(...r.preempted));
  assert.ok(preempted.includes('b'), 'b was preempted');
  assert.ok(e.stats().prefillPreemptions >= 1);
  assert.ok(e.stats().prefillPreemptions <= e.stats().preemptions);
  assert.equal(e.stats().finished.length, 2);
});

test('preemption picks the largest priority value first', () => {
  const e = new Engine(config({ numGpuBlocks: 12, maxNumBatchedTokens: 256 }));
  e.add({ id: 'low', prompt: tokens(8, 1), maxTokens: 30, sampler: hashSampler('low'), ignoreEos: true, priority: 5 });
  e.add({ id: 'high', prompt: tokens(8, 2), maxTokens: 30, sampler: hashSampler('high'), ignoreEos: true, priority: 0 });
  e.add({ id: 'mid', prompt: tokens(8, 3), maxTokens: 30, sampler: hashSampler('mid'), ignoreEos: true, priority: 1 });
  const order: string[] = [];
  const first = e.step()!;
  assert.deepEqual(first.started.map((s) => s.id), ['high', 'mid', 'low']);
  drain(e, (r) => order.push(...r.preempted));
  assert.equal(order[0], 'low');
});

test('a sequence that outgrows the whole cache ends with length instead of spinning', () => {
  const e = new Engine(config({ numGpuBlocks: 4, maxNumBatchedTokens: 64 }));
  e.add({ id: 'a', prompt: tokens(6, 1), maxTokens: 100, sampler: hashSampler('a'), ignoreEos: true });
  const fin = drain(e).flatMap((r) => r.finished);
  assert.deepEqual(fin.map((f) => [f.reason, f.outputTokens]), [['length', 11]]);
});

test('maxNumSeqs caps the running batch', () => {
  const e = new Engine(config({ maxNumSeqs: 3 }));
  for (let i = 0; i < 10; i++) e.add({ id: `r${i}`, prompt: tokens(4, i), maxTokens: 5, sampler: hashSampler(`r${i}`) });
  const r = e.step()!;
  assert.equal(r.started.length, 3);
  assert.equal(e.stats().running, 3);
  assert.equal(e.stats().waiting, 7);
  drain(e, () => assert.ok(e.stats().running <= 3));
});

test('waiting requests are admitted by (priority, arrival)', () => {
  const e = new Engine(config({ maxNumSeqs: 1 }));
  e.add({ id: 'x', prompt: tokens(4, 1), maxTokens: 1, sampler: hashSampler('x'), priority: 2 });
  e.add({ id: 'y', prompt: tokens(4, 2), maxTokens: 1, sampler: hashSampler('y'), priority: 1 });
  e.add({ id: 'z', prompt: tokens(4, 3), maxTokens: 1, sampler: hashSampler('z'), priority: 1 });
  const started = drain(e).flatMap((r) => r.started.map((s) => s.id));
  assert.deepEqual(started, ['y', 'z', 'x']);
});

test('abort frees blocks wherever the request is', () => {
  const e = new Engine(config({ maxNumSeqs: 1 }));
  e.add({ id: 'run', prompt: tokens(30, 1), maxTokens: 50, sampler: hashSampler('run') });
  e.add({ id: 'wait', prompt: tokens(30, 2), maxTokens: 50, sampler: hashSampler('wait') });
  e.step();
  assert.ok(e.stats().freeBlocks < 64);
  assert.equal(e.abort('run'), true);
  assert.equal(e.abort('wait'), true);
  assert.equal(e.abort('nope'), false);
  assert.equal(e.stats().freeBlocks, 64);
  assert.equal(e.stats().finished.abort, 2);
  assert.equal(e.hasWork(), false);
  assert.equal(e.step(), null);
  assert.equal(e.pendingPrefillTokens(), 0);
  // The id is free again.
  e.add({ id: 'run', prompt: tokens(5, 1), maxTokens: 1, sampler: hashSampler('run') });
  assert.throws(() => e.add({ id: 'run', prompt: tokens(5, 1), maxTokens: 1, sampler: hashSampler('run') }), /already in use/);
});

test('check() refuses what can never run, with vLLM-shaped messages', () => {
  const e = new Engine(config({ maxModelLen: 1000, numGpuBlocks: 10 }));
  const long = e.check(900, 200);
  assert.equal(long?.code, 'context_length_exceeded');
  assert.match(long.message, /^This model's maximum context length is 1000 tokens\. However, you requested 1100 tokens \(900 in the messages, 200 in the completion\)/);
  const big = e.check(40, 10);
  assert.equal(big?.code, 'exceeds_kv_capacity');
  assert.equal(e.check(36, 10), null);
  assert.throws(() => e.add({ id: 'x', prompt: tokens(40, 1), maxTokens: 10, sampler: hashSampler('x') }), /KV cache/);
  assert.throws(() => e.add({ id: 'y', prompt: [], maxTokens: 10, sampler: hashSampler('y') }), /empty/);
});

test('answers many times their prompt are cached whole, and a later request reusing their hash arrays gets its own', () => {
  const e = new Engine(config({ numGpuBlocks: 256 }));
  const turn = (id: string, prompt: number[], maxTokens: number) => {
    const out: number[] = [];
    e.add({ id, prompt, maxTokens, sampler: hashSampler(id), ignoreEos: true });
    drain(e, (r) => out.push(...r.tokens.filter((t) => t.id === id).map((t) => t.token)));
    return out;
  };
  const a = tokens(8, 1);
  const outA = turn('a', a, 100);
  // 8 + 100 tokens, the first 107 computed: 26 full blocks.
  assert.equal(e.cachedPrefixTokens([...a, ...outA, ...tokens(6, 2)]), 104);
  const b = tokens(12, 3);
  const outB = turn('b', b, 30);
  assert.equal(e.cachedPrefixTokens([...b, ...outB, ...tokens(6, 4)]), 40);
  // b's blocks under a's chain, and a's under b's, are not cached.
  assert.equal(e.cachedPrefixTokens([...a, ...outB]), 8);
});

test('KV events replayed reproduce the engine cache exactly, and stored hashes match their tokens', () => {
  const cfg = config({ numGpuBlocks: 40, maxNumSeqs: 6, maxNumBatchedTokens: 48 });
  const e = new Engine(cfg);
  const lm = createSyntheticLm('test-model');
  const rng = seededRng(11);
  const replica = new Set<number>();
  const apply = (evs: KvEvent[]) => {
    for (const ev of evs) {
      if (ev.type === 'AllBlocksCleared') replica.clear();
      else if (ev.type === 'BlockRemoved') for (const h of ev.blockHashes) assert.ok(replica.delete(h), 'removed unknown hash');
      else {
        let parent = ev.parentBlockHash ?? chainRoot(cfg.hashSeed);
        ev.blockHashes.forEach((h, i) => {
          assert.equal(hashBlock(parent, ev.tokenIds, i * ev.blockSize, ev.blockSize), h);
          assert.ok(!replica.has(h), 'stored twice');
          replica.add(h);
          parent = h;
        });
      }
    }
  };
  let n = 0;
  for (let round = 0; round < 30; round++) {
    for (let k = 0; k < 3; k++) {
      const id = `r${n++}`;
      const prefix = tokens(4 * Math.floor(rng() * 6), Math.floor(rng() * 3));
      e.add({ id, prompt: [...prefix, ...tokens(1 + Math.floor(rng() * 20), n)], maxTokens: 1 + Math.floor(rng() * 20), sampler: createSampler(lm, { seed: n }).sampler, eosTokenId: lm.eosTokenId });
    }
    for (let s = 0; s < 5 && e.hasWork(); s++) {
      apply(e.step()!.kvEvents);
      assert.deepEqual(replica, e.cachedBlockHashes());
    }
    if (round === 20) {
      drain(e, (r) => apply(r.kvEvents));
      e.resetPrefixCache();
      apply(e.takeKvEvents());
      assert.equal(replica.size, 0);
    }
  }
  drain(e, (r) => apply(r.kvEvents));
  assert.deepEqual(replica, e.cachedBlockHashes());
  assert.ok(e.stats().prefixHits > 0);
});

test('resetPrefixCache empties the cache when idle', () => {
  const e = new Engine(config());
  const p = tokens(20, 1);
  e.add({ id: 'a', prompt: p, maxTokens: 1, sampler: hashSampler('a') });
  drain(e);
  assert.equal(e.cachedPrefixTokens(p), 16);
  e.resetPrefixCache();
  assert.deepEqual(e.takeKvEvents(), [{ type: 'AllBlocksCleared' }]);
  assert.equal(e.cachedPrefixTokens(p), 0);
  assert.equal(e.stats().cachedFreeBlocks, 0);
});

test('prefix caching off: no hits, no events, no counters', () => {
  const e = new Engine(config({ enablePrefixCaching: false }));
  const p = tokens(20, 1);
  for (const id of ['a', 'b']) {
    e.add({ id, prompt: p, maxTokens: 1, sampler: hashSampler(id) });
    const r = drain(e);
    assert.equal(r[0]!.started[0]!.cachedPromptTokens, 0);
    assert.deepEqual(r.flatMap((s) => s.kvEvents), []);
  }
  assert.equal(e.stats().prefixQueries, 0);
  assert.equal(e.cachedPrefixTokens(p), 0);
});

test('emitTokens false reports no tokens but the same first tokens, finishes and durations', () => {
  const run = (emitTokens: boolean) => {
    const e = new Engine(config({ emitTokens, kvEvents: false }));
    for (let i = 0; i < 6; i++) e.add({ id: `r${i}`, prompt: tokens(10 + i * 7, i % 2), maxTokens: 5 + i, sampler: hashSampler(`r${i}`) });
    return drain(e);
  };
  const a = run(true);
  const b = run(false);
  assert.ok(a.some((s) => s.tokens.length > 0));
  assert.ok(b.every((s) => s.tokens.length === 0));
  assert.deepEqual(b.map((s) => [s.durationMs, s.firstTokens, s.finished]), a.map((s) => [s.durationMs, s.firstTokens, s.finished]));
});

test('an Engine serves as the oracle probe of the fleet simulation', () => {
  const e = new Engine(config({ maxNumSeqs: 1, maxNumBatchedTokens: 16 }));
  const probe: OracleProbe = e;
  e.add({ id: 'a', prompt: tokens(40, 1), maxTokens: 2, sampler: hashSampler('a') });
  e.add({ id: 'b', prompt: tokens(10, 2), maxTokens: 2, sampler: hashSampler('b') });
  assert.equal(probe.pendingPrefillTokens(), 50);
  e.step();
  assert.equal(probe.pendingPrefillTokens(), 34);
  assert.equal(probe.running(), 1);
  assert.equal(probe.waiting(), 1);
  assert.equal(probe.freeBlocks(), 64 - 4);
  drain(e);
  assert.equal(probe.pendingPrefillTokens(), 0);
});

test('a LoRA adapter keys its blocks: no cached block is shared with the base model or another adapter', () => {
  const e = new Engine(config());
  const prompt = tokens(16, 7);
  const run = (id: string, lora?: string) => {
    e.add({ id, prompt, maxTokens: 1, sampler: hashSampler(id), ignoreEos: true, ...(lora !== undefined ? { lora } : {}) });
    const events: KvEvent[] = [];
    let cached = -1;
    drain(e, (r) => {
      events.push(...r.kvEvents);
      for (const s of r.started) if (s.id === id) cached = s.cachedPromptTokens;
    });
    return { cached, stored: events.filter((ev): ev is Extract<KvEvent, { type: 'BlockStored' }> => ev.type === 'BlockStored') };
  };
  const base = run('base');
  assert.equal(base.cached, 0);
  assert.equal(base.stored[0]?.loraName, undefined);
  const sql = run('sql', 'sql-lora');
  assert.equal(sql.cached, 0, "the base model's blocks are not the adapter's");
  assert.equal(sql.stored[0]?.loraName, 'sql-lora', 'its BlockStored events name the adapter');
  assert.equal(sql.stored[0]?.parentBlockHash, null);
  assert.notEqual(sql.stored[0]?.blockHashes[0], base.stored[0]?.blockHashes[0]);
  assert.equal(run('chat', 'chat-lora').cached, 0, "nor are another adapter's");
  assert.ok(run('sql2', 'sql-lora').cached >= 12, "the adapter's own blocks are");
  assert.ok(run('base2').cached >= 12, "and the base model's its own");
});

test('max_loras: a request whose adapter would be one too many in the batch waits, others pass it', () => {
  const e = new Engine(config({ maxLoras: 1 }));
  const add = (id: string, lora: string | undefined, maxTokens: number) =>
    e.add({ id, prompt: tokens(8, id.charCodeAt(0)), maxTokens, sampler: hashSampler(id), ignoreEos: true, ...(lora !== undefined ? { lora } : {}) });
  add('a', 'x', 4);
  add('b', 'y', 2);
  add('c', 'x', 4);
  add('d', undefined, 2);
  const startedAt = new Map<string, number>();
  const finishedAt = new Map<string, number>();
  let step = 0;
  drain(e, (r) => {
    for (const s of r.started) startedAt.set(s.id, step);
    for (const f of r.finished) finishedAt.set(f.id, step);
    if (step === 0) assert.deepEqual(e.adapterState(), { running: ['x'], waiting: ['y'] });
    step++;
  });
  assert.deepEqual([startedAt.get('a'), startedAt.get('c'), startedAt.get('d')], [0, 0, 0], 'the same adapter and the base model share the batch');
  assert.ok(startedAt.get('b')! > Math.max(finishedAt.get('a')!, finishedAt.get('c')!), 'the other adapter waits until x is out of the batch');
  // Unlimited without maxLoras.
  const free = new Engine(config());
  free.add({ id: 'p', prompt: tokens(8, 1), maxTokens: 2, sampler: hashSampler('p'), ignoreEos: true, lora: 'x' });
  free.add({ id: 'q', prompt: tokens(8, 2), maxTokens: 2, sampler: hashSampler('q'), ignoreEos: true, lora: 'y' });
  assert.equal(free.step()!.started.length, 2);
});
