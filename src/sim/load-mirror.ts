/**
 * Shared in-flight accounting between simulated gateway replicas (ReplicaOptions.shareLoad): a
 * change of one replica's accounting at a worker (dispatch, first token, end) reaches the other
 * replicas' WorkerStates after the sharing delay, as the live gateway's shared.load does.
 */
import type { WorkerState } from '../fleet/worker-state.js';

export class LoadMirror {
  /**
   * `states[r][w]`: replica r's view of worker w. `at(t, fn)` runs fn at virtual time t (an event
   * of the simulation's queue).
   */
  constructor(
    private readonly states: readonly (readonly WorkerState[])[],
    private readonly delayMs: number,
    private readonly now: () => number,
    private readonly at: (t: number, fn: () => void) => void,
  ) {}

  /** Apply `change` of replica `from`'s accounting at worker `w` to the other replicas. */
  mirror(from: number, w: number, change: (s: WorkerState) => void): void {
    const apply = () => {
      for (let r = 0; r < this.states.length; r++) if (r !== from) change(this.states[r]![w]!);
    };
    if (this.delayMs === 0) apply();
    else this.at(this.now() + this.delayMs, apply);
  }
}
