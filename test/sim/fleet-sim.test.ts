import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import { KvEventMapper } from '../../src/fleet/kv-events-mapper.js';
import { WorkerState } from '../../src/fleet/worker-state.js';
import type { EngineConfig } from '../../src/engine/types.js';
import { PrefixIndex } from '../../src/scheduler/index/prefix-index.js';
import { PrefixMatcher } from '../../src/scheduler/index/prefix-match.js';
import { createPolicy, policyNames } from '../../src/scheduler/registry.js';
import { Router } from '../../src/scheduler/router.js';
import type { Policy, RouteRequest } from '../../src/scheduler/types.js';
import { policyScrapeInterval, simulateFleet, type RouterTraceEvent } from '../../src/sim/fleet-sim.js';
import { summarize } from '../../src/bench/metrics.js';
import type { BenchRequest } from '../../src/workload/types.js';
import { workloadSource } from '../../src/workload/workloads.js';
import { fillStream } from '../../src/workload/tokens.js';
import { VirtualClock } from '../../src/util/clock.js';
import { seededRng } from '../../src/util/rng.js';
import { RequestState } from '../../src/util/state.js';

const cfg = buildEngineConfig({ gpu: 'h100', model: 'llama-3-8b', hashSeed: 7, emitTokens: false });

function req(arrivalMs: number, promptLen: number, maxTokens: number, seed: number): BenchRequest {
  const p = new Int32Array(promptLen);
  fillStream(p, 0, seed, promptLen);
  return { arrivalMs, promptTokens: p, maxTokens, outputSeed: seed };
}

/** A policy that always answers with `status`. */
function refusing(status: 400 | 503): Policy {
  return { name: `refuse-${status}`, route: () => ({ ok: false, status, code: `test_${status}`, message: 'no' }) };
}

