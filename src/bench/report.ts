/**
 * The bench's HTML report: one self-contained page (inline CSS and SVG, no scripts, no network)
 * with latency CDFs, throughput / hit-rate / goodput bars, KV usage over time per worker for each
 * policy, and the summary table.
 */
import type { Dist } from './metrics.js';
import type { BenchResults, RunCurves } from './run.js';
import { barChart, esc, lineChart, PALETTE, type Series } from './svg.js';

const CSS = `
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#555;margin-bottom:16px}.row{display:flex;flex-wrap:wrap;gap:16px}
table{border-collapse:collapse;font-size:12px}th,td{padding:4px 8px;border-bottom:1px solid #eee;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f6f6f6}
svg .title{font-size:13px;font-weight:600}svg .tick,svg .legend{font-size:10px;fill:#333}svg .label{font-size:11px;fill:#555}
svg .grid{stroke:#eee}svg .frame{fill:none;stroke:#999}
.small svg .title{font-size:11px}
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
    'ITL ms p50/p90/p99', 'E2E ms p50/p90/p99', 'req/s', 'out tok/s', 'goodput req/s', 'prefix hit', 'GPU·s', '$/M out tok', 'sim wall s',
  ];
  const rows = r.policies.map((p) =>
    [
      esc(p.name), p.completed, p.rejected, p.shed, p.preemptions, dist(p.ttft_ms), dist(p.tpot_ms, 1), dist(p.itl_ms, 1),
      dist(p.e2e_ms), p.throughput_rps.toFixed(2), p.output_tokens_per_s.toFixed(0), p.goodput_rps.toFixed(2),
      `${(p.prefix_hit_rate * 100).toFixed(1)}%`, p.gpu_seconds.toFixed(0),
      p.cost_per_million_output_tokens === null ? '–' : p.cost_per_million_output_tokens.toFixed(3),
      p.sim_wall_ms === undefined ? '–' : (p.sim_wall_ms / 1000).toFixed(1),
    ].map((c) => `<td>${c}</td>`).join(''),
  );
  return `<table><thead><tr>${head.map((h) => `<th>${h}</th>`).join('')}</tr></thead><tbody>${rows.map((r) => `<tr>${r}</tr>`).join('')}</tbody></table>`;
}

export function renderReport(r: BenchResults, curves: readonly RunCurves[]): string {
  const colors = new Map(curves.map((c, i) => [c.name, PALETTE[i % PALETTE.length]!]));
  const color = (name: string) => colors.get(name) ?? PALETTE[0]!;
  const slo = [r.slo_ttft_ms !== null ? `TTFT ≤ ${r.slo_ttft_ms} ms` : '', r.slo_tpot_ms !== null ? `TPOT ≤ ${r.slo_tpot_ms} ms` : '']
    .filter(Boolean)
    .join(', ');
  const parts: string[] = [];
  parts.push(`<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>kvgate bench — ${esc(r.trace)}</title><style>${CSS}</style></head><body>`);
  parts.push(`<h1>kvgate bench — ${esc(r.trace)}</h1>`);
  parts.push(
    `<div class="meta">${r.workers} × ${esc(r.gpu)}${r.tp > 1 ? ` (tp ${r.tp})` : ''}, ${esc(r.model)}, seed ${r.seed}` +
      `${r.rate_scale !== 1 ? `, arrival rate × ${r.rate_scale}` : ''}${r.limit !== null ? `, limit ${r.limit}` : ''}` +
      `${r.skipped_rows > 0 ? `, ${r.skipped_rows} malformed rows skipped` : ''}, $${r.gpu_hour_cost.toFixed(2)}/GPU-hour` +
      `${slo ? `, goodput SLO: ${esc(slo)}` : ''}. Simulated in virtual time; latencies are modelled, not measured.</div>`,
  );
  parts.push('<h2>Summary</h2>', summaryTableHtml(r));

  parts.push('<h2>Latency</h2><div class="row">');
  parts.push(lineChart(cdfSeries(curves, (c) => c.ttftQuantiles), { title: 'TTFT CDF', xLabel: 'time to first token, ms (log)', yLabel: 'fraction of requests', logX: true, yMin: 0, yMax: 1 }));
  parts.push(lineChart(cdfSeries(curves, (c) => c.e2eQuantiles), { title: 'E2E latency CDF', xLabel: 'end-to-end latency, ms (log)', yLabel: 'fraction of requests', logX: true, yMin: 0, yMax: 1 }));
  parts.push('</div>');

  parts.push('<h2>Throughput and cache</h2><div class="row">');
  parts.push(barChart(r.policies.map((p) => ({ label: p.name, value: p.throughput_rps, color: color(p.name) })), { title: 'Throughput', unit: 'req/s' }));
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
