/** KV-event publishing on vLLM's wire format, over real ZeroMQ sockets. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decode } from '@msgpack/msgpack';
import * as zmq from 'zeromq';
import { KvEventPublisher, bindAddress } from '../../../src/sim/worker/kv-event-publisher.js';
import { startSimWorker } from '../../../src/sim/worker/server.js';
import { blockHashes } from '../../../src/kv/block-hash.js';
import { estimateTokenizer } from '../../../src/tokenizer/index.js';
import type { KvEvent } from '../../../src/kv/events.js';
import { longPrompt, postJson } from './helpers.js';

const stored: KvEvent = { type: 'BlockStored', blockHashes: [2 ** 40 + 7, 2 ** 52 + 3], parentBlockHash: null, tokenIds: [...Array(8).keys()], blockSize: 4 };
const removed: KvEvent = { type: 'BlockRemoved', blockHashes: [2 ** 40 + 7] };
const cleared: KvEvent = { type: 'AllBlocksCleared' };

function seqOf(frame: Buffer): number {
  return Number(frame.readBigInt64BE(0));
}

/** A subscriber that has provably joined: the publisher re-sends a probe batch until one arrives. */
async function joinedSubscriber(pub: KvEventPublisher, endpoint: string, topic = ''): Promise<zmq.Subscriber> {
  const sub = new zmq.Subscriber({ receiveTimeout: 2000, linger: 0 });
  sub.connect(endpoint);
  sub.subscribe(topic);
  for (let i = 0; i < 100; i++) {
    pub.publish([cleared]);
    try {
      sub.receiveTimeout = 20;
      await sub.receive();
      break;
    } catch {
      // not joined yet
    }
  }
  // Drain the probes that are still on their way.
  for (;;) {
    try {
      await sub.receive();
    } catch {
      break;
    }
  }
  sub.receiveTimeout = 2000;
  return sub;
}

test('bind addresses: port 0 and bare ports', () => {
  assert.equal(bindAddress('tcp://127.0.0.1:0'), 'tcp://127.0.0.1:*');
  assert.equal(bindAddress(0), 'tcp://127.0.0.1:*');
  assert.equal(bindAddress(5557), 'tcp://127.0.0.1:5557');
  assert.equal(bindAddress('5557'), 'tcp://127.0.0.1:5557');
  assert.equal(bindAddress('tcp://*:5557'), 'tcp://*:5557');
});

test('PUB messages are [topic, 8-byte seq, msgpack EventBatch] with tagged-array events (array encoding)', async () => {
  const pub = new KvEventPublisher({ endpoint: 'tcp://127.0.0.1:0', topic: 'kv@w0', encoding: 'array' });
  const { endpoint } = await pub.start();
  assert.match(endpoint, /^tcp:\/\/127\.0\.0\.1:\d+$/);
  assert.doesNotMatch(endpoint, /:0$/);
  const sub = await joinedSubscriber(pub, endpoint, 'kv@w0');
  try {
    const first = pub.sequence;
    const t0 = Date.now() / 1000;
    pub.publish([stored, removed]);
    pub.publish([]); // empty batches are not sent
    pub.publish([cleared]);
    const [topic, seq, payload] = await sub.receive();
    assert.equal(topic!.toString(), 'kv@w0');
    assert.equal(seq!.length, 8);
    assert.equal(seqOf(seq!), first);
    const batch = decode(payload!) as unknown[];
    assert.equal(batch.length, 3);
    const [ts, events, rank] = batch as [number, unknown[][], number];
    assert.ok(Math.abs(ts - t0) < 5, 'ts is a unix time in seconds');
    assert.equal(rank, 0);
    assert.deepEqual(events, [
      ['BlockStored', [2 ** 40 + 7, 2 ** 52 + 3], null, [0, 1, 2, 3, 4, 5, 6, 7], 4, null, 'GPU', null],
      ['BlockRemoved', [2 ** 40 + 7], 'GPU'],
    ]);
    // Hashes travel as 64-bit integers (msgpack uint64), not floats or strings.
    assert.ok(Buffer.from(payload!).includes(Buffer.from([0xcf, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03])));
    const [, seq2, payload2] = await sub.receive();
    assert.equal(seqOf(seq2!), first + 1);
    assert.deepEqual((decode(payload2!) as unknown[])[1], [['AllBlocksCleared']]);
  } finally {
    sub.close();
    await pub.close();
  }
});

