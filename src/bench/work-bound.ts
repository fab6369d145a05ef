/**
 * work_bound: the highest request rate any routing policy could sustain on a fleet, from the work
 * the requests need and nothing else — the capacity counterpart of ideal_hit_rate.
 *
 * Every request is priced at its cheapest: its prompt hits the ideal prefix cache (ideal-hit.ts:
 * one worker with unlimited KV, so no fleet hits more), its uncached tokens are prefilled in one
 * chunk (more chunks read the context's KV again), and each of its output tokens after the first
 * is one decode step reading its context. From the roofline (src/engine/time-model.ts) it keeps
 * only what cannot be shared with other requests: the FLOPs of its tokens, its sampled sequences
 * and its attention, and the bytes of KV it reads. The weights each step reads, the fixed step
 * overhead and all-reduces are left out (they shrink with batching, and a bound must not guess
 * how far). Summed over requests, with the roofline's overlap rule — a step costs
 * max(compute, memory) + β·min(compute, memory), and for sums of steps
 *
 *   Σ (max(c, m) + β·min(c, m)) ≥ max(Σc, Σm) + β·min(Σc, Σm)
 *
 * (since max + β·min = (1 − β)·max + β·(c + m), and Σ max ≥ max of the sums) — this is a lower
 * bound on the GPU time the requests need on any fleet, busyMs. W workers supply W ms of GPU time
 * per ms, so no policy sustains more than W · requests / busyMs requests per ms: above that rate
 * work arrives faster than the fleet can do it and queues grow without end. A capacity search's
 * rate is within this bound's reach only if the SLO leaves room to batch; what separates the two
 * is what routing, batching and the SLO cost, so a policy's capacity ÷ work_bound says how much
 * any policy could still gain. (A short run can sit above the bound for a while, its queues not
 * yet long enough to break the SLO; the bound is for sustained load.)
 */
import type { RooflineTimeModel } from '../engine/time-model.js';
import type { BenchRequest } from '../workload/types.js';
import { idealHitRate, type IdealHit } from './ideal-hit.js';

export interface WorkBound {
  /** Lower bound on the GPU time (ms) the requests need, on one GPU group of the fleet's kind. */
  busyMs: number;
  /** Of which compute and KV reads (ms), summed before the overlap rule. */
  computeMs: number;
  memoryMs: number;
  requests: number;
  /** workers · requests / busyMs, per second: no policy sustains a higher request rate. */
  requestsPerS: number;
  /** The ideal hit rate it priced the prompts at (the same pass as idealHitRate's). */
  ideal: IdealHit;
}

export function workBound(
  requests: Iterable<BenchRequest>,
  model: RooflineTimeModel,
  workers: number,
  blockSize = 16,
  seed = 0,
): WorkBound {
  // The weights are read once per step whatever the step holds: the bound charges none of them.
  const weightsMs = model.breakdown({ prefill: [], decodeSeqs: 0, decodeContextTokens: 0 }).memoryMs;
  let compute = 0;
  let memory = 0;
  let n = 0;
  const prefill = [{ newTokens: 0, contextLen: 0 }];
  const ideal = idealHitRate(requests, blockSize, seed, (r, hit) => {
    n++;
    const p = r.promptTokens.length;
    prefill[0]!.newTokens = p - hit;
    prefill[0]!.contextLen = p;
    const pre = model.breakdown({ prefill, decodeSeqs: 0, decodeContextTokens: 0 });
    compute += pre.computeMs;
    memory += pre.memoryMs - weightsMs;
    // The first output token comes with the prefill; the k-th after it attends to p + k − 1
    // earlier tokens at least.
    // n answers (parallel sampling) share the prefill and decode each on its own.
    for (const out of r.sampleTokens ?? [r.maxTokens]) {
      const steps = Math.max(0, out - 1);
      if (steps === 0) continue;
      const contexts = steps * p + (steps * (steps - 1)) / 2;
      const dec = model.breakdown({ prefill: [], decodeSeqs: steps, decodeContextTokens: contexts });
      compute += dec.computeMs;
      memory += dec.memoryMs - weightsMs;
    }
  });
  const beta = model.params.overlapPenalty;
  const busyMs = Math.max(compute, memory) + beta * Math.min(compute, memory);
  return {
    busyMs,
    computeMs: compute,
    memoryMs: memory,
    requests: n,
    requestsPerS: busyMs > 0 ? (workers * n * 1000) / busyMs : Infinity,
    ideal,
  };
}

/** A policy's capacity beside the work bound of the requests its capacity probe replayed. */
export interface BoundAtCapacity {
  name: string;
  capacityRps: number;
  boundRps: number;
}

/**
 * The work bound at each policy's capacity: a capacity probe replays requests of its own (a longer
 * probe reuses more of its earlier prompts, and its bound is higher), so a capacity is set beside
 * the bound of those requests — never beside the bound of the plain run's requests, which may be
 * lower. The bound holds for sustained load: a capacity above it means probes too short for the
 * queues to build, and the line says so.
 */
export function boundsAtCapacity(policies: readonly { name: string; capacity: { requests_per_s: number | null; work_bound_rps?: number | null } | null }[]): BoundAtCapacity[] {
  return policies.flatMap((p) =>
    p.capacity && p.capacity.requests_per_s !== null && p.capacity.work_bound_rps != null && Number.isFinite(p.capacity.work_bound_rps)
      ? [{ name: p.name, capacityRps: p.capacity.requests_per_s, boundRps: p.capacity.work_bound_rps }]
      : [],
  );
}

/** One line: each policy's bound at its capacity, and its capacity as a fraction of it; null if none. */
export function describeBoundsAtCapacity(bounds: readonly BoundAtCapacity[]): string | null {
  if (bounds.length === 0) return null;
  const parts = bounds.map((b) => {
    const of = b.capacityRps / b.boundRps;
    return `${b.name} ${b.boundRps.toFixed(1)} req/s (capacity ${b.capacityRps.toFixed(1)}, ${of.toFixed(2)} of it${of > 1 ? ': above the bound, so its probes were too short for queues to build' : ''})`;
  });
  return `work bound of the requests each capacity replayed (no policy sustains more on them): ${parts.join('; ')}`;
}
