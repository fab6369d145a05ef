import { test } from 'node:test';
import assert from 'node:assert/strict';
import { blockHashes } from '../../../src/kv/block-hash.js';
import { Engine } from '../../../src/engine/engine.js';
import type { EngineConfig } from '../../../src/engine/types.js';
import { KvEventMapper } from '../../../src/fleet/kv-events-mapper.js';
import { KVGATE_HASH_SEED, PromptBlocks, type BlockSeq } from '../../../src/kv/prompt-blocks.js';
import { PrefixIndex } from '../../../src/scheduler/index/prefix-index.js';
import { seededRng } from '../../../src/util/rng.js';

const BS = 16;
const hashes = (tokens: number[]) => blockHashes(tokens, BS, KVGATE_HASH_SEED);
const seq = (start: number, n: number) => Array.from({ length: n }, (_, i) => start + i);

test('lookup returns each worker’s matched leading blocks', () => {
  const idx = new PrefixIndex();
  idx.addWorker('a', 1000);
  idx.addWorker('b', 1000);
  const p = seq(1, 10 * BS);
  const h = hashes(p);
  idx.insert('a', h, 'routed', 0);
  idx.insert('b', h, 'routed', 0, 0, 4);
  const out = new Int32Array(3);
  idx.matchSlots(h, [idx.slotOf('a'), idx.slotOf('b'), -1], out, 0);
  assert.deepEqual([...out], [10, 4, 0]);
  // A prompt diverging in block 6 matches 6 at a and 4 at b.
  const q = [...p];
  q[6 * BS + 3] = 99999;
  assert.equal(idx.matchWorker(hashes(q), 'a', 0), 6);
  assert.equal(idx.matchWorker(hashes(q), 'b', 0), 4);
});

test('per-worker capacity ages out the least recently used blocks, prompt tails first', () => {
  const idx = new PrefixIndex();
  idx.addWorker('a', 8);
  const p1 = hashes(seq(1000, 6 * BS));
  const p2 = hashes(seq(5000, 6 * BS));
  idx.insert('a', p1, 'routed', 0);
  idx.insert('a', p2, 'routed', 1);
  assert.equal(idx.blockCount('a'), 8);
  // p2 is whole; p1 lost its tail (4 of its 6 blocks), keeping its head.
  assert.equal(idx.matchWorker(p2, 'a', 2), 6);
  assert.equal(idx.matchWorker(p1, 'a', 2), 2);
  assert.equal(idx.stats().evictedForCapacity, 4);
  // Shrinking capacity evicts more.
  idx.setCapacity('a', 3);
  assert.equal(idx.blockCount('a'), 3);
  assert.equal(idx.matchWorker(p2, 'a', 2), 3);
});

test('predictions expire unless confirmed; confirmed blocks stay', () => {
  const idx = new PrefixIndex({ predictedTtlMs: 100 });
  idx.addWorker('a', 1000);
  const p1 = hashes(seq(1, 4 * BS));
  const p2 = hashes(seq(900, 4 * BS));
  idx.insert('a', p1, 'predicted', 0);
  idx.insert('a', p2, 'predicted', 0);
  assert.equal(idx.matchWorker(p1, 'a', 50), 4);
  idx.confirm('a', p1, 60);
  assert.equal(idx.matchWorker(p1, 'a', 150), 4);
  assert.equal(idx.matchWorker(p2, 'a', 150), 0);
  assert.equal(idx.blockCount('a'), 4);
  assert.ok(idx.stats().expired >= 4);
});

test('the byte bound holds: the index evicts instead of growing past maxBytes', () => {
  const idx = new PrefixIndex({ maxBytes: 64 * 1024 });
  idx.addWorker('a', 1e9);
  idx.addWorker('b', 1e9);
  const max = idx.stats().maxNodes;
  for (let i = 0; i < 40; i++) idx.insert(i % 2 ? 'a' : 'b', hashes(seq(i * 100_000, 64 * BS)), 'routed', i);
  const s = idx.stats();
  assert.ok(s.nodes <= max, `${s.nodes} > ${max}`);
  assert.ok(s.bytes <= 64 * 1024, `bytes ${s.bytes}`);
  assert.ok(s.evictedForMemory > 0);
  // The most recent prompt is still fully known.
  assert.equal(idx.matchWorker(hashes(seq(39 * 100_000, 64 * BS)), 'a', 40), 64);
});

