import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { idealHitRate } from '../../src/bench/ideal-hit.js';
import { summarize } from '../../src/bench/metrics.js';
import { runBench } from '../../src/bench/run.js';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import { createPolicy } from '../../src/scheduler/registry.js';
import { simulateFleet } from '../../src/sim/fleet-sim.js';
import { expandSessions } from '../../src/workload/sessions.js';
import { blockHashes } from '../../src/kv/block-hash.js';
import { answerTokens } from '../../src/workload/tokens.js';
import type { BenchRequest } from '../../src/workload/types.js';
import { workloadSource } from '../../src/workload/workloads.js';

const range = (a: number, n: number) => Array.from({ length: n }, (_, i) => a + i);
const req = (promptTokens: number[], maxTokens = 1, outputSeed = 0): BenchRequest => ({ arrivalMs: 0, promptTokens, maxTokens, outputSeed });

/**
 * Each request's ideal hit in tokens, as the rule says it, block by block over a Set: the leading
 * prompt blocks seen (at most ⌊(prompt − 1)/bs⌋), then every block the request computes joins the
 * set — past `max` blocks, two generations of them, a hit moving a block to the newer one.
 */
function referenceHits(reqs: readonly BenchRequest[], bs: number, max = Infinity): number[] {
  let current = new Set<number>();
  let previous: Set<number> | null = null;
  const add = (h: number): void => {
    if (current.has(h)) return;
    current.add(h);
    if (current.size >= max) {
      previous = current;
      current = new Set();
    }
  };
  const has = (h: number): boolean => {
    if (current.has(h)) return true;
    if (previous === null || !previous.has(h)) return false;
    add(h);
    return true;
  };
  return reqs.map((r) => {
    const tokens = [...Array.from(r.promptTokens), ...answerTokens(r.outputSeed, Math.max(0, r.maxTokens - 1))];
    const hs = blockHashes(tokens, bs, 0);
    let hit = 0;
    while (hit < Math.floor((r.promptTokens.length - 1) / bs) && has(hs[hit]!)) hit++;
    for (const h of hs) add(h);
    return hit * bs;
  });
}

