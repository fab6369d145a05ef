/**
 * The bench's HTML report: one self-contained page (inline CSS and SVG, no scripts, no network)
 * with latency CDFs, throughput / hit-rate / goodput bars, KV usage over time per worker for each
 * policy, and the summary table; with --capacity, attainment against the offered rate for every
 * probe of every policy, and the capacities.
 */
import type { Dist } from './metrics.js';
import type { BenchResults, RunCurves } from './run.js';
import { describeSlo } from './slo.js';
import { barChart, esc, lineChart, PALETTE, type Series } from './svg.js';
import { boundsAtCapacity, describeBoundsAtCapacity } from './work-bound.js';

const CSS = `
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#555;margin-bottom:16px}.row{display:flex;flex-wrap:wrap;gap:16px}
table{border-collapse:collapse;font-size:12px}th,td{padding:4px 8px;border-bottom:1px solid #eee;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f6f6f6}
svg .title{font-size:13px;font-weight:600}svg .tick,svg .legend{font-size:10px;fill:#333}svg .label{font-size:11px;fill:#555}
svg .grid{stroke:#eee}svg .frame{fill:none;stroke:#999}
.small svg .title{font-size:11px}.scroll{overflow-x:auto}
`;

const ms = (v: number | null, digits = 0): string => (v === null ? '–' : v.toFixed(digits));
const dist = (d: Dist, digits = 0): string => `${ms(d.p50, digits)} / ${ms(d.p90, digits)} / ${ms(d.p99, digits)}`;

function cdfSeries(curves: readonly RunCurves[], pick: (c: RunCurves) => number[]): Series[] {
  return curves.map((c, i) => {
    const q = pick(c);
    return {
      name: c.name,
      color: PALETTE[i % PALETTE.length]!,
      points: q.map((v, k) => [Math.max(v, 0.01), k / (q.length - 1)] as [number, number]),
    };
  });
}

function summaryTableHtml(r: BenchResults): string {
  const head = [
    'policy', 'completed', 'rejected', 'shed', 'preempt', 'TTFT ms p50/p90/p99', 'TPOT ms p50/p90/p99',
    'ITL ms p50/p90/p99', 'E2E ms p50/p90/p99', 'req/s', 'out tok/s', 'goodput req/s', 'attainment', 'prefix hit', 'ideal hit',
    ...(r.capacity ? ['capacity (rate ×)', 'capacity req/s', '÷ round-robin', '÷ best peer'] : []),
    'GPU·s', '$/M out tok', 'sim wall s',
  ];
  const pct = (x: number | null) => (x === null ? '–' : `${(x * 100).toFixed(1)}%`);
  const ratio = (x: number | null | undefined) => (x === null || x === undefined ? '–' : x.toFixed(2));
  const rows = r.policies.map((p) =>
    [
      esc(p.name), p.completed, p.rejected, p.shed, p.preemptions, dist(p.ttft_ms), dist(p.tpot_ms, 1), dist(p.itl_ms, 1),
      dist(p.e2e_ms), p.throughput_rps.toFixed(2), p.output_tokens_per_s.toFixed(0), p.goodput_rps.toFixed(2),
      pct(p.attainment), pct(p.prefix_hit_rate), pct(r.ideal_hit_rate),
      ...(r.capacity
        ? [
            p.capacity?.rate_scale == null ? '–' : `${p.capacity.rate_scale.toFixed(3)}${p.capacity.converged ? '' : ' (not converged)'}`,
            p.capacity?.requests_per_s == null ? '–' : p.capacity.requests_per_s.toFixed(1),
            ratio(r.capacity.vs_round_robin[p.name]),
            ratio(r.capacity.vs_best_peer[p.name]),
          ]
        : []),
      p.gpu_seconds.toFixed(0),
      p.cost_per_million_output_tokens === null ? '–' : p.cost_per_million_output_tokens.toFixed(3),
      p.sim_wall_ms === undefined ? '–' : (p.sim_wall_ms / 1000).toFixed(1),
    ].map((c) => `<td>${c}</td>`).join(''),
  );
  return `<table><thead><tr>${head.map((h) => `<th>${h}</th>`).join('')}</tr></thead><tbody>${rows.map((r) => `<tr>${r}</tr>`).join('')}</tbody></table>`;
}

/** The plain run's offered rate, and what its throughput figures are not. */
export function offeredLine(offeredRps: number): string {
  return `offered rate: ${offeredRps.toFixed(1)} req/s of arrivals, the same for every policy; req/s and throughput are what completed at that rate, not what a fleet can carry (that is --capacity)`;
}

