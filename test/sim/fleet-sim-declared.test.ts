/** Declared max_tokens (--declared-max-tokens): the router sees the client's cap, the engine stops at the answer's length. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { withDeclaredMaxTokens } from '../../src/bench/run.js';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import { createPolicy } from '../../src/scheduler/registry.js';
import { simulateFleet, type RouterTraceEvent } from '../../src/sim/fleet-sim.js';
import { expandSessions } from '../../src/workload/sessions.js';
import type { BenchRequest } from '../../src/workload/types.js';
import { workloadSource } from '../../src/workload/workloads.js';

const cfg = buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', hashSeed: 7, emitTokens: false });

const req = (arrivalMs: number, promptLen: number, maxTokens: number): BenchRequest => ({
  arrivalMs,
  promptTokens: Array.from({ length: promptLen }, (_, i) => (i * 7919 + arrivalMs) % 50_000),
  maxTokens,
  outputSeed: arrivalMs,
});

describe('declared max_tokens', () => {
  it('declares max(cap, output) on every request, a session’s later turns included', () => {
    const roots = [...withDeclaredMaxTokens(workloadSource('multi-turn', { size: 40, rate: 10, seed: 2 }).open(), 150)];
    const all = [...expandSessions(roots)];
    assert.equal(all.length, 40);
    assert.ok(all.some((r) => r.maxTokens > 150) && all.some((r) => r.maxTokens < 150), 'answers on both sides of the cap');
    for (const r of all) assert.equal(r.declaredMaxTokens, Math.max(150, r.maxTokens));
  });

  it('routes on the declared cap and generates exactly the answer’s length', async () => {
    const maxLen = cfg.maxModelLen;
    const reqs = [req(0, 500, 20), req(10, 800, 3000), req(20, maxLen - 100, 50)];
    const trace: RouterTraceEvent[] = [];
    const r = await simulateFleet(withDeclaredMaxTokens(reqs, 4096), {
      workers: 2,
      engineConfig: cfg,
      policy: createPolicy('kvgate'),
      seed: 1,
      routerTrace: (e) => trace.push(e),
    });
    const seen = trace.flatMap((e) => (e.type === 'route' ? [e.req.maxTokens] : []));
    // 4096; an answer longer than the cap declares its own length; a prompt near the context
    // limit declares what is left of it, and is not refused.
    assert.deepEqual(seen, [4096, 4096, 100]);
    assert.equal(r.completed.arrival.length, 3);
    assert.deepEqual([...r.completed.outputTokens].sort((a, b) => a - b), [20, 50, 3000]);
  });
});