test('past its first nodes the index grows at once to what its workers can hold, and no further', () => {
  const idx = new PrefixIndex({});
  for (const id of ['a', 'b', 'c', 'd']) idx.addWorker(id, 10_000);
  const small = idx.stats().bytes;
  // Past the first 1,024 nodes: one step to 65,536 nodes (the next power of two above 40,000),
  // not a doubling to 2,048.
  idx.insert('a', hashes(seq(0, 1100 * BS)), 'routed', 0);
  const grown = idx.stats().bytes;
  assert.ok(grown > 16 * small, `grew from ${small} to ${grown} bytes`);
  // Filling every worker to its capacity needs no further growth.
  for (const id of ['a', 'b', 'c', 'd']) idx.insert(id, hashes(seq(id.charCodeAt(0) * 1_000_000, 10_000 * BS)), 'routed', 1);
  assert.equal(idx.stats().nodes, 40_000);
  assert.equal(idx.stats().bytes, grown);
});

test('many inserts and removals keep the hash table consistent with a reference model', () => {
  const rng = seededRng(7);
  const idx = new PrefixIndex({ maxWorkers: 40 });
  const ids = Array.from({ length: 40 }, (_, i) => `w${i}`);
  for (const id of ids) idx.addWorker(id, 1e9);
  const truth = new Map<string, Set<number>>(ids.map((id) => [id, new Set()]));
  const pool = Array.from({ length: 3000 }, () => Math.floor(rng() * 2 ** 53));
  for (let step = 0; step < 20_000; step++) {
    const id = ids[Math.floor(rng() * ids.length)]!;
    const h = pool[Math.floor(rng() * pool.length)]!;
    if (rng() < 0.6) {
      idx.insert(id, [h], 'event', step);
      truth.get(id)!.add(h);
    } else {
      assert.equal(idx.remove(id, h), truth.get(id)!.delete(h));
    }
  }
  for (const id of ids) {
    for (const h of pool) assert.equal(idx.holds(id, h), truth.get(id)!.has(h));
    assert.equal(idx.blockCount(id), truth.get(id)!.size);
  }
});

