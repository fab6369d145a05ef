/**
 * One bench: the same request source replayed once per policy, each on a fresh simulated fleet,
 * summarised into the results JSON and the data the HTML report draws.
 */
import { buildEngineConfig } from '../engine/profiles.js';
import { createPolicy, policyNames, type PolicyOptions } from '../scheduler/registry.js';
import { simulateFleet, type AdmitResult } from '../sim/fleet-sim.js';
import type { RouteRequest } from '../scheduler/types.js';
import { mix32 } from '../workload/tokens.js';
import { summarize, type PolicySummary } from './metrics.js';
import type { BenchRequest, BenchSource } from '../workload/types.js';

/** $/GPU-hour defaults (on-demand cloud list prices, rounded). */
export const GPU_HOUR_COST: Record<string, number> = { h100: 3.5, a100: 1.8, a10g: 1.0 };

export interface BenchOptions {
  source: BenchSource;
  policies: string[];
  workers: number;
  gpu: string;
  model: string;
  tp?: number;
  seed: number;
  /** Multiply the arrival rate (divide arrival times) by this. */
  rateScale?: number;
  /** Replay at most this many requests. */
  limit?: number;
  /** Scrape interval for every policy, ms (default: each policy's own, else 1000). */
  scrapeIntervalMs?: number;
  sloTtftMs?: number;
  sloTpotMs?: number;
  gpuHourCost?: number;
  overheadMs?: number;
  kvSampleMs?: number;
  omitWallTime?: boolean;
  policyOptions?: PolicyOptions;
  /** Admission control seam, created fresh per policy run. */
  admission?: () => (req: RouteRequest, now: number) => AdmitResult;
  onPolicyStart?: (name: string) => void;
  onProgress?: (name: string, arrivals: number, virtualMs: number) => void;
  onPolicyDone?: (summary: PolicySummary) => void;
}

export interface WorkerSummary {
  id: string;
  routed: number;
  preemptions: number;
  busy_gpu_s: number;
  kv_usage_mean: number;
  kv_usage_max: number;
}

export type PolicyResult = PolicySummary & { workers: WorkerSummary[] };

export interface BenchResults {
  trace: string;
  /** The workload's knobs, when the source is a built-in workload. */
  source_params: Record<string, number | string> | null;
  workers: number;
  gpu: string;
  model: string;
  tp: number;
  seed: number;
  rate_scale: number;
  limit: number | null;
  skipped_rows: number;
  slo_ttft_ms: number | null;
  slo_tpot_ms: number | null;
  gpu_hour_cost: number;
  policies: PolicyResult[];
}

/** What the HTML report draws per policy, beyond the summary. */
export interface RunCurves {
  name: string;
  /** Latency at quantiles 0, 0.5, …, 100% (201 points), ms; empty when nothing completed. */
  ttftQuantiles: number[];
  e2eQuantiles: number[];
  /** KV usage per worker, one point every kvIntervalMs. */
  kvIntervalMs: number;
  kvUsage: number[][];
}

export interface BenchOutput {
  results: BenchResults;
  curves: RunCurves[];
}

/** Throws with the known names if any policy is unknown. */
export function checkPolicies(names: readonly string[]): void {
  const known = policyNames();
  const unknown = names.filter((n) => !known.includes(n));
  if (unknown.length > 0) {
    throw new Error(`unknown policy ${unknown.map((n) => `'${n}'`).join(', ')} (known: ${known.join(', ')})`);
  }
}

function* limited(src: Iterable<BenchRequest>, limit: number | undefined, rateScale: number): Generator<BenchRequest> {
  let n = 0;
  for (const r of src) {
    if (limit !== undefined && n >= limit) return;
    n++;
    yield rateScale === 1 ? r : { ...r, arrivalMs: r.arrivalMs / rateScale };
  }
}

function quantiles(values: Float64Array, points = 201): number[] {
  values.sort();
  const n = values.length;
  if (n === 0) return [];
  const out: number[] = [];
  for (let i = 0; i < points; i++) {
    const pos = (i / (points - 1)) * (n - 1);
    const lo = Math.floor(pos);
    const hi = Math.min(lo + 1, n - 1);
    out.push(Math.round((values[lo]! + (values[hi]! - values[lo]!) * (pos - lo)) * 1000) / 1000);
  }
  return out;
}

