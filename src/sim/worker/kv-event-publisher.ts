/**
 * Publishes the engine's KV-cache events on vLLM's wire format
 * (vllm/distributed/kv_events.py, ZmqEventPublisher):
 *
 * - a ZeroMQ PUB socket sends one multipart message per batch:
 *     [topic, seq (8-byte big-endian), payload]
 *   with payload = msgpack of an EventBatch in one of vLLM's two encodings (msgspec structs with
 *   tag=True, see src/fleet/kv-events-wire.ts):
 *   - 'map' (current vLLM): `{ts, events, data_parallel_rank}` with each event a map tagged
 *     "type": {"type": "BlockStored", "block_hashes", "parent_block_hash", "token_ids",
 *     "block_size", "lora_id", "medium", "lora_name"}, {"type": "BlockRemoved", "block_hashes",
 *     "medium"}, {"type": "AllBlocksCleared"} — fields in declaration order, the optional ones
 *     (extra_keys, group_idx, kv_cache_spec_*) left out as msgspec's omit_defaults does;
 *   - 'array' (older vLLM, array_like): `[ts, events, data_parallel_rank]` with tagged arrays
 *     ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name].
 *   Hashes are msgpack integers (the engine's 53-bit hashes, encoded as uint64). `medium` is "GPU",
 *   or "CPU" for blocks of the engine's host-memory offload tier.
 * - an optional ROUTER socket serves replays: a client (DEALER, or REQ) sends the first sequence
 *   number it wants as 8 big-endian bytes and receives one `(seq, payload)` message per buffered
 *   batch from there, then `(-1, "")`.
 *
 * Sequence numbers start at 0 and increase by one per batch, so a subscriber can detect gaps
 * (PUB drops messages past its high-water mark) and ask the replay socket for what it missed.
 */
import { encode } from '@msgpack/msgpack';
import * as zmq from 'zeromq';
import type { KvEvent } from '../../kv/events.js';

export interface KvEventPublisherOptions {
  /**
   * Where the PUB socket binds: `tcp://host:port`, `tcp://*:port`, or port 0 / `*` for an
   * ephemeral port (`tcp://127.0.0.1:0`). A bare number is a port on 127.0.0.1.
   */
  endpoint: string | number;
  /** Where the replay ROUTER socket binds (same forms); no replay socket when absent. */
  replayEndpoint?: string | number;
  /** Topic frame of every message. vLLM's default is the empty string. */
  topic?: string;
  /** Batches kept for replay (vLLM's buffer_steps default is 10,000). */
  bufferSteps?: number;
  /** Sent as the EventBatch's data_parallel_rank. */
  dataParallelRank?: number;
  /** PUB high-water mark (vLLM's default 100,000). */
  hwm?: number;
  /** The worker's LoRA adapters, in load order: their blocks' lora_id is the position from 1. */
  adapters?: readonly string[];
  /** Payload encoding: 'map' (current vLLM, the default) or 'array' (older vLLM). */
  encoding?: KvEventEncoding;
  /**
   * Share of batches not sent on the PUB socket (0..1), to test a subscriber's gap repair: they
   * still take a sequence number and stay in the replay buffer, as a batch dropped past the
   * high-water mark does. Which batches is a fixed function of the sequence number
   * (dropsBatch), so a run drops the same ones every time.
   */
  dropRate?: number;
}

