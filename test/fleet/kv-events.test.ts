import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { encode } from '@msgpack/msgpack';
import * as zmq from 'zeromq';
import { blockHashes } from '../../src/kv/block-hash.js';
import { Engine } from '../../src/engine/engine.js';
import type { EngineConfig } from '../../src/engine/types.js';
import { KvEventSubscriber } from '../../src/fleet/kv-events.js';
import { decodeEventBatch, encodeSeq, foldHash } from '../../src/fleet/kv-events-wire.js';
import { KVGATE_HASH_SEED, PROMPT_ADAPTER, promptBlocks } from '../../src/kv/prompt-blocks.js';
import { KvEventMapper } from '../../src/fleet/kv-events-mapper.js';
import { encodeEventBatch } from '../../src/sim/worker/kv-event-publisher.js';
import { hashSampler } from '../../src/engine/synthetic-lm.js';
import { RequestState } from '../../src/util/state.js';
import { PrefixIndex } from '../../src/scheduler/index/prefix-index.js';
import { KvEventPublisher } from '../../src/sim/worker/kv-event-publisher.js';

const BS = 4;
const seq = (start: number, n: number) => Array.from({ length: n }, (_, i) => start + i);
const kvHashes = (tokens: number[]) => blockHashes(tokens, BS, KVGATE_HASH_SEED);