export function renderReport(r: BenchResults, curves: readonly RunCurves[]): string {
  const colors = new Map(curves.map((c, i) => [c.name, PALETTE[i % PALETTE.length]!]));
  const color = (name: string) => colors.get(name) ?? PALETTE[0]!;
  const slo = describeSlo({ ttftMs: r.slo_ttft_ms ?? undefined, ttftPer1kMs: r.slo_ttft_per_1k_ms ?? undefined, tpotMs: r.slo_tpot_ms ?? undefined });
  const parts: string[] = [];
  parts.push(`<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>kvgate bench — ${esc(r.trace)}</title><style>${CSS}</style></head><body>`);
  parts.push(`<h1>kvgate bench — ${esc(r.trace)}</h1>`);
  parts.push(
    `<div class="meta">${r.gpu.includes(':') ? `${r.workers} workers (${esc(r.gpu)})` : `${r.workers} × ${esc(r.gpu)}`}${r.tp > 1 ? ` (tp ${r.tp})` : ''}, ${esc(r.model)}, seed ${r.seed}` +
      `${r.rate_scale !== 1 ? `, arrival rate × ${r.rate_scale}` : ''}${r.limit !== null ? `, limit ${r.limit}` : ''}` +
      `${r.skipped_rows > 0 ? `, ${r.skipped_rows} malformed rows skipped` : ''}, $${r.gpu_hour_cost.toFixed(2)}/GPU-hour` +
      `${slo ? `, goodput SLO: ${esc(slo)}` : ''}. Simulated in virtual time; latencies are modelled, not measured.</div>`,
  );
  parts.push('<h2>Summary</h2>', `<div class="meta">${esc(offeredLine(r.offered_rps))}</div>`, `<div class="scroll">${summaryTableHtml(r)}</div>`);
  parts.push(
    `<div class="meta">Ideal hit rate ${(r.ideal_hit_rate * 100).toFixed(1)}%: one worker with unlimited KV cache on the same requests (the workload's inherent prefix reuse).</div>`,
  );

  const specRows = r.policies.filter((p) => p.speculative);
  if (specRows.length > 0) {
    const head = ['policy', 'mode', 'cascade / plain', 'rounds', 'α̂', 'from draft', 'mean k', 'target GPU-s', 'draft GPU-s', 'target GPU-ms / token', '$/M out (busy)', 'settled after shift'];
    const rows = specRows.map((p) => {
      const s = p.speculative!;
      const st = s.settle;
      return [
        esc(p.name),
        esc(s.mode),
        `${s.cascade_requests} / ${s.plain_requests}`,
        String(s.rounds),
        s.spec_acceptance_rate === null ? '–' : s.spec_acceptance_rate.toFixed(3),
        `${(s.tokens_from_draft_fraction * 100).toFixed(1)}%`,
        s.mean_k.toFixed(2),
        s.target_gpu_seconds.toFixed(1),
        s.draft_gpu_seconds.toFixed(1),
        s.target_gpu_ms_per_output_token === null ? '–' : s.target_gpu_ms_per_output_token.toFixed(2),
        s.cost_per_million_output_tokens === null ? '–' : s.cost_per_million_output_tokens.toFixed(2),
        st ? (st.settled_after_s === null ? 'never' : `${st.settled_after_s} s (mean k ${st.mean_k_before ?? '–'} → ${st.mean_k_after ?? '–'})`) : '–',
      ].map((c) => `<td>${c}</td>`).join('');
    });
    const d = specRows[0]!.speculative!.draft;
    parts.push(
      `<h2>Speculative cascade</h2><div class="meta">Draft pool: ${d.workers} × ${esc(d.gpu)}, ${esc(d.model)} ${esc(d.quant)}. ` +
        `Cost: both pools' busy GPU time at their GPUs' prices per million output tokens (see docs/speculative.md).</div>` +
        `<div class="scroll"><table><thead><tr>${head.map((h) => `<th>${h}</th>`).join('')}</tr></thead><tbody>${rows.map((x) => `<tr>${x}</tr>`).join('')}</tbody></table></div>`,
    );
  }

  const cap = r.capacity;
  if (cap) {
    const target = cap.target_attainment;
    const boundLine = describeBoundsAtCapacity(boundsAtCapacity(r.policies));
    parts.push(
      `<h2>Capacity at SLO</h2><div class="meta">Capacity: the highest arrival rate at which ≥ ${(target * 100).toFixed(0)}% of requests meet ${esc(slo)} ` +
        `(rejected and shed requests miss it). Every probe is a fresh fleet on the same request stream` +
        `${cap.min_seconds > 0 ? `, at least ${cap.min_seconds} s of arrivals for a built-in workload` : ''}; each dot is one probe run to its end ` +
        `(a probe stopped once its misses decided it has no measured attainment and is left out: --capacity-full-probes draws every one). ` +
        `${boundLine ? `${esc(boundLine[0]!.toUpperCase() + boundLine.slice(1))} (the work bound: the requests' least GPU time). ` : ''}` +
        `Best peer: ${esc(cap.best_peer ?? 'none')}.</div><div class="row">`,
    );
    const series: Series[] = r.policies.map((p) => ({
      name: p.name,
      color: color(p.name),
      markers: true,
      points: (p.capacity?.probes ?? [])
        .filter((q) => q.stopped_early !== true)
        .sort((a, b) => a.requests_per_s - b.requests_per_s)
        .map((q) => [q.requests_per_s, q.attainment] as [number, number]),
    }));
    const xs = series.flatMap((s) => s.points.map(([x]) => x));
    if (xs.length > 0) {
      series.push({ name: `target ${(target * 100).toFixed(0)}%`, color: '#7f7f7f', dash: '4 3', points: [[Math.min(...xs), target], [Math.max(...xs), target]] });
    }
    parts.push(lineChart(series, { title: 'SLO attainment vs offered rate', xLabel: 'offered rate, requests/s', yLabel: 'fraction of requests meeting the SLO', yMin: 0, yMax: 1, width: 620, height: 340, legendCorner: 'bottom-left' }));
    parts.push(
      barChart(
        r.policies.map((p) => ({ label: p.name, value: p.capacity?.requests_per_s ?? 0, color: color(p.name) })),
        { title: 'Capacity at SLO', unit: 'req/s' },
      ),
    );
    parts.push('</div>');
  }

  parts.push('<h2>Latency</h2><div class="row">');
  parts.push(lineChart(cdfSeries(curves, (c) => c.ttftQuantiles), { title: 'TTFT CDF', xLabel: 'time to first token, ms (log)', yLabel: 'fraction of requests', logX: true, yMin: 0, yMax: 1 }));
  parts.push(lineChart(cdfSeries(curves, (c) => c.e2eQuantiles), { title: 'E2E latency CDF', xLabel: 'end-to-end latency, ms (log)', yLabel: 'fraction of requests', logX: true, yMin: 0, yMax: 1 }));
  parts.push('</div>');

  parts.push('<h2>Throughput and cache</h2><div class="row">');
  parts.push(barChart(r.policies.map((p) => ({ label: p.name, value: p.throughput_rps, color: color(p.name) })), { title: `Throughput (offered ${r.offered_rps.toFixed(1)} req/s)`, unit: 'req/s' }));
  parts.push(barChart(r.policies.map((p) => ({ label: p.name, value: p.output_tokens_per_s, color: color(p.name) })), { title: 'Output tokens', unit: 'tok/s' }));
  parts.push(barChart(r.policies.map((p) => ({ label: p.name, value: p.prefix_hit_rate, color: color(p.name) })), { title: 'Prefix-cache hit rate (token-weighted)', unit: '', percent: true }));
  parts.push(barChart(r.policies.map((p) => ({ label: p.name, value: p.goodput_rps, color: color(p.name) })), { title: `Goodput${slo ? ` (${slo})` : ''}`, unit: 'req/s' }));
  parts.push('</div>');

  parts.push('<h2>KV-cache usage per worker</h2><div class="row small">');
  for (const c of curves) {
    const series: Series[] = c.kvUsage.map((pts, w) => ({
      name: `w${w}`,
      color: PALETTE[w % PALETTE.length]!,
      points: pts.map((u, k) => [(k * c.kvIntervalMs) / 1000, u * 100] as [number, number]),
    }));
    parts.push(lineChart(series, { title: c.name, xLabel: 'simulated time, s', yLabel: 'KV usage, %', yMin: 0, yMax: 100, width: 380, height: 220, legend: false }));
  }
  parts.push('</div>');

  parts.push('<h2>Per worker</h2><div class="row">');
  for (const p of r.policies) {
    parts.push(barChart(p.workers.map((w) => ({ label: `${w.id} (${w.preemptions} preempt)`, value: w.routed, color: color(p.name) })), { title: `${p.name}: requests routed`, unit: '', width: 360 }));
  }
  parts.push('</div></body></html>\n');
  return parts.join('\n');
}