test('map encoding (the default): the batch and each event are maps in vLLM field order', async () => {
  const pub = new KvEventPublisher({ endpoint: 'tcp://127.0.0.1:0', dataParallelRank: 2 });
  const { endpoint } = await pub.start();
  const sub = await joinedSubscriber(pub, endpoint);
  try {
    pub.publish([stored, { type: 'BlockRemoved', blockHashes: [5], medium: 'CPU' }, cleared]);
    const [, , payload] = await sub.receive();
    const batch = decode(payload!) as Record<string, unknown>;
    assert.deepEqual(Object.keys(batch), ['ts', 'events', 'data_parallel_rank']);
    assert.equal(batch['data_parallel_rank'], 2);
    assert.deepEqual(batch['events'], [
      { type: 'BlockStored', block_hashes: [2 ** 40 + 7, 2 ** 52 + 3], parent_block_hash: null, token_ids: [0, 1, 2, 3, 4, 5, 6, 7], block_size: 4, lora_id: null, medium: 'GPU', lora_name: null },
      { type: 'BlockRemoved', block_hashes: [5], medium: 'CPU' },
      { type: 'AllBlocksCleared' },
    ]);
  } finally {
    sub.close();
    await pub.close();
  }
});

test('the replay socket returns buffered batches from a sequence number, then -1', async () => {
  const pub = new KvEventPublisher({ endpoint: 'tcp://127.0.0.1:0', replayEndpoint: 'tcp://127.0.0.1:0', bufferSteps: 3, encoding: 'array' });
  const { replayEndpoint } = await pub.start();
  assert.ok(replayEndpoint);
  for (let i = 0; i < 5; i++) pub.publish([{ type: 'BlockRemoved', blockHashes: [i] }]);
  const dealer = new zmq.Dealer({ receiveTimeout: 2000, linger: 0 });
  dealer.connect(replayEndpoint);
  try {
    // REQ-style framing: an empty delimiter before the start sequence.
    await dealer.send([Buffer.alloc(0), Buffer.from([0, 0, 0, 0, 0, 0, 0, 3])]);
    const got: Array<[number, unknown]> = [];
    for (;;) {
      const [delim, seq, payload] = await dealer.receive();
      assert.equal(delim!.length, 0);
      const n = seqOf(seq!);
      if (n === -1) {
        assert.equal(payload!.length, 0);
        break;
      }
      got.push([n, (decode(payload!) as unknown[])[1]]);
    }
    assert.deepEqual(got, [
      [3, [['BlockRemoved', [3], 'GPU']]],
      [4, [['BlockRemoved', [4], 'GPU']]],
    ]);
    // A bare DEALER without the delimiter frame gets bare replies.
    await dealer.send(Buffer.from([0, 0, 0, 0, 0, 0, 0, 4]));
    const [bareSeq, barePayload] = await dealer.receive();
    assert.equal(seqOf(bareSeq!), 4);
    assert.deepEqual((decode(barePayload!) as unknown[])[1], [['BlockRemoved', [4], 'GPU']]);
    assert.equal(seqOf((await dealer.receive())[0]!), -1);
    // From 0: only what the bounded buffer still holds (3 batches).
    await dealer.send([Buffer.alloc(0), Buffer.alloc(8)]);
    const seqs: number[] = [];
    for (;;) {
      const [, seq] = await dealer.receive();
      const n = seqOf(seq!);
      if (n === -1) break;
      seqs.push(n);
    }
    assert.deepEqual(seqs, [2, 3, 4]);
  } finally {
    dealer.close();
    await pub.close();
  }
});

