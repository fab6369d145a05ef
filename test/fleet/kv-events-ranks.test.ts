/** Data-parallel ranks: one subscriber per rank at vLLM's port offsets, merged into the worker's view. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { blockHashes } from '../../src/kv/block-hash.js';
import { KVGATE_HASH_SEED } from '../../src/kv/prompt-blocks.js';
import { KvEventMapper } from '../../src/fleet/kv-events-mapper.js';
import { RankMergingSink, rankEndpoint, rankSubscriberId } from '../../src/fleet/kv-events-ranks.js';
import { PrefixIndex } from '../../src/scheduler/index/prefix-index.js';
import { KvEventPublisher } from '../../src/sim/worker/kv-event-publisher.js';
import { startSimWorker } from '../../src/sim/worker/server.js';
import { parseConfig as loadConfig } from '../../src/config/index.js';
import { MODEL, startGateway, waitFor } from '../gateway/helpers.js';

const seq = (start: number, n: number) => Array.from({ length: n }, (_, i) => start + i);

test("rank endpoints are offset as vLLM's publisher offsets them", () => {
  assert.equal(rankEndpoint('tcp://10.0.0.5:5557', 0), 'tcp://10.0.0.5:5557');
  assert.equal(rankEndpoint('tcp://10.0.0.5:5557', 3), 'tcp://10.0.0.5:5560');
  assert.equal(rankEndpoint('tcp://[::1]:5557', 1), 'tcp://[::1]:5558');
  assert.equal(rankEndpoint('inproc://cache', 2), 'inproc://cache_dp2');
  assert.throws(() => rankEndpoint('ipc:///tmp/kv', 1), /tcp:\/\/ or inproc:\/\//);
});

test('merged ranks: a block stays while any rank holds it; a rank clears only its own; events only when every rank is', () => {
  const index = new PrefixIndex();
  index.addWorker('w', 1000);
  const sink = new RankMergingSink(index, 'w', 2);
  const [r0, r1] = [0, 1].map((r) => new KvEventMapper(sink, rankSubscriberId('w', r), { blockSize: 4 }));
  const a = seq(10, 8);
  const b = seq(50, 4);
  r0!.apply([{ type: 'BlockStored', blockHashes: [1, 2], parentBlockHash: null, tokenIds: a, blockSize: 4 }], 0);
  r1!.apply([{ type: 'BlockStored', blockHashes: [901], parentBlockHash: null, tokenIds: a.slice(0, 4), blockSize: 4 }], 0);
  r1!.apply([{ type: 'BlockStored', blockHashes: [902], parentBlockHash: null, tokenIds: b, blockSize: 4 }], 0);
  const kvA = blockHashes(a, 4, KVGATE_HASH_SEED);
  const kvB = blockHashes(b, 4, KVGATE_HASH_SEED);
  assert.equal(index.matchWorker(kvA, 'w', 0), 2);
  // Rank 0 evicts a's first block: rank 1 still holds it.
  r0!.apply([{ type: 'BlockRemoved', blockHashes: [1] }], 0);
  assert.equal(index.matchWorker(kvA, 'w', 0), 2);
  // Rank 1 is reset: its blocks go unless rank 0 holds them.
  r1!.apply([{ type: 'AllBlocksCleared' }], 0);
  assert.equal(index.matchWorker(kvB, 'w', 0), 0);
  assert.ok(!index.holds('w', kvA[0]!));
  assert.ok(index.holds('w', kvA[1]!), "rank 0's second block is untouched");
  sink.setSource(rankSubscriberId('w', 0), 'events', 'in sequence', 0);
  assert.equal(index.source('w'), 'approximate', 'rank 1 has not spoken yet');
  sink.setSource(rankSubscriberId('w', 1), 'events', 'in sequence', 0);
  assert.equal(index.source('w'), 'events');
  sink.setSource(rankSubscriberId('w', 1), 'approximate', 'sequence gap 4..6 not replayable; resynchronising', 0);
  assert.equal(index.workerStatus('w')?.reason, 'rank 1: sequence gap 4..6 not replayable; resynchronising');
});

test('config: dataParallelSize is validated and needs a tcp or inproc endpoint', () => {
  const base = { pools: [{ name: 'p', model: 'm', workers: [{ url: 'http://a:1', kvEvents: { endpoint: 'tcp://a:5557', dataParallelSize: 4 } }] }] };
  assert.equal(loadConfig(base).kvEvents[0]!.dataParallelSize, 4);
  const bad = (kv: unknown) => () => loadConfig({ pools: [{ name: 'p', model: 'm', workers: [{ url: 'http://a:1', kvEvents: kv }] }] });
  assert.throws(bad({ endpoint: 'ipc:///tmp/kv', dataParallelSize: 2 }), /dataParallelSize above 1 needs a tcp/);
  assert.throws(bad({ endpoint: 'tcp://a:5557', dataParallelSize: 0 }), /dataParallelSize/);
  assert.throws(bad({ endpoint: 'tcp://a:5557', dataParallelSize: 1.5 }), /dataParallelSize/);
});

/** Two publishers on consecutive ports (rank 0 at P, rank 1 at P + 1), as a DP-2 vLLM server has. */
async function rankPublishers(): Promise<KvEventPublisher[]> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const p0 = new KvEventPublisher({ endpoint: 'tcp://127.0.0.1:0', dataParallelRank: 0 });
    const { endpoint } = await p0.start();
    const port = Number(endpoint.slice(endpoint.lastIndexOf(':') + 1));
    const p1 = new KvEventPublisher({ endpoint: `tcp://127.0.0.1:${port + 1}`, dataParallelRank: 1 });
    try {
      await p1.start();
      return [p0, p1];
    } catch {
      await p1.close();
      await p0.close();
    }
  }
  throw new Error('no two consecutive free ports');
}