describe('ideal_hit_rate', () => {
  it('gives every request the hit of the rule block by block, sessions, shared prompts and the bound included', () => {
    const reqs: BenchRequest[] = [];
    for (const name of ['multi-turn', 'rag', 'agentic', 'mixed', 'fewshot-bursts']) {
      for (const r of expandSessions(workloadSource(name, { size: 150, seed: 4 }).open())) reqs.push(r);
    }
    // Repeats of whole requests, and prompts that end inside a held run or past it.
    for (let i = 0; i < 40; i++) {
      const r = reqs[(i * 37) % reqs.length]!;
      const cut = Math.max(1, Math.floor((r.promptTokens.length * (i % 5)) / 4));
      reqs.push(i % 2 ? r : { ...r, promptTokens: Array.from(r.promptTokens).slice(0, cut), outputSeed: r.outputSeed + i });
    }
    const total = referenceHits(reqs, 16).length;
    assert.equal(total, reqs.length);
    for (const max of [Infinity, 5_000, 20_000, 60_000]) {
      const want = referenceHits(reqs, 16, max);
      const got: number[] = [];
      idealHitRate(reqs, 16, 0, (_r, hit) => got.push(hit), max === Infinity ? undefined : max);
      assert.deepEqual(got, want, `bound ${max}`);
      if (max === Infinity) assert.ok(want.filter((h) => h > 0).length > reqs.length / 3, 'many requests hit');
    }
  });

  it('past its block bound keeps the blocks seen or hit most recently, in at most two generations', () => {
    // Block size 4, one full block per 5-token prompt: prompt k is block k.
    const p = (k: number) => req([k, k, k, k, 0]);
    // Bound 2: blocks 1, 2 fill a generation and 3, 4 the next, which drops 1 and 2: 3 is still
    // held when asked again, 1 is not.
    const seq = [1, 2, 3, 4, 5, 3, 1].map(p);
    const hits: number[] = [];
    idealHitRate(seq, 4, 0, (_r, hit) => hits.push(hit), 2);
    assert.deepEqual(hits, [0, 0, 0, 0, 0, 4, 0]);
    // Unbounded (the default bound is far above): every repeat hits.
    const all: number[] = [];
    idealHitRate(seq, 4, 0, (_r, hit) => all.push(hit));
    assert.deepEqual(all, [0, 0, 0, 0, 0, 4, 4]);
  });

  it('counts the longest run of full blocks seen before, capped so the last prompt token is computed', () => {
    // Block size 4.
    const e = req(range(30, 8), 5, 77); // 8 prompt tokens + 5 generated: blocks of 12 computed tokens
    const f = req([...range(30, 8), ...answerTokens(77, 5), 50, 51, 52]); // 16 tokens
    const stream = [
      req(range(1, 10)), // A: nothing seen: 0
      req([...range(1, 8), 20, 21]), // B: A's two full blocks: 8
      req(range(1, 8)), // C: both blocks seen, but the last token is always computed: 4
      req([9, 9, 9, 9, 9, 9]), // D: 0
      e, // E: 0
      f, // F: E's 2 prompt blocks + E's first output block (answer 0–3) = 12; block 4 (answer 4, 50–52) is new
    ];
    const r = idealHitRate(stream, 4);
    assert.equal(r.promptTokens, 10 + 10 + 8 + 6 + 8 + 16);
    assert.equal(r.hitTokens, 0 + 8 + 4 + 0 + 0 + 12);
    assert.equal(r.rate, 24 / 58);
    // The last generated token is never computed, so it is never cached: with a 4-token answer
    // E' caches only 8 + 3 = 11 tokens, two full blocks.
    const e2 = req(range(30, 8), 4, 77);
    const f2 = req([...range(30, 8), ...answerTokens(77, 4), 60, 61]);
    assert.equal(idealHitRate([e2, f2], 4).hitTokens, 8);
    assert.deepEqual(idealHitRate([], 16), { promptTokens: 0, hitTokens: 0, rate: 0 });
  });

  it('equals the hit rate of one engine with room for everything when requests do not overlap', async () => {
    const cfg = buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', hashSeed: 3, emitTokens: false });
    for (const name of ['multi-turn', 'rag', 'agentic']) {
      // Every request (sessions expanded), one at a time, 60 s apart: nothing overlaps, nothing is evicted.
      const reqs = [...expandSessions(workloadSource(name, { size: 40, seed: 8 }).open())].map((r, i) => {
        const { next: _next, ...rest } = r;
        return { ...rest, arrivalMs: i * 60_000 };
      });
      const total = reqs.reduce((a, r) => a + r.promptTokens.length + r.maxTokens, 0);
      assert.ok(total < cfg.numGpuBlocks * cfg.blockSize, `${name}: ${total} tokens fit in one worker`);
      const sim = await simulateFleet(reqs, { workers: 1, engineConfig: cfg, policy: createPolicy('round-robin'), seed: 1 });
      const engine = summarize(sim, { tp: 1, gpuHourCost: 1 }).prefix_hit_rate;
      const ideal = idealHitRate(reqs, cfg.blockSize).rate;
      assert.ok(ideal > 0.05, `${name}: ideal ${ideal}`);
      assert.equal(engine, Math.round(ideal * 10000) / 10000, name);
    }
  });

  it('is reported per run in the results, at least every policy’s hit rate', async () => {
    const { results } = await runBench({
      source: workloadSource('multi-turn', { size: 120, rate: 40, seed: 1 }),
      policies: ['round-robin', 'kvgate'],
      workers: 3,
      gpu: 'h100',
      model: 'llama-3.1-8b',
      seed: 1,
    });
    assert.equal(typeof results.ideal_hit_rate, 'number');
    assert.ok(results.ideal_hit_rate > 0.5);
    for (const p of results.policies) assert.ok(p.prefix_hit_rate <= results.ideal_hit_rate + 1e-4, `${p.name} ${p.prefix_hit_rate}`);
  });
});
