import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { blockHashes, chainRoot } from '../../src/kv/block-hash.js';
import { expandSessions } from '../../src/workload/sessions.js';
import { answerToken, answerTokens } from '../../src/workload/tokens.js';
import type { BenchRequest } from '../../src/workload/types.js';
import { describeWorkloads, workloadNames, workloadSource } from '../../src/workload/workloads.js';

/** Every request of a workload, later session turns included (each answered at once). */
const all = (name: string, o: Parameters<typeof workloadSource>[1]) => [...expandSessions(workloadSource(name, o).open())];

const fingerprint = (rs: BenchRequest[]) =>
  JSON.stringify(rs.map((r) => [r.arrivalMs, r.maxTokens, r.outputSeed, r.tenant, r.session, Array.from(r.promptTokens).slice(0, 40), r.promptTokens.length]));

describe('workloads', () => {
  for (const name of workloadNames()) {
    it(`${name}: deterministic from the seed, time-ordered, sized`, () => {
      const a = all(name, { size: 200, seed: 3 });
      const b = all(name, { size: 200, seed: 3 });
      const c = all(name, { size: 200, seed: 4 });
      assert.equal(a.length, 200);
      assert.equal(fingerprint(a), fingerprint(b));
      assert.notEqual(fingerprint(a), fingerprint(c));
      for (let i = 1; i < a.length; i++) assert.ok(a[i]!.arrivalMs >= a[i - 1]!.arrivalMs, `${name}: arrivals out of order at ${i}`);
      for (const r of a) {
        assert.ok(r.promptTokens.length > 0 && r.maxTokens > 0);
      }
    });
  }

  for (const name of workloadNames()) {
    it(`${name}: a prompt begins with the part it names, whose block hashes are the prompt's own`, () => {
      const rs = all(name, { size: 300, seed: 7 });
      const root = chainRoot(11);
      let parts = 0;
      for (const r of rs) {
        const part = r.promptPart;
        if (part === undefined) continue;
        parts++;
        assert.ok(part.tokens.length <= r.promptTokens.length, `${name}: a part longer than its prompt`);
        for (let i = 0; i < part.tokens.length; i++) assert.equal(part.tokens[i], r.promptTokens[i], `${name}: token ${i} of the part differs from the prompt's`);
        const own = blockHashes(r.promptTokens, 16, 11, Math.floor(part.tokens.length / 16));
        assert.deepEqual(Array.from(part.hashes(root, 16)), own);
      }
      if (['shared-prefix', 'rag', 'multi-turn', 'agentic', 'fewshot-bursts', 'chat-app'].includes(name)) assert.ok(parts > 0, `${name}: no request names a part`);
    });
  }

  it('rag: prompts that begin with the same document share one part', () => {
    const rs = all('rag', { size: 2000, seed: 5 });
    const parts = new Set(rs.map((r) => r.promptPart));
    assert.ok(parts.size > 1 && parts.size < rs.length / 4, `${parts.size} parts for ${rs.length} prompts`);
    for (const r of rs) assert.ok(r.promptPart!.tokens.length >= 150 + 1000, 'the part is the instruction and a whole document');
  });

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
    const rs = all('multi-turn', { size: 300, rate: 20, seed: 6 });
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

  it('lora: every request names one of 16 adapters, popular ones most, each with its own system prompt', () => {
    const rs = [...workloadSource('lora', { size: 2000, seed: 9 }).open()];
    const by = new Map<string, number>();
    for (const r of rs) by.set(r.adapter!, (by.get(r.adapter!) ?? 0) + 1);
    assert.ok(by.size > 10 && by.size <= 16, `${by.size} adapters`);
    assert.ok((by.get('lora-0') ?? 0) > (by.get('lora-15') ?? 0) * 4, 'Zipf popularity');
    // One system prompt per adapter: requests of an adapter share their first 500 tokens.
    const heads = new Map<string, Set<string>>();
    for (const r of rs) (heads.get(r.adapter!) ?? heads.set(r.adapter!, new Set()).get(r.adapter!)!).add(Array.from(r.promptTokens).slice(0, 500).join(','));
    for (const [a, h] of heads) assert.equal(h.size, 1, a);
    assert.equal(new Set([...heads.values()].map((h) => [...h][0])).size, heads.size, 'and no two adapters share one');
  });

  it('bursty: mixes in long-context requests', () => {
    const rs = [...workloadSource('bursty', { size: 1000, seed: 8 }).open()];
    const long = rs.filter((r) => r.promptTokens.length >= 8000).length;
    assert.ok(long > 100 && long < 200, `${long} long requests`);
  });

  it('rejects unknown names and bad knobs with clear errors', () => {
    assert.throws(() => workloadSource('nope'), /unknown workload 'nope' \(known: shared-prefix, multi-turn, rag, bursty, mixed, agentic, rollouts, fewshot-bursts, chat-app, lora\)/);
    assert.throws(() => workloadSource('rag', { rate: 0 }), /rate must be a positive number/);
    assert.throws(() => workloadSource('rag', { size: 1.5 }), /size must be a non-negative integer/);
    assert.equal(describeWorkloads().length, workloadNames().length);
  });
});

