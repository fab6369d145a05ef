import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { MixedHardwareHint } from '../../src/fleet/mixed-hardware.js';
import { WorkerState } from '../../src/fleet/worker-state.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { startSimWorker } from '../../src/sim/worker/server.js';
import { configFor, MODEL, waitFor } from '../gateway/helpers.js';
import { createGateway } from '../../src/gateway/gateway.js';

const worker = (id: string, blocks: number | undefined, hardware?: string): WorkerState => {
  const w = new WorkerState({ id, url: `http://127.0.0.1:1/${id}`, pool: 'p', model: 'm', ...(hardware ? { hardware } : {}) });
  w.applySnapshot({ at: 0, kvUsage: 0, running: 0, waiting: 0, ...(blocks !== undefined ? { numGpuBlocks: blocks } : {}) });
  return w;
};

test('workers of one speed class reporting KV capacities far apart get one warning; labelled or alike, none', () => {
  const warnings: Array<Record<string, unknown>> = [];
  const hint = new MixedHardwareHint((f) => warnings.push(f));
  const alike = [worker('a', 30_000), worker('b', 28_000), worker('c', undefined)];
  for (const w of alike) hint.check(w, alike);
  assert.equal(warnings.length, 0, 'within a quarter of each other: one kind');
  const mixed = [worker('h1', 30_000), worker('h2', 30_000), worker('g1', 9_000)];
  for (const w of [...mixed, ...mixed]) hint.check(w, mixed);
  assert.equal(warnings.length, 1, 'once per speed class');
  assert.deepEqual(warnings[0], { pool: 'p', hardware: undefined, smallest: { worker: 'g1', numGpuBlocks: 9_000 }, largest: { worker: 'h1', numGpuBlocks: 30_000 } });
  const labelled = [worker('h1', 30_000, 'h100'), worker('g1', 9_000, 'a10g')];
  const quiet = new MixedHardwareHint((f) => warnings.push(f));
  for (const w of labelled) quiet.check(w, labelled);
  assert.equal(warnings.length, 1, 'each kind is its own class');
});

test('the gateway says so in its log when a pool’s workers report different capacities', async () => {
  const sims = await Promise.all([30_000, 8_000].map((numGpuBlocks) => startSimWorker({ port: 0, model: MODEL, speed: 100, numGpuBlocks })));
  const lines: any[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l));
      cb();
    },
  });
  const gw = createGateway(configFor(sims.map((s) => s.url), { log: { level: 'info' } }), { logger: createLogger({ level: 'info', destination: sink }) });
  try {
    await gw.start();
    await waitFor(() => lines.some((l) => /KV capacities far apart/.test(l.msg)));
    const l = lines.find((x) => /KV capacities far apart/.test(x.msg));
    assert.equal(l.level, 40);
    assert.deepEqual([l.smallest.numGpuBlocks, l.largest.numGpuBlocks], [8_000, 30_000]);
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});
