import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';
import { help, run } from '../../src/cli/bench.js';

const CLI = resolve(dirname(fileURLToPath(import.meta.url)), '../../src/cli.js');
const dir = mkdtempSync(join(tmpdir(), 'kvgate-bench-cli-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function bench(...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, 'bench', ...args], { encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/**
 * `kvgate bench ARGS` run in this process (the same `run` that `kvgate bench` calls), its output
 * captured: for the many refusals, which need no process of their own each.
 */
async function benchHere(...args: string[]) {
  let stdout = '';
  let stderr = '';
  const { write: out } = process.stdout;
  const { write: err } = process.stderr;
  process.stdout.write = ((c: string | Uint8Array) => ((stdout += String(c)), true)) as typeof process.stdout.write;
  process.stderr.write = ((c: string | Uint8Array) => ((stderr += String(c)), true)) as typeof process.stderr.write;
  try {
    return { code: await run(args), stdout, stderr };
  } finally {
    process.stdout.write = out;
    process.stderr.write = err;
  }
}

const SMALL = ['--workload', 'mixed', '--size', '120', '--rate', '30', '--workers', '3'];

describe('kvgate bench CLI', () => {
  it('documents every flag in --help', () => {
    const flags = [
      'workload', 'size', 'rate', 'burstiness', 'trace', 'format', 'azure-shared-prefix', 'azure-prefix-groups', 'skip-bad',
      'workers', 'gpu', 'gpu-labels', 'model', 'tp', 'policy', 'rate-scale', 'limit', 'seed', 'scrape-interval', 'overhead-ms', 'slo-ttft',
      'slo-tpot', 'gpu-hour-cost', 'json', 'report', 'omit-wall-time', 'progress', 'quiet', 'list', 'help',
      'slo-ttft-per-1k', 'capacity', 'attainment', 'min-band-attainment', 'max-probes', 'capacity-seconds', 'capacity-precision', 'max-loras', 'set', 'repeat-fraction', 'cache', 'cache-ttl-ms', 'cache-max-bytes',
      'admission', 'priority-mix', 'shed-above', 'queue-above', 'queue-max', 'queue-max-wait', 'declared-max-tokens', 'jobs',
    ];
    for (const f of flags) assert.ok(help.includes(`--${f}`), `--${f} missing from help`);
    const r = bench('--help');
    assert.equal(r.code, 0);
    assert.equal(r.stdout, help);
  });

  it('--workload lora --max-loras: adapters wait for slots, and the LoRA affinity keeps them from it', () => {
    const ttftP99 = (...extra: string[]): number => {
      const out = join(dir, 'lora.json');
      const r = bench('--workload', 'lora', '--size', '800', '--max-loras', '2', '--policy', 'kvgate', ...extra, '--json', out, '--quiet');
      assert.equal(r.code, 0, r.stderr);
      return JSON.parse(readFileSync(out, 'utf8')).policies[0].ttft_ms.p99;
    };
    const withAffinity = ttftP99();
    const without = ttftP99('--set', 'kvgate.loraAffinity=false');
    assert.ok(withAffinity * 10 < without, `TTFT p99 ${withAffinity} ms with the affinity, ${without} ms without`);
    assert.equal(bench('--workload', 'lora', '--max-loras', '0').code, 2);
  });

  it('runs kvgate to the SLO it is judged by, unless told otherwise; the peers get nothing', () => {
    const out = join(dir, 'slo.json');
    const r = bench(...SMALL, '--policy', 'round-robin,kvgate', '--slo-tpot', '80', '--slo-ttft', '1600', '--json', out, '--quiet');
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(JSON.parse(readFileSync(out, 'utf8')).policy_options, { kvgate: { tpotTargetMs: '80', tpotWorthMs: '20' } });
    const set = bench(...SMALL, '--policy', 'kvgate', '--slo-tpot', '80', '--set', 'kvgate.tpotTargetMs=40', '--json', out, '--quiet');
    assert.equal(set.code, 0, set.stderr);
    assert.deepEqual(JSON.parse(readFileSync(out, 'utf8')).policy_options, { kvgate: { tpotTargetMs: '40' } });
  });

  it('answers bad arguments with a clear message and exit status 2', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['--workload', 'rag', '--bogus'], /Unknown option '--bogus'/],
      [[], /exactly one of --workload NAME or --trace FILE/],
      [['--workload', 'nope'], /unknown workload 'nope' \(known: shared-prefix/],
      [['--workload', 'rag', '--workers', '0'], /--workers must be an integer ≥ 1/],
      [['--workload', 'rag', '--admission', 'maybe'], /--admission must be on, off or llm-d/],
      [['--workload', 'rag', '--priority-mix', 'vip=1'], /--priority-mix: unknown priority class 'vip'/],
      [['--workload', 'rag', '--shed-above', '0.5'], /--shed-above applies to --admission on only/],
      [['--workload', 'rag', '--admission', 'on', '--queue-above', '1.5'], /--queue-above must be a fraction/],
      [['--workload', 'rag', '--rate-scale', 'fast'], /--rate-scale must be a positive number/],
      [['--workload', 'rag', '--declared-max-tokens', '0'], /--declared-max-tokens must be an integer ≥ 1/],
      [['--workload', 'rag', '--policy', 'round-robin,magic'], /unknown policy 'magic' \(known: .*round-robin.*least-load/],
      [['--workload', 'rag', '--gpu', 'tpu'], /unknown GPU 'tpu'/],
      [['--workload', 'rag', '--gpu', 'h100:4,a100'], /--gpu: a GPU mix is NAME:COUNT/],
      [['--workload', 'rag', '--gpu', 'h100:4,tpu:4'], /--gpu: unknown GPU 'tpu'/],
      [['--workload', 'rag', '--gpu', 'h100:4,a100:4', '--workers', '6'], /has 8 workers, but --workers is 6/],
      [['--workload', 'rag', '--gpu', 'h100:2,h100:2'], /h100 is named twice/],
      [['--workload', 'rag', '--gpu', 'h100:0,a100:2'], /count of h100 in a GPU mix must be at least 1/],
      [['--workload', 'rag', '--gpu-labels', 'off'], /--gpu-labels applies to a mixed fleet/],
      [['--workload', 'rag', '--gpu', 'h100:2,a100:2', '--gpu-labels', 'maybe'], /--gpu-labels must be on or off/],
      [['--workload', 'rag', '--format', 'azure'], /--format applies to --trace only/],
      [['--trace', '/nonexistent/x.jsonl'], /cannot read trace/],
      [['--workload', 'rag', '--attainment', '0.8'], /--attainment applies to --capacity only/],
      [['--workload', 'rag', '--max-probes', '5'], /--max-probes applies to --capacity only/],
      [['--workload', 'rag', '--capacity-seconds', '30'], /--capacity-seconds applies to --capacity only/],
      [['--workload', 'rag', '--capacity', '--capacity-seconds', 'soon'], /--capacity-seconds must be a non-negative number/],
      [['--workload', 'rag', '--capacity-precision', '0.01'], /--capacity-precision applies to --capacity only/],
      [['--workload', 'rag', '--capacity', '--capacity-precision', '0'], /--capacity-precision must be a positive number/],
      [['--workload', 'rag', '--min-band-attainment', '0.8'], /--min-band-attainment applies to --capacity only/],
      [['--workload', 'rag', '--capacity', '--min-band-attainment', '1.2'], /--min-band-attainment must be a fraction in \(0, 1\]/],
      [['--workload', 'rag', '--capacity', '--min-band-attainment', '0'], /--min-band-attainment must be a positive number/],
      [['--workload', 'rag', '--capacity', '--attainment', '1.5'], /--attainment must be a fraction in \(0, 1\]/],
      [['--workload', 'rag', '--capacity', '--max-probes', '0'], /--max-probes must be an integer ≥ 1/],
      [['--workload', 'rag', '--slo-ttft-per-1k', '100'], /--slo-ttft-per-1k needs --slo-ttft/],
      [['--workload', 'rag', '--cache', 'yes'], /--cache must be on or off/],
      [['--workload', 'rag', '--cache-ttl-ms', '5'], /--cache-ttl-ms applies to --cache on only/],
      [['--workload', 'rag', '--repeat-fraction', '1'], /--repeat-fraction must be in \[0, 1\)/],
      [['--workload', 'rag', '--repeat-fraction=-0.1'], /--repeat-fraction must be a non-negative number/],
      [['--workload', 'rag', '--policy', 'kvgate', '--set', 'kvgate'], /--set takes POLICY.KNOB=VALUE/],
      [['--workload', 'rag', '--policy', 'kvgate', '--set', 'dynamo.prefillLoadScale=2'], /policy 'dynamo' is not among --policy kvgate/],
      [['--workload', 'rag', '--policy', 'kvgate', '--set', 'kvgate.spillRelative=lots'], /policy 'kvgate' options: spillRelative: expected a number/],
      [['--workload', 'rag', '--policy', 'kvgate', '--set', 'kvgate.noSuchKnob=1'], /policy 'kvgate' options: .*noSuchKnob/],
    ];
    // Each refusal in this process; the first three also as the command a user runs.
    for (const [i, [args, re]] of cases.entries()) {
      const r = i < 3 ? bench(...args) : await benchHere(...args);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, re);
      assert.equal(r.stdout, '');
    }
  });

  it('prints a summary table and writes byte-identical JSON for the same seed', () => {
    const a = join(dir, 'a.json');
    const b = join(dir, 'b.json');
    const c = join(dir, 'c.json');
    const r = bench(...SMALL, '--policy', 'round-robin,least-load', '--seed', '3', '--json', a, '--omit-wall-time', '--slo-ttft', '500', '--slo-tpot', '50');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /policy\s+done\s+rej\s+shed/);
    assert.match(r.stdout, /^round-robin\s+\d+/m);
    assert.match(r.stdout, /^least-load\s+\d+/m);
    assert.match(r.stdout, /wall time/);
    assert.equal(bench(...SMALL, '--policy', 'round-robin,least-load', '--seed', '3', '--json', b, '--omit-wall-time', '--slo-ttft', '500', '--slo-tpot', '50', '--quiet').code, 0);
    assert.equal(bench(...SMALL, '--policy', 'round-robin,least-load', '--seed', '4', '--json', c, '--omit-wall-time', '--slo-ttft', '500', '--slo-tpot', '50', '--quiet').code, 0);
    const ja = readFileSync(a, 'utf8');
    assert.equal(ja, readFileSync(b, 'utf8'));
    assert.notEqual(ja, readFileSync(c, 'utf8'));
    const j = JSON.parse(ja);
    assert.equal(j.workers, 3);
    assert.equal(j.gpu, 'h100');
    assert.equal(j.model, 'llama-3.1-8b');
    assert.equal(j.seed, 3);
    assert.deepEqual(j.policies.map((p: { name: string }) => p.name), ['round-robin', 'least-load']);
    assert.equal(typeof j.ideal_hit_rate, 'number');
    assert.equal(j.capacity, null);
    assert.equal(j.slo_ttft_per_1k_ms, null);
    for (const p of j.policies) {
      assert.equal(typeof p.attainment, 'number');
      assert.equal(p.capacity, null);
      for (const k of ['ttft_ms', 'tpot_ms', 'itl_ms', 'e2e_ms']) assert.deepEqual(Object.keys(p[k]), ['p50', 'p90', 'p99', 'mean']);
      for (const k of ['throughput_rps', 'output_tokens_per_s', 'prefix_hit_rate', 'gpu_seconds', 'cost_per_million_output_tokens', 'goodput_rps', 'preemptions']) {
        assert.equal(typeof p[k], 'number', k);
      }
      assert.equal(p.requests, 120);
      assert.equal(p.completed + p.rejected + p.shed, p.requests);
      assert.ok(p.goodput_rps <= p.throughput_rps);
      assert.equal('sim_wall_ms' in p, false);
    }
  });

  it('--cache on: the TTFT of the requests a worker answered leaves out the cache hits (answered at once)', () => {
    const out = join(dir, 'cache-workers.json');
    const r = bench('--workload', 'rag', '--size', '600', '--workers', '2', '--seed', '1', '--policy', 'round-robin', '--cache', 'on', '--repeat-fraction', '0.9', '--json', out, '--quiet');
    assert.equal(r.code, 0, r.stderr);
    const p = JSON.parse(readFileSync(out, 'utf8')).policies[0];
    // Most requests are hits with a TTFT of 0 (no --overhead-ms); a worker's first token takes a step.
    assert.equal(p.ttft_ms.p50, 0);
    assert.ok(p.cache.misses > 0 && p.cache.ttft_ms_workers.p50 > 0, JSON.stringify(p.cache.ttft_ms_workers));
  });

  it('--cache on answers repeats from the response cache: cache_hit_rate in the JSON, a line per policy, same seed same bytes', () => {
    const a = join(dir, 'cache-a.json');
    const b = join(dir, 'cache-b.json');
    const args = ['--workload', 'shared-prefix', '--size', '300', '--rate', '20', '--workers', '2', '--policy', 'round-robin', '--repeat-fraction', '0.4', '--omit-wall-time'];
    const r = bench(...args, '--cache', 'on', '--json', a);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /cache hit/);
    assert.match(r.stdout, /round-robin: the response cache answered \d+\.\d% of requests .*GPU work saved ≈ [\d.]+ GPU-s .*TTFT p50\/p90\/p99 ms without \d+\/\d+\/\d+, with \d+\/\d+\/\d+/);
    assert.equal(bench(...args, '--cache', 'on', '--json', b, '--quiet').code, 0);
    assert.equal(readFileSync(a, 'utf8'), readFileSync(b, 'utf8'));
    const j = JSON.parse(readFileSync(a, 'utf8'));
    assert.equal(j.source_params.repeat_fraction, 0.4);
    assert.deepEqual(j.cache, { ttl_ms: 300000, max_bytes: 268435456 });
    const p = j.policies[0];
    assert.ok(p.cache_hit_rate > 0.3 && p.cache_hit_rate <= 0.4, String(p.cache_hit_rate));
    assert.equal(p.cache.hits + p.cache.coalesced + p.cache.misses, p.requests);
    assert.equal(p.completed + p.rejected + p.shed, p.requests);
    assert.ok(p.cache.gpu_seconds_saved > 0);
    assert.ok(p.ttft_ms.p50 <= p.cache.ttft_ms_without_cache.p50);
    const off = join(dir, 'cache-off.json');
    assert.equal(bench(...args, '--json', off, '--quiet').code, 0);
    const o = JSON.parse(readFileSync(off, 'utf8'));
    assert.equal(o.cache, null);
    assert.equal(o.policies[0].cache_hit_rate, 0);
    assert.equal(o.policies[0].cache, null);
  });

  it('--cache-isolation tenant reports what isolating tenants’ cached prompts costs, against the same policy shared', () => {
    const json = join(dir, 'iso.json');
    const args = ['--workload', 'shared-prefix', '--size', '400', '--rate', '20', '--workers', '2', '--policy', 'kvgate'];
    const r = bench(...args, '--cache-isolation', 'tenant', '--tenants', '8', '--json', json);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /kvgate: cacheIsolation tenant \(8 tenants\): prefix-cache hit \d+\.\d% shared → \d+\.\d% isolated; TTFT p50\/p99 ms/);
    const p = JSON.parse(readFileSync(json, 'utf8')).policies[0];
    assert.equal(p.isolation.tenants, 8);
    // Eight customers sending the same application prompts no longer share their prefixes.
    assert.ok(p.prefix_hit_rate < p.isolation.prefix_hit_rate_shared - 0.1, `${p.prefix_hit_rate} vs ${p.isolation.prefix_hit_rate_shared}`);
    assert.ok(p.prefix_hit_rate > 0, 'each tenant still hits its own prefixes');
    assert.equal(bench(...args, '--tenants', '8').code, 2, '--tenants needs --cache-isolation tenant');
  });

  it('writes a self-contained HTML report', () => {
    const out = join(dir, 'r.html');
    const r = bench(...SMALL, '--policy', 'round-robin,random', '--report', out, '--quiet');
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, '');
    const html = readFileSync(out, 'utf8');
    assert.match(html, /^<!DOCTYPE html>/);
    assert.ok((html.match(/<svg /g) ?? []).length >= 8);
    for (const t of ['TTFT CDF', 'E2E latency CDF', 'Throughput', 'Prefix-cache hit rate', 'KV-cache usage per worker']) assert.ok(html.includes(t), t);
    assert.doesNotMatch(html, /<script|<link|src=|href=/i);
    // The only URL is the SVG namespace.
    assert.deepEqual([...new Set(html.match(/https?:\/\/[^"' ]+/g))], ['http://www.w3.org/2000/svg']);
  });

  it('refuses --capacity at once when no worker of the fleet could meet the TPOT SLO even idle', () => {
    const slow = bench('--workload', 'bursty', '--gpu', 'l4', '--capacity', '--policy', 'kvgate');
    assert.equal(slow.code, 2);
    assert.match(slow.stderr, /no rate meets a 50 ms TPOT SLO here: an idle l4 worker \(tp 1\) takes \d+\.\d ms per decode step for llama-3\.1-8b\. Raise --slo-tpot/);
    // A fleet with one kind fast enough is searched as usual (here refused only for its size).
    const mixed = bench('--workload', 'bursty', '--gpu', 'l4:1,h100:1', '--capacity', '--size', '0', '--policy', 'kvgate');
    assert.doesNotMatch(mixed.stderr, /no rate meets/);
    const unknown = bench('--workload', 'bursty', '--model', 'nope', '--capacity', '--policy', 'kvgate');
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /unknown model "nope"/);
  });

  it('replays a Mooncake trace, reporting bad rows by line or skipping them with --skip-bad', () => {
    const rows = [
      { timestamp: 0, input_length: 600, output_length: 5, hash_ids: [1, 2] },
      { timestamp: 10, input_length: 600, output_length: 5, hash_ids: [1, 3] },
      { timestamp: 20, input_length: -4, output_length: 5, hash_ids: [1] },
      { timestamp: 30, input_length: 700, output_length: 3, hash_ids: [1, 2] },
    ];
    const trace = join(dir, 'm.jsonl');
    writeFileSync(trace, rows.map((x) => JSON.stringify(x)).join('\n') + '\n');
    const bad = bench('--trace', trace, '--policy', 'round-robin');
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /m\.jsonl:3: "input_length" must be an integer ≥ 1/);
    assert.match(bad.stderr, /--skip-bad/);
    const json = join(dir, 'm.json');
    const ok = bench('--trace', trace, '--skip-bad', '--policy', 'round-robin', '--workers', '1', '--json', json, '--quiet');
    assert.equal(ok.code, 0, ok.stderr);
    const j = JSON.parse(readFileSync(json, 'utf8'));
    assert.equal(j.trace, 'mooncake:m.jsonl');
    assert.equal(j.skipped_rows, 1);
    assert.equal(j.policies[0].completed, 3);
    // One worker: the later rows reuse block 1 (512 tokens) of the first.
    assert.ok(j.policies[0].prefix_hit_rate > 0.4);
  });

  it('replays a BurstGPT trace, told from an Azure one by its header, failed rows left out', () => {
    const trace = join(dir, 'burst.csv');
    writeFileSync(trace, 'Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n0,ChatGPT,900,4,904,Conversation log\n0.5,ChatGPT,300,0,300,Conversation log\n1.25,GPT-4,900,6,906,API log\n');
    const json = join(dir, 'burst.json');
    const ok = bench('--trace', trace, '--azure-shared-prefix', '512', '--azure-prefix-groups', '1', '--policy', 'round-robin', '--workers', '1', '--json', json, '--quiet');
    assert.equal(ok.code, 0, ok.stderr);
    const j = JSON.parse(readFileSync(json, 'utf8'));
    assert.equal(j.trace, 'burstgpt:burst.csv');
    assert.equal(j.skipped_rows, 1);
    assert.equal(j.policies[0].completed, 2);
    assert.ok(j.policies[0].prefix_hit_rate > 0.2, 'the synthetic shared prefix is reused');
    const other = join(dir, 'one.jsonl');
    writeFileSync(other, JSON.stringify({ timestamp: 0, input_length: 600, output_length: 5, hash_ids: [1, 2] }) + '\n');
    const mooncake = bench('--trace', other, '--azure-shared-prefix', '5', '--policy', 'round-robin');
    assert.match(mooncake.stderr, /--azure-shared-prefix applies to --format azure and burstgpt only/);
  });

  it('--capacity finds each policy’s capacity at SLO: JSON, table and report', () => {
    const json = join(dir, 'cap.json');
    const html = join(dir, 'cap.html');
    const args = ['--workload', 'shared-prefix', '--size', '200', '--rate', '10', '--workers', '1', '--policy', 'round-robin,least-load', '--capacity', '--max-probes', '6', '--capacity-seconds', '30', '--omit-wall-time'];
    const r = bench(...args, '--json', json, '--report', html);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /cap ×\s+cap req\/s\s+÷RR\s+÷peer/);
    assert.match(r.stdout, /ideal hit/);
    assert.match(r.stdout, /capacity: highest rate scale with ≥ 90% of requests within the SLO \(TTFT ≤ 1000 ms \+ 100 ms\/1k prompt tokens, TPOT ≤ 50 ms\)/);
    assert.match(r.stderr, /^round-robin: rate ×1 \([\d.]+ req\/s offered\): attainment [\d.]+%, worst prompt band [\d.]+%$/m);
    assert.match(r.stdout, /attainment by prompt length at capacity, tokens \(completed requests\):\n {2}round-robin {2}<2k [\d.]+% \(\d+\) · 2k-8k [-\d.]+%? \(\d+\) · >=8k [-\d.]+%? \(\d+\)\n/);
    const j = JSON.parse(readFileSync(json, 'utf8'));
    assert.equal(j.slo_ttft_ms, 1000);
    assert.equal(j.slo_ttft_per_1k_ms, 100);
    assert.equal(j.slo_tpot_ms, 50);
    assert.deepEqual(Object.keys(j.capacity).sort(), ['best_peer', 'max_probes', 'min_band_attainment', 'min_seconds', 'precision', 'target_attainment', 'vs_best_peer', 'vs_round_robin']);
    assert.equal(j.capacity.min_band_attainment, null);
    assert.equal(j.capacity.min_seconds, 30);
    assert.ok(j.work_bound.requests_per_s > 0 && j.work_bound.busy_gpu_seconds > 0);
    assert.match(r.stdout, /work bound of the plain run's requests: [\d.]+ req\/s/);
    assert.match(r.stdout, /work bound of the requests each capacity replayed \(no policy sustains more on them\): round-robin [\d.]+ req\/s \(capacity [\d.]+, [\d.]+ of it/);
    assert.match(r.stdout, /^offered rate: [\d.]+ req\/s of arrivals/m);
    assert.equal(j.capacity.max_probes, 6);
    assert.equal(j.capacity.vs_round_robin['round-robin'], 1);
    for (const p of j.policies) {
      for (const k of ['rate_scale', 'requests_per_s', 'attainment', 'worst_band_attainment', 'attainment_by_prompt']) assert.ok(k in p.capacity, k);
      assert.deepEqual(p.attainment_by_prompt.map((b: { band: string }) => b.band), ['<2k', '2k-8k', '>=8k']);
      assert.ok(p.capacity.probes.length >= 1 && p.capacity.probes.length <= 6);
      for (const q of p.capacity.probes) {
        // A probe stopped once its misses decided it had arrivals up to then; the others all 30 s.
        assert.ok(q.requests >= 200 && q.span_s < 30 && (q.stopped_early === true || q.span_s > 25), `probe ${JSON.stringify(q)}`);
        if (q.stopped_early) assert.ok(q.attainment < 0.9, 'a stopped probe missed');
      }
      assert.equal(typeof p.attainment, 'number');
    }
    const page = readFileSync(html, 'utf8');
    assert.ok(page.includes('SLO attainment vs offered rate'));
    assert.ok(page.includes('Capacity at SLO'));
    const dots = (page.match(/<circle /g) ?? []).length;
    assert.equal(dots, j.policies.reduce((a: number, p: { capacity: { probes: Array<{ stopped_early?: true }> } }) => a + p.capacity.probes.filter((q) => !q.stopped_early).length, 0));
    assert.doesNotMatch(page, /NaN|undefined|Infinity/);
    // Same seed, same capacity JSON, byte for byte.
    const again = join(dir, 'cap2.json');
    assert.equal(bench(...args, '--json', again, '--quiet').code, 0);
    assert.equal(readFileSync(again, 'utf8'), readFileSync(json, 'utf8'));
  });

  it('--jobs runs the policies on worker threads with the figures of a serial run, capacity probes included', () => {
    const serial = join(dir, 'jobs-1.json');
    const parallel = join(dir, 'jobs-3.json');
    const args = ['--workload', 'shared-prefix', '--size', '150', '--rate', '10', '--workers', '2', '--policy', 'round-robin,kvgate,least-load', '--capacity', '--max-probes', '3', '--capacity-seconds', '20', '--omit-wall-time'];
    const one = bench(...args, '--jobs', '1', '--json', serial);
    assert.equal(one.code, 0, one.stderr);
    const three = bench(...args, '--jobs', '3', '--json', parallel, '--progress');
    assert.equal(three.code, 0, three.stderr);
    assert.equal(readFileSync(parallel, 'utf8'), readFileSync(serial, 'utf8'));
    // Every probe's line once, whichever thread ran it; the status line counts the policies done.
    for (const name of ['round-robin', 'kvgate', 'least-load']) assert.match(three.stderr, new RegExp(`${name}: rate ×1 \\(`));
    assert.match(three.stderr, /3\/3 policies done/);
    assert.equal(bench(...args, '--jobs', '0').code, 2);
  });

  it('closed-loop workloads give byte-identical JSON for the same seed', () => {
    const a = join(dir, 'ag-a.json');
    const b = join(dir, 'ag-b.json');
    const args = ['--workload', 'agentic', '--size', '150', '--rate', '20', '--workers', '2', '--policy', 'round-robin,kvgate', '--omit-wall-time', '--slo-ttft', '1000', '--quiet'];
    assert.equal(bench(...args, '--json', a).code, 0);
    assert.equal(bench(...args, '--json', b).code, 0);
    assert.equal(readFileSync(a, 'utf8'), readFileSync(b, 'utf8'));
    assert.equal(JSON.parse(readFileSync(a, 'utf8')).policies[0].requests, 150);
  });

  it('--admission llm-d: llm-d’s flow control queues by band and its admitter sheds sheddable requests only', () => {
    const run = (admission: string) => {
      const json = join(dir, `peer-${admission}.json`);
      const r = bench('--workload', 'rag', '--size', '300', '--rate', '200', '--workers', '2', '--policy', 'kvgate', '--priority-mix', 'critical=0.2,standard=0.3,sheddable=0.5', '--admission', admission, '--quiet', '--omit-wall-time', '--json', json);
      assert.equal(r.code, 0, r.stderr);
      return JSON.parse(readFileSync(json, 'utf8'));
    };
    const llmd = run('llm-d');
    assert.equal(llmd.peer_admission, 'llm-d');
    assert.equal(llmd.admission, null);
    const p = llmd.policies[0];
    // Scraped every 50 ms, as llm-d's EPP refreshes (its detector counts a 200 ms old scrape as saturated).
    assert.equal(p.scrape_interval_ms, 50);
    const bp = p.by_priority;
    assert.equal(bp.critical.shed + bp.standard.shed, 0);
    assert.ok(bp.sheddable.shed > 0 && p.refusals.llm_d_admitter_shed === bp.sheddable.shed, JSON.stringify(p.refusals));
    // Saturated by the burst, the critical band waited in the router's queue.
    assert.ok(bp.critical.queued > 0);
    // The sample admitter configuration: the burst is not held in bands, sheddable requests are still shed.
    const sample = run('llm-d-admitter');
    assert.equal(sample.peer_admission, 'llm-d-admitter');
    const sp = sample.policies[0];
    assert.equal(sp.scrape_interval_ms, 50);
    assert.ok(sp.by_priority.critical.queued < bp.critical.queued, `${sp.by_priority.critical.queued} < ${bp.critical.queued}`);
    assert.ok(sp.by_priority.sheddable.shed > 0 && sp.by_priority.critical.shed === 0);
    const off = run('off');
    assert.equal(off.peer_admission, null);
    assert.equal(off.policies[0].shed, 0);
  });

  it('--set changes one policy’s knob and leaves the others at their defaults', () => {
    const run = (...extra: string[]) => {
      const json = join(dir, `set-${extra.length}.json`);
      const r = bench(...SMALL, '--policy', 'llm-d-legacy,dynamo', '--omit-wall-time', '--quiet', '--json', json, ...extra);
      assert.equal(r.code, 0, r.stderr);
      const policies = JSON.parse(readFileSync(json, 'utf8')).policies as Array<{ workers: Array<{ routed: number }> }>;
      return policies.map((p) => p.workers.map((w) => w.routed));
    };
    const base = run();
    // All prefix weight, no load terms: llm-d-legacy piles the shared prefixes onto fewer workers.
    const set = run('--set', 'llm-d-legacy.queueWeight=0', '--set', 'llm-d-legacy.kvCacheWeight=0');
    assert.notDeepEqual(set[0], base[0]);
    assert.deepEqual(set[1], base[1]);
  });

  it('--declared-max-tokens: routers see the cap, answers keep their length', () => {
    const run = (...extra: string[]) => {
      const json = join(dir, `d${extra.length}.json`);
      const r = bench(...SMALL, '--policy', 'round-robin,kvgate', '--json', json, '--quiet', '--omit-wall-time', ...extra);
      assert.equal(r.code, 0, r.stderr);
      return JSON.parse(readFileSync(json, 'utf8'));
    };
    const exact = run();
    const declared = run('--declared-max-tokens', '4096');
    assert.equal(exact.declared_max_tokens, null);
    assert.equal(declared.declared_max_tokens, 4096);
    const [rrExact, kvExact] = exact.policies;
    const [rrDeclared, kvDeclared] = declared.policies;
    // Round-robin never reads max_tokens: the same run to the last figure.
    assert.deepEqual(rrDeclared, rrExact);
    // Every answer is as long either way; kvgate, which weighs the answer's length, routes otherwise.
    assert.equal(kvDeclared.completed, kvExact.completed);
    assert.notDeepEqual(kvDeclared.ttft_ms, kvExact.ttft_ms);
  });

  it('--limit and --rate-scale shape the replay', () => {
    const json = join(dir, 'l.json');
    const r = bench(...SMALL, '--policy', 'round-robin', '--limit', '40', '--rate-scale', '2', '--json', json, '--quiet');
    assert.equal(r.code, 0, r.stderr);
    const j = JSON.parse(readFileSync(json, 'utf8'));
    assert.equal(j.policies[0].requests, 40);
    assert.equal(j.limit, 40);
    assert.equal(j.rate_scale, 2);
  });

  // The public traces live in shared/ beside the checkout (dist/test/bench → checkout is three up).
  const realTraces = process.env.KVGATE_TRACES ?? resolve(dirname(fileURLToPath(import.meta.url)), '../../../../shared/traces');
  // A skip says why (node --test prints the reason beside "# SKIP").
  const noTraces = existsSync(realTraces)
    ? false
    : `no trace data at ${realTraces} (set KVGATE_TRACES to a folder holding mooncake_synthetic_trace.jsonl and AzureLLMInferenceTrace_conv.csv)`;
  it('smoke-runs the real traces when present', { skip: noTraces }, () => {
    for (const [file, extra] of [
      ['mooncake_synthetic_trace.jsonl', []],
      ['AzureLLMInferenceTrace_conv.csv', ['--azure-shared-prefix', '0.3']],
    ] as const) {
      const json = join(dir, `${file}.json`);
      const r = bench('--trace', join(realTraces, file), ...extra, '--limit', '60', '--workers', '2', '--policy', 'least-load', '--json', json, '--quiet');
      assert.equal(r.code, 0, r.stderr);
      const p = JSON.parse(readFileSync(json, 'utf8')).policies[0];
      assert.equal(p.requests, 60);
      assert.equal(p.completed + p.rejected + p.shed, 60);
      assert.ok(p.completed > 0);
    }
  });
});
