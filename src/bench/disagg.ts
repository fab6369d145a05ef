/**
 * `kvgate bench --disagg P:D | auto`: prefill/decode disaggregation against aggregated serving on
 * the same GPUs. Each fleet is one bench run of one policy (run.ts), on the same request stream:
 * - aggregated: every worker serves requests whole;
 * - P:D: P prefill workers and D decode workers, each request decided by the gateway's decider
 *   (src/scheduler/disagg/), its KV moved over the link (src/engine/kv-link.ts);
 *   With prefill role `both` (label `P+:D`) the prefill workers also serve local requests whole;
 * - auto: every split P:(N−P) of the N workers, 1 ≤ P < N; the best (highest capacity at SLO,
 *   else highest attainment) is reported beside the aggregated fleet, which is the answer when no
 *   split carries more.
 * With --capacity each fleet's capacity at SLO is searched as for any policy (capacity.ts), so
 * "× aggregated" is a ratio of capacities measured on the same requests in the same run.
 */
import type { KvTransferModel } from '../engine/kv-link.js';
import type { DeciderOptions } from '../scheduler/disagg/decider.js';
import { runBench, type BenchOptions, type PolicyResult } from './run.js';

export interface DisaggBenchOptions {
  /** A fixed split, or every split of the fleet's workers. */
  split: { prefill: number; decode: number } | 'auto';
  transfer: KvTransferModel;
  decider: DeciderOptions;
  /** The prefill workers' role (SimDisaggOptions.prefillRole; default prefill). */
  prefillRole?: 'prefill' | 'both';
  /** Called before each fleet's runs, with its label. */
  onFleet?: (label: string) => void;
}

/** One fleet's figures, as the table and the JSON give them. */
export interface DisaggFleetRow {
  fleet: string;
  prefill_workers: number;
  decode_workers: number;
  /** Capacity at SLO as a rate scale and as offered requests/s (with --capacity), else null. */
  capacity_rate_scale: number | null;
  capacity_rps: number | null;
  /** This fleet's capacity ÷ the aggregated fleet's (null without both). */
  vs_aggregated: number | null;
  /** Figures of the run at the common load: the aggregated fleet's capacity (with --capacity), else the bench's rate scale. */
  attainment: number | null;
  ttft_ms: { p50: number | null; p99: number | null };
  tpot_ms: { p50: number | null; p99: number | null };
  /** $ per million output tokens when the fleet runs at its capacity (null without one). */
  cost_per_million_at_capacity: number | null;
  /** Busy GPU time ÷ (run duration × GPUs) of each pool; the aggregated fleet's in decode_util. */
  prefill_util: number | null;
  decode_util: number;
  /** Share of completed requests served disaggregated, and the KV they moved. */
  disaggregated_fraction: number;
  transfer_gb: number;
  transfer_ms_p99: number | null;
}

export interface DisaggBenchResults {
  trace: string;
  workers: number;
  gpu: string;
  model: string;
  tp: number;
  policy: string;
  link: { name: string; gb_per_s: number; latency_us: number };
  kv_bytes_per_token: number;
  decider: DeciderOptions;
  prefill_role: 'prefill' | 'both';
  slo: { ttft_ms: number | null; ttft_per_1k_ms: number | null; tpot_ms: number | null };
  /** Rate scale at which every fleet's latencies were measured (the aggregated fleet's capacity, or --rate-scale). */
  load_rate_scale: number;
  /** The aggregated fleet first, then each split run. */
  fleets: DisaggFleetRow[];
  /** The fleet with the highest capacity (else attainment), the aggregated one included, and its capacity ÷ the aggregated fleet's. */
  best: { fleet: string; vs_aggregated: number | null };
  /** Every run's full summary (run.ts), by fleet label. */
  runs: Record<string, PolicyResult>;
}

const r3 = (x: number): number => Math.round(x * 1000) / 1000;

/** "P:D" → the split, checked against the fleet size. Throws with the reason. */
export function parseDisaggSplit(s: string, workers: number | undefined): { prefill: number; decode: number } | 'auto' {
  if (s === 'auto') return 'auto';
  const m = /^(\d+):(\d+)$/.exec(s.trim());
  if (!m) throw new Error(`takes P:D (prefill and decode workers, e.g. 1:3) or auto, got '${s}'`);
  const prefill = Number(m[1]);
  const decode = Number(m[2]);
  if (prefill < 1 || decode < 1) throw new Error(`needs at least one prefill and one decode worker, got '${s}'`);
  if (workers !== undefined && prefill + decode !== workers) throw new Error(`${s} is ${prefill + decode} workers, but --workers is ${workers}: compare on the same GPU count`);
  return { prefill, decode };
}

