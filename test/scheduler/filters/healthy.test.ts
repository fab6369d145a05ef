import { test } from 'node:test';
import assert from 'node:assert/strict';
import { healthyFilter } from '../../../src/scheduler/filters/healthy.js';
import type { RoutingContext } from '../../../src/scheduler/types.js';
import { seededRng } from '../../../src/util/rng.js';
import { request, seq, worker } from '../helpers.js';

const ctx: RoutingContext = { now: 0, rng: seededRng(1), staleAfterMs: 5000 };
const ids = (ws: readonly { id: string }[]) => ws.map((w) => w.id);

test('every worker up and trusted: the candidates are passed on as they came', () => {
  const ws = [worker('a'), worker('b'), worker('c')];
  assert.equal(healthyFilter.filter(request(seq(0, 32)), ws, ctx), ws);
});

test('workers failing health checks, with an open circuit or draining are dropped; suspected ones too unless every one is', () => {
  const req = request(seq(0, 32));
  const [down, open, draining, suspect, fine] = ['down', 'open', 'draining', 'suspect', 'fine'].map((id) => worker(id));
  down!.healthy = false;
  open!.circuitOpen = true;
  draining!.draining = true;
  suspect!.suspected = true;
  const ws = [down!, open!, draining!, suspect!, fine!];
  assert.deepEqual(ids(healthyFilter.filter(req, ws, ctx)), ['fine']);
  // Every worker up, one suspected: the others.
  assert.deepEqual(ids(healthyFilter.filter(req, [suspect!, fine!], ctx)), ['fine']);
  // Only the suspected worker is up: suspicion alone never refuses the request.
  fine!.healthy = false;
  assert.deepEqual(ids(healthyFilter.filter(req, ws, ctx)), ['suspect']);
  // One worker, suspected: kept, and the input array left as it was.
  const one = [suspect!];
  const kept = healthyFilter.filter(req, one, ctx);
  assert.deepEqual(ids(kept), ['suspect']);
  assert.deepEqual(ids(one), ['suspect']);
  // Nothing up at all.
  suspect!.healthy = false;
  assert.deepEqual(ids(healthyFilter.filter(req, ws, ctx)), []);
});