describe('fleet simulation', () => {
  it('accounts for every request: completed + rejected + shed = requests', async () => {
    const reqs = [req(0, 500, 20, 1), req(5, 9000, 10, 2), req(10, 300, 5, 3), req(20, 100, 1, 4)];
    const r = await simulateFleet(reqs, { workers: 2, engineConfig: cfg, policy: createPolicy('round-robin'), seed: 1 });
    assert.equal(r.requests, 4);
    // 9,000 prompt tokens exceed llama-3-8b's 8,192-token context: the worker's 400, counted.
    assert.equal(r.rejected, 1);
    assert.deepEqual(r.refusals, { context_length_exceeded: 1 });
    assert.equal(r.completed.arrival.length, 3);
    assert.equal(r.completed.arrival.length + r.rejected + r.shed, r.requests);
    assert.deepEqual([...r.completed.outputTokens].sort((a, b) => a - b), [1, 5, 20]);
  });

  it('counts router 400s as rejected and 503s as shed, never dropping a request', async () => {
    const reqs = [req(0, 100, 5, 1), req(1, 100, 5, 2)];
    const a = await simulateFleet(reqs, { workers: 2, engineConfig: cfg, policy: refusing(503), seed: 1 });
    assert.equal(a.shed, 2);
    assert.equal(a.rejected, 0);
    const b = await simulateFleet(reqs, { workers: 2, engineConfig: cfg, policy: refusing(400), seed: 1 });
    assert.equal(b.rejected, 2);
    assert.equal(b.shed, 0);
  });

  it('the admission hook runs before routing and its refusals are counted', async () => {
    const reqs = [0, 1, 2, 3, 4, 5].map((i) => req(i * 10, 100, 3, i));
    const seen: number[] = [];
    const r = await simulateFleet(reqs, {
      workers: 2,
      engineConfig: cfg,
      policy: createPolicy('round-robin'),
      seed: 1,
      admit: (rq, now) => {
        seen.push(now);
        return Number(rq.id) % 2 === 0 ? { ok: true } : { ok: false, status: 429, code: 'rate_limited' };
      },
    });
    assert.deepEqual(seen, [0, 10, 20, 30, 40, 50]);
    assert.equal(r.shed, 3);
    assert.equal(r.completed.arrival.length, 3);
    assert.deepEqual(r.refusals, { rate_limited: 3 });
  });

  it('times one request from its steps: TTFT = prefill step, TPOT = decode step', async () => {
    const r = await simulateFleet([req(100, 1000, 4, 9)], { workers: 1, engineConfig: cfg, policy: createPolicy('round-robin'), seed: 1 });
    const prefill = cfg.timeModel.stepMs({ prefill: [{ newTokens: 1000, contextLen: 1000 }], decodeSeqs: 0, decodeContextTokens: 0 });
    const c = r.completed;
    assert.equal(c.arrival[0], 100);
    assert.ok(Math.abs(c.firstToken[0]! - 100 - prefill) < 1e-9);
    const decodes = [1001, 1002, 1003].map((ctx) => cfg.timeModel.stepMs({ prefill: [], decodeSeqs: 1, decodeContextTokens: ctx }));
    const e2e = prefill + decodes.reduce((a, b) => a + b, 0);
    assert.ok(Math.abs(c.finish[0]! - 100 - e2e) < 1e-9);
    const s = summarize(r, { tp: 1, gpuHourCost: 3.5 });
    assert.ok(Math.abs(s.tpot_ms.mean! - (e2e - prefill) / 3) < 1e-3);
    // Three decode steps, one sequence each: three ITL samples.
    assert.equal(r.itl.total, 3);
    assert.ok(Math.abs(r.itl.sum - decodes.reduce((a, b) => a + b, 0)) < 1e-9);
    assert.equal(r.workers[0]!.steps, 4);
  });

  it('runs n sampled answers as n sequences sharing the prompt: first token of any, end of the last', async () => {
    const one = { ...req(0, 1000, 40, 9), sampleTokens: [40, 10, 25] };
    const told: Array<number | undefined> = [];
    const policy = createPolicy('round-robin');
    const spy: Policy = { ...policy, name: policy.name, route: policy.route.bind(policy), onComplete: (_r, _w, _ok, _c, out) => told.push(out) };
    const routed: RouteRequest[] = [];
    const r = await simulateFleet([one, req(5, 300, 5, 4)], {
      workers: 1,
      engineConfig: cfg,
      policy: spy,
      seed: 1,
      routerTrace: (e) => {
        if (e.type === 'route') routed.push(e.req);
      },
    });
    const c = r.completed;
    assert.equal(c.arrival.length, 2);
    const i = c.arrival.indexOf(0);
    // The prompt is computed once: the other two answers find its full blocks cached (each
    // computes only the partial last block), so the first step costs one prefill, not three.
    const prefill = cfg.timeModel.stepMs({ prefill: [{ newTokens: 1000, contextLen: 1000 }], decodeSeqs: 0, decodeContextTokens: 0 });
    assert.ok(c.firstToken[i]! <= 1.1 * prefill, `first token at ${c.firstToken[i]} ms, one prefill is ${prefill} ms`);
    assert.ok(c.cachedTokens[i] === 0, 'the first answer computed the prompt');
    assert.equal(c.outputTokens[i], 40, 'TPOT is the longest answer’s');
    assert.equal(c.answeredTokens![i], 75, 'throughput counts every answer');
    assert.equal(r.workers[0]!.steps >= 40, true);
    assert.equal(routed[0]!.sequences, 3);
    assert.equal(routed[1]!.sequences, undefined);
    // The policy learns the answers' mean length per sequence (Router.complete).
    assert.deepEqual(told.sort((a, b) => a! - b!), [5, 25]);
    const s = summarize(r, { tp: 1, gpuHourCost: 3.5 });
    assert.equal(s.requests, 2);
  });

  it('adds the constant overhead before the worker sees the request', async () => {
    const one = [req(0, 800, 3, 5)];
    const a = await simulateFleet(one, { workers: 1, engineConfig: cfg, policy: createPolicy('round-robin'), seed: 1 });
    const b = await simulateFleet(one, { workers: 1, engineConfig: cfg, policy: createPolicy('round-robin'), seed: 1, overheadMs: 25 });
    assert.ok(Math.abs(b.completed.firstToken[0]! - a.completed.firstToken[0]! - 25) < 1e-9);
    assert.ok(Math.abs(b.completed.finish[0]! - a.completed.finish[0]! - 25) < 1e-9);
  });

  it('scrapes at the policy’s own interval unless overridden', async () => {
    const base = createPolicy('round-robin');
    const policy = { name: 'slow-scrape', scrapeIntervalMs: 250, route: (r, w, c) => base.route(r, w, c) } as Policy;
    const src = () => workloadSource('shared-prefix', { size: 60, rate: 50, seed: 3 }).open();
    const times = async (p: Policy, override?: number) => {
      const ts = new Set<number>();
      const r = await simulateFleet(src(), {
        workers: 2,
        engineConfig: cfg,
        policy: p,
        seed: 1,
        scrapeIntervalMs: override,
        routerTrace: (e) => {
          if (e.type === 'snapshot') ts.add(e.t);
        },
      });
      return { ts: [...ts], interval: r.scrapeIntervalMs };
    };
    const own = await times(policy);
    assert.equal(own.interval, 250);
    assert.ok(own.ts.length > 3);
    for (const t of own.ts) assert.equal(t % 250, 0);
    const over = await times(policy, 100);
    assert.equal(over.interval, 100);
    assert.ok(over.ts.includes(100));
    const dflt = await times(createPolicy('round-robin'));
    assert.equal(dflt.interval, 1000);
  });

  it('gives the live engine probe only to a policy that declares usesOracle', async () => {
    const probes: boolean[] = [];
    const spy = (name: string, usesOracle?: boolean): Policy => {
      const rr = createPolicy('round-robin');
      return {
        name,
        ...(usesOracle !== undefined ? { usesOracle } : {}),
        route: (r, ws, c) => {
          probes.push(ws.every((w) => w.oracle !== undefined));
          if (ws[0]!.oracle) assert.equal(ws[0]!.oracle.running() + ws[0]!.oracle.waiting() >= 0, true);
          return rr.route(r, ws, c);
        },
      };
    };
    await simulateFleet([req(0, 100, 2, 1)], { workers: 2, engineConfig: cfg, policy: spy('any-name', true), seed: 1 });
    await simulateFleet([req(0, 100, 2, 1)], { workers: 2, engineConfig: cfg, policy: spy('oracle'), seed: 1 });
    await simulateFleet([req(0, 100, 2, 1)], { workers: 2, engineConfig: cfg, policy: spy('other', false), seed: 1 });
    // The registered simulation-only policies declare it.
    assert.equal(createPolicy('oracle').usesOracle, true);
    assert.equal(createPolicy('oracle-greedy').usesOracle, true);
    assert.deepEqual(probes, [true, false, false]);
  });

  it('feeds the engines’ KV events to the prefix index of a policy that declares usesKvEvents', async () => {
    // One worker; three requests sharing a 1,000-token prefix, far enough apart that each has
    // finished before the next arrives. Each decision records how much of the prompt the index
    // says the worker holds.
    const shared = new Int32Array(1000);
    fillStream(shared, 0, 99, 1000);
    const withPrefix = (arrivalMs: number, seed: number): BenchRequest => {
      const p = new Int32Array(1200);
      p.set(shared);
      fillStream(p, 1000, seed, 200);
      return { arrivalMs, promptTokens: p, maxTokens: 3, outputSeed: seed };
    };
    const spy = (usesKvEvents: boolean) => {
      const index = new PrefixIndex({ predictedTtlMs: 0 });
      const matcher = new PrefixMatcher(index);
      const rr = createPolicy('round-robin');
      const seen: number[] = [];
      const policy: Policy = {
        name: 'events-spy',
        prefixIndex: index,
        usesKvEvents,
        route: (r, ws, c) => {
          seen.push(matcher.matches(r, ws, c).get(ws[0]!)!.blocks);
          return rr.route(r, ws, c);
        },
      };
      return { policy, index, seen };
    };
    const reqs = [withPrefix(0, 1), withPrefix(5_000, 2), withPrefix(10_000, 3)];
    const fed = spy(true);
    const kinds = new Set<string>();
    await simulateFleet(reqs, { workers: 1, engineConfig: cfg, policy: fed.policy, seed: 1, routerTrace: (e) => kinds.add(e.type) });
    // The first request found nothing; the later ones find the whole shared prefix (62 full
    // blocks of 16) and more of the earlier prompt's tail, which ends in a different tail.
    assert.equal(fed.seen[0], 0);
    assert.ok(fed.seen[1]! >= 62 && fed.seen[1]! < 75, `${fed.seen[1]}`);
    assert.ok(fed.seen[2]! >= 62 && fed.seen[2]! < 75, `${fed.seen[2]}`);
    assert.equal(fed.index.source('w0'), 'events');
    assert.ok(kinds.has('kvEvents'));
    // Without the flag the engines record no events and the index learns nothing.
    const unfed = spy(false);
    const kinds2 = new Set<string>();
    await simulateFleet(reqs, { workers: 1, engineConfig: cfg, policy: unfed.policy, seed: 1, routerTrace: (e) => kinds2.add(e.type) });
    assert.deepEqual(unfed.seen, [0, 0, 0]);
    assert.ok(!kinds2.has('kvEvents'));
    // kvEvents: true feeds it anyway, as a gateway whose workers have kvEvents does.
    const forced = spy(false);
    await simulateFleet(reqs, { workers: 1, engineConfig: cfg, policy: forced.policy, seed: 1, kvEvents: true });
    assert.equal(forced.seen[0], 0);
    assert.ok(forced.seen[1]! >= 62, `${forced.seen[1]}`);
    assert.equal(forced.index.source('w0'), 'events');
  });

  it('models the host-memory tier: a prefix evicted from a small GPU comes back from host memory, credited by tier', async () => {
    // One worker whose GPU holds one prompt; two prompts alternate, so each evicts the other.
    const prompt = (seed: number) => {
      const p = new Int32Array(1200);
      fillStream(p, 0, seed, 1200);
      return p;
    };
    const a = prompt(7);
    const b = prompt(8);
    const reqs: BenchRequest[] = [a, b, a, b].map((p, i) => ({ arrivalMs: i * 5_000, promptTokens: p, maxTokens: 3, outputSeed: i }));
    const small = { ...cfg, numGpuBlocks: 90 };
    const run = async (cpuOffload?: EngineConfig['cpuOffload']) => {
      const index = new PrefixIndex({ predictedTtlMs: 0 });
      const matcher = new PrefixMatcher(index);
      const rr = createPolicy('round-robin');
      const tiers: Array<[number, number, number]> = [];
      const policy: Policy = {
        name: 'tier-spy',
        prefixIndex: index,
        usesKvEvents: true,
        route: (r, ws, c) => {
          tiers.push(matcher.matches(r, ws, c).get(ws[0]!)!.tiers);
          return rr.route(r, ws, c);
        },
      };
      const summary = await simulateFleet(reqs, { workers: 1, engineConfig: cpuOffload ? { ...small, cpuOffload } : small, policy, seed: 1 });
      return { tiers, summary };
    };
    const plain = await run();
    // Without the tier only the head the second prompt left on the GPU is still there.
    const [left, , ] = plain.tiers[2]!;
    assert.ok(left < 20, `${left}`);
    assert.deepEqual(plain.tiers[2], [left, 0, 0]);
    const offload = await run({ numBlocks: 1000, loadMsPerBlock: 0.1 });
    const [gpu, host] = offload.tiers[2]!;
    assert.equal(gpu, left);
    assert.ok(gpu + host >= 74, `the third request finds the rest of its prompt in host memory (${host} blocks)`);
    const cached = (r: typeof plain) => r.summary.completed.cachedTokens.reduce((x, y) => x + y, 0);
    assert.ok(cached(offload) > cached(plain) + 1500, `${cached(offload)} vs ${cached(plain)} cached prompt tokens`);
  });

  it('is deterministic: same seed, same summary', async () => {
    const run = async (seed: number) => {
      const r = await simulateFleet(workloadSource('mixed', { size: 150, rate: 40, seed: 11 }).open(), {
        workers: 3,
        engineConfig: cfg,
        policy: createPolicy('random'),
        seed,
      });
      return JSON.stringify(summarize(r, { tp: 1, gpuHourCost: 3.5, omitWallTime: true }));
    };
    const a = await run(5);
    assert.equal(a, await run(5));
    assert.notEqual(a, await run(6));
  });

  it('refuses a source whose arrivals go backwards', async () => {
    await assert.rejects(
      simulateFleet([req(10, 100, 2, 1), req(5, 100, 2, 2)], { workers: 1, engineConfig: cfg, policy: createPolicy('round-robin'), seed: 1 }),
      /request 1: arrival 5 ms is before the previous one \(10 ms\)/,
    );
  });

  it('preempts when KV runs out and still completes everything', async () => {
    const small = { ...cfg, numGpuBlocks: 300 };
    // Four 75-block prompts arriving together fill all 300 blocks; the first decode needs a 301st.
    const reqs = Array.from({ length: 12 }, (_, i) => req(0, 1200, 200, 100 + i));
    const r = await simulateFleet(reqs, { workers: 1, engineConfig: small, policy: createPolicy('round-robin'), seed: 1 });
    assert.equal(r.completed.arrival.length, 12);
    assert.ok(r.workers[0]!.preemptions > 0, 'expected preemptions with 300 blocks');
  });
});

