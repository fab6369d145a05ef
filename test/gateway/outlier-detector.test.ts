/** OutlierDetector's arithmetic, on a hand-driven clock: allowance, suspicion, clearing. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WorkerState } from '../../src/fleet/worker-state.js';
import { OutlierDetector } from '../../src/gateway/outliers.js';
import type { RelayAttempt } from '../../src/gateway/relay-attempt.js';

function setup() {
  let now = 0;
  const clock = { now: () => now };
  const workers = ['a', 'b', 'c'].map((id) => new WorkerState({ id, url: `http://${id}:1`, pool: 'p', model: 'm' }));
  const attempts = new Map<string, Array<Partial<RelayAttempt> & { given: string[] }>>();
  const suspected: string[] = [];
  const d = new OutlierDetector(workers, {
    minSilenceMs: 500,
    ttftFactor: 4,
    checkIntervalMs: 100,
    clock,
    attemptsOn: (id) => (attempts.get(id) ?? []) as unknown as RelayAttempt[],
    onSuspect: (w) => suspected.push(w.id),
  });
  const attempt = (worker: string, o: { stream: boolean; relaying: boolean; at: number }) => {
    const a = {
      given: [] as string[],
      isStream: o.stream,
      relaying: o.relaying,
      dispatchedAt: o.at,
      lastByteAt: o.at,
      // Like a real attempt, each settles at once and leaves the relay's set.
      suspectedHung() {
        a.given.push('retry');
        attempts.set(worker, attempts.get(worker)!.filter((x) => x !== a));
      },
      stalled() {
        a.given.push('stalled');
        attempts.set(worker, attempts.get(worker)!.filter((x) => x !== a));
      },
    };
    attempts.set(worker, [...(attempts.get(worker) ?? []), a]);
    return a;
  };
  return { d, workers, attempt, suspected, set: (t: number) => (now = t) };
}

test('the allowance is the floor, or the factor times the larger of its own and its peers’ median TTFT', () => {
  const { d, workers } = setup();
  const [a, b, c] = workers as [WorkerState, WorkerState, WorkerState];
  assert.equal(d.allowanceMs(a), 500);
  d.onFirstByte(b, 200);
  d.onFirstByte(c, 300);
  // a has no history: its peers' median (300 → the upper middle of two) × 4.
  assert.equal(d.allowanceMs(a), 1200);
  d.onFirstByte(a, 50);
  assert.equal(d.allowanceMs(a), 1200, 'a fast worker is still allowed what its peers need');
  for (let i = 0; i < 50; i++) d.onFirstByte(a, 1000);
  assert.ok(d.allowanceMs(a) > 3_900, 'a worker that is slow on its own is given its own pace');
});

test('silence past the allowance with a stream owed: suspected, waiting attempts retried, a stalled stream ended; a byte clears it', () => {
  const { d, workers, attempt, suspected, set } = setup();
  const a = workers[0]!;
  const waiting = attempt('a', { stream: true, relaying: false, at: 0 });
  const relaying = attempt('a', { stream: true, relaying: true, at: 0 });
  const young = attempt('a', { stream: false, relaying: false, at: 400 });
  set(450);
  d.check();
  assert.equal(a.suspected, false, 'within the allowance');
  set(600);
  d.check();
  assert.equal(a.suspected, true);
  assert.deepEqual(suspected, ['a']);
  assert.deepEqual(waiting.given, ['retry']);
  assert.deepEqual(relaying.given, ['stalled']);
  assert.deepEqual(young.given, [], 'an attempt younger than the allowance waits');
  set(950);
  d.check();
  assert.deepEqual(young.given, ['retry']);
  d.onBytes(a);
  assert.equal(a.suspected, false);
});

test('non-streamed requests alone are not judged by silence; a timed-out check after silence suspects', () => {
  const { d, workers, attempt, set } = setup();
  const b = workers[1]!;
  attempt('b', { stream: false, relaying: false, at: 0 });
  set(10_000);
  d.check();
  assert.equal(b.suspected, false);
  d.onWatchResult(b, null);
  set(10_200);
  d.onWatchResult(b, '/metrics timed out after 160 ms');
  assert.equal(b.suspected, false, 'it answered 200 ms ago');
  set(10_600);
  d.onWatchResult(b, '/metrics timed out after 160 ms');
  assert.equal(b.suspected, true);
  d.onWatchResult(b, 'connect ECONNREFUSED');
  assert.equal(b.suspected, true);
});