test('a simulated worker publishes BlockStored for a prompt, with the prompt\'s tokens, replayable', async () => {
  const w = await startSimWorker({
    model: 'llama-3.1-8b',
    speed: 200,
    hashSeed: 1234,
    kvEvents: { endpoint: 'tcp://127.0.0.1:0', replayEndpoint: 'tcp://127.0.0.1:0', topic: '' },
  });
  const sub = new zmq.Subscriber({ receiveTimeout: 100, linger: 0 });
  const dealer = new zmq.Dealer({ receiveTimeout: 2000, linger: 0 });
  try {
    assert.ok(w.kvEventsEndpoint && w.kvReplayEndpoint);
    sub.connect(w.kvEventsEndpoint);
    sub.subscribe();
    // The subscription needs a moment to reach the publisher: send distinct prompts until one
    // batch arrives (bounded), drain, then check a fresh prompt's events exactly.
    sub.receiveTimeout = 200;
    let joined = false;
    for (let i = 0; i < 20 && !joined; i++) {
      await postJson(w, '/v1/completions', { prompt: longPrompt(40, `warm${i}`), max_tokens: 1 });
      joined = await sub.receive().then(
        () => true,
        () => false,
      );
    }
    assert.ok(joined, 'the subscriber receives batches');
    sub.receiveTimeout = 50;
    await (async () => {
      for (;;) await sub.receive();
    })().catch(() => undefined);
    sub.receiveTimeout = 2000;
    const prompt = longPrompt(70, 'fresh');
    const ids = estimateTokenizer.encode(prompt);
    await postJson(w, '/v1/completions', { prompt, max_tokens: 2, ignore_eos: true });
    const [topic, seq, payload] = await sub.receive();
    assert.equal(topic!.length, 0);
    // The default encoding is current vLLM's: the batch and its events are maps, tagged "type".
    const { events } = decode(payload!) as { events: Array<Record<string, unknown>> };
    const st = events.find((e) => e['type'] === 'BlockStored')!;
    assert.ok(st, 'a BlockStored event');
    assert.deepEqual(Object.keys(st), ['type', 'block_hashes', 'parent_block_hash', 'token_ids', 'block_size', 'lora_id', 'medium', 'lora_name']);
    const { block_hashes: hashes, parent_block_hash: parent, token_ids: tokenIds, block_size: blockSize, lora_id: loraId, medium } = st as {
      block_hashes: number[];
      parent_block_hash: number | null;
      token_ids: number[];
      block_size: number;
      lora_id: null;
      medium: string;
    };
    const full = Math.floor(ids.length / 16);
    assert.equal(blockSize, 16);
    assert.equal(parent, null);
    assert.equal(loraId, null);
    assert.equal(medium, 'GPU');
    assert.equal(hashes.length, full);
    assert.deepEqual(tokenIds, ids.slice(0, full * 16));
    assert.deepEqual(hashes, blockHashes(ids, 16, 1234));
    // The same batch is in the replay buffer under the same sequence number.
    const n = seqOf(seq!);
    dealer.connect(w.kvReplayEndpoint);
    await dealer.send([Buffer.alloc(0), seq!]);
    const [, rseq, rpayload] = await dealer.receive();
    assert.equal(seqOf(rseq!), n);
    assert.deepEqual(Buffer.from(rpayload!), Buffer.from(payload!));
    // Resetting the prefix cache (nothing running) drops every cached block.
    for (;;) if (seqOf((await dealer.receive())[1]!) === -1) break;
    const reset = await fetch(w.url + '/reset_prefix_cache', { method: 'POST' });
    assert.equal(reset.status, 200);
    sub.receiveTimeout = 2000;
    let sawClear = false;
    while (!sawClear) {
      const [, , p] = await sub.receive();
      sawClear = (decode(p!) as { events: Array<Record<string, unknown>> }).events.some((e) => e['type'] === 'AllBlocksCleared');
    }
    assert.equal(w.engine.stats().cachedFreeBlocks, 0);
  } finally {
    sub.close();
    dealer.close();
    await w.close();
  }
});
