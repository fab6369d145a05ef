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
