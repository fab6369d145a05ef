import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Engine } from '../../src/engine/engine.js';
import { buildEngineConfig, HOST_LOAD_BYTES_PER_S, sizeEngine } from '../../src/engine/profiles.js';
import type { EngineConfig } from '../../src/engine/types.js';
import type { KvEvent } from '../../src/kv/events.js';

const BS = 4;
const seq = (start: number, n: number) => Array.from({ length: n }, (_, i) => start + i);

function config(hostBlocks: number): EngineConfig {
  return {
    blockSize: BS,
    numGpuBlocks: 10,
    maxModelLen: 1024,
    maxNumSeqs: 4,
    maxNumBatchedTokens: 64,
    enablePrefixCaching: true,
    hashSeed: 5,
    kvEvents: true,
    emitTokens: false,
    timeModel: { stepMs: () => 1 },
    ...(hostBlocks > 0 ? { cpuOffload: { numBlocks: hostBlocks, loadMsPerBlock: 10 } } : {}),
  };
}

/** Run one request to the end; its cached prompt tokens, the steps' total time and its events. */
function run(engine: Engine, id: string, prompt: number[], maxTokens = 1): { cached: number; ms: number; events: KvEvent[] } {
  engine.add({ id, prompt, maxTokens, sampler: () => 7, ignoreEos: true });
  let cached = -1;
  let ms = 0;
  const events: KvEvent[] = [];
  while (engine.hasWork()) {
    const r = engine.step()!;
    ms += r.durationMs;
    events.push(...r.kvEvents);
    for (const s of r.started) if (s.id === id) cached = s.cachedPromptTokens;
  }
  return { cached, ms, events };
}

test('a prefix evicted from the GPU is kept in host memory and loaded back at its PCIe cost, with CPU-medium events', () => {
  const a = seq(100, 5 * BS + 1); // 5 full blocks
  const b = seq(900, 9 * BS); // evicts a's blocks from a 10-block GPU
  for (const host of [0, 16]) {
    const engine = new Engine(config(host));
    run(engine, 'a1', a);
    const evict = run(engine, 'b', b, 4); // its decode takes the tenth block too
    const again = run(engine, 'a2', a);
    if (host === 0) {
      assert.equal(again.cached, 0, 'without the tier, the evicted prefix is recomputed');
      continue;
    }
    // The copy to host is published before the GPU's removal, as vLLM's offloading connector does.
    const cpuStored = evict.events.filter((e) => e.type === 'BlockStored' && e.medium === 'CPU');
    assert.ok(cpuStored.length >= 5, 'every evicted block reported stored on the CPU');
    const firstCpu = evict.events.findIndex((e) => e.type === 'BlockStored' && e.medium === 'CPU');
    const firstGpuRemoval = evict.events.findIndex((e) => e.type === 'BlockRemoved' && e.medium === undefined);
    assert.ok(firstCpu < firstGpuRemoval);
    assert.equal(again.cached, 5 * BS, 'the whole prefix comes back from host memory');
    assert.equal(engine.stats().hostHits, 5 * BS);
    // Five blocks at 10 ms each on top of the steps' own time.
    assert.ok(again.ms >= 50, `load priced into the step: ${again.ms} ms`);
    // Loaded blocks are cached on the GPU again (BlockStored without a medium, i.e. GPU).
    assert.ok(again.events.some((e) => e.type === 'BlockStored' && e.medium === undefined && e.blockHashes.length > 0));
  }
});

test('the host tier is an LRU: its evictions are published as BlockRemoved on the CPU', () => {
  const engine = new Engine(config(4));
  const events: KvEvent[] = [];
  for (let i = 0; i < 4; i++) events.push(...run(engine, `r${i}`, seq(1000 * (i + 1), 9 * BS), 4).events);
  const removedCpu = events.filter((e) => e.type === 'BlockRemoved' && e.medium === 'CPU').flatMap((e) => (e as { blockHashes: number[] }).blockHashes);
  assert.ok(removedCpu.length > 0);
  assert.ok((engine.stats().hostCachedBlocks ?? 0) <= 4);
  // /reset_prefix_cache drops the host tier too.
  engine.resetPrefixCache();
  const after = engine.takeKvEvents();
  assert.equal(engine.stats().hostCachedBlocks, 0);
  assert.ok(after.some((e) => e.type === 'AllBlocksCleared'));
});

test('cpuOffloadGib sizes the tier in blocks of the model and prices a block at its bytes over PCIe', () => {
  const sizing = sizeEngine({ gpu: 'h100', model: 'llama-3.1-8b' });
  const cfg = buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', cpuOffloadGib: 8 });
  const blockBytes = sizing.kvBytesPerToken * 16;
  assert.equal(cfg.cpuOffload?.numBlocks, Math.floor((8 * 1024 ** 3) / blockBytes));
  assert.ok(Math.abs(cfg.cpuOffload.loadMsPerBlock - (blockBytes / HOST_LOAD_BYTES_PER_S) * 1000) < 1e-12);
  assert.equal(buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b' }).cpuOffload, undefined);
  assert.throws(() => buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', cpuOffloadGib: -1 }), /cpuOffloadGib/);
});
