/**
 * `npm run bench -- spec`: the speculative cascade under load, in the discrete-event fleet
 * simulation (`kvgate bench --spec-mode`): the gateway's own round logic and controller on the
 * virtual clock, the draft and target engines modelled by the roofline time model, every call
 * queued and batched with the other traffic on its engine.
 *
 * Fleet: target pool of --workers llama-3.1-70b TP 4 on H100 ($3.50/GPU-hour), draft pool of
 * --draft-workers llama-3.1-8b int4 on A10G ($1.00/GPU-hour). Load: Poisson arrivals at --rate
 * req/s of temperature-0 completions, prompts of 150–300 tokens (distinct), 128 output tokens.
 * For α = 0.3, 0.5, 0.7, 0.9 (fixed over the run) and for a shift 0.8 → 0.3 a third of the way
 * through, each mode — target-only, fixed k = 4, adaptive — runs on the same requests:
 * cost per million output tokens (both pools' busy GPU time at their prices), target GPU-ms per
 * output token, TPOT p50/p99, E2E p99, and the controller's figures. Then the issue's targets,
 * met or missed, per seed:
 *   - at α = 0.7 adaptive costs ≥ 40% less per output token than target-only;
 *   - at α = 0.3 adaptive costs at most 5% more than target-only;
 *   - after the shift the adaptive controller settles within 30 simulated seconds (src/bench/spec.ts
 *     defines "settled": 1 s windows of its decisions, probes left out, each window's mean k within
 *     0.5 of the post-shift steady mean k from then on).
 */
import { benchArgs } from './args.js';
import { runBench } from '../src/bench/run.js';
import type { BenchSpecOptions, SpecAcceptance, SpecMode } from '../src/bench/spec.js';
import { specLoad } from './spec-load.js';

const HELP = `npm run bench -- spec [options]

The speculative cascade against target-only generation under load, in the fleet simulation.

Options:
  --rate R           arrivals per second (default 3)
  --duration S       seconds of arrivals per run (default 120; the shift runs 1.5× as long)
  --workers N        target workers, llama-3.1-70b TP 4 on H100 (default 2)
  --draft-workers N  draft workers, llama-3.1-8b int4 on A10G (default 1)
  --seeds LIST       seeds (default 1,2)
  --target-engine vllm|sglang  the target pool's engine (default vllm): what a verification costs
  --verify-cache on|off  verification reads the target's prefix cache (default: on for sglang, off
                     for vllm, whose OpenAI route skips it for prompt logprobs)
  --tpot-budget MS   every request's TPOT budget (default none: as fast as target-only)
  --k-sweep LIST     instead of the scenarios: at one α (--alpha, default 0.7) target-only, fixed k
                     for every k in LIST (e.g. 1,2,4,6,8,10) and adaptive, and the cheapest fixed k
                     (what no choice of one k per round can beat at this load)
  --alpha A          α of --k-sweep
  --markdown         print the tables as Markdown
  -h, --help         this text
`;

const MODES: Array<[string, SpecMode]> = [
  ['target-only', { kind: 'target-only' }],
  ['fixed k=4', { kind: 'fixed', k: 4 }],
  ['adaptive', { kind: 'adaptive' }],
];

interface Row {
  scenario: string;
  mode: string;
  cost: number;
  targetMsPerTok: number;
  alpha: number | null;
  fromDraft: number;
  meanK: number;
  plain: number;
  cascade: number;
  tpot50: number;
  tpot99: number;
  e2e99: number;
  settled: number | null;
  steady: string;
}