test('event-fed index equals the engine’s prefix cache, through the subscriber’s mapping', () => {
  const cfg: EngineConfig = {
    blockSize: BS,
    numGpuBlocks: 96,
    maxModelLen: 4096,
    maxNumSeqs: 8,
    maxNumBatchedTokens: 512,
    enablePrefixCaching: true,
    hashSeed: 12345, // the engine's own chain, unknown to the index
    kvEvents: true,
    emitTokens: false,
    timeModel: { stepMs: () => 1 },
  };
  const engine = new Engine(cfg);
  const idx = new PrefixIndex();
  idx.addWorker('w', cfg.numGpuBlocks);
  const mapper = new KvEventMapper(idx, 'w', { blockSize: BS });
  const rng = seededRng(3);
  const systems = [seq(1, 5 * BS), seq(3000, 7 * BS), seq(9000, 3 * BS)];
  const prompts: number[][] = [];
  for (let i = 0; i < 60; i++) {
    const sys = systems[Math.floor(rng() * systems.length)]!;
    const tail = Array.from({ length: 8 + Math.floor(rng() * 60) }, () => 20000 + Math.floor(rng() * 500));
    prompts.push([...sys, ...tail]);
  }
  let now = 0;
  let unmapped = 0;
  let checks = 0;
  for (let i = 0; i < prompts.length; i++) {
    engine.add({ id: `r${i}`, prompt: prompts[i]!, maxTokens: 4 + (i % 7), sampler: () => 5, ignoreEos: true });
    // Step a little between arrivals so requests overlap, evict and re-store blocks.
    for (let s = 0; s < 3; s++) {
      const r = engine.step();
      if (!r) break;
      now += r.durationMs;
      unmapped += mapper.apply(r.kvEvents, now);
    }
    for (const probe of [prompts[i]!, prompts[Math.floor(rng() * (i + 1))]!, ...systems]) {
      const usable = Math.floor((probe.length - 1) / BS);
      const fromIndex = Math.min(idx.matchWorker(hashes(probe), 'w', now), usable) * BS;
      assert.equal(fromIndex, engine.cachedPrefixTokens(probe), `step ${i}`);
      checks++;
    }
  }
  while (engine.hasWork()) {
    const r = engine.step()!;
    unmapped += mapper.apply(r.kvEvents, now);
  }
  for (const probe of prompts) {
    const usable = Math.floor((probe.length - 1) / BS);
    assert.equal(Math.min(idx.matchWorker(hashes(probe), 'w', now), usable) * BS, engine.cachedPrefixTokens(probe));
  }
  assert.equal(unmapped, 0);
  assert.ok(mapper.stats().removed > 0, 'the test should exercise evictions');
  assert.ok(checks > 100);
  // The index never believes in more blocks than the engine caches.
  assert.ok(idx.blockCount('w') <= cfg.numGpuBlocks);
  engine.resetPrefixCache();
  const r = engine.step();
  assert.equal(r, null);
});

test('worker masks widen as workers join; beyond maxWorkers a worker is untracked, not an error', () => {
  const idx = new PrefixIndex({ maxWorkers: 100 });
  const p = hashes(seq(1, 8 * BS));
  idx.addWorker('w0', 1000);
  idx.insert('w0', p, 'routed', 0);
  for (let i = 1; i < 100; i++) {
    idx.addWorker(`w${i}`, 1000);
    idx.insert(`w${i}`, p, 'routed', 0, 0, i % 9);
  }
  const slots = Array.from({ length: 100 }, (_, i) => idx.slotOf(`w${i}`));
  const out = new Int32Array(100);
  idx.matchSlots(p, slots, out, 0);
  assert.equal(out[0], 8);
  for (let i = 1; i < 100; i++) assert.equal(out[i], i % 9, `w${i}`);
  assert.throws(() => idx.addWorker('w100', 10), /at most 100 workers/);
  idx.removeWorker('w5');
  idx.addWorker('again', 1000);
  assert.equal(idx.matchWorker(p, 'again', 0), 0);
});

test('many outstanding predictions (the ring grows) all expire on time', () => {
  const idx = new PrefixIndex({ predictedTtlMs: 10 });
  idx.addWorker('a', 1e6);
  const prompts = Array.from({ length: 50 }, (_, i) => hashes(seq(i * 10_000, 100 * BS)));
  prompts.forEach((p, i) => idx.insert('a', p, 'predicted', i * 0.01));
  assert.equal(idx.blockCount('a'), 5000);
  assert.equal(idx.matchWorker(prompts[49]!, 'a', 5), 100);
  idx.insert('a', prompts[0]!, 'routed', 5);
  assert.equal(idx.matchWorker(prompts[49]!, 'a', 20), 0);
  assert.equal(idx.matchWorker(prompts[0]!, 'a', 20), 100);
  assert.equal(idx.blockCount('a'), 100);
});