describe('repeat_fraction', () => {
  const key = (r: { promptTokens: ArrayLike<number>; maxTokens: number; tenant?: string }) => `${r.tenant}|${r.maxTokens}|${Array.from(r.promptTokens).join(',')}`;

  it('replaces that fraction of requests by exact repeats of earlier ones, same tenant; the rest are unchanged', () => {
    const plain = [...workloadSource('shared-prefix', { size: 2000, seed: 3 }).open()];
    const rep = [...workloadSource('shared-prefix', { size: 2000, seed: 3, repeatFraction: 0.3 }).open()];
    assert.equal(rep.length, 2000);
    const seen = new Map<string, number>();
    let repeats = 0;
    for (let i = 0; i < rep.length; i++) {
      const r = rep[i]!;
      assert.equal(r.arrivalMs, plain[i]!.arrivalMs, 'arrivals are the workload’s');
      const k = key(r);
      if (seen.has(k)) {
        repeats++;
        assert.equal(r.outputSeed, rep[seen.get(k)!]!.outputSeed, 'a repeat gets the same answer');
      } else {
        assert.equal(k, key(plain[i]!), 'a request that is not a repeat is the workload’s own');
        seen.set(k, i);
      }
    }
    assert.ok(repeats > 540 && repeats < 660, `${repeats} repeats of 2000`);
    assert.equal(workloadSource('shared-prefix', { size: 10, repeatFraction: 0.3 }).params!.repeat_fraction, 0.3);
    assert.equal('repeat_fraction' in workloadSource('shared-prefix', { size: 10 }).params!, false);
  });

  it('replaces a session’s first turn by a single request', () => {
    const rep = [...workloadSource('multi-turn', { size: 500, seed: 1, repeatFraction: 0.5 }).open()];
    const singles = rep.filter((r) => r.next === undefined && r.session === undefined);
    assert.ok(singles.length > 0);
    assert.ok(singles.every((r) => (r.turns ?? 1) === 1));
  });

  it('rejects fractions outside [0, 1)', () => {
    assert.throws(() => workloadSource('rag', { repeatFraction: 1 }), /repeat fraction must be in \[0, 1\)/);
    assert.throws(() => workloadSource('rag', { repeatFraction: -0.1 }), /repeat fraction/);
  });
});