test('end to end: the gateway subscribes to every rank of a worker and shows them in /admin/workers', async () => {
  const sim = await startSimWorker({ port: 0, model: MODEL, speed: 100 });
  const pubs = await rankPublishers();
  const { gw, url } = await startGateway([], {
    pools: [{ name: 'main', model: MODEL, workers: [{ url: sim.url, id: 'w0', kvEvents: { endpoint: (await pubs[0]!.start()).endpoint, dataParallelSize: 2 } }] }],
    policy: { name: 'dynamo' },
  });
  try {
    const index = gw.router.policy.prefixIndex!;
    const bs = 16;
    const toks = [seq(1000, 2 * bs), seq(5000, 3 * bs)];
    // Each rank publishes until the gateway has its blocks (PUB drops what is sent before a subscriber joins).
    await waitFor(() => {
      pubs.forEach((p, r) => p.publish([{ type: 'BlockStored', blockHashes: [r * 100 + 1, r * 100 + 2, r * 100 + 3].slice(0, toks[r]!.length / bs), parentBlockHash: null, tokenIds: toks[r]!, blockSize: bs }]));
      return toks.every((t) => index.matchWorker(blockHashes(t, bs, KVGATE_HASH_SEED), 'w0', 0) === t.length / bs);
    }, 5000);
    const d = ((await (await fetch(url + '/admin/workers')).json()) as any[]).find((w) => w.id === 'w0');
    assert.equal(d.kvEvents.ranks.length, 2);
    assert.deepEqual(d.kvEvents.ranks.map((r: { endpoint: string }) => Number(r.endpoint.slice(r.endpoint.lastIndexOf(':') + 1))).reduce((a: number, b: number) => b - a), 1);
    assert.equal(d.kvEvents.source, 'events');
    const m = await (await fetch(url + '/metrics')).text();
    assert.match(m, /kvgate_kv_events_batches\{worker="w0\/dp1"\} [1-9]/);
  } finally {
    await gw.close();
    await Promise.all(pubs.map((p) => p.close()));
    await sim.close();
  }
});
