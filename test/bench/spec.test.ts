import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';
import { help, parseSpecFlags } from '../../src/cli/bench.js';
import { acceptanceAt, parseAcceptanceByTenant, parseAcceptanceShift, parseSpecMode, settleOf, verifyReadsCache } from '../../src/bench/spec.js';

const CLI = resolve(dirname(fileURLToPath(import.meta.url)), '../../src/cli.js');
const dir = mkdtempSync(join(tmpdir(), 'kvgate-bench-spec-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function bench(...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, 'bench', ...args], { encoding: 'utf8', timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const FLEET = ['--workload', 'multi-turn', '--size', '60', '--rate', '2', '--workers', '1', '--policy', 'round-robin', '--model', 'llama-3.1-70b', '--tp', '4', '--gpu', 'h100'];
const DRAFT = ['--draft-model', 'llama-3.1-8b', '--draft-quant', 'int4', '--draft-gpu', 'a10g'];

describe('kvgate bench --spec-mode', () => {
  it('parses the modes, acceptance rates and shifts', () => {
    assert.deepEqual(parseSpecMode('target-only'), { kind: 'target-only' });
    assert.deepEqual(parseSpecMode('fixed:4'), { kind: 'fixed', k: 4 });
    assert.deepEqual(parseSpecMode('adaptive'), { kind: 'adaptive' });
    assert.deepEqual(parseAcceptanceShift('0.8:0.3@60'), { before: 0.8, after: 0.3, atMs: 60_000 });
    const o = parseSpecFlags({ 'spec-mode': 'fixed:3', 'spec-acceptance': '0.7', 'draft-model': 'llama-3.1-8b', 'draft-quant': 'int4', 'draft-gpu': 'A10G', 'draft-workers': '2' });
    assert.deepEqual(o, { mode: { kind: 'fixed', k: 3 }, acceptance: 0.7, draftModel: 'llama-3.1-8b', draftQuant: 'int4', draftGpu: 'a10g', draftWorkers: 2, targetEngine: 'vllm' });
    // The target's engine sets what a verification reads from its prefix cache.
    const sg = parseSpecFlags({ 'spec-mode': 'adaptive', 'spec-acceptance': '0.7', 'draft-model': 'llama-3.1-8b', 'target-engine': 'sglang', 'spec-tpot-budget': '50' })!;
    assert.equal(sg.targetEngine, 'sglang');
    assert.equal(sg.tpotBudgetMs, 50);
    assert.equal(verifyReadsCache(sg), true);
    assert.equal(verifyReadsCache(o), false);
    assert.equal(verifyReadsCache({ ...o, verifyPrefixCache: true }), true);
    // Defaults: bf16, the target's GPU, one draft worker.
    const d = parseSpecFlags({ 'spec-mode': 'adaptive', 'spec-acceptance-shift': '0.9:0.2@30', 'draft-model': 'llama-3.1-8b', gpu: 'a100' })!;
    assert.equal(d.draftQuant, 'bf16');
    assert.equal(d.draftGpu, 'a100');
    assert.equal(d.draftWorkers, 1);
    assert.deepEqual(d.acceptance, { before: 0.9, after: 0.2, atMs: 30_000 });
    assert.equal(parseSpecFlags({}), undefined);
  });

  it('rejects bad values and combinations with a message naming the flag', () => {
    const cases: Array<[Record<string, string>, RegExp]> = [
      [{ 'spec-mode': 'fixed' }, /--spec-mode must be target-only, fixed:K .* got 'fixed'/],
      [{ 'spec-mode': 'fixed:0' }, /--spec-mode must be .*fixed:K \(K an integer from 1 to 16\)/],
      [{ 'spec-mode': 'fixed:17' }, /--spec-mode must be/],
      [{ 'spec-mode': 'sometimes' }, /--spec-mode must be/],
      [{ 'spec-mode': 'adaptive', 'spec-acceptance': '1.5', 'draft-model': 'llama-3.1-8b' }, /--spec-acceptance the acceptance rate must be a number from 0 to 1, got '1.5'/],
      [{ 'spec-mode': 'adaptive', 'spec-acceptance': 'high', 'draft-model': 'llama-3.1-8b' }, /--spec-acceptance .*got 'high'/],
      [{ 'spec-mode': 'adaptive', 'spec-acceptance-shift': '0.8-0.3@60', 'draft-model': 'llama-3.1-8b' }, /--spec-acceptance-shift must be A1:A2@SECONDS/],
      [{ 'spec-mode': 'adaptive', 'spec-acceptance-shift': '0.8:0.3@-1', 'draft-model': 'llama-3.1-8b' }, /non-negative number of seconds/],
      [{ 'spec-mode': 'adaptive', 'spec-acceptance': '0.5', 'spec-acceptance-shift': '0.8:0.3@60', 'draft-model': 'llama-3.1-8b' }, /not both/],
      [{ 'spec-mode': 'adaptive', 'draft-model': 'llama-3.1-8b' }, /needs the draft's acceptance/],
      [{ 'spec-mode': 'fixed:4', 'spec-acceptance': '0.5' }, /needs --draft-model NAME \(known: llama-3.1-8b/],
      [{ 'spec-mode': 'fixed:4', 'spec-acceptance': '0.5', 'draft-model': 'gpt-5' }, /unknown --draft-model 'gpt-5'/],
      [{ 'spec-mode': 'fixed:4', 'spec-acceptance': '0.5', 'draft-model': 'llama-3.1-8b', 'draft-quant': 'int8' }, /--draft-quant must be bf16, fp8 or int4, got 'int8'/],
      [{ 'spec-mode': 'fixed:4', 'spec-acceptance': '0.5', 'draft-model': 'llama-3.1-8b', 'draft-gpu': 'tpu' }, /unknown --draft-gpu 'tpu'/],
      [{ 'spec-mode': 'fixed:4', 'spec-acceptance': '0.5', 'draft-model': 'llama-3.1-8b', 'draft-workers': '0' }, /--draft-workers must be an integer ≥ 1, got '0'/],
      [{ 'spec-mode': 'fixed:4', 'spec-acceptance': '0.5', 'draft-model': 'llama-3.1-8b', 'spec-verify-cache': 'yes' }, /--spec-verify-cache must be on or off/],
      [{ 'spec-mode': 'fixed:4', 'spec-acceptance': '0.5', 'draft-model': 'llama-3.1-8b', 'target-engine': 'trt' }, /--target-engine must be vllm or sglang, got 'trt'/],
      [{ 'spec-mode': 'adaptive', 'spec-acceptance': '0.5', 'draft-model': 'llama-3.1-8b', 'spec-tpot-budget': '-3' }, /--spec-tpot-budget must be a positive number of milliseconds/],
      [{ 'target-engine': 'sglang' }, /--target-engine applies to --spec-mode only/],
      [{ 'draft-model': 'llama-3.1-8b' }, /--draft-model applies to --spec-mode only/],
      [{ 'spec-acceptance': '0.5' }, /--spec-acceptance applies to --spec-mode only/],
      [{ 'spec-mode': 'adaptive', 'spec-acceptance-by-tenant': 't0=0.9', 'draft-model': 'llama-3.1-8b' }, /needs --spec-acceptance A for the tenants it does not name/],
      [{ 'spec-mode': 'adaptive', 'spec-acceptance-shift': '0.8:0.3@60', 'spec-acceptance-by-tenant': 't0=0.9', 'draft-model': 'llama-3.1-8b' }, /--spec-acceptance-by-tenant or --spec-acceptance-shift, not both/],
      [{ 'spec-mode': 'adaptive', 'spec-acceptance': '0.3', 'spec-acceptance-by-tenant': 't0:0.9', 'draft-model': 'llama-3.1-8b' }, /--spec-acceptance-by-tenant must be TENANT=A/],
      [{ 'spec-mode': 'adaptive', 'spec-acceptance': '0.3', 'spec-acceptance-by-tenant': 't0=1.2', 'draft-model': 'llama-3.1-8b' }, /the acceptance of tenant 't0' must be a number from 0 to 1, got '1.2'/],
      [{ 'spec-mode': 'adaptive', 'spec-acceptance': '0.3', 'spec-acceptance-by-tenant': 't0=0.9,t0=0.8', 'draft-model': 'llama-3.1-8b' }, /names tenant 't0' twice/],
      [{ 'spec-acceptance-by-tenant': 't0=0.9' }, /--spec-acceptance-by-tenant applies to --spec-mode only/],
    ];
    for (const [flags, re] of cases) assert.throws(() => parseSpecFlags(flags), re, JSON.stringify(flags));
  });

  it('documents its flags in --help and answers bad ones with exit status 2', () => {
    for (const f of ['spec-mode', 'spec-acceptance', 'spec-acceptance-shift', 'spec-acceptance-by-tenant', 'tenants', 'draft-model', 'draft-quant', 'draft-gpu', 'draft-workers', 'spec-verify-cache']) {
      assert.ok(help.includes(`--${f}`), `--${f} missing from help`);
    }
    const r = bench(...FLEET, '--spec-mode', 'fixed:x');
    assert.equal(r.code, 2);
    assert.match(r.stderr, /kvgate bench: --spec-mode must be/);
    const c = bench(...FLEET, '--spec-mode', 'adaptive', '--spec-acceptance', '0.7', ...DRAFT, '--cache', 'on');
    assert.equal(c.code, 2);
    assert.match(c.stderr, /not simulated with --cache on/);
  });

  it('writes consistent speculative figures to the JSON for each mode', () => {
    const results: Record<string, any> = {};
    for (const mode of ['target-only', 'fixed:4', 'adaptive']) {
      const json = join(dir, `${mode.replace(':', '-')}.json`);
      const r = bench(...FLEET, '--spec-mode', mode, '--spec-acceptance', '0.8', ...DRAFT, '--json', json, '--quiet');
      assert.equal(r.code, 0, r.stderr);
      results[mode] = JSON.parse(readFileSync(json, 'utf8')).policies[0];
    }
    for (const [mode, p] of Object.entries(results)) {
      const s = p.speculative;
      for (const f of ['draft_gpu_seconds', 'target_gpu_seconds', 'spec_acceptance_rate', 'tokens_from_draft_fraction', 'mean_k', 'cost_per_million_output_tokens', 'target_gpu_ms_per_output_token']) {
        assert.ok(f in s, `${mode}: ${f} missing`);
      }
      assert.equal(s.mode, mode);
      assert.ok(s.tokens_from_draft_fraction >= 0 && s.tokens_from_draft_fraction <= 1);
      // The target pool's busy time is the run's busy GPU time; the cost prices both pools' busy time.
      assert.equal(s.target_gpu_seconds, p.busy_gpu_seconds);
      const out = p.output_tokens_per_s * p.duration_s;
      const cost = ((s.target_gpu_seconds * s.gpu_hour_cost.target + s.draft_gpu_seconds * s.gpu_hour_cost.draft) / 3600 / out) * 1e6;
      assert.ok(Math.abs(cost - s.cost_per_million_output_tokens) / cost < 0.01, `${mode}: ${cost} vs ${s.cost_per_million_output_tokens}`);
      assert.equal(s.cascade_requests + s.plain_requests + s.draft_refused, mode === 'target-only' ? 0 : p.completed);
    }
    const t = results['target-only'].speculative;
    assert.equal(t.draft_gpu_seconds, 0);
    assert.equal(t.tokens_from_draft_fraction, 0);
    assert.equal(t.mean_k, 0);
    assert.equal(t.spec_acceptance_rate, null);
    const f = results['fixed:4'].speculative;
    assert.equal(f.mean_k, 4);
    assert.ok(f.draft_gpu_seconds > 0);
    assert.ok(f.tokens_from_draft_fraction > 0.5, String(f.tokens_from_draft_fraction));
    assert.ok(Math.abs(f.spec_acceptance_rate - 0.8) < 0.05, String(f.spec_acceptance_rate));
    // Every mode served the same requests and tokens.
    assert.equal(results['fixed:4'].completed, results['target-only'].completed);
    assert.equal(results.adaptive.completed, results['target-only'].completed);
  });

  it('gives each tenant its own acceptance; the adaptive controller learns it per tenant', () => {
    assert.deepEqual(parseAcceptanceByTenant('t0=0.9, code=1'), { t0: 0.9, code: 1 });
    const a = acceptanceAt(0.3, { t0: 0.9 });
    assert.equal(a(0, 't0'), 0.9);
    assert.equal(a(5_000, 't7'), 0.3);
    const o = parseSpecFlags({ 'spec-mode': 'adaptive', 'spec-acceptance': '0.3', 'spec-acceptance-by-tenant': 't0=0.9', 'draft-model': 'llama-3.1-8b' })!;
    assert.deepEqual(o.acceptanceByTenant, { t0: 0.9 });
    const run = (mode: string) => {
      const json = join(dir, `tenants-${mode.replace(':', '-')}.json`);
      // A verifier that reads the prefix cache, and a TPOT budget to trade for cost.
      const r = bench(...FLEET, '--tenants', '2', '--spec-mode', mode, '--spec-acceptance', '0.1', '--spec-acceptance-by-tenant', 't0=0.95', ...DRAFT, '--target-engine', 'sglang', '--spec-tpot-budget', '50', '--json', json, '--quiet');
      assert.equal(r.code, 0, r.stderr);
      return JSON.parse(readFileSync(json, 'utf8')).policies[0].speculative.by_tenant;
    };
    // fixed:4 runs every request through the cascade: the measured α̂ is each tenant's own.
    const f = run('fixed:4');
    assert.deepEqual(Object.keys(f), ['t0', 't1']);
    assert.equal(f.t0.acceptance, 0.95);
    assert.equal(f.t1.acceptance, 0.1);
    assert.ok(Math.abs(f.t0.spec_acceptance_rate - 0.95) < 0.03, String(f.t0.spec_acceptance_rate));
    assert.ok(Math.abs(f.t1.spec_acceptance_rate - 0.1) < 0.05, String(f.t1.spec_acceptance_rate));
    // adaptive speculates long for t0 and sends t1 to the target alone but for probes.
    const d = run('adaptive');
    assert.ok(d.t0.mean_k > 4 && d.t0.cascade_requests > d.t0.plain_requests, JSON.stringify(d.t0));
    const t1Cascades = d.t1.cascade_requests - d.t1.probe_requests;
    assert.ok(d.t1.plain_requests + d.t1.probe_requests > 5 * t1Cascades, JSON.stringify(d.t1));
    // Without the flag there is no per-tenant breakdown.
    const json = join(dir, 'no-tenants.json');
    assert.equal(bench(...FLEET, '--spec-mode', 'fixed:2', '--spec-acceptance', '0.5', ...DRAFT, '--json', json, '--quiet').code, 0);
    assert.equal(JSON.parse(readFileSync(json, 'utf8')).policies[0].speculative.by_tenant, undefined);
    const bad = bench(...FLEET, '--tenants', '2');
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--tenants applies to --cache-isolation tenant and --spec-acceptance-by-tenant only/);
  });

  it('says when the controller settled after an acceptance shift', () => {
    // k 6 until 10 s, then off from 14 s on (a few stragglers at k 6 in between, a probe later).
    const d = { t: [] as number[], k: [] as number[], reason: [] as string[] };
    for (let t = 0; t < 40_000; t += 100) {
      const on = t < 10_000 || (t < 14_000 && t % 1000 === 0);
      d.t.push(t);
      d.k.push(on ? 6 : 0);
      d.reason.push(on ? 'speculate' : 'no_gain');
      if (t === 20_000) {
        d.t.push(t);
        d.k.push(2);
        d.reason.push('probe');
      }
    }
    const s = settleOf(d, { before: 0.8, after: 0.3, atMs: 10_000 });
    assert.equal(s.mean_k_before, 6);
    assert.equal(s.mean_k_after, 0);
    // Windows from 10 to 14 s hold one straggler at k 6 among ten decisions: mean 0.6, off by more than 0.5.
    assert.equal(s.settled_after_s, 4);
    // Stragglers that dominate their windows delay it just the same; none settles it at once.
    const d2 = { t: [...d.t], k: d.k.map((k, i) => (d.t[i]! >= 10_000 && d.t[i]! < 14_000 && d.reason[i] !== 'probe' ? 6 : k)), reason: d.reason };
    assert.equal(settleOf(d2, { before: 0.8, after: 0.3, atMs: 10_000 }).settled_after_s, 4);
    const d3 = { t: d.t, k: d.k.map((k, i) => (d.t[i]! >= 10_000 && d.t[i]! < 14_000 && d.t[i]! % 1000 === 0 ? 0 : k)), reason: d.reason };
    assert.equal(settleOf(d3, { before: 0.8, after: 0.3, atMs: 10_000 }).settled_after_s, 0);
    // A controller that flips until the end never settled.
    const d4 = { t: d.t, k: d.k.map((k, i) => (d.t[i]! >= 39_000 ? 6 : k)), reason: d.reason };
    assert.equal(settleOf(d4, { before: 0.8, after: 0.3, atMs: 10_000 }).settled_after_s, null);
  });
});
