/**
 * Tier-weighted prefix credit: a block the worker holds in host memory or on disk (KV events with
 * a medium) is a hit worth less than one on the GPU, as each policy's source weighs it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { KvEventMapper } from '../../../src/fleet/kv-events-mapper.js';
import type { WorkerState } from '../../../src/fleet/worker-state.js';
import { PrefixIndex } from '../../../src/scheduler/index/prefix-index.js';
import { createPolicy } from '../../../src/scheduler/registry.js';
import type { Policy, PolicyOptions, RouteOutcome } from '../../../src/scheduler/types.js';
import { request, router, seq, worker } from '../helpers.js';

const picked = (o: RouteOutcome) => (o.ok ? o.decision.worker.id : `refused ${o.status}`);
let nextEngineHash = 1_000_000;

/** `w`'s engine stores the full blocks of `tokens` on the GPU, then (host) moves them to host memory. */
function feed(policy: Policy, w: WorkerState, tokens: readonly number[], where: 'gpu' | 'host'): void {
  const index = policy.prefixIndex!;
  if (!index.hasWorker(w.id)) index.addWorker(w.id, w.numGpuBlocks);
  const bs = w.blockSize;
  const n = Math.floor(tokens.length / bs);
  const mapper = new KvEventMapper(index, w.id, { blockSize: bs });
  const hashes = Array.from({ length: n }, () => nextEngineHash++);
  mapper.apply([{ type: 'BlockStored', blockHashes: hashes, parentBlockHash: null, tokenIds: tokens.slice(0, n * bs), blockSize: bs }], 0);
  if (where === 'host') {
    mapper.apply(
      [
        { type: 'BlockStored', blockHashes: hashes, parentBlockHash: null, tokenIds: [], blockSize: bs, medium: 'CPU' },
        { type: 'BlockRemoved', blockHashes: hashes, medium: 'GPU' },
      ],
      0,
    );
  }
}

test('llm-d-precise: a host-memory block counts cpuWeight (0.8) of a GPU one in the affinity share, as llm-d-kv-cache weighs the cpu tier', () => {
  const prompt = seq(100, 64 * 16);
  // a holds 52 of the 64 blocks and is prefilling another 1,024-token prompt; b holds none, idle.
  //   on the GPU: share 52/64 = 0.81 ≥ 0.8 → sticky a;
  //   in host memory: 0.8 · 52/64 = 0.65 → no one sticky → token load a 1,024 + 12 · 16 > b 1,024 → b.
  const pick = (where: 'gpu' | 'host', options: PolicyOptions = {}) => {
    const policy = createPolicy('llm-d-precise', options);
    const { router: r } = router(policy);
    const a = worker('a');
    const b = worker('b');
    assert.ok(r.route(request(seq(50_000, 64 * 16)), [a]).ok);
    feed(policy, a, prompt.slice(0, 52 * 16), where);
    return picked(r.route(request(prompt), [a, b]));
  };
  assert.equal(pick('gpu'), 'a');
  assert.equal(pick('host'), 'b');
  assert.equal(pick('host', { cpuWeight: 1 }), 'a');
});

test('dynamo: the overlap is effective — host blocks count host_cache_hit_weight (0.75)', () => {
  const sys = seq(10, 32 * 16);
  const prompt = [...sys, ...seq(9000, 16)]; // 33 blocks
  // a holds the 32-block prefix in host memory only, b the first 28 blocks on its GPU.
  //   cost = (33 − overlap) + 33 new blocks: a = 33 − 24 + 33 = 42, b = 33 − 28 + 33 = 38.
  const pick = (options: PolicyOptions = {}) => {
    const policy = createPolicy('dynamo', options);
    const { router: r } = router(policy);
    const a = worker('a');
    const b = worker('b');
    feed(policy, a, sys, 'host');
    feed(policy, b, sys.slice(0, 28 * 16), 'gpu');
    return picked(r.route(request(prompt), [a, b]));
  };
  assert.equal(pick(), 'b');
  assert.equal(pick({ hostCacheHitWeight: 1 }), 'a'); // a = 1 + 33 = 34 < 38
});

test('prefix index: blocks held only off the GPU do not count against its GPU capacity', () => {
  const index = new PrefixIndex();
  index.addWorker('w', 4);
  index.insertEvent('w', [1, 2, 3, 4], 'gpu', 0);
  index.insertEvent('w', [5, 6, 7, 8], 'host', 0);
  assert.equal(index.blockCount('w'), 8);
  assert.deepEqual(index.tierCounts([1, 2, 3, 4, 5, 6, 7, 8], 'w', 8), [4, 4, 0]);
  // A fifth GPU block pushes the least recently used out.
  index.insertEvent('w', [9], 'gpu', 0);
  assert.equal(index.blockCount('w'), 8);
  // A host block stored on the GPU again is a GPU block; removing it from the host keeps it.
  index.insertEvent('w', [5], 'gpu', 0);
  index.remove('w', 5, 'host');
  assert.ok(index.holds('w', 5));
  assert.deepEqual(index.tierCounts([5], 'w', 1), [1, 0, 0]);
  index.remove('w', 5, 'gpu');
  assert.ok(!index.holds('w', 5));
});

test('kvgate: a host-memory block counts hostHitWeight of a cached token in the estimate', () => {
  const sys = seq(10, 32 * 16);
  const prompt = [...sys, ...seq(9000, 16)]; // 33 blocks, 528 tokens
  const hitAt = (where: 'gpu' | 'host', options: PolicyOptions = {}) => {
    const policy = createPolicy('kvgate', options);
    const { router: r } = router(policy);
    const a = worker('a');
    feed(policy, a, sys, where);
    const o = r.route(request(prompt), [a]);
    assert.ok(o.ok);
    return o.decision.expectedPrefixHit;
  };
  assert.equal(hitAt('gpu'), 512 / 528);
  assert.equal(hitAt('host'), 384 / 528); // 0.75 · 512
  assert.equal(hitAt('host', { hostHitWeight: 1 }), 512 / 528);
  assert.equal(hitAt('host', { hostHitWeight: 0 }), 0);
});
