import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { SpeedClasses } from '../../src/fleet/speed-classes.js';
import { WorkerState } from '../../src/fleet/worker-state.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { startSimWorker } from '../../src/sim/worker/server.js';
import { configFor, MODEL, waitFor } from '../gateway/helpers.js';
import { createGateway } from '../../src/gateway/gateway.js';

const worker = (id: string, blocks: number | undefined, hardware?: string, pool = 'p'): WorkerState => {
  const w = new WorkerState({ id, url: `http://127.0.0.1:1/${id}`, pool, model: 'm', ...(hardware ? { hardware } : {}) });
  w.applySnapshot({ at: 0, kvUsage: 0, running: 0, waiting: 0, ...(blocks !== undefined ? { numGpuBlocks: blocks } : {}) });
  return w;
};

const classesOf = (ws: readonly WorkerState[]): string[] => ws.map((w) => w.speedClass.replace(/[\u0000\u0001]/g, '|'));

test('an unlabelled pool whose capacities fall in one band stays one class, keyed by the pool', () => {
  const warnings: Array<Record<string, unknown>> = [];
  const classes = new SpeedClasses((f) => warnings.push(f));
  const alike = [worker('a', 30_000), worker('b', 28_000), worker('c', undefined), worker('d', 24_500)];
  for (const w of alike) classes.update(w, alike);
  assert.deepEqual(classesOf(alike), ['p', 'p', 'p', 'p']);
  assert.equal(warnings.length, 0);
});

test('an unlabelled pool is split where a capacity is more than a quarter above its band’s smallest; one warning per pool', () => {
  const warnings: Array<Record<string, unknown>> = [];
  const classes = new SpeedClasses((f) => warnings.push(f));
  const mixed = [worker('h1', 30_000), worker('g1', 9_000), worker('h2', 30_100), worker('g2', 9_050), worker('x', undefined)];
  for (const w of [...mixed, ...mixed]) classes.update(w, mixed);
  assert.deepEqual(classesOf(mixed), ['p|30000', 'p|9000', 'p|30000', 'p|9000', 'p']);
  assert.equal(warnings.length, 1, 'once per pool');
  assert.deepEqual(warnings[0], {
    pool: 'p',
    smallest: { worker: 'g1', numGpuBlocks: 9_000 },
    largest: { worker: 'h2', numGpuBlocks: 30_100 },
    classes: [
      { numGpuBlocks: 9_000, workers: ['g1', 'g2'] },
      { numGpuBlocks: 30_000, workers: ['h1', 'h2'] },
    ],
  });
  // A band is measured from its smallest member, so a slow drift upwards does not chain into one.
  const chain = [worker('a', 10_000), worker('b', 12_000), worker('c', 14_000), worker('d', 16_000)];
  for (const w of chain) classes.update(w, chain);
  assert.deepEqual(classesOf(chain), ['p|10000', 'p|10000', 'p|14000', 'p|14000']);
});

test('labels decide where given; other pools are left alone; a label spanning far-apart capacities is warned of', () => {
  const warnings: Array<Record<string, unknown>> = [];
  const classes = new SpeedClasses((f) => warnings.push(f));
  const fleet = [worker('h1', 30_000, 'h100'), worker('g1', 9_000, 'a10g'), worker('q1', 9_000, undefined, 'q'), worker('q2', 30_000, 'h100', 'q')];
  for (const w of fleet) classes.update(w, fleet);
  assert.deepEqual(classesOf(fleet), ['p|h100', 'p|a10g', 'q', 'q|h100']);
  assert.equal(warnings.length, 0, 'each kind labelled: nothing to say');
  const wrong = [worker('h1', 30_000, 'gpu'), worker('g1', 9_000, 'gpu')];
  for (const w of [...wrong, ...wrong]) classes.update(w, wrong);
  assert.equal(warnings.length, 1);
  assert.deepEqual(warnings[0], { pool: 'p', hardware: 'gpu', smallest: { worker: 'g1', numGpuBlocks: 9_000 }, largest: { worker: 'h1', numGpuBlocks: 30_000 } });
});

test('classes follow a capacity that changes and a worker that leaves', () => {
  const classes = new SpeedClasses();
  const a = worker('a', 30_000);
  const b = worker('b', undefined);
  const fleet = [a, b];
  for (const w of fleet) classes.update(w, fleet);
  assert.deepEqual(classesOf(fleet), ['p', 'p']);
  b.applySnapshot({ at: 1, kvUsage: 0, running: 0, waiting: 0, numGpuBlocks: 8_000 });
  classes.update(b, fleet);
  assert.deepEqual(classesOf(fleet), ['p|30000', 'p|8000'], 'its first report splits the pool');
  fleet.pop();
  classes.update(a, fleet);
  assert.deepEqual(classesOf(fleet), ['p'], 'alone again: the pool');
});

test('the gateway learns a pool’s capacities as classes and says so in its log', async () => {
  const sims = await Promise.all([30_000, 8_000].map((numGpuBlocks) => startSimWorker({ port: 0, model: MODEL, speed: 100, numGpuBlocks })));
  const lines: any[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l));
      cb();
    },
  });
  const gw = createGateway(configFor(sims.map((s) => s.url), { log: { level: 'info' }, admin: { keys: [{ value: 'sk-admin-00000001' }] } }), {
    logger: createLogger({ level: 'info', destination: sink }),
  });
  try {
    const { url } = await gw.start();
    await waitFor(() => lines.some((l) => /KV capacities far apart/.test(l.msg)));
    const l = lines.find((x) => /KV capacities far apart/.test(x.msg));
    assert.equal(l.level, 40);
    assert.deepEqual([l.smallest.numGpuBlocks, l.largest.numGpuBlocks], [8_000, 30_000]);
    const res = await fetch(`${url}/admin/workers`, { headers: { authorization: 'Bearer sk-admin-00000001' } });
    const workers = (await res.json()) as Array<{ speedClass: string }>;
    assert.deepEqual(workers.map((w) => w.speedClass).sort(), ['main · 30000 blocks', 'main · 8000 blocks']);
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});