/** Whether batch `seq` is one of the share `rate` of batches a lossy publisher drops. */
export function dropsBatch(seq: number, rate: number): boolean {
  if (rate <= 0) return false;
  let h = Math.imul(seq ^ 0x9e3779b9, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return (h >>> 0) / 4294967296 < rate;
}

export type KvEventEncoding = 'map' | 'array';

export interface KvEventEndpoints {
  /** The bound PUB endpoint, with the real port (e.g. tcp://127.0.0.1:41235). */
  endpoint: string;
  replayEndpoint?: string;
}

const MEDIUM_GPU = 'GPU';
const END_SEQ = seqBytes(-1);

/** 8-byte big-endian signed sequence number. */
function seqBytes(seq: number): Buffer {
  const b = Buffer.allocUnsafe(8);
  b.writeBigInt64BE(BigInt(seq));
  return b;
}

/**
 * One event as msgspec encodes vLLM's tagged structs: a map tagged "type" (current vLLM), or a
 * tagged array (array_like). `loraIds`: the worker's adapters' lora_id (vLLM numbers them from 1
 * as it loads them).
 */
function wireEvent(e: KvEvent, loraIds?: ReadonlyMap<string, number>, encoding: KvEventEncoding = 'array'): unknown {
  switch (e.type) {
    case 'BlockStored': {
      const lora = e.loraName ?? null;
      const loraId = lora === null ? null : (loraIds?.get(lora) ?? null);
      const medium = e.medium ?? MEDIUM_GPU;
      if (encoding === 'array') return ['BlockStored', e.blockHashes, e.parentBlockHash, e.tokenIds, e.blockSize, loraId, medium, lora];
      return {
        type: 'BlockStored',
        block_hashes: e.blockHashes,
        parent_block_hash: e.parentBlockHash,
        token_ids: e.tokenIds,
        block_size: e.blockSize,
        lora_id: loraId,
        medium,
        lora_name: lora,
      };
    }
    case 'BlockRemoved': {
      const medium = e.medium ?? MEDIUM_GPU;
      return encoding === 'array' ? ['BlockRemoved', e.blockHashes, medium] : { type: 'BlockRemoved', block_hashes: e.blockHashes, medium };
    }
    case 'AllBlocksCleared':
      return encoding === 'array' ? ['AllBlocksCleared'] : { type: 'AllBlocksCleared' };
  }
}

/** msgpack payload of one EventBatch, in `encoding` (array by default, for the tests' fixtures). */
export function encodeEventBatch(
  ts: number,
  events: readonly KvEvent[],
  dataParallelRank: number,
  loraIds?: ReadonlyMap<string, number>,
  encoding: KvEventEncoding = 'array',
): Uint8Array {
  const wire = events.map((e) => wireEvent(e, loraIds, encoding));
  return encode(encoding === 'array' ? [ts, wire, dataParallelRank] : { ts, events: wire, data_parallel_rank: dataParallelRank });
}

/** 'tcp://127.0.0.1:0' → 'tcp://127.0.0.1:*' (zeromq's ephemeral-port form); 5557 → 'tcp://127.0.0.1:5557'. */
export function bindAddress(endpoint: string | number): string {
  if (typeof endpoint === 'number') return `tcp://127.0.0.1:${endpoint === 0 ? '*' : endpoint}`;
  if (/^\d+$/.test(endpoint)) return bindAddress(Number(endpoint));
  return endpoint.replace(/^(tcp:\/\/.+):0$/, '$1:*');
}

export class KvEventPublisher {
  private readonly opts: KvEventPublisherOptions;
  private readonly topic: Buffer;
  private readonly bufferSteps: number;
  private readonly dpRank: number;
  private readonly loraIds: Map<string, number>;
  private pub: zmq.Publisher | null = null;
  private replay: zmq.Router | null = null;
  private nextSeq = 0;
  /** Batches not sent live (dropRate). */
  dropped = 0;
  /** Recent batches for replay, oldest first (a ring would save the shift; 10k entries is cheap). */
  private readonly buffer: Array<{ seq: number; payload: Uint8Array }> = [];
  /** zeromq.js allows one send in flight per socket: sends are chained. */
  private pubChain: Promise<void> = Promise.resolve();
  private replayLoop: Promise<void> | null = null;
  private closed = false;
  private endpoints: KvEventEndpoints | null = null;

  constructor(opts: KvEventPublisherOptions) {
    this.opts = opts;
    this.topic = Buffer.from(opts.topic ?? '', 'utf8');
    this.bufferSteps = opts.bufferSteps ?? 10_000;
    this.dpRank = opts.dataParallelRank ?? 0;
    this.loraIds = new Map((opts.adapters ?? []).map((a, i) => [a, i + 1]));
  }

  /** Bind the sockets. Resolves with the endpoints actually bound (real ports). */
  async start(): Promise<KvEventEndpoints> {
    if (this.endpoints) return this.endpoints;
    const pub = new zmq.Publisher({ linger: 0, sendHighWaterMark: this.opts.hwm ?? 100_000 });
    this.pub = pub;
    await pub.bind(bindAddress(this.opts.endpoint));
    const endpoints: KvEventEndpoints = { endpoint: pub.lastEndpoint ?? String(this.opts.endpoint) };
    if (this.opts.replayEndpoint !== undefined) {
      const router = new zmq.Router({ linger: 0 });
      this.replay = router;
      await router.bind(bindAddress(this.opts.replayEndpoint));
      endpoints.replayEndpoint = router.lastEndpoint ?? String(this.opts.replayEndpoint);
      this.replayLoop = this.serveReplays(router);
    }
    this.endpoints = endpoints;
    return endpoints;
  }

  /** An adapter loaded at run time: its events carry the next lora_id (vLLM counts on from the last). */
  addAdapter(name: string): void {
    if (!this.loraIds.has(name)) this.loraIds.set(name, Math.max(0, ...this.loraIds.values()) + 1);
  }

  /** Sequence number the next batch will carry. */
  get sequence(): number {
    return this.nextSeq;
  }

  /** Publish one batch (one engine step's events). Empty batches are not sent. */
  publish(events: readonly KvEvent[], ts = Date.now() / 1000): void {
    if (this.closed || events.length === 0) return;
    const seq = this.nextSeq++;
    const payload = encodeEventBatch(ts, events, this.dpRank, this.loraIds, this.opts.encoding ?? 'map');
    this.buffer.push({ seq, payload });
    if (this.buffer.length > this.bufferSteps) this.buffer.shift();
    const pub = this.pub;
    if (!pub) return; // not started: kept for replay only
    if (dropsBatch(seq, this.opts.dropRate ?? 0)) {
      this.dropped++;
      return;
    }
    const frames = [this.topic, seqBytes(seq), payload];
    this.pubChain = this.pubChain.then(
      () => pub.send(frames),
      () => undefined,
    ).catch(() => undefined); // a PUB send only fails once the socket is closing
  }

  private async serveReplays(router: zmq.Router): Promise<void> {
    try {
      for await (const frames of router) {
        // [identity, "", seq] from DEALER/REQ clients that frame like REQ; [identity, seq] from bare DEALERs.
        const identity = frames[0]!;
        const delimited = frames.length >= 3 && frames[1]!.length === 0;
        const seqFrame = frames[delimited ? 2 : 1];
        if (!seqFrame || seqFrame.length !== 8) continue; // not a replay request
        const start = Number(seqFrame.readBigInt64BE(0));
        const head: Buffer[] = delimited ? [identity, Buffer.alloc(0)] : [identity];
        // Snapshot: batches published while replaying are not interleaved into this reply.
        const batches = this.buffer.filter((b) => b.seq >= start);
        for (const b of batches) await router.send([...head, seqBytes(b.seq), b.payload]);
        await router.send([...head, END_SEQ, Buffer.alloc(0)]);
      }
    } catch {
      // The socket was closed while receiving or sending: the loop simply ends.
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.pubChain;
    this.pub?.close();
    this.replay?.close();
    await this.replayLoop;
  }
}
