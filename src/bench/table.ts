/**
 * The bench summary as a plain-text table, one row per policy.
 *
 * Columns beyond the fixed ones appear when they mean something: `attain` (fraction of requests
 * meeting the SLO) when an SLO is set, `ideal hit` (the run's ideal_hit_rate, the same on every
 * row, beside each policy's own hit rate) when given, and the capacity columns with --capacity:
 * `cap ×` (rate scale), `cap req/s`, `÷RR` and `÷peer` (capacity over round-robin's and over the
 * best peer's), and `cache hit` (requests the response cache answered) with --cache on.
 *
 * cacheLines: one line per policy on what the response cache did (with --cache on).
 * gpuLines: on a mixed fleet, one line per policy on the share of requests each GPU kind got.
 */
import type { CapacityRatios, CapacityResult } from './capacity.js';
import type { Dist, PolicySummary } from './metrics.js';
import type { CacheRunSummary, IsolationSummary, WorkerSummary } from './run.js';
import type { SpecSummary } from './spec.js';

const num = (x: number | null, digits = 0): string => (x === null ? '-' : x.toFixed(digits));

export interface TableOptions {
  /** The run's ideal_hit_rate. */
  idealHitRate?: number;
  /** Capacity ratios of the run (with --capacity). */
  capacity?: CapacityRatios | null;
}

type Row = PolicySummary & { workers: readonly WorkerSummary[]; capacity?: CapacityResult | null; cache?: CacheRunSummary | null; isolation?: IsolationSummary | null; speculative?: SpecSummary | null };

export function summaryTable(rows: readonly Row[], o: TableOptions = {}): string {
  const withAttainment = rows.some((r) => r.attainment !== null && r.attainment !== undefined);
  const withIdeal = o.idealHitRate !== undefined;
  const withCache = rows.some((r) => r.cache);
  const cap = o.capacity ?? null;
  const header = [
    'policy',
    'done',
    'rej',
    'shed',
    'preempt',
    'TTFT p50',
    'TTFT p99',
    'TPOT p50',
    'TPOT p99',
    'ITL p99',
    'E2E p50',
    'E2E p99',
    'req/s',
    'out tok/s',
    'goodput',
    ...(withAttainment ? ['attain'] : []),
    'hit rate',
    ...(withIdeal ? ['ideal hit'] : []),
    ...(withCache ? ['cache hit'] : []),
    ...(cap ? ['cap ×', 'cap req/s', '÷RR', '÷peer'] : []),
    '$/M out',
    'wall s',
  ];
  const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
  const body = rows.map((r) => [
    r.name,
    String(r.completed),
    String(r.rejected),
    String(r.shed),
    String(r.preemptions),
    num(r.ttft_ms.p50),
    num(r.ttft_ms.p99),
    num(r.tpot_ms.p50, 1),
    num(r.tpot_ms.p99, 1),
    num(r.itl_ms.p99, 1),
    num(r.e2e_ms.p50),
    num(r.e2e_ms.p99),
    r.throughput_rps.toFixed(2),
    r.output_tokens_per_s.toFixed(0),
    r.goodput_rps.toFixed(2),
    ...(withAttainment ? [r.attainment === null || r.attainment === undefined ? '-' : pct(r.attainment)] : []),
    pct(r.prefix_hit_rate),
    ...(withIdeal ? [pct(o.idealHitRate!)] : []),
    ...(withCache ? [pct(r.cache_hit_rate)] : []),
    ...(cap
      ? [
          r.capacity?.rate_scale == null ? '-' : `${r.capacity.rate_scale.toFixed(3)}${r.capacity.converged ? '' : '?'}`,
          num(r.capacity?.requests_per_s ?? null, 1),
          num(cap.vs_round_robin[r.name] ?? null, 2),
          num(cap.vs_best_peer[r.name] ?? null, 2),
        ]
      : []),
    num(r.cost_per_million_output_tokens, 3),
    r.sim_wall_ms === undefined ? '-' : (r.sim_wall_ms / 1000).toFixed(1),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((row) => row[i]!.length)));
  const fmt = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [fmt(header), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(fmt)].join('\n') + '\n';
}

const ms = (d: Dist, k: 'p50' | 'p90' | 'p99'): string => (d[k] === null ? '-' : d[k].toFixed(0));

