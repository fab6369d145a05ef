import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { answerToken } from '../../src/workload/tokens.js';
import type { BenchRequest } from '../../src/workload/types.js';
import { describeWorkloads, workloadNames, workloadSource } from '../../src/workload/workloads.js';

const fingerprint = (rs: BenchRequest[]) =>
  JSON.stringify(rs.map((r) => [r.arrivalMs, r.maxTokens, r.outputSeed, r.tenant, r.session, Array.from(r.promptTokens).slice(0, 40), r.promptTokens.length]));

describe('workloads', () => {
  for (const name of workloadNames()) {
    it(`${name}: deterministic from the seed, time-ordered, sized`, () => {
      const a = [...workloadSource(name, { size: 200, seed: 3 }).open()];
      const b = [...workloadSource(name, { size: 200, seed: 3 }).open()];
      const c = [...workloadSource(name, { size: 200, seed: 4 }).open()];
      assert.equal(a.length, 200);
      assert.equal(fingerprint(a), fingerprint(b));
      assert.notEqual(fingerprint(a), fingerprint(c));
      for (let i = 1; i < a.length; i++) assert.ok(a[i]!.arrivalMs >= a[i - 1]!.arrivalMs, `${name}: arrivals out of order at ${i}`);
      for (const r of a) {
        assert.ok(r.promptTokens.length > 0 && r.maxTokens > 0);
      }
    });
  }

  it('the rate knob sets the mean arrival rate', () => {
    for (const rate of [10, 100]) {
      const rs = [...workloadSource('shared-prefix', { size: 4000, rate, seed: 1 }).open()];
      const measured = (rs.length - 1) / ((rs.at(-1)!.arrivalMs - rs[0]!.arrivalMs) / 1000);
      assert.ok(Math.abs(measured / rate - 1) < 0.08, `rate ${rate}: measured ${measured}`);
    }
  });

  it('burstiness below 1 makes gaps more variable (Gamma shape)', () => {
    const cv = (b: number) => {
      const rs = [...workloadSource('bursty', { size: 4000, rate: 20, seed: 2, burstiness: b }).open()];
      const gaps = rs.slice(1).map((r, i) => r.arrivalMs - rs[i]!.arrivalMs);
      const mean = gaps.reduce((x, y) => x + y, 0) / gaps.length;
      const sd = Math.sqrt(gaps.reduce((x, g) => x + (g - mean) ** 2, 0) / gaps.length);
      return sd / mean;
    };
    // Coefficient of variation of Gamma(k) is 1/sqrt(k).
    assert.ok(Math.abs(cv(1) - 1) < 0.1);
    assert.ok(Math.abs(cv(0.25) - 2) < 0.3);
  });

  it('shared-prefix: requests of a tenant share their long system prompt', () => {
    const rs = [...workloadSource('shared-prefix', { size: 300, seed: 5 }).open()];
    const byTenant = new Map<string, BenchRequest[]>();
    for (const r of rs) byTenant.set(r.tenant!, [...(byTenant.get(r.tenant!) ?? []), r]);
    const [, group] = [...byTenant].find(([, g]) => g.length >= 2)!;
    const [x, y] = group;
    let common = 0;
    while (x!.promptTokens[common] === y!.promptTokens[common]) common++;
    assert.ok(common >= 1500 && common <= 2500, `shared prefix of ${common} tokens`);
  });

  it('multi-turn: each turn extends the previous prompt with the exact previous answer', () => {
    const rs = [...workloadSource('multi-turn', { size: 300, rate: 20, seed: 6 }).open()];
    const bySession = new Map<string, BenchRequest[]>();
    for (const r of rs) bySession.set(r.session!, [...(bySession.get(r.session!) ?? []), r]);
    let checked = 0;
    for (const turns of bySession.values()) {
      for (let i = 1; i < turns.length; i++) {
        const prev = turns[i - 1]!;
        const cur = turns[i]!;
        assert.ok(cur.arrivalMs > prev.arrivalMs);
        const p = prev.promptTokens.length;
        assert.deepEqual(Array.from(cur.promptTokens).slice(0, p), Array.from(prev.promptTokens));
        const answer = Array.from({ length: prev.maxTokens }, (_, k) => answerToken(prev.outputSeed, k));
        assert.deepEqual(Array.from(cur.promptTokens).slice(p, p + prev.maxTokens), answer);
        assert.ok(cur.promptTokens.length > p + prev.maxTokens);
        checked++;
      }
    }
    assert.ok(checked > 20);
  });

  it('rag: prompts share the instruction and reuse popular documents', () => {
    const rs = [...workloadSource('rag', { size: 200, seed: 7 }).open()];
    const heads = new Set(rs.map((r) => Array.from(r.promptTokens).slice(0, 150).join(',')));
    assert.equal(heads.size, 1);
    const firstDocs = new Set(rs.map((r) => Array.from(r.promptTokens).slice(150, 170).join(',')));
    assert.ok(firstDocs.size < rs.length / 2, `first documents: ${firstDocs.size} distinct of ${rs.length}`);
  });

  it('bursty: mixes in long-context requests', () => {
    const rs = [...workloadSource('bursty', { size: 1000, seed: 8 }).open()];
    const long = rs.filter((r) => r.promptTokens.length >= 8000).length;
    assert.ok(long > 100 && long < 200, `${long} long requests`);
  });

  it('rejects unknown names and bad knobs with clear errors', () => {
    assert.throws(() => workloadSource('nope'), /unknown workload 'nope' \(known: shared-prefix, multi-turn, rag, bursty, mixed\)/);
    assert.throws(() => workloadSource('rag', { rate: 0 }), /rate must be a positive number/);
    assert.throws(() => workloadSource('rag', { size: 1.5 }), /size must be a non-negative integer/);
    assert.equal(describeWorkloads().length, workloadNames().length);
  });
});