test('idle-time upkeep applies a long deferred insert in slices, with the same result as an insert now', async () => {
  const rng = seededRng(3);
  const prompts = Array.from({ length: 6 }, (_, k) => hashes(Array.from({ length: 500 * BS }, (_, i) => (k < 3 && i < 300 * BS ? i : Math.floor(rng() * 1e6)))));
  const now = new PrefixIndex();
  const later = new PrefixIndex();
  for (const idx of [now, later]) {
    idx.addWorker('a', 1200); // smaller than the six prompts together: capacity evicts too
    idx.addWorker('b', 5000);
  }
  prompts.forEach((h, k) => now.insert(k % 2 ? 'b' : 'a', h, 'routed', k));
  prompts.forEach((h, k) => later.insertLater(k % 2 ? 'b' : 'a', h, 'routed', k));
  // A budget of nothing: each call applies one run of blocks, then reports work left.
  let calls = 0;
  while (!later.maintain(0)) calls++;
  assert.ok(calls >= 6 * Math.floor(500 / 32), `sliced into ${calls} runs`);
  for (const id of ['a', 'b']) {
    assert.equal(later.blockCount(id), now.blockCount(id));
    for (const h of prompts) assert.equal(later.matchWorker(h, id, 9), now.matchWorker(h, id, 9));
  }
  assert.equal(later.stats().evictedForCapacity, now.stats().evictedForCapacity);
});

test('a prompt’s blocks as an array, a PromptBlocks or another BlockSeq index alike, now or deferred', () => {
  const rng = seededRng(11);
  const tokens = Array.from({ length: 12 }, (_, k) => Array.from({ length: (40 + 7 * k) * BS }, (_, i) => (k % 3 === 0 && i < 20 * BS ? i : Math.floor(rng() * 1e6))));
  const asArray = (t: number[]): BlockSeq => hashes(t);
  const asPromptBlocks = (t: number[]): BlockSeq => new PromptBlocks(t, BS, KVGATE_HASH_SEED);
  const asOther = (t: number[]): BlockSeq => {
    const h = hashes(t);
    return { length: h.length, at: (i: number) => h[i] };
  };
  const build = (as: (t: number[]) => BlockSeq, deferred: boolean): PrefixIndex => {
    const idx = new PrefixIndex();
    idx.addWorker('a', 300); // less than the prompts together: capacity evicts, entries are deleted
    idx.addWorker('b', 2000);
    tokens.forEach((t, k) => {
      const id = k % 2 ? 'b' : 'a';
      if (deferred) idx.insertLater(id, as(t), k % 4 === 0 ? 'predicted' : 'routed', k);
      else idx.insert(id, as(t), 'event', k);
    });
    return idx;
  };
  for (const deferred of [false, true]) {
    const ref = build(asArray, deferred);
    for (const as of [asPromptBlocks, asOther]) {
      const idx = build(as, deferred);
      for (const id of ['a', 'b']) {
        assert.equal(idx.blockCount(id), ref.blockCount(id));
        for (const t of tokens) assert.equal(idx.matchWorker(hashes(t), id, 20), ref.matchWorker(hashes(t), id, 20));
      }
      assert.equal(idx.stats().evictedForCapacity, ref.stats().evictedForCapacity);
    }
    assert.ok(ref.stats().evictedForCapacity > 0, 'the test should evict');
  }
});

test('a read of the index while a deferred insert is part-applied sees all of it', () => {
  const idx = new PrefixIndex();
  idx.addWorker('a', 5000);
  const h = hashes(seq(7, 400 * BS));
  idx.insertLater('a', h, 'routed', 0);
  assert.equal(idx.maintain(0), false, 'work left after one slice');
  assert.equal(idx.matchWorker(h, 'a', 1), 400);
  assert.equal(idx.maintain(0), true);
});

test('the idle-time upkeep runs by itself on the event loop', async () => {
  const idx = new PrefixIndex();
  idx.addWorker('a', 5000);
  const h = hashes(seq(11, 300 * BS));
  idx.insertLater('a', h, 'routed', 0);
  assert.equal(idx.deferredInserts, 1);
  for (let i = 0; i < 500 && idx.deferredInserts > 0; i++) await new Promise((r) => setImmediate(r));
  assert.equal(idx.deferredInserts, 0);
  assert.equal(idx.blockCount('a'), 300);
});