describe('fleet simulation routes exactly as the Router does in a plain loop', () => {
  /**
   * Record every call the simulation makes to its router, then drive a fresh Router + policy over
   * fresh WorkerStates with the same calls at the same virtual times — the way the gateway drives
   * it — and compare the decisions. Any policy that peeked at simulation-only state would diverge.
   */
  async function replayMatches(policyName: string): Promise<number> {
    const events: RouterTraceEvent[] = [];
    const seed = 42;
    const workers = 4;
    const decided: string[] = [];
    await simulateFleet(workloadSource('mixed', { size: 120, rate: 60, seed: 9 }).open(), {
      workers,
      engineConfig: cfg,
      policy: createPolicy(policyName),
      seed,
      routerTrace: (e) => {
        events.push(e);
        if (e.type === 'route') decided.push(e.worker ?? `refused:${e.status}`);
      },
    });
    const clock = new VirtualClock(0);
    const policy = createPolicy(policyName);
    const scrape = policyScrapeInterval(policy) ?? 1000;
    const router = new Router({ policy, clock, rng: seededRng(seed), staleAfterMs: Math.max(5000, 5 * scrape) });
    const states = Array.from(
      { length: workers },
      (_, i) => new WorkerState({ id: `w${i}`, url: `sim://w${i}`, pool: 'default', model: 'model', numGpuBlocks: cfg.numGpuBlocks, blockSize: cfg.blockSize }),
    );
    // A policy fed by KV events gets them as the gateway's subscribers deliver them: through the
    // mapper, into its index.
    const index = policy.usesKvEvents ? policy.prefixIndex : undefined;
    const mappers = states.map((w) => {
      if (!index) return null;
      index.addWorker(w.id, cfg.numGpuBlocks);
      index.setSource(w.id, 'events', 'replayed', 0);
      return new KvEventMapper(index, w.id, { blockSize: cfg.blockSize });
    });
    const replayed: string[] = [];
    for (const e of events) {
      clock.set(e.t);
      switch (e.type) {
        case 'snapshot':
          states[e.worker]!.applySnapshot(e.snapshot);
          break;
        case 'kvEvents':
          mappers[e.worker]!.apply(e.events, e.t);
          break;
        case 'route': {
          const fresh: RouteRequest = {
            id: e.req.id,
            model: e.req.model,
            promptText: e.req.promptText,
            promptTokens: e.req.promptTokens,
            maxTokens: e.req.maxTokens,
            state: new RequestState(),
          };
          if (e.req.sessionKey !== undefined) fresh.sessionKey = e.req.sessionKey;
          if (e.req.tenant !== undefined) fresh.tenant = e.req.tenant;
          const out = router.route(fresh, states);
          replayed.push(out.ok ? out.decision.worker.id : `refused:${out.status}`);
          break;
        }
        case 'firstToken':
          router.firstToken(e.id);
          break;
        case 'complete':
          router.complete(e.id, e.ok, e.outputTokens);
          break;
      }
    }
    assert.deepEqual(replayed, decided, `${policyName}: replayed decisions differ`);
    assert.equal(router.openCount, 0);
    return new Set(decided).size;
  }

  // Policies that read the engines' live state (usesOracle) cannot be replayed without them.
  for (const name of policyNames().filter((p) => createPolicy(p).usesOracle !== true)) {
    it(`${name}`, async () => {
      const used = await replayMatches(name);
      assert.ok(used >= 2, `${name} used only ${used} worker(s)`);
    });
  }
});
