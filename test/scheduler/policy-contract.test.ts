/**
 * What every registered policy promises, whatever its rules: run over policyNames(), so a new
 * policy is held to it without being named here.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { OracleProbe, WorkerState } from '../../src/fleet/worker-state.js';
import { createPolicy, policyNames } from '../../src/scheduler/registry.js';
import type { Policy, RouteOutcome, RouteRequest } from '../../src/scheduler/types.js';
import { request, router, seq, worker } from './helpers.js';

/**
 * A probe that mirrors the gateway's own accounting: enough for the policies that read
 * WorkerState.oracle (usesOracle) to route, without a simulated engine.
 */
function accountingProbe(w: WorkerState): OracleProbe {
  return {
    cachedPrefixTokens: () => 0,
    running: () => w.inflightCount,
    waiting: () => 0,
    freeBlocks: () => Math.max(0, w.numGpuBlocks - w.inflightBlocks),
    pendingPrefillTokens: () => w.inflightPrefillTokens,
  };
}

/** Fresh workers for `policy`, with probes if it reads them. */
function fleet(policy: Policy, ids = ['a', 'b', 'c', 'd']): WorkerState[] {
  const ws = ids.map((id) => worker(id));
  if (policy.usesOracle) for (const w of ws) w.oracle = accountingProbe(w);
  return ws;
}

/**
 * Requests that exercise caching and sessions: three shared 256-token prefixes, a unique tail,
 * every other request in one of five sessions. The same `i` always gives the same request.
 */
function traffic(i: number): RouteRequest {
  const tokens = [...seq(1_000 * (i % 3), 256), ...seq(100_000 + i * 64, 64)];
  return request(tokens, { id: `contract-${i}`, ...(i % 2 === 1 ? { sessionKey: `s${i % 5}` } : {}) });
}

function picked(out: RouteOutcome): string {
  assert.ok(out.ok, out.ok ? '' : `refused: ${out.status} ${out.code} ${out.message}`);
  return out.decision.worker.id;
}

/** Route 60 requests, answering some with a first token and ending some, as traffic does. */
function replay(name: string, seed: number): string[] {
  const policy = createPolicy(name);
  const { router: r, clock } = router(policy, seed);
  const ws = fleet(policy);
  const out: string[] = [];
  for (let i = 0; i < 60; i++) {
    clock.advance(7);
    const req = traffic(i);
    const o = r.route(req, ws);
    assert.ok(o.ok);
    if (o.ok) out.push(`${o.decision.worker.id} ${o.decision.reason} ${o.decision.expectedPrefixHit.toFixed(6)}`);
    if (i % 3 !== 0) r.firstToken(req.id);
    if (i % 4 === 0) r.complete(req.id, i % 8 === 0);
  }
  return out;
}

for (const name of policyNames()) {
  describe(`policy contract: ${name}`, () => {
    test('never picks an unhealthy or open-circuit worker; with none left it answers 503', () => {
      const policy = createPolicy(name);
      const { router: r } = router(policy);
      const ws = fleet(policy);
      ws[1]!.healthy = false;
      ws[2]!.circuitOpen = true;
      for (let i = 0; i < 30; i++) assert.ok(['a', 'd'].includes(picked(r.route(traffic(i), ws))));
      ws[0]!.healthy = false;
      ws[3]!.circuitOpen = true;
      const none = r.route(traffic(30), ws);
      assert.ok(!none.ok && none.status === 503 && none.code === 'no_worker_available', JSON.stringify(none));
    });

    test('honours the workers a retry must avoid', () => {
      const policy = createPolicy(name);
      const { router: r } = router(policy);
      const ws = fleet(policy);
      for (let i = 0; i < 20; i++) assert.equal(picked(r.route(traffic(i), ws, new Set(['a', 'b', 'd']))), 'c');
      // The same request retried after a failure goes elsewhere.
      const req = traffic(20);
      const first = picked(r.route(req, ws));
      r.complete(req.id, false);
      assert.notEqual(picked(r.route(req, ws, new Set([first]))), first);
      const all = r.route(traffic(21), ws, new Set(ws.map((w) => w.id)));
      assert.ok(!all.ok && all.status === 503 && all.code === 'no_worker_available');
    });

    test('an empty pool is 503 no_worker_available', () => {
      const { router: r } = router(createPolicy(name));
      const out = r.route(traffic(0), []);
      assert.ok(!out.ok);
      if (!out.ok) {
        assert.equal(out.status, 503);
        assert.equal(out.code, 'no_worker_available');
        assert.match(out.message, /model 'm'/);
      }
    });

    test('the expected prefix hit is a fraction in [0, 1], also for repeated and fully cached prompts', () => {
      const policy = createPolicy(name);
      const { router: r, clock } = router(policy);
      const ws = fleet(policy);
      const whole = seq(0, 16 * 32); // exactly 32 blocks, sent again and again
      for (let i = 0; i < 40; i++) {
        clock.advance(5);
        const req = i % 2 === 0 ? traffic(i) : request(whole, { id: `whole-${i}` });
        const out = r.route(req, ws);
        assert.ok(out.ok);
        if (out.ok) {
          const h = out.decision.expectedPrefixHit;
          assert.ok(Number.isFinite(h) && h >= 0 && h <= 1, `${h}`);
        }
        r.firstToken(req.id);
      }
    });

    test('the same seed and the same requests give the same picks', () => {
      const a = replay(name, 11);
      const b = replay(name, 11);
      assert.equal(a.length, 60);
      assert.deepEqual(a, b);
    });

    test('Router.complete is idempotent: a request is released, and the policy told, once', () => {
      const inner = createPolicy(name);
      let completes = 0;
      const counted: Policy = {
        name: inner.name,
        route: (req, ws, ctx) => inner.route(req, ws, ctx),
        onDispatch: (req, d, ctx) => inner.onDispatch?.(req, d, ctx),
        onFirstToken: (req, w, ctx) => inner.onFirstToken?.(req, w, ctx),
        onComplete: (req, w, ok, ctx) => {
          completes++;
          inner.onComplete?.(req, w, ok, ctx);
        },
      };
      const { router: r } = router(counted);
      const ws = fleet(inner);
      const req = traffic(0);
      const id = picked(r.route(req, ws));
      const w = ws.find((x) => x.id === id)!;
      r.firstToken(req.id);
      r.complete(req.id, true);
      r.complete(req.id, true);
      r.complete(req.id, false);
      assert.equal(completes, 1);
      assert.equal(r.openCount, 0);
      assert.equal(w.inflightCount, 0);
      assert.equal(w.inflightBlocks, 0);
      assert.equal(w.inflightPrefillTokens, 0);
      // Later decisions are those of a router that completed the request once.
      const once = createPolicy(name);
      const { router: r1 } = router(once);
      const ws1 = fleet(once);
      const req1 = traffic(0);
      r1.route(req1, ws1);
      r1.firstToken(req1.id);
      r1.complete(req1.id, true);
      for (let i = 1; i < 10; i++) assert.equal(picked(r.route(traffic(i), ws)), picked(r1.route(traffic(i), ws1)));
    });
  });
}
