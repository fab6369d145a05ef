/**
 * vLLM's KV-event wire format (vllm/distributed/kv_events.py), decoded in both of its encodings.
 *
 * A ZeroMQ PUB message is `[topic, seq (8-byte big-endian), payload]`; the payload is msgpack of
 * an `EventBatch {ts, events, data_parallel_rank?}`. The events are msgspec structs declared with
 * `tag=True` (KVCacheEvent), which msgspec encodes:
 * - as a map tagged `"type"` in current vLLM: `{"type": "BlockStored", "block_hashes": …,
 *   "parent_block_hash": …, "token_ids": …, "block_size": …, "lora_id": …, "medium": …,
 *   "lora_name": …, "extra_keys"?, "group_idx"?, "kv_cache_spec_kind"?,
 *   "kv_cache_spec_sliding_window"?}`, `{"type": "BlockRemoved", "block_hashes", "medium",
 *   "group_idx"?}`, `{"type": "AllBlocksCleared"}`; fields with defaults (extra_keys onwards,
 *   data_parallel_rank) are left out when unset (`omit_defaults=True`), and the batch is a map;
 * - as a tagged array in older vLLM (`array_like=True`): `["BlockStored", block_hashes,
 *   parent_block_hash, token_ids, block_size, lora_id, medium, lora_name, extra_keys, group_idx,
 *   kv_cache_spec_kind, kv_cache_spec_sliding_window]` — fields in declaration order, trailing
 *   defaults left out — and the batch `[ts, events, data_parallel_rank]`.
 * Either form is accepted per batch and per event; a map may also name its tag `tag`.
 * Block hashes are bytes (sha256 digests) by default, or integers with an environment switch;
 * integers beyond 2^53 arrive as bigints. Every hash is folded to a 53-bit number, which is only
 * ever used as a lookup key (collisions at 53 bits are negligible for a cache's worth of blocks).
 */
import { Decoder } from '@msgpack/msgpack';
import type { KvEvent } from '../kv/events.js';

export interface KvEventBatch {
  ts: number;
  events: KvEvent[];
  dpRank?: number;
  /** Events of a type this gateway does not know (a newer vLLM's), skipped. */
  skippedUnknown: number;
}

const decoder = new Decoder({ useBigInt64: true });

const TWO32 = 4294967296;

/** Fold an engine block hash (number, bigint, bytes or string) to a 53-bit number. */
export function foldHash(h: unknown): number {
  if (typeof h === 'number') {
    if (Number.isSafeInteger(h) && h >= 0) return h;
    // Negative or unsafe numbers: fold their 64-bit pattern.
    return foldHash(BigInt.asUintN(64, BigInt(Math.trunc(h))));
  }
  if (typeof h === 'bigint') {
    const u = BigInt.asUintN(64, h);
    const lo = Number(u & 0xffffffffn);
    const hi = Number(u >> 32n);
    return ((hi ^ (hi >>> 21)) & 0x1fffff) * TWO32 + lo;
  }
  if (h instanceof Uint8Array) {
    // Digests are uniform: xor 7-byte lanes into 53 bits.
    let a = 0;
    let b = 0;
    for (let i = 0; i < h.length; i++) {
      const x = h[i]!;
      if (i % 7 < 4) a = (a ^ (x << ((i % 7) * 8))) >>> 0;
      else b = (b ^ (x << (((i % 7) - 4) * 8))) & 0x1fffff;
    }
    return b * TWO32 + a;
  }
  if (typeof h === 'string') {
    let a = 0x811c9dc5;
    let b = 0x01000193;
    for (let i = 0; i < h.length; i++) {
      a = Math.imul(a ^ h.charCodeAt(i), 0x01000193) >>> 0;
      b = Math.imul(b + h.charCodeAt(i), 0x5bd1e995) >>> 0;
    }
    return (b & 0x1fffff) * TWO32 + a;
  }
  throw new Error(`unsupported block hash type: ${typeof h}`);
}

function toInt(v: unknown, what: string): number {
  if (typeof v === 'number') return v;
  if (typeof v === 'bigint') return Number(v);
  throw new Error(`${what} must be an integer, got ${typeof v}`);
}

function hashList(v: unknown, what: string): number[] {
  if (!Array.isArray(v)) throw new Error(`${what} must be an array`);
  return v.map(foldHash);
}

function tagOf(e: unknown): { tag: string; fields: unknown[] | Record<string, unknown> } {
  if (Array.isArray(e)) {
    if (typeof e[0] !== 'string') throw new Error('event array must start with its tag');
    return { tag: e[0], fields: e.slice(1) };
  }
  if (e !== null && typeof e === 'object') {
    const o = e as Record<string, unknown>;
    const tag = o['type'] ?? o['tag'] ?? o['event_type'];
    if (typeof tag !== 'string') throw new Error('event map has no type/tag field');
    return { tag, fields: o };
  }
  throw new Error(`event must be an array or a map, got ${typeof e}`);
}

/** Named field `key` from a map, or positional field `pos` from an array. */
function field(fields: unknown[] | Record<string, unknown>, pos: number, key: string): unknown {
  return Array.isArray(fields) ? fields[pos] : fields[key];
}

