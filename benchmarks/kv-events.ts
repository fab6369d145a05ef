/**
 * `npm run bench -- kv-events`: how many KV-cache event blocks one core of the gateway takes in,
 * against how many a fleet publishes.
 *
 * 1. Records the events a simulated fleet's engines publish under a built-in workload
 *    (`simulateFleet` with the `dynamo` policy, which routes on KV events, so every engine
 *    publishes them; each step's batch as the subscriber would receive it).
 * 2. Encodes each batch as vLLM's publisher does (msgpack, src/sim/worker/kv-event-publisher.ts).
 * 3. Times, in this process and in alternating rounds, what a subscriber does per message:
 *    decoding alone (decodeEventBatch, the baseline), and decoding then mapping into a prefix
 *    index through one KvEventMapper per worker (src/fleet/kv-events-mapper.ts), as the gateway's
 *    ZeroMQ subscribers do.
 *
 * Prints blocks per second of one core for each, the mapping's share beyond decoding, and the
 * fleet's own rate (blocks stored and removed per simulated second): their ratio is how many such
 * fleets one core of the gateway keeps up with.
 */
import { benchArgs } from './args.js';
import { buildEngineConfig } from '../src/engine/profiles.js';
import { KvEventMapper } from '../src/fleet/kv-events-mapper.js';
import { decodeEventBatch } from '../src/fleet/kv-events-wire.js';
import type { KvEvent } from '../src/kv/events.js';
import { PrefixIndex } from '../src/scheduler/index/prefix-index.js';
import { createPolicy } from '../src/scheduler/registry.js';
import { simulateFleet } from '../src/sim/fleet-sim.js';
import { encodeEventBatch } from '../src/sim/worker/kv-event-publisher.js';
import { workloadSource } from '../src/workload/workloads.js';

const HELP = `npm run bench -- kv-events [options]

Records the KV-cache events of a simulated fleet (dynamo policy, so the engines publish them),
encodes them as vLLM does, then times decoding them alone and decoding plus mapping them into a
prefix index, as the gateway's subscribers do. Prints blocks per second of one core for each and
the fleet's own rate.

Options:
  --workload NAME  built-in workload (default mixed)
  --workers N      simulated workers (default 16)
  --size N         requests (default 3000)
  --seed N         seed (default 1)
  --rounds N       timed rounds of each, alternating (default 3; the best of each is reported)
  -h, --help       this text`;

interface Recorded {
  worker: number;
  t: number;
  payload: Uint8Array;
  blocks: number;
}

function blocksOf(events: readonly KvEvent[]): number {
  let n = 0;
  for (const e of events) if (e.type === 'BlockStored' || e.type === 'BlockRemoved') n += e.blockHashes.length;
  return n;
}

async function record(workload: string, workers: number, size: number, seed: number): Promise<{ batches: Recorded[]; simulatedMs: number; blockSize: number; capacity: number }> {
  const engineConfig = buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', hashSeed: seed, emitTokens: false, kvEvents: true });
  const batches: Recorded[] = [];
  let last = 0;
  await simulateFleet(workloadSource(workload, { size, seed }).open(), {
    workers,
    engineConfig,
    policy: createPolicy('dynamo'),
    seed,
    routerTrace: (e) => {
      if (e.type !== 'kvEvents') return;
      last = Math.max(last, e.t);
      batches.push({ worker: e.worker, t: e.t, payload: encodeEventBatch(e.t / 1000, e.events, 0), blocks: blocksOf(e.events) });
    },
  });
  return { batches, simulatedMs: last, blockSize: engineConfig.blockSize, capacity: engineConfig.numGpuBlocks };
}

function decodeOnly(batches: readonly Recorded[]): number {
  let sink = 0;
  const t0 = process.hrtime.bigint();
  for (const b of batches) sink += decodeEventBatch(b.payload).events.length;
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  if (sink < 0) console.log(sink);
  return ms;
}