/**
 * The index answers a match by galloping and bisection, which is exact only while each worker's
 * blocks are prefix-closed (a block held implies every block before it in its chain is held).
 * Every way the index changes must keep that: inserts of whole prompts, capacity eviction,
 * prediction expiry and retraction, confirmation, and event removal in vLLM's order (a freed
 * request's blocks tail first). Checked against a block-by-block walk over `holds`, with more
 * than 32 workers so the mask spans several words.
 */
test('matches equal a block-by-block walk under random traffic, capacity eviction, expiry and retraction', () => {
  const rng = seededRng(20261124);
  const W = 40;
  const idx = new PrefixIndex({ predictedTtlMs: 50 });
  const ids = Array.from({ length: W }, (_, i) => `w${i}`);
  for (const id of ids) idx.addWorker(id, 150 + Math.floor(rng() * 200));
  const slots = ids.map((id) => idx.slotOf(id));
  // Prompts: one of 6 shared heads (0–40 blocks), then a unique tail (0–30 blocks).
  const heads = Array.from({ length: 6 }, (_, g) => seq(1_000_000 * (g + 1), Math.floor(rng() * 41) * BS));
  let serial = 0;
  const prompt = () => {
    const head = heads[Math.floor(rng() * heads.length)]!;
    const cut = Math.floor(rng() * (head.length / BS + 1)) * BS;
    return { h: hashes([...head.slice(0, cut), ...seq(50_000_000 + 1000 * serial++, Math.floor(rng() * 31) * BS)]), shared: cut / BS };
  };
  const walk = (h: number[], id: string) => {
    let b = 0;
    while (b < h.length && idx.holds(id, h[b]!)) b++;
    return b;
  };
  const inflight: Array<{ id: string; h: number[] }> = [];
  const stored: Array<{ id: string; h: number[]; shared: number }> = [];
  let now = 0;
  let checked = 0;
  for (let step = 0; step < 3000; step++) {
    now += rng() * 5;
    const { h, shared } = prompt();
    const id = ids[Math.floor(rng() * W)]!;
    const r = rng();
    if (r < 0.45) {
      idx.insert(id, h, 'predicted', now);
      inflight.push({ id, h });
    } else if (r < 0.75) {
      idx.insert(id, h, 'event', now);
      stored.push({ id, h, shared });
    } else if (r < 0.85 && inflight.length > 0) {
      const k = inflight.splice(Math.floor(rng() * inflight.length), 1)[0]!;
      idx.confirm(k.id, k.h, now);
    } else if (stored.length > 0) {
      // BlockRemoved for a finished request's own blocks, tail first, as vLLM's free queue
      // orders them (blocks other requests share are freed after their descendants).
      const k = stored[Math.floor(rng() * stored.length)]!;
      const held = walk(k.h, k.id);
      for (let b = held - 1; b >= Math.max(k.shared, held - 1 - Math.floor(rng() * 6)); b--) idx.remove(k.id, k.h[b]!);
    }
    if (step % 7 === 0) {
      const out = new Int32Array(W);
      idx.matchSlots(h, slots, out, now);
      for (let i = 0; i < W; i++) assert.equal(out[i], walk(h, ids[i]!), `step ${step}, worker ${ids[i]}`);
      checked++;
    }
  }
  assert.ok(checked > 400);
});

test('track registers a worker, keeps its capacity in step and gives its slot; −1 once the index is full', () => {
  const idx = new PrefixIndex({ maxWorkers: 2 });
  const a = idx.track('a', 8);
  assert.equal(a, idx.slotOf('a'));
  assert.equal(idx.track('a', 8), a);
  const p = hashes(seq(1, 6 * BS));
  idx.insert('a', p, 'routed', 0);
  assert.equal(idx.blockCount('a'), 6);
  // A smaller capacity reported later evicts, as setCapacity does.
  assert.equal(idx.track('a', 4), a);
  assert.equal(idx.blockCount('a'), 4);
  assert.equal(idx.workerStatus('a')!.capacity, 4);
  const b = idx.track('b', 8);
  assert.notEqual(b, a);
  assert.equal(idx.track('c', 8), -1);
  assert.equal(idx.hasWorker('c'), false);
});