/** What the response cache did, per policy: hit rate, GPU time saved, TTFT with and without it. */
export function cacheLines(rows: readonly Row[]): string {
  const out: string[] = [];
  for (const r of rows) {
    const c = r.cache;
    if (!c) continue;
    const saved = c.busy_gpu_seconds_without_cache > 0 ? (c.gpu_seconds_saved / c.busy_gpu_seconds_without_cache) * 100 : 0;
    out.push(
      `${r.name}: the response cache answered ${(r.cache_hit_rate * 100).toFixed(1)}% of requests (${c.hits} hits, ${c.coalesced} joined an identical request in flight); ` +
        `GPU work saved ≈ ${c.gpu_seconds_saved.toFixed(1)} GPU-s (${saved.toFixed(1)}% of ${c.busy_gpu_seconds_without_cache.toFixed(1)} busy GPU-s without it, by tokens; ` +
        `${c.output_tokens_saved} output tokens not generated; measured busy GPU-s ${c.busy_gpu_seconds_delta >= 0 ? '+' : ''}${c.busy_gpu_seconds_delta.toFixed(1)}); ` +
        `TTFT p50/p90/p99 ms without ${ms(c.ttft_ms_without_cache, 'p50')}/${ms(c.ttft_ms_without_cache, 'p90')}/${ms(c.ttft_ms_without_cache, 'p99')}, ` +
        `with ${ms(r.ttft_ms, 'p50')}/${ms(r.ttft_ms, 'p90')}/${ms(r.ttft_ms, 'p99')} (workers' answers alone ${ms(c.ttft_ms_workers, 'p50')}/${ms(c.ttft_ms_workers, 'p90')}/${ms(c.ttft_ms_workers, 'p99')})`,
    );
  }
  return out.length > 0 ? out.join('\n') + '\n' : '';
}

/** Per policy and priority class (runs with --admission or --priority-mix): offered, completed, shed, TTFT. */
export function priorityLines(rows: readonly Row[]): string {
  const out: string[] = [];
  for (const r of rows) {
    const bp = r.by_priority;
    if (!bp) continue;
    for (const [cls, c] of Object.entries(bp)) {
      if (c.requests === 0) continue;
      const t = c.ttft_ms;
      const f = (x: number | null) => (x === null ? '-' : x.toFixed(0));
      out.push(
        `${r.name} ${cls}: ${c.requests} offered, ${c.completed} completed, ${c.shed} shed (p99 ${c.shed_latency_ms.p99 === null ? '-' : c.shed_latency_ms.p99.toFixed(1)} ms after arrival), ` +
          `${c.queued} queued; TTFT p50/p90/p99 ms ${f(t.p50)}/${f(t.p90)}/${f(t.p99)}; goodput ${(c.goodput_fraction * 100).toFixed(1)}% of offered`,
      );
    }
  }
  return out.length > 0 ? out.join('\n') + '\n' : '';
}

/**
 * On a mixed fleet (workers of more than one GPU), where each policy sent its requests, by GPU kind
 * and in worker order of the kinds: `kvgate: h100 91.2% · a10g 8.8%`. Empty for a fleet of one kind.
 */
export function gpuLines(rows: readonly Row[]): string {
  const out: string[] = [];
  for (const r of rows) {
    const by = new Map<string, number>();
    let total = 0;
    for (const w of r.workers) {
      by.set(w.gpu, (by.get(w.gpu) ?? 0) + w.routed);
      total += w.routed;
    }
    if (by.size < 2) return '';
    const parts = [...by].map(([gpu, n]) => `${gpu} ${total > 0 ? ((100 * n) / total).toFixed(1) : '0.0'}%`);
    out.push(`${r.name}: ${parts.join(' · ')}`);
  }
  return out.length > 0 ? 'requests routed by GPU (the run at the given rate):\n' + out.join('\n') + '\n' : '';
}

/** What tenant isolation of cached prompts cost, per policy: hit rate, TTFT, GPU time, capacity. */
export function isolationLines(rows: readonly Row[]): string {
  const out: string[] = [];
  for (const r of rows) {
    const i = r.isolation;
    if (!i) continue;
    const cap =
      r.capacity && i.capacity_rate_scale_shared !== null
        ? `; capacity ×${i.capacity_rate_scale_shared.toFixed(2)} shared → ×${r.capacity.rate_scale?.toFixed(2) ?? '?'} isolated`
        : '';
    out.push(
      `${r.name}: cacheIsolation tenant${i.tenants !== null ? ` (${i.tenants} tenants)` : ''}: prefix-cache hit ${(i.prefix_hit_rate_shared * 100).toFixed(1)}% shared → ${(r.prefix_hit_rate * 100).toFixed(1)}% isolated; ` +
        `TTFT p50/p99 ms ${ms(i.ttft_ms_shared, 'p50')}/${ms(i.ttft_ms_shared, 'p99')} → ${ms(r.ttft_ms, 'p50')}/${ms(r.ttft_ms, 'p99')}; ` +
        `busy GPU-s ${i.busy_gpu_seconds_shared.toFixed(1)} → ${r.busy_gpu_seconds.toFixed(1)}${cap}`,
    );
  }
  return out.length > 0 ? out.join('\n') + '\n' : '';
}