function decodeAndMap(batches: readonly Recorded[], workers: number, blockSize: number, capacity: number): { ms: number; unmapped: number } {
  const index = new PrefixIndex();
  const mappers: KvEventMapper[] = [];
  for (let w = 0; w < workers; w++) {
    index.addWorker(`w${w}`, capacity);
    index.setSource(`w${w}`, 'events', 'kv events', 0);
    mappers.push(new KvEventMapper(index, `w${w}`, { blockSize }));
  }
  let unmapped = 0;
  const t0 = process.hrtime.bigint();
  for (const b of batches) unmapped += mappers[b.worker]!.apply(decodeEventBatch(b.payload).events, b.t);
  index.flush();
  return { ms: Number(process.hrtime.bigint() - t0) / 1e6, unmapped };
}

async function main(): Promise<void> {
  const { values } = benchArgs('kv-events', {
    options: {
      workload: { type: 'string', default: 'mixed' },
      workers: { type: 'string', default: '16' },
      size: { type: 'string', default: '3000' },
      seed: { type: 'string', default: '1' },
      rounds: { type: 'string', default: '3' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(HELP);
    return;
  }
  const int = (name: string, v: string, min: number): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer ≥ ${min}, got '${v}'`);
    return n;
  };
  const workers = int('workers', values.workers, 1);
  const size = int('size', values.size, 1);
  const seed = int('seed', values.seed, 0);
  const rounds = int('rounds', values.rounds, 1);
  const rec = await record(values.workload, workers, size, seed);
  const blocks = rec.batches.reduce((s, b) => s + b.blocks, 0);
  const bytes = rec.batches.reduce((s, b) => s + b.payload.length, 0);
  console.log(
    `recorded: ${values.workload}, ${size} requests over ${workers} workers (seed ${seed}): ${rec.batches.length.toLocaleString('en-US')} batches, ` +
      `${blocks.toLocaleString('en-US')} blocks stored or removed, ${(bytes / 1048576).toFixed(1)} MiB of msgpack, ${(rec.simulatedMs / 1000).toFixed(0)} s of simulated time`,
  );
  // A first pass of each, untimed, so that neither is timed while it is still being compiled.
  decodeOnly(rec.batches);
  decodeAndMap(rec.batches, workers, rec.blockSize, rec.capacity);
  let decodeMs = Infinity;
  let mapMs = Infinity;
  let unmapped = 0;
  for (let r = 0; r < rounds; r++) {
    decodeMs = Math.min(decodeMs, decodeOnly(rec.batches));
    const m = decodeAndMap(rec.batches, workers, rec.blockSize, rec.capacity);
    mapMs = Math.min(mapMs, m.ms);
    unmapped = m.unmapped;
  }
  const perSec = (ms: number): number => Math.round((blocks / ms) * 1000);
  const fleetRate = blocks / (rec.simulatedMs / 1000);
  console.log(`decode alone:        ${decodeMs.toFixed(0)} ms, ${perSec(decodeMs).toLocaleString('en-US')} blocks/s, ${((decodeMs * 1000) / rec.batches.length).toFixed(1)} µs a batch`);
  console.log(
    `decode, map, index:  ${mapMs.toFixed(0)} ms, ${perSec(mapMs).toLocaleString('en-US')} blocks/s, ${((mapMs * 1000) / rec.batches.length).toFixed(1)} µs a batch ` +
      `(${(mapMs / decodeMs).toFixed(2)}× decoding alone; ${unmapped} events unmapped)`,
  );
  console.log(
    `the fleet publishes ${Math.round(fleetRate).toLocaleString('en-US')} blocks per simulated second (${Math.round(fleetRate / workers).toLocaleString('en-US')} a worker): ` +
      `one core maps ${(perSec(mapMs) / fleetRate).toFixed(1)}× that (best of ${rounds} round${rounds === 1 ? '' : 's'} each)`,
  );
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exitCode = 1;
});
