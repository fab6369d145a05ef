/**
 * vLLM's KV-event payloads as vLLM's msgspec encoder lays them out, byte by byte (a minimal
 * msgpack writer here, independent of the decoder's library), in both encodings; and what the
 * mapper does with the fields beyond the hashes: medium, group_idx / kv_cache_spec_kind,
 * extra_keys.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeEventBatch, foldHash } from '../../src/fleet/kv-events-wire.js';
import { KvEventMapper } from '../../src/fleet/kv-events-mapper.js';
import { blockHashes } from '../../src/kv/block-hash.js';
import type { KvEvent } from '../../src/kv/events.js';
import { KVGATE_HASH_SEED, PROMPT_ADAPTER, PROMPT_SALT, promptBlocks } from '../../src/kv/prompt-blocks.js';
import { PrefixIndex } from '../../src/scheduler/index/prefix-index.js';
import { RequestState } from '../../src/util/state.js';

// ---- a minimal msgpack writer: exactly the forms msgspec emits for these structs ----
type Mp = number[];
const str = (s: string): Mp => {
  const b = [...Buffer.from(s, 'utf8')];
  if (b.length < 32) return [0xa0 | b.length, ...b];
  return [0xd9, b.length, ...b];
};
const bin = (b: Uint8Array): Mp => [0xc4, b.length, ...b];
const uint = (n: number): Mp => (n < 128 ? [n] : n < 256 ? [0xcc, n] : n < 65536 ? [0xcd, n >> 8, n & 0xff] : [0xce, (n >>> 24) & 0xff, (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff]);
const nil: Mp = [0xc0];
const f64 = (x: number): Mp => {
  const b = Buffer.alloc(8);
  b.writeDoubleBE(x);
  return [0xcb, ...b];
};
const arr = (...items: Mp[]): Mp => [0x90 | items.length, ...items.flat()];
const map = (...pairs: Array<[string, Mp]>): Mp => [0x80 | pairs.length, ...pairs.flatMap(([k, v]) => [...str(k), ...v])];

const BS = 4;
const digest = (i: number) => Uint8Array.from({ length: 32 }, (_, k) => (i * 37 + k * 11) & 0xff);
const tokens = (start: number, n: number) => Array.from({ length: n }, (_, i) => start + i);

test('map encoding (current vLLM): every field of BlockStored, BlockRemoved and AllBlocksCleared', () => {
  // KVEventBatch(ts=1712.25, events=[BlockStored(...all fields...), BlockRemoved(...), AllBlocksCleared()],
  // data_parallel_rank=1) through msgspec.msgpack.Encoder: tag first, fields in declaration order.
  const payload = Uint8Array.from(
    map(
      ['ts', f64(1712.25)],
      [
        'events',
        arr(
          map(
            ['type', str('BlockStored')],
            ['block_hashes', arr(bin(digest(1)), bin(digest(2)))],
            ['parent_block_hash', bin(digest(0))],
            ['token_ids', arr(...tokens(10, 2 * BS).map(uint))],
            ['block_size', uint(BS)],
            ['lora_id', uint(3)],
            ['medium', str('GPU')],
            ['lora_name', str('sql-lora')],
            ['extra_keys', arr(arr(str('sql-lora'), str('tenant-a')), nil)],
            ['group_idx', uint(0)],
            ['kv_cache_spec_kind', str('full_attention')],
          ),
          map(['type', str('BlockRemoved')], ['block_hashes', arr(bin(digest(2)))], ['medium', str('CPU')], ['group_idx', uint(1)]),
          map(['type', str('AllBlocksCleared')]),
        ),
      ],
      ['data_parallel_rank', uint(1)],
    ),
  );
  const b = decodeEventBatch(payload);
  assert.equal(b.ts, 1712.25);
  assert.equal(b.dpRank, 1);
  assert.equal(b.skippedUnknown, 0);
  assert.deepEqual(b.events[0], {
    type: 'BlockStored',
    blockHashes: [foldHash(digest(1)), foldHash(digest(2))],
    parentBlockHash: foldHash(digest(0)),
    tokenIds: tokens(10, 2 * BS),
    blockSize: BS,
    loraName: 'sql-lora',
    medium: 'GPU',
    extraKeys: [['sql-lora', 'tenant-a'], null],
    groupIdx: 0,
    kvCacheSpecKind: 'full_attention',
  });
  assert.deepEqual(b.events[1], { type: 'BlockRemoved', blockHashes: [foldHash(digest(2))], medium: 'CPU', groupIdx: 1 });
  assert.deepEqual(b.events[2], { type: 'AllBlocksCleared' });
  // A sliding-window group's store carries its window.
  const sw = decodeEventBatch(
    Uint8Array.from(
      map(
        ['ts', f64(1)],
        [
          'events',
          arr(
            map(
              ['type', str('BlockStored')],
              ['block_hashes', arr(uint(7))],
              ['parent_block_hash', nil],
              ['token_ids', arr(...tokens(0, BS).map(uint))],
              ['block_size', uint(BS)],
              ['lora_id', nil],
              ['medium', nil],
              ['lora_name', nil],
              ['group_idx', uint(1)],
              ['kv_cache_spec_kind', str('sliding_window')],
              ['kv_cache_spec_sliding_window', uint(4096)],
            ),
          ),
        ],
      ),
    ),
  );
  assert.deepEqual(sw.events[0], { type: 'BlockStored', blockHashes: [7], parentBlockHash: null, tokenIds: tokens(0, BS), blockSize: BS, groupIdx: 1, kvCacheSpecKind: 'sliding_window', slidingWindow: 4096 });
  assert.equal(sw.dpRank, undefined, 'data_parallel_rank omitted when unset (omit_defaults)');
});

test('array encoding (older vLLM, array_like): the same fields by position, trailing defaults left out', () => {
  const payload = Uint8Array.from(
    arr(
      f64(99.5),
      arr(
        arr(str('BlockStored'), arr(uint(11), uint(12)), nil, arr(...tokens(0, 2 * BS).map(uint)), uint(BS), nil, str('GPU'), nil, arr(nil, arr(str('mm-hash-1'))), uint(0), str('full_attention'), nil),
        arr(str('BlockStored'), arr(uint(13)), uint(12), arr(...tokens(100, BS).map(uint)), uint(BS), nil, str('GPU'), nil),
        arr(str('BlockRemoved'), arr(uint(11)), str('GPU')),
        arr(str('BlockRemoved'), arr(uint(12)), str('GPU'), uint(2)),
        arr(str('AllBlocksCleared')),
      ),
      uint(0),
    ),
  );
  const b = decodeEventBatch(payload);
  assert.equal(b.ts, 99.5);
  assert.equal(b.dpRank, 0);
  assert.deepEqual(b.events[0], { type: 'BlockStored', blockHashes: [11, 12], parentBlockHash: null, tokenIds: tokens(0, 2 * BS), blockSize: BS, medium: 'GPU', extraKeys: [null, ['mm-hash-1']], groupIdx: 0, kvCacheSpecKind: 'full_attention' });
  assert.deepEqual(b.events[1], { type: 'BlockStored', blockHashes: [13], parentBlockHash: 12, tokenIds: tokens(100, BS), blockSize: BS, medium: 'GPU' });
  assert.deepEqual(b.events[2], { type: 'BlockRemoved', blockHashes: [11], medium: 'GPU' });
  assert.deepEqual(b.events[3], { type: 'BlockRemoved', blockHashes: [12], medium: 'GPU', groupIdx: 2 });
  assert.deepEqual(b.events[4], { type: 'AllBlocksCleared' });
  assert.throws(() => decodeEventBatch(Uint8Array.from(arr(f64(0), arr(arr(str('BlockStored'), arr(uint(1)), nil, arr(uint(1)), uint(1), nil, uint(5)))))), /medium must be a string/);
  assert.throws(() => decodeEventBatch(Uint8Array.from(arr(f64(0), arr(arr(str('BlockStored'), arr(uint(1)), nil, arr(uint(1)), uint(1), nil, nil, nil, uint(3)))))), /extra_keys must be an array/);
});

function rig(): { index: PrefixIndex; mapper: KvEventMapper; apply: (...e: KvEvent[]) => void } {
  const index = new PrefixIndex();
  index.addWorker('w', 1000);
  const mapper = new KvEventMapper(index, 'w', { blockSize: BS });
  return { index, mapper, apply: (...e) => mapper.apply(e, 0) };
}
const stored = (hashes: number[], parent: number | null, toks: number[], more: Partial<Extract<KvEvent, { type: 'BlockStored' }>> = {}): KvEvent => ({
  type: 'BlockStored',
  blockHashes: hashes,
  parentBlockHash: parent,
  tokenIds: toks,
  blockSize: BS,
  ...more,
});

test('a hybrid model: only the full-attention group feeds the index; a sliding-window eviction leaves it alone', () => {
  const { index, mapper, apply } = rig();
  const prompt = tokens(50, 3 * BS);
  const kv = blockHashes(prompt, BS, KVGATE_HASH_SEED);
  // vLLM's hybrid manager stores the same block hashes in each group.
  apply(stored([1, 2, 3], null, prompt, { groupIdx: 0, kvCacheSpecKind: 'full_attention' }));
  apply(stored([1, 2, 3], null, prompt, { groupIdx: 1, kvCacheSpecKind: 'sliding_window', slidingWindow: 8 }));
  assert.equal(index.matchWorker(kv, 'w', 0), 3);
  // The sliding window moves on: its group frees the first blocks, the full-attention group keeps them.
  apply({ type: 'BlockRemoved', blockHashes: [1, 2], groupIdx: 1 });
  assert.equal(index.matchWorker(kv, 'w', 0), 3, 'the prefix is still cached');
  assert.ok(mapper.stats().otherGroup >= 2);
  apply({ type: 'BlockRemoved', blockHashes: [3], groupIdx: 0 });
  assert.equal(index.matchWorker(kv, 'w', 0), 2);
  // Without kinds (group ids only), group 0 feeds.
  const r = rig();
  r.apply(stored([9], null, prompt.slice(0, BS), { groupIdx: 1 }));
  assert.equal(r.index.blockCount('w'), 0);
  r.apply(stored([9], null, prompt.slice(0, BS), { groupIdx: 0 }));
  assert.equal(r.index.blockCount('w'), 1);
  // A mamba-first model: the first full-attention group seen feeds, whatever its number.
  const m = rig();
  m.apply(stored([5], null, prompt.slice(0, BS), { groupIdx: 0, kvCacheSpecKind: 'mamba' }));
  m.apply(stored([5], null, prompt.slice(0, BS), { groupIdx: 2, kvCacheSpecKind: 'full_attention' }));
  m.apply({ type: 'BlockRemoved', blockHashes: [5], groupIdx: 0 });
  assert.equal(m.index.matchWorker(kv, 'w', 0), 1);
});

test('extra_keys: a cache_salt roots the chain as kvgate salts its prompts; other keys fork it', () => {
  const prompt = tokens(300, 2 * BS);
  const salted = new RequestState();
  salted.set(PROMPT_SALT, 'tenant-a');
  const saltedBlocks = promptBlocks(salted, prompt, BS, KVGATE_HASH_SEED);
  const plain = promptBlocks(new RequestState(), prompt, BS, KVGATE_HASH_SEED);
  const { index, apply } = rig();
  apply(stored([1, 2], null, prompt, { extraKeys: [['tenant-a'], null] }));
  assert.equal(index.matchWorker(saltedBlocks, 'w', 0), 2, 'the salted prompt matches');
  assert.equal(index.matchWorker(plain, 'w', 0), 0, 'the unsalted one does not');
  // No key on any block (vLLM sends a null for each): the plain prompt's chain.
  const none = rig();
  none.apply(stored([1, 2], null, prompt, { extraKeys: [null, null] }));
  assert.equal(none.index.matchWorker(plain, 'w', 0), 2);
  // An image's hash on the second block: the first block is the plain prompt's, the second is not.
  const mm = rig();
  mm.apply(stored([1, 2], null, prompt, { extraKeys: [null, [['img-digest', 0]]] }));
  assert.equal(mm.index.matchWorker(plain, 'w', 0), 1);
  // The adapter's name among the keys is the adapter's chain already, not a fork.
  const lora = rig();
  lora.apply(stored([1, 2], null, prompt, { loraName: 'sql-lora', extraKeys: [['sql-lora'], ['sql-lora']] }));
  const withLora = new RequestState();
  withLora.set(PROMPT_ADAPTER, 'sql-lora');
  assert.equal(lora.index.matchWorker(promptBlocks(withLora, prompt, BS, KVGATE_HASH_SEED), 'w', 0), 2);
});

test('medium: a block offloaded to host memory still matches, at the host tier, until the host drops it too', () => {
  const { index, mapper, apply } = rig();
  const prompt = tokens(700, 3 * BS);
  const kv = blockHashes(prompt, BS, KVGATE_HASH_SEED);
  apply(stored([1, 2, 3], null, prompt));
  assert.deepEqual(index.tierCounts(kv, 'w', 3), [3, 0, 0]);
  // vLLM's offloading connector: the CPU copy, without token ids, then the GPU's eviction.
  apply(stored([2, 3], 1, [], { medium: 'CPU' }), { type: 'BlockRemoved', blockHashes: [2, 3], medium: 'GPU' });
  assert.equal(index.matchWorker(kv, 'w', 0), 3);
  assert.deepEqual(index.tierCounts(kv, 'w', 3), [1, 2, 0]);
  apply(stored([3], 2, [], { medium: 'CPU_TIER2' }), { type: 'BlockRemoved', blockHashes: [3], medium: 'CPU' });
  assert.deepEqual(index.tierCounts(kv, 'w', 3), [1, 1, 1]);
  apply({ type: 'BlockRemoved', blockHashes: [2], medium: 'CPU' });
  assert.equal(index.matchWorker(kv, 'w', 0), 1);
  // A medium that is not the worker's own is skipped, and so is a tokenless copy of an unknown block.
  apply(stored([40], null, [], { medium: 'EXTERNAL' }), stored([41], null, [], { medium: 'CPU' }));
  assert.equal(mapper.stats().otherMedium, 1);
  assert.equal(mapper.stats().unknownBlock, 1);
  // AllBlocksCleared clears every tier of the worker.
  apply({ type: 'AllBlocksCleared' });
  assert.equal(index.blockCount('w'), 0);
  assert.equal(mapper.stats().mapped, 0);
});
