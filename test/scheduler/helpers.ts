import { WorkerState, type MetricsSnapshot } from '../../src/fleet/worker-state.js';
import { KvEventMapper } from '../../src/fleet/kv-events-mapper.js';
import { Router } from '../../src/scheduler/router.js';
import type { Policy, RouteRequest } from '../../src/scheduler/types.js';
import { VirtualClock } from '../../src/util/clock.js';
import { seededRng } from '../../src/util/rng.js';
import { RequestState } from '../../src/util/state.js';

export function worker(id: string, opts: { blocks?: number; snapshot?: Partial<MetricsSnapshot> | null } = {}): WorkerState {
  const w = new WorkerState({ id, url: `http://127.0.0.1:1/${id}`, pool: 'target', model: 'm', numGpuBlocks: opts.blocks ?? 10_000, blockSize: 16 });
  if (opts.snapshot !== null) w.applySnapshot({ at: 0, kvUsage: 0, running: 0, waiting: 0, ...opts.snapshot });
  return w;
}

let reqSeq = 0;
export function request(tokens: number[], extra: Partial<RouteRequest> = {}): RouteRequest {
  return {
    id: `req-${reqSeq++}`,
    model: 'm',
    promptText: extra.promptText ?? tokens.map((t) => `t${t}`).join(' '),
    promptTokens: tokens,
    maxTokens: 16,
    state: new RequestState(),
    ...extra,
  };
}

export const seq = (start: number, n: number): number[] => Array.from({ length: n }, (_, i) => start + i);

export function router(policy: Policy, seed = 1, staleAfterMs = 5000): { router: Router; clock: VirtualClock } {
  const clock = new VirtualClock(0);
  return { router: new Router({ policy, clock, rng: seededRng(seed), staleAfterMs }), clock };
}

let engineHash = 1;
/**
 * Tell `policy`'s prefix index, as a worker's KV events would through the gateway's mapper, that
 * `w` stored the full blocks of `tokens` (a sequence from its start).
 */
export function feedKvEvents(policy: Policy, w: WorkerState, tokens: readonly number[], now = 0): void {
  const index = policy.prefixIndex;
  if (!index) throw new Error(`${policy.name} keeps no prefix index`);
  if (!index.hasWorker(w.id)) index.addWorker(w.id, w.numGpuBlocks);
  const bs = w.blockSize;
  const n = Math.floor(tokens.length / bs);
  const mapper = new KvEventMapper(index, w.id, { blockSize: bs });
  const blockHashes = Array.from({ length: n }, () => engineHash++);
  mapper.apply([{ type: 'BlockStored', blockHashes, parentBlockHash: null, tokenIds: tokens.slice(0, n * bs), blockSize: bs }], now);
}