/** Per policy (runs with --spec-mode): what the speculative cascade did and cost. */
export function specLines(rows: readonly Row[]): string {
  const out: string[] = [];
  for (const r of rows) {
    const s = r.speculative;
    if (!s) continue;
    const a = s.spec_acceptance_rate === null ? '–' : s.spec_acceptance_rate.toFixed(3);
    const cost = s.cost_per_million_output_tokens === null ? '–' : `$${s.cost_per_million_output_tokens.toFixed(2)}`;
    const perTok = s.target_gpu_ms_per_output_token === null ? '–' : s.target_gpu_ms_per_output_token.toFixed(2);
    let line =
      `${r.name}: speculation ${s.mode}: ${s.cascade_requests} requests through the cascade, ${s.plain_requests} sent to the target alone${s.draft_refused > 0 ? ` (and ${s.draft_refused} too long for the draft's context)` : ''}, ${s.rounds} rounds; ` +
      `α̂ ${a}, ${(s.tokens_from_draft_fraction * 100).toFixed(1)}% of output tokens from the draft, mean k ${s.mean_k.toFixed(2)}; ` +
      `busy GPU-s target ${s.target_gpu_seconds.toFixed(1)} ($${s.gpu_hour_cost.target}/h) + draft ${s.draft_gpu_seconds.toFixed(1)} ($${s.gpu_hour_cost.draft}/h) → ${cost} per million output tokens; ` +
      `target GPU-ms per output token ${perTok}; TPOT p50/p99 ${ms(r.tpot_ms, 'p50')}/${ms(r.tpot_ms, 'p99')} ms, E2E p99 ${ms(r.e2e_ms, 'p99')} ms; ` +
      `target ${s.target_engine}, verification ${s.verify_prefix_cache ? 'reads the prefix cache' : 'recomputes the context'}` +
      (s.probe_target_gpu_seconds === null ? '' : `, probes ${s.probe_target_gpu_seconds.toFixed(1)} target GPU-s`);
    const st = s.settle;
    if (st) {
      line +=
        `; acceptance ${st.alpha_before} → ${st.alpha_after} at ${st.shift_at_s} s: mean k ${st.mean_k_before ?? '–'} before, ${st.mean_k_after ?? '–'} after, ` +
        `settled ${st.settled_after_s === null ? 'never' : `${st.settled_after_s} s after the shift`}`;
    }
    if (s.by_tenant) {
      const parts = Object.entries(s.by_tenant).map(
        ([t, c]) => `${t} α ${c.acceptance} (α̂ ${c.spec_acceptance_rate === null ? '–' : c.spec_acceptance_rate.toFixed(3)}) mean k ${c.mean_k.toFixed(2)}, ${c.cascade_requests} cascade / ${c.plain_requests} target alone`,
      );
      line += `; per tenant: ${parts.join('; ')}`;
    }
    out.push(line);
  }
  return out.length > 0 ? out.join('\n') + '\n' : '';
}

/** Each policy's attainment per prompt-length band at its capacity (the search's best probe). */
export function bandLines(rows: readonly Row[], floor: number | null): string {
  const withBands = rows.filter((p) => p.capacity?.attainment_by_prompt);
  if (withBands.length === 0) return '';
  const width = Math.max(...withBands.map((p) => p.name.length));
  const lines = withBands.map((p) => {
    const bands = p.capacity!.attainment_by_prompt!.map((b) => `${b.band} ${b.attainment === null ? '-' : `${(b.attainment * 100).toFixed(1)}%`} (${b.requests})`);
    return `  ${p.name.padEnd(width)}  ${bands.join(' · ')}\n`;
  });
  const head = floor === null ? 'attainment by prompt length at capacity' : `attainment by prompt length at capacity (each band with ≥ 20 requests held to ≥ ${(floor * 100).toFixed(0)}%)`;
  return `${head}, tokens (completed requests):\n${lines.join('')}`;
}