/** A fleet's row: capacity from `r`'s search, latencies and the rest from `at` (the run at the common load). */
function rowOf(label: string, r: PolicyResult, at: PolicyResult, prefill: number, workers: number, tp: number, hourCost: number): DisaggFleetRow {
  const cap = r.capacity;
  const outPerReq = at.throughput_rps > 0 ? at.output_tokens_per_s / at.throughput_rps : 0;
  const capRps = cap?.requests_per_s ?? null;
  const costAtCap = capRps !== null && capRps > 0 && outPerReq > 0 ? r3(((workers * tp * hourCost) / 3600 / (capRps * outPerReq)) * 1e6) : null;
  const util = (from: number, to: number): number => {
    let busy = 0;
    for (let i = from; i < to; i++) busy += at.workers[i]!.busy_gpu_s;
    return at.duration_s > 0 ? r3(busy / (at.duration_s * (to - from) * tp)) : 0;
  };
  return {
    fleet: label,
    prefill_workers: prefill,
    decode_workers: workers - prefill,
    capacity_rate_scale: cap?.rate_scale ?? null,
    capacity_rps: capRps,
    vs_aggregated: null,
    attainment: at.attainment,
    ttft_ms: { p50: at.ttft_ms.p50, p99: at.ttft_ms.p99 },
    tpot_ms: { p50: at.tpot_ms.p50, p99: at.tpot_ms.p99 },
    cost_per_million_at_capacity: costAtCap,
    prefill_util: prefill > 0 ? util(0, prefill) : null,
    decode_util: util(prefill, workers),
    disaggregated_fraction: at.disagg && at.completed > 0 ? r3(at.disagg.disaggregated / at.completed) : 0,
    transfer_gb: at.disagg?.transfer_gb ?? 0,
    transfer_ms_p99: at.disagg?.transfer_ms.p99 ?? null,
  };
}

/** Run the aggregated fleet and the split(s) of `o.workers` workers with `o.policies[0]`. */
export async function runDisaggBench(o: BenchOptions, d: DisaggBenchOptions): Promise<DisaggBenchResults> {
  if (o.policies.length !== 1) throw new Error(`--disagg compares fleets under one policy; got ${o.policies.length} (--policy NAME)`);
  if (o.workers < 2) throw new Error('--disagg needs at least 2 workers');
  if (o.gpu.includes(':')) throw new Error('--disagg is not simulated on a mixed fleet');
  const tp = o.tp ?? 1;
  const splits = d.split === 'auto' ? Array.from({ length: o.workers - 1 }, (_, i) => i + 1) : [d.split.prefill];
  const runs: Record<string, PolicyResult> = {};
  const fleets: DisaggFleetRow[] = [];
  const base = { ...o, runWide: false };
  d.onFleet?.(`aggregated ${o.workers}`);
  const agg = (await runBench({ ...base, disagg: undefined })).results;
  const hourCost = agg.gpu_hour_cost;
  runs['aggregated'] = agg.policies[0]!;
  // Latencies are compared at one load: the aggregated fleet's capacity when it was searched (each
  // split's plain run, and the start of its own search, are at that rate), else the bench's rate.
  const load = runs['aggregated'].capacity?.rate_scale ?? null;
  const aggAt = load !== null && load !== (o.rateScale ?? 1) ? (await runBench({ ...base, rateScale: load, capacity: undefined, disagg: undefined })).results.policies[0]! : runs['aggregated'];
  fleets.push(rowOf('aggregated', runs['aggregated'], aggAt, 0, o.workers, tp, hourCost));
  for (const p of splits) {
    const label = `${p}P${d.prefillRole === 'both' ? '+' : ''}:${o.workers - p}D`;
    d.onFleet?.(label);
    const out = await runBench({ ...base, ...(load !== null ? { rateScale: load } : {}), disagg: { prefill: p, transfer: d.transfer, decider: d.decider, prefillRole: d.prefillRole ?? 'prefill' } });
    runs[label] = out.results.policies[0]!;
    fleets.push(rowOf(label, runs[label], runs[label], p, o.workers, tp, hourCost));
  }
  const aggCap = fleets[0]!.capacity_rate_scale;
  for (const f of fleets) f.vs_aggregated = aggCap !== null && aggCap > 0 && f.capacity_rate_scale !== null ? r3(f.capacity_rate_scale / aggCap) : null;
  // The best fleet, the aggregated one included: a split that carries less is no reason to split.
  const key = (f: DisaggFleetRow): number => f.capacity_rate_scale ?? f.attainment ?? -1;
  const best = fleets.reduce((a, b) => (key(b) > key(a) ? b : a));
  const link = d.transfer.link;
  return {
    trace: o.source.name,
    workers: o.workers,
    gpu: o.gpu,
    model: o.model,
    tp,
    policy: o.policies[0]!,
    link: { name: link.name, gb_per_s: link.bytesPerSecond / 1e9, latency_us: r3(link.latencyMs * 1000) },
    kv_bytes_per_token: d.transfer.bytesPerToken,
    decider: d.decider,
    prefill_role: d.prefillRole ?? 'prefill',
    slo: { ttft_ms: o.sloTtftMs ?? null, ttft_per_1k_ms: o.sloTtftPer1kMs ?? null, tpot_ms: o.sloTpotMs ?? null },
    load_rate_scale: load ?? o.rateScale ?? 1,
    fleets,
    best: { fleet: best.fleet, vs_aggregated: best.vs_aggregated },
    runs,
  };
}