function optString(v: unknown, what: string): string | undefined {
  if (v === null || v === undefined) return undefined;
  if (typeof v !== 'string') throw new Error(`${what} must be a string`);
  return v;
}

function optInt(v: unknown, what: string): number | undefined {
  if (v === null || v === undefined) return undefined;
  return toInt(v, what);
}

/** extra_keys: one entry per block, each a tuple (array) or null. */
function extraKeys(v: unknown): Array<unknown[] | null> | undefined {
  if (v === null || v === undefined) return undefined;
  if (!Array.isArray(v)) throw new Error('BlockStored.extra_keys must be an array');
  return v.map((k) => {
    if (k === null || k === undefined) return null;
    if (!Array.isArray(k)) throw new Error('BlockStored.extra_keys entries must be arrays or null');
    return k;
  });
}

/**
 * Decode one event; null for an event type this gateway does not know. Positions are those of
 * the array form after its tag (BlockStored's fields in vllm/distributed/kv_events.py order).
 */
function decodeEvent(e: unknown): KvEvent | null {
  const { tag, fields } = tagOf(e);
  switch (tag) {
    case 'BlockStored': {
      const parent = field(fields, 1, 'parent_block_hash');
      const tokens = field(fields, 2, 'token_ids');
      if (!Array.isArray(tokens)) throw new Error('BlockStored.token_ids must be an array');
      // lora_id (position 4) is deprecated upstream and numbered per process as adapters load, so
      // no router can tell adapters apart by it across workers: lora_name keys the blocks.
      const lora = optString(field(fields, 6, 'lora_name'), 'BlockStored.lora_name');
      const medium = optString(field(fields, 5, 'medium'), 'BlockStored.medium');
      const extra = extraKeys(field(fields, 7, 'extra_keys'));
      const group = optInt(field(fields, 8, 'group_idx'), 'BlockStored.group_idx');
      const kind = optString(field(fields, 9, 'kv_cache_spec_kind'), 'BlockStored.kv_cache_spec_kind');
      const window = optInt(field(fields, 10, 'kv_cache_spec_sliding_window'), 'BlockStored.kv_cache_spec_sliding_window');
      return {
        type: 'BlockStored',
        blockHashes: hashList(field(fields, 0, 'block_hashes'), 'BlockStored.block_hashes'),
        parentBlockHash: parent === null || parent === undefined ? null : foldHash(parent),
        tokenIds: tokens.map((t) => toInt(t, 'token id')),
        blockSize: toInt(field(fields, 3, 'block_size'), 'BlockStored.block_size'),
        ...(lora !== undefined && lora !== '' ? { loraName: lora } : {}),
        ...(medium !== undefined ? { medium } : {}),
        ...(extra !== undefined ? { extraKeys: extra } : {}),
        ...(group !== undefined ? { groupIdx: group } : {}),
        ...(kind !== undefined ? { kvCacheSpecKind: kind } : {}),
        ...(window !== undefined ? { slidingWindow: window } : {}),
      };
    }
    case 'BlockRemoved': {
      const medium = optString(field(fields, 1, 'medium'), 'BlockRemoved.medium');
      const group = optInt(field(fields, 2, 'group_idx'), 'BlockRemoved.group_idx');
      return {
        type: 'BlockRemoved',
        blockHashes: hashList(field(fields, 0, 'block_hashes'), 'BlockRemoved.block_hashes'),
        ...(medium !== undefined ? { medium } : {}),
        ...(group !== undefined ? { groupIdx: group } : {}),
      };
    }
    case 'AllBlocksCleared':
      return { type: 'AllBlocksCleared' };
    default:
      return null;
  }
}

/** Decode a msgpack EventBatch payload. Throws with a clear message on malformed input. */
export function decodeEventBatch(payload: Uint8Array): KvEventBatch {
  const raw = decoder.decode(payload);
  let ts: unknown;
  let events: unknown;
  let dp: unknown;
  if (Array.isArray(raw)) [ts, events, dp] = raw;
  else if (raw !== null && typeof raw === 'object') {
    const o = raw as Record<string, unknown>;
    ts = o['ts'];
    events = o['events'];
    dp = o['data_parallel_rank'];
  } else throw new Error('event batch must be an array or a map');
  if (!Array.isArray(events)) throw new Error('event batch has no events array');
  const out: KvEvent[] = [];
  let skipped = 0;
  for (const e of events) {
    const d = decodeEvent(e);
    if (d === null) skipped++;
    else out.push(d);
  }
  const batch: KvEventBatch = { ts: typeof ts === 'number' ? ts : Number(ts ?? 0), events: out, skippedUnknown: skipped };
  if (dp !== undefined && dp !== null) batch.dpRank = toInt(dp, 'data_parallel_rank');
  return batch;
}

/** Read the 8-byte big-endian sequence frame (signed: the replay end marker is −1). */
export function decodeSeq(frame: Uint8Array): number {
  if (frame.length !== 8) throw new Error(`sequence frame must be 8 bytes, got ${frame.length}`);
  const v = new DataView(frame.buffer, frame.byteOffset, 8).getBigInt64(0, false);
  return Number(v);
}

export function encodeSeq(seq: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigInt64BE(BigInt(seq));
  return b;
}
