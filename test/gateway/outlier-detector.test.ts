/** OutlierDetector's arithmetic, on a hand-driven clock: allowance, suspicion, clearing. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WorkerState } from '../../src/fleet/worker-state.js';
import { DEFAULT_PREFILL_TOKENS_PER_SEC, OutlierDetector } from '../../src/gateway/fleet-watch/outliers.js';
import type { RelayAttempt } from '../../src/gateway/pipeline/relay-attempt.js';

function setup(prefillRate?: (w: WorkerState) => number) {
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
    ...(prefillRate ? { prefillRate } : {}),
    onSuspect: (w) => suspected.push(w.id),
  });
  const attempt = (worker: string, o: { stream: boolean; relaying: boolean; at: number; uncached?: number }) => {
    const a = {
      uncachedTokens: o.uncached ?? 0,
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

test('a worker prefilling a long prompt is allowed the factor times that prefill at its measured rate', () => {
  // 20,000 tokens/s measured: 40,000 uncached tokens are 2 s of prefill, 8 s allowed at factor 4.
  const { d, workers, attempt, suspected, set } = setup(() => 20_000);
  const a = workers[0]!;
  d.onFirstByte(a, 50);
  assert.equal(d.allowanceMs(a), 500);
  const waiting = attempt('a', { stream: true, relaying: false, at: 0, uncached: 40_000 });
  // Short prompts sent after it do not add to it: the longest prefill counts.
  attempt('a', { stream: false, relaying: false, at: 0, uncached: 300 });
  assert.equal(d.allowanceMs(a), 8_000);
  set(2_100);
  d.check();
  assert.equal(a.suspected, false, 'silent through its prefill: not suspected');
  assert.deepEqual(waiting.given, []);
  set(7_900);
  d.check();
  assert.equal(a.suspected, false);
  // Still nothing long past any prefill that long: a hung worker is still found.
  set(8_200);
  d.check();
  assert.deepEqual(suspected, ['a']);
  assert.deepEqual(waiting.given, ['retry']);
  assert.equal(d.allowanceMs(a), 500, 'given up and gone: its prefill no longer stretches the allowance');
});

test('without a measured rate the default prefill rate applies; a TTFT its prefill explains is not learned as slowness', () => {
  const { d, workers, attempt } = setup();
  const [a, b] = workers as [WorkerState, WorkerState];
  const long = attempt('a', { stream: true, relaying: false, at: 0, uncached: 58_000 });
  assert.equal(d.allowanceMs(a), (4 * 1000 * 58_000) / DEFAULT_PREFILL_TOKENS_PER_SEC);
  assert.equal(d.allowanceMs(b), 500, 'a peer’s prefill is its own');
  d.onFirstByte(a, 2_080);
  long.relaying = true;
  assert.equal(d.allowanceMs(a), 500, 'the long first token did not stretch later allowances');
  assert.equal(d.allowanceMs(b), 500);
});

test('a timed-out check during a long prefill does not suspect the worker', () => {
  const { d, workers, attempt, set } = setup(() => 20_000);
  const c = workers[2]!;
  d.onWatchResult(c, null);
  attempt('c', { stream: true, relaying: false, at: 0, uncached: 40_000 });
  set(1_500);
  d.onWatchResult(c, '/metrics timed out after 160 ms');
  assert.equal(c.suspected, false);
  set(8_500);
  d.onWatchResult(c, '/metrics timed out after 160 ms');
  assert.equal(c.suspected, true);
});