describe('agentic and fewshot-bursts workloads', () => {
  it('agentic: sessions of 4–16 turns over 6 shared 2–4k-token tool specs, growing by each answer and a tool result, seconds apart', () => {
    const roots = [...workloadSource('agentic', { size: 3000, seed: 9 }).open()];
    const sessions = new Map<string, BenchRequest[]>();
    for (const r of expandSessions(roots, 1000)) sessions.set(r.session!, [...(sessions.get(r.session!) ?? []), r]);
    // Every session but the last (cut short by the size) has 4–16 turns.
    const lengths = roots.slice(0, -1).map((r) => r.turns!);
    assert.ok(lengths.every((n) => n >= 4 && n <= 16), `turns ${Math.min(...lengths)}–${Math.max(...lengths)}`);
    assert.ok(Math.abs(lengths.reduce((a, b) => a + b, 0) / lengths.length - 10) < 1);
    const specs = new Set<string>();
    for (const turns of sessions.values()) {
      const first = turns[0]!;
      // The shared head: a tool spec of 2–4k tokens, the same for every session of that tenant.
      specs.add(`${first.tenant}:${Array.from(first.promptTokens).slice(0, 32).join(',')}`);
      for (let k = 1; k < turns.length; k++) {
        const prev = turns[k - 1]!;
        const cur = turns[k]!;
        const p = prev.promptTokens.length;
        assert.deepEqual(Array.from(cur.promptTokens).slice(0, p), Array.from(prev.promptTokens));
        assert.deepEqual(Array.from(cur.promptTokens).slice(p, p + prev.maxTokens), Array.from(answerTokens(prev.outputSeed, prev.maxTokens)));
        const added = cur.promptTokens.length - p - prev.maxTokens;
        assert.ok(added >= 100 && added <= 600, `tool result of ${added} tokens`);
        // Think time: 0.5 s + exponential, after the (here: 1 s) answer.
        assert.ok(cur.arrivalMs - prev.arrivalMs >= 1000 + 500);
        assert.ok(prev.maxTokens >= 50 && prev.maxTokens <= 300);
      }
    }
    assert.equal(specs.size, 6);
    const heads = [...sessions.values()].map((t) => t[0]!);
    const byTenant = new Map<string, BenchRequest[]>();
    for (const h of heads) byTenant.set(h.tenant!, [...(byTenant.get(h.tenant!) ?? []), h]);
    for (const group of byTenant.values()) {
      if (group.length < 2) continue;
      const [x, y] = group;
      let common = 0;
      while (x!.promptTokens[common] === y!.promptTokens[common]) common++;
      assert.ok(common >= 2000 && common <= 4000, `shared tool spec of ${common} tokens`);
    }
  });

  it('fewshot-bursts: 3 long few-shot prefixes queried in on/off bursts with tiny answers, plus ~20% long unique documents', () => {
    const rs = [...workloadSource('fewshot-bursts', { size: 6000, seed: 4 }).open()];
    const docs = rs.filter((r) => r.tenant === undefined);
    const shots = rs.filter((r) => r.tenant !== undefined);
    assert.ok(Math.abs(docs.length / rs.length - 0.2) < 0.04, `${docs.length} documents`);
    for (const d of docs) assert.ok(d.promptTokens.length >= 8000 && d.promptTokens.length <= 16000 && d.maxTokens >= 100 && d.maxTokens <= 400);
    const docHeads = new Set(docs.map((d) => Array.from(d.promptTokens).slice(0, 16).join(',')));
    assert.equal(docHeads.size, docs.length, 'documents are unique');
    const tenants = new Map<string, BenchRequest[]>();
    for (const r of shots) tenants.set(r.tenant!, [...(tenants.get(r.tenant!) ?? []), r]);
    assert.equal(tenants.size, 3);
    for (const [name, group] of tenants) {
      for (const r of group) assert.ok(r.maxTokens >= 1 && r.maxTokens <= 8);
      const [x, y] = group;
      let common = 0;
      while (x!.promptTokens[common] === y!.promptTokens[common]) common++;
      assert.ok(common >= 5000 && common <= 7000, `${name}: prefix of ${common} tokens`);
      const question = x!.promptTokens.length - common;
      assert.ok(question >= 19 && question <= 100);
      // On/off: most gaps are short (within a burst), a few are long (between bursts).
      const gaps = group.slice(1).map((r, i) => r.arrivalMs - group[i]!.arrivalMs);
      const mean = gaps.reduce((a, b) => a + b, 0) / gaps.length;
      const cv = Math.sqrt(gaps.reduce((a, g) => a + (g - mean) ** 2, 0) / gaps.length) / mean;
      assert.ok(cv > 2, `${name}: coefficient of variation of gaps ${cv.toFixed(2)} (Poisson: 1)`);
    }
    // The mean rate is the knob's.
    const measured = (rs.length - 1) / ((rs.at(-1)!.arrivalMs - rs[0]!.arrivalMs) / 1000);
    const nominal = describeWorkloads().find((w) => w.name === 'fewshot-bursts')!.rate;
    assert.ok(Math.abs(measured / nominal - 1) < 0.2, `measured ${measured.toFixed(1)} req/s, nominal ${nominal}`);
  });
});

