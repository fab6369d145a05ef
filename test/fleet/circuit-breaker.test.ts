import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { CircuitBreaker, type BreakerState } from '../../src/fleet/circuit-breaker.js';
import { WorkerState } from '../../src/fleet/worker-state.js';

const worker = () => new WorkerState({ id: 'w', url: 'http://127.0.0.1:1', pool: 'p', model: 'm' });

test('opens after N consecutive failures, half-opens after the cool-down, closes on a good probe', async () => {
  const w = worker();
  const seen: BreakerState[] = [];
  const b = new CircuitBreaker(w, { failuresToOpen: 3, coolDownMs: 30, onTransition: (_w, s) => seen.push(s) });
  b.onFailure();
  b.onFailure();
  b.onSuccess(); // resets the count
  b.onFailure();
  b.onFailure();
  assert.equal(w.circuitOpen, false);
  b.onFailure();
  assert.equal(b.state, 'open');
  assert.equal(w.circuitOpen, true);
  await sleep(60);
  assert.equal(b.state, 'half-open');
  assert.equal(w.circuitOpen, false);
  b.onDispatch(); // the probe: nobody else gets through meanwhile
  assert.equal(w.circuitOpen, true);
  b.onSuccess();
  assert.equal(b.state, 'closed');
  assert.equal(w.circuitOpen, false);
  assert.deepEqual(seen, ['open', 'half-open', 'closed']);
  b.close();
});

test('a failed probe re-opens; an abandoned probe lets the next one through', async () => {
  const w = worker();
  const b = new CircuitBreaker(w, { failuresToOpen: 1, coolDownMs: 20 });
  b.onFailure();
  assert.equal(b.state, 'open');
  await sleep(40);
  b.onDispatch();
  b.onNeutral();
  assert.equal(w.circuitOpen, false);
  b.onDispatch();
  b.onFailure();
  assert.equal(b.state, 'open');
  assert.equal(w.circuitOpen, true);
  b.close();
});

test('the failure-rate trigger opens a worker that fails every other request, once the window holds minRequests', () => {
  const w = worker();
  let t = 0;
  const b = new CircuitBreaker(w, { failuresToOpen: 5, coolDownMs: 10_000, failureRate: { threshold: 0.5, windowMs: 1000, minRequests: 10 }, now: () => t });
  for (let i = 0; i < 4; i++) {
    b.onFailure();
    b.onSuccess();
    t += 10;
  }
  // 8 outcomes, half failed: below minRequests, and never 5 failures in a row.
  assert.equal(b.state, 'closed');
  b.onSuccess();
  b.onFailure(); // 10 outcomes, 5 failed: 0.5 ≥ threshold
  assert.equal(b.state, 'open');
  assert.equal(w.circuitOpen, true);
  b.close();
});

test('failures older than the window do not count toward the rate', () => {
  const w = worker();
  let t = 0;
  const b = new CircuitBreaker(w, { failuresToOpen: 100, coolDownMs: 10_000, failureRate: { threshold: 0.5, windowMs: 1000, minRequests: 4 }, now: () => t });
  b.onFailure();
  b.onFailure();
  b.onFailure();
  b.onSuccess();
  b.onSuccess();
  b.onSuccess();
  assert.equal(b.state, 'closed'); // 3 of 6 is 0.5 — but it was checked at each failure: 3 of 3 with only 3 outcomes
  t = 2000; // the window has moved past all of them
  b.onSuccess();
  b.onSuccess();
  b.onSuccess();
  b.onFailure(); // 1 of 4
  assert.equal(b.state, 'closed');
  assert.equal(b.failureRate(), 0.25);
  b.close();
});

test('a 503/429 backs the worker off (Retry-After, else doubling) without counting a failure; a success ends it', async () => {
  const w = worker();
  const backoffs: number[] = [];
  const b = new CircuitBreaker(w, { failuresToOpen: 1, coolDownMs: 10_000, overloadBackoffMs: 20, maxBackoffMs: 50, onBackoff: (_w, ms) => backoffs.push(ms) });
  b.onOverloaded();
  assert.equal(b.state, 'closed');
  assert.equal(b.consecutiveFailures, 0);
  assert.equal(w.circuitOpen, true);
  await sleep(40);
  assert.equal(w.circuitOpen, false, 'back in routing after the back-off');
  b.onOverloaded(); // repeats: doubled
  b.onOverloaded(); // doubled again, capped at maxBackoffMs
  b.onOverloaded(5); // a Retry-After wins
  assert.deepEqual(backoffs, [20, 40, 50, 5]);
  b.onSuccess();
  assert.equal(w.circuitOpen, false);
  assert.equal(b.backoffMs, 0);
  b.onOverloaded();
  assert.deepEqual(backoffs.at(-1), 20, 'a success resets the doubling');
  b.close();
});

test('evidence of recovery half-opens an open circuit before its cool-down ends', () => {
  const w = worker();
  const b = new CircuitBreaker(w, { failuresToOpen: 1, coolDownMs: 60_000 });
  b.onRecovered();
  assert.equal(b.state, 'closed', 'nothing to do when closed');
  b.onFailure();
  assert.equal(b.state, 'open');
  b.onRecovered();
  assert.equal(b.state, 'half-open');
  assert.equal(w.circuitOpen, false);
  b.close();
});

test("another replica's opening and closing: applied for the cool-down left, reported as 'peer', then local probing", async () => {
  const w = worker();
  const seen: string[] = [];
  const b = new CircuitBreaker(w, { failuresToOpen: 2, coolDownMs: 200, onTransition: (_w, s, cause, from) => seen.push(`${from}>${s} ${cause}`) });
  assert.equal(b.applyPeerOpen(0), false, 'nothing left of the cool-down: nothing to do');
  assert.equal(b.applyPeerOpen(40), true);
  assert.equal(b.state, 'open');
  assert.equal(w.circuitOpen, true);
  assert.ok(b.openRemainingMs() <= 40);
  assert.equal(b.applyPeerOpen(10), false, 'already open for longer');
  b.onSuccess(); // a request dispatched before the opening: does not close another replica's opening
  assert.equal(b.state, 'open');
  // Never longer than its own cool-down on another's word.
  assert.equal(b.applyPeerOpen(60_000), true);
  assert.ok(b.openRemainingMs() <= 200 && b.openRemainingMs() > 100);
  await sleep(260);
  assert.equal(b.state, 'half-open', 'the cool-down ends here as for a local opening');
  b.onDispatch();
  b.onFailure();
  assert.equal(b.state, 'open');
  b.onFailure();
  assert.equal(b.applyPeerClose(), true);
  assert.equal(b.state, 'closed');
  assert.equal(w.circuitOpen, false);
  assert.equal(b.consecutiveFailures, 0, 'failures start afresh: one more does not reopen it');
  b.onFailure();
  assert.equal(b.state, 'closed');
  assert.equal(b.applyPeerClose(), false);
  assert.deepEqual(seen, ['closed>open peer', 'open>open peer', 'open>half-open local', 'half-open>open local', 'open>closed peer']);
  // A success while open closes an opening of this replica's own (as it always did).
  b.onFailure();
  b.onFailure();
  assert.equal(b.state, 'open');
  b.onSuccess();
  assert.equal(b.state, 'closed');
  assert.equal(seen.at(-1), 'open>closed local');
  b.close();
});