async function until(cond: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** A vLLM-shaped publisher driven by hand: PUB + ROUTER replay over a buffer the test controls. */
class RawPublisher {
  readonly pub = new zmq.Publisher({ linger: 0 });
  readonly router = new zmq.Router({ linger: 0 });
  readonly buffer: Array<[number, Uint8Array]> = [];
  accepted = false;
  private serving: Promise<void> | null = null;

  async start(): Promise<{ endpoint: string; replay: string }> {
    this.pub.events.on('accept', () => (this.accepted = true));
    await this.pub.bind('tcp://127.0.0.1:*');
    await this.router.bind('tcp://127.0.0.1:*');
    this.serving = (async () => {
      try {
        for await (const [id, empty, start] of this.router) {
          const from = Number(start!.readBigInt64BE(0));
          for (const [s, p] of this.buffer) if (s >= from) await this.router.send([id!, empty!, encodeSeq(s), p]);
          await this.router.send([id!, empty!, encodeSeq(-1), Buffer.alloc(0)]);
        }
      } catch {
        // closed
      }
    })();
    return { endpoint: this.pub.lastEndpoint!, replay: this.router.lastEndpoint! };
  }

  /** Encode a batch; keep it for replay; send it live unless `drop`. */
  async publish(s: number, events: unknown[], drop = false): Promise<void> {
    const payload = encode([Date.now() / 1000, events, 0]);
    this.buffer.push([s, payload]);
    if (!drop) await this.pub.send(['', encodeSeq(s), payload]);
  }

  async close(): Promise<void> {
    this.pub.close();
    this.router.close();
    await this.serving;
  }
}

/** BlockStored for consecutive blocks of `tokens`, with bytes hashes (vLLM's default sha256 digests). */
function stored(engineHashes: Uint8Array[], parent: Uint8Array | null, tokens: number[]): unknown[] {
  return ['BlockStored', engineHashes, parent, tokens, BS, null, 'GPU'];
}
const digest = (i: number) => {
  const b = new Uint8Array(32);
  for (let k = 0; k < 32; k++) b[k] = (i * 131 + k * 17) & 0xff;
  b[0] = i & 0xff;
  b[1] = (i >> 8) & 0xff;
  return b;
};

test('wire decoding is liberal: arrays or maps, int/bigint/bytes hashes, media kept, unknown events skipped', () => {
  const big = 2n ** 63n + 12345n;
  const batch = decodeEventBatch(
    encode({
      ts: 1.5,
      events: [
        { type: 'BlockStored', block_hashes: [big], parent_block_hash: null, token_ids: [1, 2, 3, 4], block_size: 4 },
        ['BlockStored', [7], null, [1, 2, 3, 4], 4, null, 'CPU'],
        ['BlockRemoved', [digest(1)]],
        ['AllBlocksCleared'],
        ['SomethingNew', 1, 2],
      ],
      data_parallel_rank: 2,
    }, { useBigInt64: true }),
  );
  assert.equal(batch.dpRank, 2);
  assert.equal(batch.skippedUnknown, 1);
  assert.deepEqual(batch.events.map((e) => e.type), ['BlockStored', 'BlockStored', 'BlockRemoved', 'AllBlocksCleared']);
  assert.equal((batch.events[1] as { medium?: string }).medium, 'CPU');
  const h = (batch.events[0] as { blockHashes: number[] }).blockHashes[0]!;
  assert.equal(h, foldHash(big));
  assert.ok(Number.isSafeInteger(h));
  assert.equal(foldHash(12345), 12345);
  assert.notEqual(foldHash(digest(1)), foldHash(digest(2)));
  assert.throws(() => decodeEventBatch(encode([1, 'nope'])), /events array/);
});

test('subscriber maps events onto kvgate hashes, detects a sequence gap and repairs it by replay', async () => {
  const p = new RawPublisher();
  const ep = await p.start();
  const index = new PrefixIndex();
  index.addWorker('w', 1000);
  const sub = new KvEventSubscriber({ workerId: 'w', endpoint: ep.endpoint, replayEndpoint: ep.replay, index, blockSize: BS });
  try {
    sub.start();
    await until(() => p.accepted, 'connection');
    await sleep(100); // let the subscription reach the publisher
    const prompt = seq(100, 4 * BS);
    await p.publish(0, [stored([digest(0), digest(1)], null, prompt.slice(0, 2 * BS))]);
    await until(() => sub.status().batches === 1, 'first batch');
    assert.equal(index.source('w'), 'events');
    // Batch 1 is lost on the live socket (only the replay buffer has it); batch 2 reveals the gap.
    await p.publish(1, [stored([digest(2)], digest(1), prompt.slice(2 * BS, 3 * BS))], true);
    await p.publish(2, [stored([digest(3)], digest(2), prompt.slice(3 * BS, 4 * BS))]);
    await until(() => sub.status().lastSeq === 2, 'batch 2');
    const st = sub.status();
    assert.equal(st.gaps, 1);
    assert.equal(st.replays, 1);
    assert.equal(st.resyncs, 0);
    assert.equal(index.matchWorker(kvHashes(prompt), 'w', 0), 4);
    // BlockRemoved goes through the engine → kvgate map.
    await p.publish(3, [['BlockRemoved', [digest(2)], 'GPU']]);
    await until(() => sub.status().lastSeq === 3, 'batch 3');
    assert.equal(index.matchWorker(kvHashes(prompt), 'w', 0), 2);
    await p.publish(4, [['AllBlocksCleared']]);
    await until(() => sub.status().lastSeq === 4, 'batch 4');
    assert.equal(index.blockCount('w'), 0);
    assert.equal(index.source('w'), 'events');
  } finally {
    await sub.close();
    await p.close();
  }
});

test('an unreplayable gap clears the event-fed state and falls back to approximate, and says why', async () => {
  const p = new RawPublisher();
  const ep = await p.start();
  const index = new PrefixIndex();
  index.addWorker('w', 1000);
  const statuses: string[] = [];
  const sub = new KvEventSubscriber({
    workerId: 'w',
    endpoint: ep.endpoint,
    index,
    blockSize: BS,
    rebuildMs: 60_000,
    onStatus: (s) => statuses.push(`${s.source}: ${s.reason}`),
  });
  try {
    sub.start();
    await until(() => p.accepted, 'connection');
    await sleep(100);
    const a = seq(1, 2 * BS);
    await p.publish(0, [stored([digest(10), digest(11)], null, a)]);
    await until(() => sub.status().batches === 1, 'first batch');
    assert.equal(index.matchWorker(kvHashes(a), 'w', 0), 2);
    // Routed knowledge survives a resync; event knowledge does not.
    const routed = seq(500, 2 * BS);
    index.insert('w', kvHashes(routed), 'routed', 0);
    await p.publish(5, [stored([digest(12)], null, seq(900, BS))]);
    await until(() => sub.status().lastSeq === 5, 'batch after gap');
    const st = sub.status();
    assert.equal(st.gaps, 1);
    assert.equal(st.resyncs, 1);
    assert.equal(st.source, 'approximate');
    assert.match(st.reason, /gap 1\.\.4.*resynchronising/);
    assert.equal(index.source('w'), 'approximate');
    assert.equal(index.matchWorker(kvHashes(a), 'w', 0), 0);
    assert.equal(index.matchWorker(kvHashes(routed), 'w', 0), 2);
    // Events after the gap still feed the index while it rebuilds.
    assert.equal(index.matchWorker(kvHashes(seq(900, BS)), 'w', 0), 1);
    assert.ok(statuses.some((s) => s.startsWith('events')) && statuses.at(-1)!.startsWith('approximate'));
  } finally {
    await sub.close();
    await p.close();
  }
});

test('silence while busy falls back to approximate; the next in-sequence event restores events', async () => {
  const p = new RawPublisher();
  const ep = await p.start();
  const index = new PrefixIndex();
  index.addWorker('w', 1000);
  let busy = false;
  const sub = new KvEventSubscriber({ workerId: 'w', endpoint: ep.endpoint, index, blockSize: BS, silenceMs: 100, isBusy: () => busy });
  try {
    sub.start();
    await until(() => p.accepted, 'connection');
    await sleep(100);
    await p.publish(0, [stored([digest(1)], null, seq(1, BS))]);
    await until(() => sub.status().batches === 1, 'first batch');
    await sleep(250);
    assert.equal(index.source('w'), 'events', 'an idle worker may be silent');
    busy = true;
    await until(() => index.source('w') === 'approximate', 'silence detection', 2000);
    assert.match(index.workerStatus('w')!.reason, /no kv events for \d+ ms while busy/);
    await p.publish(1, [stored([digest(2)], digest(1), seq(1 + BS, BS))]);
    await until(() => index.source('w') === 'events', 'events again');
  } finally {
    await sub.close();
    await p.close();
  }
});

function engineConfig(): EngineConfig {
  return {
    blockSize: BS,
    numGpuBlocks: 64,
    maxModelLen: 1024,
    maxNumSeqs: 4,
    maxNumBatchedTokens: 64,
    enablePrefixCaching: true,
    hashSeed: 987,
    kvEvents: true,
    emitTokens: false,
    timeModel: { stepMs: () => 1 },
  };
}

/** Run `prompts` through an engine, publishing each step's events. */
function runEngine(engine: Engine, pub: KvEventPublisher, prompts: number[][], tag: string): void {
  prompts.forEach((p, i) => engine.add({ id: `${tag}${i}`, prompt: p, maxTokens: 3, sampler: () => 7, ignoreEos: true }));
  while (engine.hasWork()) pub.publish(engine.step()!.kvEvents);
}

test('end to end with the simulated worker’s publisher: join mid-stream via replay, survive a publisher restart', async () => {
  const index = new PrefixIndex();
  index.addWorker('w', 64);
  const first = new KvEventPublisher({ endpoint: 'tcp://127.0.0.1:0', replayEndpoint: 'tcp://127.0.0.1:0' });
  const ep = await first.start();
  const engine = new Engine(engineConfig());
  const system = seq(1, 6 * BS);
  const prompts = [0, 1, 2].map((i) => [...system, ...seq(1000 + i * 50, 2 * BS + 1)]);
  // Events published before anyone listens: only the replay buffer has them.
  runEngine(engine, first, prompts.slice(0, 2), 'a');
  await sleep(100); // the publisher's sends are asynchronous: let them go out to nobody
  const sub = new KvEventSubscriber({ workerId: 'w', endpoint: ep.endpoint, replayEndpoint: ep.replayEndpoint!, index, blockSize: BS });
  let second: KvEventPublisher | null = null;
  try {
    sub.start();
    await sleep(150);
    runEngine(engine, first, prompts.slice(2), 'b');
    await until(() => sub.status().lastSeq === first.sequence - 1, 'all batches');
    assert.equal(sub.status().replays, 1, 'joined mid-stream: replayed from 0');
    for (const p of [...prompts, system]) {
      const usable = Math.floor((p.length - 1) / BS);
      assert.equal(Math.min(index.matchWorker(kvHashes(p), 'w', 0), usable) * BS, engine.cachedPrefixTokens(p));
    }
    assert.ok(index.blockCount('w') > 6);
    // The worker restarts: a new publisher on the same endpoints counts from 0, with a new cache.
    await first.close();
    const port = (e: string) => Number(e.slice(e.lastIndexOf(':') + 1));
    // zmq releases a closed socket's port asynchronously: retry the bind for a moment.
    for (let attempt = 0; ; attempt++) {
      const candidate = new KvEventPublisher({ endpoint: port(ep.endpoint), replayEndpoint: port(ep.replayEndpoint!) });
      try {
        await candidate.start();
        second = candidate;
        break;
      } catch (err) {
        await candidate.close();
        if ((err as { code?: string }).code !== 'EADDRINUSE' || attempt > 50) throw err;
        await sleep(50);
      }
    }
    const fresh = new Engine({ ...engineConfig(), hashSeed: 4242 });
    const other = [seq(7000, 3 * BS + 1)];
    // Keep the new worker publishing until the subscriber has reconnected and noticed.
    for (let i = 0; sub.status().restarts === 0; i++) {
      if (i > 200) throw new Error('no restart detected');
      runEngine(fresh, second, [[...other[0]!, 9000 + i]], `c${i}`);
      await sleep(20);
    }
    await until(() => sub.status().lastSeq === second!.sequence - 1, 'caught up after restart');
    assert.equal(index.matchWorker(kvHashes(system), 'w', 0), 0, 'the old cache is forgotten');
    const p = [...other[0]!, 9000];
    assert.equal(Math.min(index.matchWorker(kvHashes(p), 'w', 0), Math.floor((p.length - 1) / BS)) * BS, fresh.cachedPrefixTokens(p));
    assert.equal(index.source('w'), 'events');
  } finally {
    await sub.close();
    await first.close();
    await second?.close();
  }
});

test('events at another block size are reported, not silently ignored', async () => {
  const p = new RawPublisher();
  const ep = await p.start();
  const index = new PrefixIndex();
  index.addWorker('w', 1000);
  const sub = new KvEventSubscriber({ workerId: 'w', endpoint: ep.endpoint, index, blockSize: BS });
  try {
    sub.start();
    await until(() => p.accepted, 'connection');
    await sleep(100);
    await p.publish(0, [['BlockStored', [digest(1)], null, seq(1, 16), 16, null, 'GPU']]);
    await until(() => sub.status().batches === 1, 'first batch');
    assert.equal(index.source('w'), 'approximate');
    assert.match(index.workerStatus('w')!.reason, /block size 16, the index hashes prompts at 4/);
    assert.equal(sub.status().mapper.blockSizeMismatch, 1);
    assert.equal(index.blockCount('w'), 0);
  } finally {
    await sub.close();
    await p.close();
  }
});

test('subscriber state is exported as Prometheus gauges', async () => {
  const { Registry } = await import('prom-client');
  const { KvEventSubscribers } = await import('../../src/fleet/kv-events.js');
  const { registerKvEventMetrics } = await import('../../src/fleet/kv-events-metrics.js');
  const p = new RawPublisher();
  const ep = await p.start();
  const index = new PrefixIndex();
  index.addWorker('w', 1000);
  const subs = new KvEventSubscribers();
  const registry = new Registry();
  registerKvEventMetrics(registry, subs);
  try {
    const sub = subs.add({ workerId: 'w', endpoint: ep.endpoint, index, blockSize: BS });
    let text = await registry.metrics();
    assert.match(text, /kvgate_kv_events_source\{worker="w",source="approximate"\} 1/);
    await until(() => p.accepted, 'connection');
    await sleep(100);
    await p.publish(0, [stored([digest(1)], null, seq(1, BS))]);
    await until(() => sub.status().batches === 1, 'first batch');
    text = await registry.metrics();
    assert.match(text, /kvgate_kv_events_source\{worker="w",source="events"\} 1/);
    assert.match(text, /kvgate_kv_events_batches\{worker="w"\} 1/);
    // A sliding-window group's store is counted as skipped, not applied.
    await p.publish(1, [['BlockStored', [digest(9)], null, seq(1, BS), BS, null, 'GPU', null, null, 1, 'sliding_window', 64]]);
    await until(() => sub.status().batches === 2, 'second batch');
    text = await registry.metrics();
    assert.match(text, /kvgate_kv_events_skipped\{worker="w",reason="other_group"\} 1/);
    assert.match(text, /kvgate_kv_events_skipped\{worker="w",reason="other_medium"\} 0/);
  } finally {
    await subs.closeAll();
    await p.close();
  }
});

test("a LoRA adapter's blocks are mapped onto the adapter's chain, by the lora_name vLLM publishes", () => {
  const engine = new Engine(engineConfig());
  const prompt = seq(500, 4 * BS);
  let lastId = 0;
  const run = (lora?: string): Uint8Array[] => {
    const id = `r${lastId++}`;
    engine.add({ id, prompt, maxTokens: 1, sampler: hashSampler(id), ignoreEos: true, ...(lora !== undefined ? { lora } : {}) });
    const payloads: Uint8Array[] = [];
    while (engine.hasWork()) {
      const r = engine.step()!;
      if (r.kvEvents.length > 0) payloads.push(encodeEventBatch(0, r.kvEvents, 0, new Map([['sql-lora', 1]])));
    }
    return payloads;
  };
  const index = new PrefixIndex();
  index.addWorker('w', 1000);
  const mapper = new KvEventMapper(index, 'w', { blockSize: BS });
  const blocksOf = (adapter?: string) => {
    const state = new RequestState();
    if (adapter !== undefined) state.set(PROMPT_ADAPTER, adapter);
    return promptBlocks(state, prompt, BS, KVGATE_HASH_SEED);
  };
  for (const p of run('sql-lora')) {
    const batch = decodeEventBatch(p);
    const st = batch.events.find((e) => e.type === 'BlockStored') as { loraName?: string } | undefined;
    assert.equal(st?.loraName, 'sql-lora');
    mapper.apply(batch.events, 0);
  }
  assert.equal(index.matchWorker(blocksOf('sql-lora'), 'w', 0), 4, "the adapter's prompt matches its blocks");
  assert.equal(index.matchWorker(blocksOf(), 'w', 0), 0, "the base model's prompt does not");
  assert.equal(index.matchWorker(blocksOf('chat-lora'), 'w', 0), 0, "nor another adapter's");
  for (const p of run()) mapper.apply(decodeEventBatch(p).events, 0);
  assert.equal(index.matchWorker(blocksOf(), 'w', 0), 4);
  // The wire form is vLLM's: lora_id, medium, lora_name after block_size.
  const wire = decodeEventBatch(encodeEventBatch(0, [{ type: 'BlockStored', blockHashes: [1], parentBlockHash: null, tokenIds: seq(0, BS), blockSize: BS, loraName: 'sql-lora' }], 0, new Map([['sql-lora', 1]])));
  assert.deepEqual(wire.events[0], { type: 'BlockStored', blockHashes: [1], parentBlockHash: null, tokenIds: seq(0, BS), blockSize: BS, loraName: 'sql-lora', medium: 'GPU' });
  assert.throws(() => decodeEventBatch(encode([0, [['BlockStored', [1], null, seq(0, BS), BS, 1, 'GPU', 7]]])), /lora_name must be a string/);
});