async function main(): Promise<void> {
  const { values: v } = benchArgs('spec', {
    options: {
      rate: { type: 'string' },
      duration: { type: 'string' },
      workers: { type: 'string' },
      'draft-workers': { type: 'string' },
      seeds: { type: 'string' },
      'verify-cache': { type: 'string' },
      'target-engine': { type: 'string' },
      'tpot-budget': { type: 'string' },
      'k-sweep': { type: 'string' },
      alpha: { type: 'string' },
      markdown: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (v.help) {
    process.stdout.write(HELP);
    return;
  }
  const rate = Number(v.rate ?? 3);
  const duration = Number(v.duration ?? 120);
  const workers = Number(v.workers ?? 2);
  const draftWorkers = Number(v['draft-workers'] ?? 1);
  const seeds = (v.seeds ?? '1,2').split(',').map(Number);
  const targetEngine = v['target-engine'] ?? 'vllm';
  if (targetEngine !== 'vllm' && targetEngine !== 'sglang') throw new UsageError(`--target-engine must be vllm or sglang, got ${targetEngine}`);
  const verifyCache = v['verify-cache'] === undefined ? targetEngine === 'sglang' : v['verify-cache'] === 'on';
  const tpotBudget = v['tpot-budget'] === undefined ? undefined : Number(v['tpot-budget']);
  if (tpotBudget !== undefined && !(tpotBudget > 0)) throw new UsageError(`--tpot-budget must be a positive number of ms, got ${v['tpot-budget']}`);
  const md = v.markdown === true;
  const shiftAt = duration / 2;
  // The last scenario: two tenants (prompt classes) in equal shares, one whose prompts suit the
  // draft (α 0.9) and one whose prompts do not (α 0.3): the controller keeps α and k per class.
  const sweep = v['k-sweep']?.split(',').map(Number);
  if (sweep && !sweep.every((k) => Number.isInteger(k) && k >= 1 && k <= 16)) throw new UsageError('--k-sweep takes integers from 1 to 16, e.g. 1,2,4,8');
  const sweepAlpha = Number(v.alpha ?? 0.7);
  if (!(sweepAlpha >= 0 && sweepAlpha <= 1)) throw new UsageError(`--alpha must be from 0 to 1, got ${v.alpha}`);
  const modes: Array<[string, SpecMode]> = sweep
    ? [
        ['target-only', { kind: 'target-only' }],
        ...sweep.map((k): [string, SpecMode] => [`fixed k=${k}`, { kind: 'fixed', k }]),
        ['adaptive', { kind: 'adaptive' }],
      ]
    : MODES;
  const all: Array<[string, SpecAcceptance, number, Record<string, number>?]> = [
    ['α 0.3', 0.3, duration],
    ['α 0.5', 0.5, duration],
    ['α 0.7', 0.7, duration],
    ['α 0.9', 0.9, duration],
    [`α 0.8→0.3 @${shiftAt}s`, { before: 0.8, after: 0.3, atMs: shiftAt * 1000 }, duration * 1.5],
    ['t0 α 0.9, t1 α 0.3', 0.3, duration, { t0: 0.9 }],
  ];
  const scenarios: typeof all = sweep ? [[`α ${sweepAlpha}`, sweepAlpha, duration]] : all;
  const perTenant: string[] = [];
  const verdicts: string[] = [];
  for (const seed of seeds) {
    process.stdout.write(
      `\nseed ${seed}: ${workers}× llama-3.1-70b TP4 H100 target + ${draftWorkers}× llama-3.1-8b int4 A10G draft; Poisson ${rate} req/s, prompts 150–300, 128 output tokens, temperature 0; ` +
        `target ${targetEngine}, verification ${verifyCache ? 'reads the prefix cache' : 'recomputes the context'}${tpotBudget === undefined ? '' : `, TPOT budget ${tpotBudget} ms`}\n`,
    );
    const head = ['scenario', 'mode', '$/M out', 'vs target-only', 'target GPU-ms/tok', 'α̂', 'from draft', 'mean k', 'cascade/plain', 'TPOT p50', 'TPOT p99', 'E2E p99', 'settled'];
    const lines: string[][] = [];
    const rows: Row[] = [];
    for (const [scenario, acceptance, dur, byTenant] of scenarios) {
      let base: Row | null = null;
      for (const [modeName, mode] of modes) {
        const spec: BenchSpecOptions = { mode, acceptance, ...(byTenant ? { acceptanceByTenant: byTenant } : {}), draftModel: 'llama-3.1-8b', draftQuant: 'int4', draftGpu: 'a10g', draftWorkers, targetEngine, verifyPrefixCache: verifyCache, ...(tpotBudget === undefined ? {} : { tpotBudgetMs: tpotBudget }) };
        const out = await runBench({ source: specLoad({ rate, durationS: dur, seed, tenants: byTenant !== undefined }), policies: ['least-load'], workers, gpu: 'h100', model: 'llama-3.1-70b', tp: 4, seed, speculative: spec, omitWallTime: true });
        const p = out.results.policies[0]!;
        const s = p.speculative!;
        const row: Row = {
          scenario,
          mode: modeName,
          cost: s.cost_per_million_output_tokens ?? NaN,
          targetMsPerTok: s.target_gpu_ms_per_output_token ?? NaN,
          alpha: s.spec_acceptance_rate,
          fromDraft: s.tokens_from_draft_fraction,
          meanK: s.mean_k,
          plain: s.plain_requests,
          cascade: s.cascade_requests,
          tpot50: p.tpot_ms.p50 ?? NaN,
          tpot99: p.tpot_ms.p99 ?? NaN,
          e2e99: p.e2e_ms.p99 ?? NaN,
          settled: s.settle?.settled_after_s ?? null,
          steady: s.settle ? `mean k ${s.settle.mean_k_before ?? '–'}→${s.settle.mean_k_after ?? '–'}` : '',
        };
        base ??= row;
        rows.push(row);
        if (s.by_tenant && mode.kind !== 'target-only') {
          const parts = Object.entries(s.by_tenant).map(
            ([t, c]) => `${t} (α ${c.acceptance}, α̂ ${c.spec_acceptance_rate === null ? '–' : c.spec_acceptance_rate.toFixed(2)}): mean k ${c.mean_k.toFixed(2)}, ${c.cascade_requests} cascade / ${c.plain_requests} target alone`,
          );
          perTenant.push(`seed ${seed}, ${modeName}: ${parts.join('; ')}`);
        }
        const delta = ((row.cost / base.cost - 1) * 100).toFixed(1);
        lines.push([
          scenario,
          modeName,
          row.cost.toFixed(2),
          row === base ? '–' : `${Number(delta) > 0 ? '+' : ''}${delta}%`,
          row.targetMsPerTok.toFixed(2),
          row.alpha === null ? '–' : row.alpha.toFixed(2),
          `${(row.fromDraft * 100).toFixed(0)}%`,
          row.meanK.toFixed(2),
          mode.kind === 'target-only' ? '–' : `${row.cascade}/${row.plain}`,
          row.tpot50.toFixed(1),
          row.tpot99.toFixed(1),
          row.e2e99.toFixed(0),
          s.settle && mode.kind !== 'target-only' ? `${row.settled === null ? 'never' : `${row.settled} s`} (${row.steady})` : '',
        ]);
      }
    }
    process.stdout.write(table(head, lines, md));
    if (sweep) {
      const fixed = rows.filter((r) => r.mode.startsWith('fixed'));
      const best = fixed.reduce((a, b) => (b.cost < a.cost ? b : a));
      const pct = (r: Row) => `${r.cost >= rows[0]!.cost ? '+' : '−'}${Math.abs((r.cost / rows[0]!.cost - 1) * 100).toFixed(1)}%`;
      verdicts.push(`seed ${seed}, α ${sweepAlpha}, ${rate} req/s: cheapest fixed k: ${best.mode} at ${pct(best)} against target-only; adaptive ${pct(rows[rows.length - 1]!)}`);
      continue;
    }
    const find = (sc: string, m: string) => rows.find((r) => r.scenario.startsWith(sc) && r.mode === m)!;
    const t07 = find('α 0.7', 'target-only');
    const a07 = find('α 0.7', 'adaptive');
    const cut = (1 - a07.cost / t07.cost) * 100;
    const t03 = find('α 0.3', 'target-only');
    const a03 = find('α 0.3', 'adaptive');
    const worse = (a03.cost / t03.cost - 1) * 100;
    const sh = find('α 0.8→0.3', 'adaptive');
    verdicts.push(
      `seed ${seed}: α 0.7 adaptive vs target-only cost ${cut >= 0 ? '−' : '+'}${Math.abs(cut).toFixed(1)}% (target ≥ 40% less): ${cut >= 40 ? 'MET' : 'MISSED'}; ` +
        `α 0.3 adaptive ${worse >= 0 ? '+' : '−'}${Math.abs(worse).toFixed(1)}% (target ≤ +5%): ${worse <= 5 ? 'MET' : 'MISSED'}; ` +
        `shift: settled ${sh.settled === null ? 'never' : `${sh.settled} s`} after it (${sh.steady}; target ≤ 30 s): ${sh.settled !== null && sh.settled <= 30 ? 'MET' : 'MISSED'}`,
    );
  }
  if (!sweep) process.stdout.write(`\nPer tenant (t0 α 0.9, t1 α 0.3):\n${perTenant.join('\n')}\n`);
  process.stdout.write(`\n${sweep ? 'Sweep' : 'Targets'}:\n${verdicts.join('\n')}\n`);
}

function table(head: string[], rows: string[][], md: boolean): string {
  if (md) return [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`, ...rows.map((r) => `| ${r.join(' | ')} |`)].join('\n') + '\n';
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const fmt = (r: string[]) => r.map((c, i) => (i < 2 ? c.padEnd(w[i]!) : c.padStart(w[i]!))).join('  ');
  return [fmt(head), w.map((x) => '-'.repeat(x)).join('  '), ...rows.map(fmt)].join('\n') + '\n';
}

/** A bad option: its message alone, exit 2 (anything else keeps its stack, exit 1). */
class UsageError extends Error {}

main().catch((e) => {
  if (e instanceof UsageError) {
    process.stderr.write(`bench spec: ${e.message}\n`);
    process.exit(2);
  }
  process.stderr.write(`${(e as Error).stack ?? e}\n`);
  process.exit(1);
});
