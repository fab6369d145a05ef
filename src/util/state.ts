/**
 * Typed per-request state: values that one step of a pipeline derives and later steps read,
 * keyed by `StateKey<T>` objects instead of strings, so a reader gets back the type the writer
 * stored and two plugins can never collide on a name (the analogue of llm-d's CycleState with
 * typed keys). Keys compare by identity; `name` is for debugging only.
 *
 * ```ts
 * const ESTIMATES = stateKey<Map<WorkerState, Estimate>>('kvgate.estimates');
 * state.set(ESTIMATES, m);
 * state.get(ESTIMATES)?.get(w);            // Estimate | undefined
 * state.getOrInit(ESTIMATES, () => new Map());
 * ```
 */

export interface StateKey<T> {
  readonly name: string;
  /** Phantom field carrying T; never set. */
  readonly __type?: T;
}

export function stateKey<T>(name: string): StateKey<T> {
  return { name };
}

export class RequestState {
  /** Created by the first set: most requests never store anything, and a Map per request is not free. */
  private values: Map<StateKey<unknown>, unknown> | null = null;

  get<T>(key: StateKey<T>): T | undefined {
    return this.values?.get(key) as T | undefined;
  }

  has(key: StateKey<unknown>): boolean {
    return this.values?.has(key) ?? false;
  }

  set<T>(key: StateKey<T>, value: T): void {
    (this.values ??= new Map()).set(key, value);
  }

  delete(key: StateKey<unknown>): void {
    this.values?.delete(key);
  }

  /** The value under `key`, created by `init` on first use. */
  getOrInit<T>(key: StateKey<T>, init: () => T): T {
    const values = (this.values ??= new Map());
    if (values.has(key)) return values.get(key) as T;
    const v = init();
    values.set(key, v);
    return v;
  }
}
