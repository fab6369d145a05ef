import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { summarize } from '../../src/bench/metrics.js';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import { createPolicy } from '../../src/scheduler/registry.js';
import { simulateFleet, type RouterTraceEvent } from '../../src/sim/fleet-sim.js';
import { expandSessions } from '../../src/workload/sessions.js';
import type { BenchRequest } from '../../src/workload/types.js';
import { workloadSource } from '../../src/workload/workloads.js';

const cfg = buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', hashSeed: 7, emitTokens: false });

interface Handoff {
  session: string;
  turn: number;
  doneMs: number;
  thinkMs: number;
}

/**
 * Wrap a source so every call of a turn's `next` is recorded: which session, which turn finished,
 * when the simulation said it was done, and the think time the source added.
 */
function recorded(src: Iterable<BenchRequest>, log: Handoff[]): Generator<BenchRequest> {
  const wrap = (r: BenchRequest, turn: number): BenchRequest => {
    const next = r.next;
    if (!next) return r;
    return {
      ...r,
      next: (doneMs) => {
        const n = next(doneMs);
        if (n) log.push({ session: r.session!, turn, doneMs, thinkMs: n.arrivalMs - doneMs });
        return n && wrap(n, turn + 1);
      },
    };
  };
  return (function* () {
    for (const r of src) yield wrap(r, 0);
  })();
}

describe('fleet simulation: closed-loop sessions', () => {
  it('sends turn k+1 a think time after turn k finished in the simulation, never before', async () => {
    const log: Handoff[] = [];
    const trace: RouterTraceEvent[] = [];
    // One worker at a rate it cannot keep up with: answers take long, so an open loop would send
    // later turns before the earlier ones finished.
    const src = recorded(workloadSource('agentic', { size: 120, rate: 40, seed: 3 }).open(), log);
    const r = await simulateFleet(src, { workers: 1, engineConfig: cfg, policy: createPolicy('round-robin'), seed: 1, routerTrace: (e) => trace.push(e) });
    assert.equal(r.requests, 120);
    assert.equal(r.completed.arrival.length, 120);
    // Per request id: its route time and completion time, and its session.
    const routedAt = new Map<string, number>();
    const doneAt = new Map<string, number>();
    const bySession = new Map<string, string[]>();
    for (const e of trace) {
      if (e.type === 'route') {
        routedAt.set(e.req.id, e.t);
        bySession.set(e.req.sessionKey!, [...(bySession.get(e.req.sessionKey!) ?? []), e.req.id]);
      } else if (e.type === 'complete') doneAt.set(e.id, e.t);
    }
    let checked = 0;
    let late = 0;
    for (const h of log) {
      const ids = bySession.get(h.session)!;
      const prev = ids[h.turn]!;
      const cur = ids[h.turn + 1]!;
      // The source was told the real finish time, and the next turn arrived think time after it.
      assert.equal(h.doneMs, doneAt.get(prev));
      assert.ok(h.thinkMs >= 500);
      assert.ok(Math.abs(routedAt.get(cur)! - (doneAt.get(prev)! + h.thinkMs)) < 1e-6);
      assert.ok(routedAt.get(cur)! > doneAt.get(prev)!);
      // How long the answer took: what an open loop would have ignored.
      if (doneAt.get(prev)! - routedAt.get(prev)! > 1000) late++;
      checked++;
    }
    // Every turn but the first of each session was handed off.
    assert.equal(checked, 120 - bySession.size);
    assert.ok(late > 0, 'expected some answers slower than 1 s on one overloaded worker');
  });

  it('a refused turn does not end its session: the next turn follows the refusal after its think time', async () => {
    const log: Handoff[] = [];
    const roots = [...workloadSource('multi-turn', { size: 60, rate: 30, seed: 5 }).open()];
    const total = [...expandSessions(roots)].length;
    const shedAt: number[] = [];
    const seen = new Set<string>();
    const r = await simulateFleet(recorded(roots, log), {
      workers: 2,
      engineConfig: cfg,
      policy: createPolicy('round-robin'),
      seed: 1,
      // Shed every first turn (the only requests whose session key has not been seen).
      admit: (req, now) => {
        const first = !seen.has(req.sessionKey!);
        seen.add(req.sessionKey!);
        if (!first) return { ok: true };
        shedAt.push(now);
        return { ok: false, status: 503, code: 'test_shed' };
      },
    });
    assert.equal(r.requests, total);
    assert.equal(r.shed, roots.length);
    assert.equal(r.completed.arrival.length, total - roots.length);
    // The first hand-off of each session happened at the instant its first turn was refused.
    const firstHandoffs = log.filter((h) => h.turn === 0).map((h) => h.doneMs);
    assert.deepEqual(firstHandoffs.sort((a, b) => a - b), shedAt.filter((_, i) => roots[i]!.turns! > 1).sort((a, b) => a - b));
    // Refused requests miss the SLO: attainment = met / all requests.
    const s = summarize(r, { tp: 1, gpuHourCost: 1, sloTtftMs: 1e9 });
    assert.equal(s.attainment, Math.round(((total - roots.length) / total) * 10000) / 10000);
  });

  it('is deterministic with closed loops: same seed, same summary; requests the same for every policy', async () => {
    const run = async (policy: string, seed: number) => {
      const r = await simulateFleet(workloadSource('agentic', { size: 150, rate: 30, seed: 11 }).open(), {
        workers: 3,
        engineConfig: cfg,
        policy: createPolicy(policy),
        seed,
      });
      return { json: JSON.stringify(summarize(r, { tp: 1, gpuHourCost: 3.5, omitWallTime: true, sloTtftMs: 500 })), r };
    };
    const a = await run('random', 5);
    assert.equal(a.json, (await run('random', 5)).json);
    assert.notEqual(a.json, (await run('random', 6)).json);
    const b = await run('least-load', 5);
    const tokens = (x: typeof a) => [...x.r.completed.promptTokens].sort((p, q) => p - q).join(',');
    assert.equal(tokens(a), tokens(b));
  });
});