/** Average consecutive samples so a series has at most `max` points. */
export function downsample(series: readonly number[], max: number): { factor: number; points: number[] } {
  const factor = Math.max(1, Math.ceil(series.length / max));
  const points: number[] = [];
  for (let i = 0; i < series.length; i += factor) {
    let s = 0;
    let k = 0;
    for (let j = i; j < Math.min(series.length, i + factor); j++, k++) s += series[j]!;
    points.push(Math.round((s / k) * 10000) / 10000);
  }
  return { factor, points };
}

export async function runBench(o: BenchOptions): Promise<BenchOutput> {
  checkPolicies(o.policies);
  const rateScale = o.rateScale ?? 1;
  if (!(rateScale > 0) || !Number.isFinite(rateScale)) throw new Error(`rate scale must be a positive number, got ${rateScale}`);
  const tp = o.tp ?? 1;
  const gpuHourCost = o.gpuHourCost ?? GPU_HOUR_COST[o.gpu.toLowerCase()] ?? 0;
  const engineConfig = buildEngineConfig({
    gpu: o.gpu,
    model: o.model,
    tp,
    hashSeed: mix32(o.seed, 0x4b56),
    emitTokens: false,
    kvEvents: false,
  });
  const policies: PolicyResult[] = [];
  const curves: RunCurves[] = [];
  for (const name of o.policies) {
    o.onPolicyStart?.(name);
    const policy = createPolicy(name, o.policyOptions);
    const sim = await simulateFleet(limited(o.source.open(), o.limit, rateScale), {
      workers: o.workers,
      engineConfig,
      policy,
      seed: o.seed,
      model: o.model,
      scrapeIntervalMs: o.scrapeIntervalMs,
      overheadMs: o.overheadMs,
      kvSampleMs: o.kvSampleMs,
      admit: o.admission?.(),
      onProgress: o.onProgress ? (n, t) => o.onProgress!(name, n, t) : undefined,
    });
    const summary = summarize(sim, {
      tp,
      gpuHourCost,
      sloTtftMs: o.sloTtftMs,
      sloTpotMs: o.sloTpotMs,
      omitWallTime: o.omitWallTime,
    });
    const c = sim.completed;
    const n = c.arrival.length;
    const ttft = new Float64Array(n);
    const e2e = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      ttft[i] = c.firstToken[i]! - c.arrival[i]!;
      e2e[i] = c.finish[i]! - c.arrival[i]!;
    }
    const workers: WorkerSummary[] = sim.workers.map((w) => {
      let sum = 0;
      let max = 0;
      for (const u of w.kvUsage) {
        sum += u;
        if (u > max) max = u;
      }
      return {
        id: w.id,
        routed: w.routed,
        preemptions: w.preemptions,
        busy_gpu_s: Math.round((w.busyMs * tp) / 10) / 100,
        kv_usage_mean: w.kvUsage.length > 0 ? Math.round((sum / w.kvUsage.length) * 10000) / 10000 : 0,
        kv_usage_max: Math.round(max * 10000) / 10000,
      };
    });
    const kv = sim.workers.map((w) => downsample(w.kvUsage, 300));
    curves.push({
      name,
      ttftQuantiles: quantiles(ttft),
      e2eQuantiles: quantiles(e2e),
      kvIntervalMs: sim.kvSampleMs * (kv[0]?.factor ?? 1),
      kvUsage: kv.map((k) => k.points),
    });
    const result: PolicyResult = { ...summary, workers };
    policies.push(result);
    o.onPolicyDone?.(summary);
  }
  return {
    results: {
      trace: o.source.name,
      source_params: o.source.params ?? null,
      workers: o.workers,
      gpu: o.gpu,
      model: o.model,
      tp,
      seed: o.seed,
      rate_scale: rateScale,
      limit: o.limit ?? null,
      skipped_rows: o.source.skipped,
      slo_ttft_ms: o.sloTtftMs ?? null,
      slo_tpot_ms: o.sloTpotMs ?? null,
      gpu_hour_cost: gpuHourCost,
      policies,
    },
    curves,
  };
}