describe('rollouts workload', () => {
  it('waves of 32 problems asking 4, 8 or 16 sampled answers of 100–4,000 tokens, beside as many single-answer chat requests', () => {
    const rs = [...workloadSource('rollouts', { size: 2000, seed: 5 }).open()];
    const trainer = rs.filter((r) => r.tenant === 'trainer');
    const chat = rs.filter((r) => r.tenant === 'chat');
    assert.ok(Math.abs(trainer.length / rs.length - 0.5) < 0.1, `${trainer.length} of ${rs.length} from the trainer`);
    for (const r of trainer) {
      const n = r.sampleTokens!.length;
      assert.ok(n === 4 || n === 8 || n === 16, `n = ${n}`);
      assert.ok(r.sampleTokens!.every((x) => x >= 100 && x <= 4000));
      assert.equal(r.maxTokens, Math.max(...r.sampleTokens!));
      assert.equal(r.declaredMaxTokens, 4096);
    }
    assert.ok(chat.every((r) => r.sampleTokens === undefined && r.maxTokens >= 100 && r.maxTokens <= 400));
    // Waves: 32 problems within 200 ms, then nothing from the trainer until the next wave.
    const waves: number[][] = [];
    for (const r of trainer) {
      const last = waves.at(-1);
      if (last && r.arrivalMs - last[0]! < 1000) last.push(r.arrivalMs);
      else waves.push([r.arrivalMs]);
    }
    for (const w of waves.slice(0, -1)) {
      assert.equal(w.length, 32);
      assert.ok(w.at(-1)! - w[0]! <= 200);
    }
    // The 4 templates are shared: prompts of one template begin alike.
    const heads = new Set(trainer.map((r) => Array.from(r.promptTokens).slice(0, 64).join(',')));
    assert.equal(heads.size, 4);
    // Its nominal rate, the two halves together.
    const measured = (rs.length - 1) / ((rs.at(-1)!.arrivalMs - rs[0]!.arrivalMs) / 1000);
    const nominal = describeWorkloads().find((w) => w.name === 'rollouts')!.rate;
    assert.ok(Math.abs(measured / nominal - 1) < 0.2, `measured ${measured.toFixed(1)} req/s, nominal ${nominal}`);
  });
});

describe('chat-app workload', () => {
  it("sessions over 8 assistants' system prompts, most short and some long, turns growing by the answer and the next message", () => {
    const rs = all('chat-app', { size: 3000, seed: 7 });
    const sessions = new Map<string, BenchRequest[]>();
    for (const r of rs) {
      const s = sessions.get(r.session!) ?? [];
      s.push(r);
      sessions.set(r.session!, s);
    }
    // Whole sessions only (the last ones may be cut by the size).
    const whole = [...sessions.values()].filter((s) => s[0]!.turns === s.length);
    const short = whole.filter((s) => s.length <= 3).length;
    const long = whole.filter((s) => s.length >= 6).length;
    assert.equal(short + long, whole.length, 'sessions are 1–3 or 6–24 turns');
    assert.ok(Math.abs(short / whole.length - 0.7) < 0.08, `${short} short of ${whole.length}`);
    assert.ok(whole.every((s) => s.length <= 24));
    // One system prompt per assistant, 1,000–6,000 tokens, shared by its sessions' first turns.
    const byTenant = new Map<string, Set<string>>();
    for (const s of whole) {
      const head = Array.from(s[0]!.promptTokens).slice(0, 64).join(',');
      const set = byTenant.get(s[0]!.tenant!) ?? new Set<string>();
      set.add(head);
      byTenant.set(s[0]!.tenant!, set);
    }
    assert.ok(byTenant.size <= 8 && byTenant.size >= 6, `${byTenant.size} assistants`);
    for (const heads of byTenant.values()) assert.equal(heads.size, 1);
    // Each turn's prompt begins with the previous one's, followed by that turn's answer.
    for (const s of whole.filter((x) => x.length >= 2).slice(0, 20)) {
      for (let k = 1; k < s.length; k++) {
        const prev = s[k - 1]!;
        const cur = s[k]!;
        assert.deepEqual(Array.from(cur.promptTokens).slice(0, prev.promptTokens.length), Array.from(prev.promptTokens));
        assert.deepEqual(
          Array.from(cur.promptTokens).slice(prev.promptTokens.length, prev.promptTokens.length + prev.maxTokens),
          Array.from(answerTokens(prev.outputSeed, prev.maxTokens)),
        );
      }
    }
    // Answers: most short (20–200), some long (300–1,000).
    const longAnswers = rs.filter((r) => r.maxTokens >= 300).length;
    assert.ok(rs.every((r) => (r.maxTokens >= 20 && r.maxTokens <= 200) || (r.maxTokens >= 300 && r.maxTokens <= 1000)));
    assert.ok(Math.abs(longAnswers / rs.length - 0.3) < 0.05, `${longAnswers} long answers of ${rs.length}`);
  });
});