/**
 * A confirmation that follows its prediction's trail (where the prediction's blocks went) must
 * leave the index exactly as one that looks every block up: the same blocks, flags, expiries and
 * LRU order. Two indexes take the same random traffic, one confirming along trails, the other
 * not; between a prediction and its confirmation other prompts evict, events remove and
 * predictions expire, so some trails lead to nodes since freed or reused. Compared through every
 * prompt's match, each worker's block count, later capacity evictions (which read the LRU order)
 * and expiry.
 */
test('a confirmation along its prediction’s trail leaves the index as one that looks its blocks up', () => {
  const rng = seededRng(20261204);
  const W = 6;
  const ids = Array.from({ length: W }, (_, i) => `w${i}`);
  const trailed = new PrefixIndex({ predictedTtlMs: 300 });
  const plain = new PrefixIndex({ predictedTtlMs: 300 });
  for (const idx of [trailed, plain]) for (const id of ids) idx.addWorker(id, 400 + 80 * ids.indexOf(id));
  const heads = Array.from({ length: 5 }, (_, g) => seq(2_000_000 * (g + 1), (10 + 8 * g) * BS));
  const prompts: number[][] = [];
  let serial = 0;
  const inflight: Array<{ id: string; h: number[]; trail: ReturnType<PrefixIndex['predict']> }> = [];
  let now = 0;
  for (let step = 0; step < 4000; step++) {
    now += rng() * 3;
    const head = heads[Math.floor(rng() * heads.length)]!;
    const h = hashes([...head.slice(0, Math.floor(rng() * (head.length / BS + 1)) * BS), ...seq(90_000_000 + 1000 * serial++, Math.floor(rng() * 40) * BS)]);
    prompts.push(h);
    const id = ids[Math.floor(rng() * W)]!;
    const r = rng();
    if (r < 0.4) {
      inflight.push({ id, h, trail: trailed.predict(id, h, now) });
      plain.insertLater(id, h, 'predicted', now);
    } else if (r < 0.75 && inflight.length > 0) {
      const k = inflight.splice(Math.floor(rng() * inflight.length), 1)[0]!;
      trailed.confirm(k.id, k.h, now, k.trail);
      plain.confirm(k.id, k.h, now);
    } else if (r < 0.9) {
      for (const idx of [trailed, plain]) idx.insertLater(id, h, 'event', now);
    } else if (prompts.length > 1) {
      const p = prompts[Math.floor(rng() * prompts.length)]!;
      for (let b = p.length - 1; b >= p.length - 4 && b >= 0; b--) for (const idx of [trailed, plain]) idx.remove(id, p[b]!);
    }
    if (step % 50 === 0) {
      for (const wid of ids) {
        assert.equal(trailed.blockCount(wid), plain.blockCount(wid), `step ${step}, ${wid}`);
        for (const p of prompts.slice(-40)) assert.equal(trailed.matchWorker(p, wid, now), plain.matchWorker(p, wid, now), `step ${step}, ${wid}`);
      }
    }
  }
  const a = trailed.stats();
  const b = plain.stats();
  assert.equal(a.evictedForCapacity, b.evictedForCapacity);
  assert.equal(a.expired, b.expired);
  assert.equal(a.nodes, b.nodes);
  assert.ok(a.evictedForCapacity > 1000, `capacity evicted ${a.evictedForCapacity} nodes`);
  // Both ways of confirming a block were taken, the trail most of the time.
  assert.ok(a.confirmedAlongTrail > 2 * a.confirmedLookedUp, `${a.confirmedAlongTrail} along trails, ${a.confirmedLookedUp} looked up`);
  assert.ok(a.confirmedLookedUp > 100, `${a.confirmedLookedUp} looked up`);
  assert.equal(b.confirmedAlongTrail + b.confirmedLookedUp, 0);
});