const fmt = (x: number | null, digits = 1): string => (x === null ? '–' : x.toFixed(digits));

/** The comparison as a markdown table (the CLI prints it; --write-docs puts it in a page). */
export function disaggTable(r: DisaggBenchResults): string {
  const lines = [
    '| fleet | capacity (req/s) | × aggregated | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | $/M output tokens at capacity | prefill / decode busy | disaggregated | KV moved (GB) |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const f of r.fleets) {
    lines.push(
      `| ${f.fleet} | ${fmt(f.capacity_rps, 2)} | ${fmt(f.vs_aggregated, 2)} | ${fmt(f.ttft_ms.p50, 0)} / ${fmt(f.ttft_ms.p99, 0)} | ${fmt(f.tpot_ms.p50, 1)} / ${fmt(f.tpot_ms.p99, 1)} | ` +
        `${fmt(f.cost_per_million_at_capacity, 3)} | ${f.prefill_util === null ? '–' : `${(f.prefill_util * 100).toFixed(0)}%`} / ${(f.decode_util * 100).toFixed(0)}% | ` +
        `${(f.disaggregated_fraction * 100).toFixed(0)}% | ${f.transfer_gb.toFixed(1)} |`,
    );
  }
  return lines.join('\n') + '\n';
}

/** One line under the table: the workload, fleet, link and SLO it was measured with. */
export function disaggCaption(r: DisaggBenchResults): string {
  const slo = [
    r.slo.ttft_ms !== null ? `TTFT ≤ ${r.slo.ttft_ms} ms${r.slo.ttft_per_1k_ms ? ` + ${r.slo.ttft_per_1k_ms} ms/1k prompt tokens` : ''}` : null,
    r.slo.tpot_ms !== null ? `TPOT ≤ ${r.slo.tpot_ms} ms` : null,
  ].filter(Boolean);
  return (
    `${r.trace}: ${r.workers}× ${r.gpu}${r.tp > 1 ? ` tp${r.tp}` : ''} ${r.model}, policy ${r.policy}; KV link ${r.link.name} ` +
    `(${r.link.gb_per_s} GB/s, ${r.link.latency_us} µs; ${(r.kv_bytes_per_token / 1024).toFixed(0)} KiB of KV per token); decider threshold ` +
    `${r.decider.nonCachedTokens} uncached tokens; SLO ${slo.join(', ') || 'none'}; latencies and busy time at rate ×${+r.load_rate_scale.toFixed(4)}` +
    `${r.fleets[0]!.capacity_rate_scale !== null ? " (the aggregated fleet's capacity)" : ''}; ` +
    (r.best.fleet === 'aggregated'
      ? 'best: aggregated (no split carries more)'
      : `best: ${r.best.fleet}` + (r.best.vs_aggregated !== null ? ` at ${r.best.vs_aggregated.toFixed(2)}× the aggregated fleet's capacity` : ''))
  );
}
