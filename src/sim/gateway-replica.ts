/**
 * One simulated gateway replica: its Router and policy, its own WorkerStates (in-flight
 * accounting), the mappers feeding its workers' KV events to its prefix index, and its speed
 * classes. A run has one, or several with `replicas` (replicas.ts).
 */
import type { EngineConfig } from '../engine/types.js';
import type { Engine } from '../engine/engine.js';
import { KvEventMapper } from '../fleet/kv-events-mapper.js';
import { SpeedClasses } from '../fleet/speed-classes.js';
import { WorkerState, type WorkerRole } from '../fleet/worker-state.js';
import { Router } from '../scheduler/router.js';
import type { Policy } from '../scheduler/types.js';
import type { Clock } from '../util/clock.js';
import { seededRng } from '../util/rng.js';

export interface SimReplica {
  router: Router;
  states: WorkerState[];
  /** Per worker, the mapper feeding its KV events to this replica's index (or null). */
  mappers: (KvEventMapper | null)[];
  /** Its workers' speed classes, re-derived from their scrapes as the gateway's are. */
  speedClasses: SpeedClasses;
}

/** The fleet a replica routes over. */
export interface ReplicaFleet {
  model: string;
  seed: number;
  clock: Clock;
  staleAfterMs: number;
  /** Each worker's engine and its configuration. */
  engines: readonly Engine[];
  configs: readonly EngineConfig[];
  blockSize: number;
  /** Each worker's declared hardware, if any. */
  hardware?: readonly string[];
  /** The LoRA adapters every worker serves. */
  adapters?: readonly string[];
  /** Feed the policy's prefix index from KV events even if it does not declare usesKvEvents. */
  kvEvents?: boolean;
  /** Each worker's role in a disaggregated fleet (absent: all `both`). */
  roles?: readonly WorkerRole[];
}

/** Replica r of the run, routing with `policy`. */
export function createReplica(policy: Policy, r: number, f: ReplicaFleet): SimReplica {
  const router = new Router({ policy, clock: f.clock, rng: seededRng(r === 0 ? f.seed : f.seed + r * 0x9e37), staleAfterMs: f.staleAfterMs });
  const eventIndex = policy.usesKvEvents === true || f.kvEvents === true ? policy.prefixIndex : undefined;
  const states: WorkerState[] = [];
  const mappers: (KvEventMapper | null)[] = [];
  const useOracle = policy.usesOracle === true;
  for (let i = 0; i < f.engines.length; i++) {
    const w = new WorkerState({
      id: `w${i}`,
      url: `sim://w${i}`,
      pool: 'default',
      model: f.model,
      numGpuBlocks: f.configs[i]!.numGpuBlocks,
      blockSize: f.blockSize,
      ...(f.hardware?.[i] !== undefined ? { hardware: f.hardware[i] } : {}),
      ...(f.adapters !== undefined ? { adapters: f.adapters } : {}),
      ...(f.roles !== undefined ? { role: f.roles[i] } : {}),
    });
    // The engine implements OracleProbe; only a policy that declares usesOracle (`oracle`,
    // `oracle-greedy`) is given the live view.
    if (useOracle) w.oracle = f.engines[i]!;
    states.push(w);
    let mapper: KvEventMapper | null = null;
    if (eventIndex && (eventIndex.hasWorker(w.id) || eventIndex.workerCount < eventIndex.maxWorkers)) {
      // As the gateway's kv-events service does: register the worker with its capacity, then map
      // its events into the index's hash space at its block size.
      if (!eventIndex.hasWorker(w.id)) eventIndex.addWorker(w.id, f.configs[i]!.numGpuBlocks);
      eventIndex.setSource(w.id, 'events', 'simulated engine (lossless)', 0);
      mapper = new KvEventMapper(eventIndex, w.id, { blockSize: f.blockSize });
    }
    mappers.push(mapper);
  }
  return { router, states, mappers, speedClasses: new SpeedClasses() };
}
