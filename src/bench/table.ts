/**
 * The bench summary as a plain-text table, one row per policy.
 */
import type { PolicySummary } from './metrics.js';

const num = (x: number | null, digits = 0): string => (x === null ? '-' : x.toFixed(digits));

export function summaryTable(rows: readonly PolicySummary[]): string {
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
    'hit rate',
    '$/M out',
    'wall s',
  ];
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
    `${(r.prefix_hit_rate * 100).toFixed(1)}%`,
    num(r.cost_per_million_output_tokens, 3),
    r.sim_wall_ms === undefined ? '-' : (r.sim_wall_ms / 1000).toFixed(1),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((row) => row[i]!.length)));
  const fmt = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [fmt(header), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(fmt)].join('\n') + '\n';
}
