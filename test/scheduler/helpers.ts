import { WorkerState, type MetricsSnapshot } from '../../src/fleet/worker-state.js';
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
