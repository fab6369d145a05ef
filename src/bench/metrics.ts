/**
 * Summary statistics of a simulated run, with the definitions of vLLM's
 * benchmarks/benchmark_serving.py:
 * - TTFT = arrival → first token; E2E = arrival → last token; TPOT = (E2E − TTFT)/(output − 1)
 *   for requests with more than one output token; ITL = gaps between consecutive tokens.
 * - Percentiles interpolate linearly between order statistics (numpy's default). ITL's samples
 *   (one per engine step) are kept in a fixed-size histogram (util/latency-histogram.ts): its
 *   percentiles are within 0.05% of the exact ones, its mean and maximum exact.
 * - Throughput = completed / duration, output tokens / duration; duration = first arrival → last
 *   completion.
 * - Goodput = completed requests meeting every given SLO per second, with the rule of slo.ts:
 *   TTFT ≤ slo_ttft (+ slo_ttft_per_1k per 1,000 prompt tokens, when set) and TPOT ≤ slo_tpot; a
 *   single-token answer has no TPOT and meets a TPOT SLO.
 * - Attainment = requests meeting the SLO / all requests (rejected and shed ones miss it); null
 *   when no SLO is given. attainment_by_prompt splits it by prompt length (below 2,048 tokens,
 *   2,048–8,191, 8,192 and more), over the completed requests of each band: an aggregate of 90%
 *   can hide a band of long prompts that mostly miss, which a router can trade for the short ones.
 * - prefix_hit_rate = Σ cached prompt tokens / Σ prompt tokens over completed requests that a
 *   worker generated (not those the response cache answered).
 * - With the response cache: TTFT and E2E cover every completed request (a hit's are the
 *   gateway's delay); TPOT leaves hits out (they arrive whole; a request that followed an
 *   identical one in flight keeps its pace); cache_hit_rate = (hits + coalesced) / requests.
 * - by_priority (runs with admission or a priority mix): per class, requests offered, completed,
 *   shed (refused with 429/503: admission, queue, or no worker), queued (waited in the admission
 *   queue), TTFT of its completed requests, the latency of its refusals (arrival → refusal) and
 *   goodput_fraction = requests meeting the SLO (completed ones, without an SLO) / offered.
 * - gpu_seconds = GPUs (workers × tp) × duration; cost per million output tokens =
 *   gpu_seconds / 3600 × $/GPU-hour / (output tokens / 10⁶).
 */
import type { SimResult } from '../sim/fleet-sim.js';
import type { SimRequest } from '../sim/sim-request.js';
import { PRIORITY_CLASSES, type PriorityClass } from '../admission/classes.js';
import { hasSlo, meetsSlo, ttftBoundMs, type Slo } from './slo.js';
import type { LatencyHistogram } from '../util/latency-histogram.js';

export interface Dist {
  p50: number | null;
  p90: number | null;
  p99: number | null;
  mean: number | null;
}

export interface PolicySummary {
  name: string;
  requests: number;
  completed: number;
  rejected: number;
  shed: number;
  preemptions: number;
  /**
   * Of those, requests preempted while still prefilling their prompt: admitted by their first
   * chunk (as vLLM admits) to a worker whose KV could not hold the rest, they gave up the prefill
   * done so far and queued again.
   */
  preemptions_in_prefill: number;
  ttft_ms: Dist;
  tpot_ms: Dist;
  itl_ms: Dist;
  /** The inter-token gaps' far tail (weightedTail). */
  itl_tail_ms: { p99_9: number | null; max: number | null };
  e2e_ms: Dist;
  duration_s: number;
  throughput_rps: number;
  output_tokens_per_s: number;
  total_tokens_per_s: number;
  prefix_hit_rate: number;
  /** Requests the response cache answered (hits and single-flight followers) / requests; 0 without it. */
  cache_hit_rate: number;
  gpu_seconds: number;
  /** Σ modelled step time over workers: the GPU time actually spent computing. */
  busy_gpu_seconds: number;
  cost_per_million_output_tokens: number | null;
  goodput_rps: number;
  /** Fraction of all requests (refused ones included) that met the SLO; null without an SLO. */
  attainment: number | null;
  /**
   * Why completed requests missed the SLO (with an SLO): TTFT over its bound only, TPOT over its
   * bound only, or both; each split by prompt length (≥ 4,096 tokens: "long"). Refused requests
   * are in `rejected` and `shed`.
   */
  slo_misses?: { ttft: number; tpot: number; both: number; long_prompt: number };
  /** Attainment per prompt-length band (PROMPT_BANDS), over each band's completed requests; with an SLO. */
  attainment_by_prompt?: BandAttainment[];
  scrape_interval_ms: number;
  refusals: Record<string, number>;
  /** Per priority class (with admission or a priority mix). */
  by_priority?: Record<PriorityClass, ClassSummary>;
  sim_wall_ms?: number;
}

export interface ClassSummary {
  requests: number;
  completed: number;
  shed: number;
  queued: number;
  ttft_ms: { p50: number | null; p90: number | null; p99: number | null };
  shed_latency_ms: { p50: number | null; p99: number | null };
  goodput_fraction: number;
}

export interface SummaryOptions {
  /** GPUs per worker (tensor parallelism). */
  tp: number;
  gpuHourCost: number;
  sloTtftMs?: number;
  /** Extra TTFT allowed per 1,000 prompt tokens, ms (see slo.ts). */
  sloTtftPer1kMs?: number;
  sloTpotMs?: number;
  /** Leave out sim_wall_ms, the one nondeterministic field (for byte-identical JSON). */
  omitWallTime?: boolean;
  /** Add by_priority. */
  byPriority?: boolean;
}

const round = (x: number, digits = 3): number => {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
};

/** Linear-interpolated percentile of ascending-sorted values (numpy's default method). */
export function percentile(sorted: ArrayLike<number>, p: number): number | null {
  const n = sorted.length;
  if (n === 0) return null;
  const pos = (p / 100) * (n - 1);
  const lo = Math.floor(pos);
  const hi = Math.min(lo + 1, n - 1);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

export function distribution(values: ArrayLike<number>): Dist {
  const s = Float64Array.from(values).sort();
  if (s.length === 0) return { p50: null, p90: null, p99: null, mean: null };
  let sum = 0;
  for (let i = 0; i < s.length; i++) sum += s[i]!;
  return {
    p50: round(percentile(s, 50)!),
    p90: round(percentile(s, 90)!),
    p99: round(percentile(s, 99)!),
    mean: round(sum / s.length),
  };
}

/**
 * Distribution of values that each occur `weight` times (ITL: one step duration per decoding
 * sequence), without expanding them. Percentiles interpolate on the expanded order statistics.
 */
export function weightedDistribution(values: ArrayLike<number>, weights: ArrayLike<number>): Dist {
  const q = weightedQuantiles(values, weights);
  if (q === null) return { p50: null, p90: null, p99: null, mean: null };
  return { p50: round(q.pct(50)), p90: round(q.pct(90)), p99: round(q.pct(99)), mean: round(q.mean) };
}

/**
 * The far tail of weighted samples: p99.9 and the largest. Inter-token gaps need it beside the
 * p99: a router that sends several uncached prompts to one worker at once makes fewer, longer
 * stalls than one that spreads them, so its p99 can be the lower while its p99.9 is twice as high.
 */
export function weightedTail(values: ArrayLike<number>, weights: ArrayLike<number>): { p99_9: number | null; max: number | null } {
  const q = weightedQuantiles(values, weights);
  if (q === null) return { p99_9: null, max: null };
  return { p99_9: round(q.pct(99.9)), max: round(q.pct(100)) };
}

/** Percentiles of `values` each counted `weights[i]` times, interpolated as `percentile` does; null when the weights sum to 0. */
function weightedQuantiles(values: ArrayLike<number>, weights: ArrayLike<number>): { pct(p: number): number; mean: number } | null {
  const n = values.length;
  const order = new Uint32Array(n);
  for (let i = 0; i < n; i++) order[i] = i;
  order.sort((a, b) => values[a]! - values[b]!);
  let total = 0;
  let sum = 0;
  for (let i = 0; i < n; i++) {
    total += weights[i]!;
    sum += values[i]! * weights[i]!;
  }
  if (total === 0) return null;
  // Value at 0-based rank r of the expanded list.
  const cum = new Float64Array(n);
  let acc = 0;
  for (let i = 0; i < n; i++) {
    acc += weights[order[i]!]!;
    cum[i] = acc;
  }
  const at = (r: number): number => {
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cum[mid]! > r) hi = mid;
      else lo = mid + 1;
    }
    return values[order[lo]!]!;
  };
  const pct = (p: number): number => {
    const pos = (p / 100) * (total - 1);
    const lo = Math.floor(pos);
    const a = at(lo);
    const b = at(Math.min(lo + 1, total - 1));
    return a + (b - a) * (pos - lo);
  };
  return { pct, mean: sum / total };
}

/**
 * Distribution of a latency histogram's samples: percentiles within HISTOGRAM_RELATIVE_ERROR
 * (0.05%) of the exact ones, the mean exact.
 */
export function histogramDistribution(h: LatencyHistogram): Dist {
  const [p50, p90, p99] = h.percentiles([50, 90, 99]);
  const mean = h.mean();
  if (mean === null) return { p50: null, p90: null, p99: null, mean: null };
  return { p50: round(p50!), p90: round(p90!), p99: round(p99!), mean: round(mean) };
}

/** The far tail of a latency histogram (as weightedTail): p99.9 within its resolution, the largest exact. */
export function histogramTail(h: LatencyHistogram): { p99_9: number | null; max: number | null } {
  if (h.total === 0) return { p99_9: null, max: null };
  const [p999] = h.percentiles([99.9]);
  return { p99_9: round(p999!), max: round(h.max) };
}

export function sloOf(o: SummaryOptions): Slo {
  const s: Slo = {};
  if (o.sloTtftMs !== undefined) s.ttftMs = o.sloTtftMs;
  if (o.sloTtftPer1kMs !== undefined) s.ttftPer1kMs = o.sloTtftPer1kMs;
  if (o.sloTpotMs !== undefined) s.tpotMs = o.sloTpotMs;
  return s;
}

/** Whether completed request i of a run met the SLO. */
function metSlo(c: SimResult['completed'], i: number, slo: Slo): boolean {
  // The same arithmetic as summarize, so goodput and attainment agree to the last bit.
  const t = c.firstToken[i]! - c.arrival[i]!;
  const e = c.finish[i]! - c.arrival[i]!;
  const out = c.outputTokens[i]!;
  const tp = out > 1 && c.fromCache?.[i] !== 1 ? (e - t) / (out - 1) : undefined;
  return meetsSlo(slo, t, tp, c.promptTokens[i]!);
}

/**
 * Follows a run as it goes (FleetSimOptions.stopWhen) and tells when its attainment can no longer
 * reach `target`: of at most `maxRequests` requests in all, the misses so far leave too few to
 * meet it. Misses so far: refusals, completed requests that missed the SLO, and requests in
 * flight whose TTFT is already past their bound (their first token came, or will come, too late).
 * A run it stops is one whose reported attainment (ProbeFigures.attainment, 4 decimals) would have
 * been below the target.
 */
export class AttainmentWatch {
  private seen = 0;
  private missed = 0;
  /** The bound at the last `decided` (the one a stopped run reports). */
  lastBound = 1;

  constructor(
    private readonly slo: Slo,
    private readonly target: number,
    private readonly maxRequests: number,
  ) {}

  decided(r: SimResult, now = -Infinity, inflight: Iterable<SimRequest> = []): boolean {
    this.lastBound = this.bound(r, now, inflight);
    return this.lastBound < this.target - 0.00005;
  }

  /** The highest attainment the run can still end with, at virtual time `now`. */
  bound(r: SimResult, now = -Infinity, inflight: Iterable<SimRequest> = []): number {
    const c = r.completed;
    for (; this.seen < c.arrival.length; this.seen++) if (!metSlo(c, this.seen, this.slo)) this.missed++;
    let late = 0;
    for (const rec of inflight) {
      const ttft = (rec.firstToken ?? now) - rec.arrivedAt;
      if (ttft > ttftBoundMs(this.slo, rec.req.promptTokens.length)) late++;
    }
    const misses = this.missed + r.rejected + r.shed + late;
    return this.maxRequests > 0 ? Math.max(0, this.maxRequests - misses) / this.maxRequests : 0;
  }
}

/** Requests of a run that met the SLO (completed ones only: refusals never meet it). */
function countMeetingSlo(r: SimResult, slo: Slo): number {
  const c = r.completed;
  let good = 0;
  for (let i = 0; i < c.arrival.length; i++) if (metSlo(c, i, slo)) good++;
  return good;
}

/**
 * Prompt-length bands of attainment_by_prompt, by their first token count: short chat turns,
 * documents and long histories, long contexts.
 */
export const PROMPT_BANDS = [
  { band: '<2k', from: 0 },
  { band: '2k-8k', from: 2048 },
  { band: '>=8k', from: 8192 },
] as const;

/** A band with fewer completed requests than this is reported but not held to a floor. */
export const MIN_BAND_REQUESTS = 20;

export interface BandAttainment {
  band: (typeof PROMPT_BANDS)[number]['band'];
  /** Completed requests with a prompt in the band. */
  requests: number;
  /** Of those, the fraction that met the SLO (null for an empty band). */
  attainment: number | null;
}

/**
 * Attainment per prompt-length band, over each band's completed requests (a refused request's
 * prompt length is not recorded; its miss counts in the aggregate attainment only).
 */
export function attainmentByPrompt(r: SimResult, slo: Slo): BandAttainment[] {
  const c = r.completed;
  const n = PROMPT_BANDS.length;
  const total = new Array<number>(n).fill(0);
  const good = new Array<number>(n).fill(0);
  for (let i = 0; i < c.arrival.length; i++) {
    const p = c.promptTokens[i]!;
    let b = n - 1;
    while (b > 0 && p < PROMPT_BANDS[b]!.from) b--;
    total[b]!++;
    if (metSlo(c, i, slo)) good[b]!++;
  }
  return PROMPT_BANDS.map((x, b) => ({ band: x.band, requests: total[b]!, attainment: total[b]! > 0 ? round(good[b]! / total[b]!, 4) : null }));
}

/** The lowest attainment among the bands with at least MIN_BAND_REQUESTS requests (1 if none has). */
export function worstBandAttainment(bands: readonly BandAttainment[]): number {
  let worst = 1;
  for (const b of bands) if (b.requests >= MIN_BAND_REQUESTS && b.attainment !== null && b.attainment < worst) worst = b.attainment;
  return worst;
}

/** Fraction of all requests (rejected and shed included) that met the SLO; 0 for an empty run. */
export function attainmentOf(r: SimResult, slo: Slo): number {
  return r.requests > 0 ? countMeetingSlo(r, slo) / r.requests : 0;
}

export function summarize(r: SimResult, o: SummaryOptions): PolicySummary {
  const slo = sloOf(o);
  const c = r.completed;
  const n = c.arrival.length;
  const ttft = new Float64Array(n);
  const e2e = new Float64Array(n);
  const tpot: number[] = [];
  let promptTokens = 0;
  let cachedTokens = 0;
  let outputTokens = 0;
  let workerPromptTokens = 0;
  let good = 0;
  const misses = { ttft: 0, tpot: 0, both: 0, long_prompt: 0 };
  const from = c.fromCache;
  for (let i = 0; i < n; i++) {
    const t = c.firstToken[i]! - c.arrival[i]!;
    const e = c.finish[i]! - c.arrival[i]!;
    ttft[i] = t;
    e2e[i] = e;
    const out = c.outputTokens[i]!;
    const cached = from === undefined ? 0 : from[i]!;
    let tp: number | undefined;
    if (out > 1 && cached !== 1) {
      tp = (e - t) / (out - 1);
      tpot.push(tp);
    }
    promptTokens += c.promptTokens[i]!;
    if (cached === 0) {
      workerPromptTokens += c.promptTokens[i]!;
      cachedTokens += c.cachedTokens[i]!;
    }
    // Throughput and cost count every answer of n sampled ones; TPOT above is the longest's pace.
    outputTokens += c.answeredTokens?.[i] ?? out;
    if (meetsSlo(slo, t, tp, c.promptTokens[i]!)) good++;
    else {
      const slowFirst = t > ttftBoundMs(slo, c.promptTokens[i]!);
      const slowDecode = slo.tpotMs !== undefined && tp !== undefined && tp > slo.tpotMs;
      if (slowFirst && slowDecode) misses.both++;
      else if (slowFirst) misses.ttft++;
      else misses.tpot++;
      if (c.promptTokens[i]! >= 4096) misses.long_prompt++;
    }
  }
  const durationS = n > 0 ? (r.lastFinishMs - r.firstArrivalMs) / 1000 : 0;
  const per = (x: number) => (durationS > 0 ? x / durationS : 0);
  const gpus = r.workers.length * o.tp;
  const gpuSeconds = gpus * durationS;
  const cost = (gpuSeconds / 3600) * o.gpuHourCost;
  const s: PolicySummary = {
    name: r.policy,
    requests: r.requests,
    completed: n,
    rejected: r.rejected,
    shed: r.shed,
    preemptions: r.workers.reduce((a, w) => a + w.preemptions, 0),
    preemptions_in_prefill: r.workers.reduce((a, w) => a + w.prefillPreemptions, 0),
    ttft_ms: distribution(ttft),
    tpot_ms: distribution(tpot),
    itl_ms: histogramDistribution(r.itl),
    itl_tail_ms: histogramTail(r.itl),
    e2e_ms: distribution(e2e),
    duration_s: round(durationS),
    throughput_rps: round(per(n)),
    output_tokens_per_s: round(per(outputTokens)),
    total_tokens_per_s: round(per(outputTokens + promptTokens)),
    prefix_hit_rate: round(workerPromptTokens > 0 ? cachedTokens / workerPromptTokens : 0, 4),
    cache_hit_rate: r.cache && r.requests > 0 ? round((r.cache.hits + r.cache.coalesced) / r.requests, 4) : 0,
    gpu_seconds: round(gpuSeconds),
    busy_gpu_seconds: round((o.tp * r.workers.reduce((a, w) => a + w.busyMs, 0)) / 1000),
    cost_per_million_output_tokens: outputTokens > 0 ? round(cost / (outputTokens / 1e6), 4) : null,
    goodput_rps: round(per(good)),
    attainment: hasSlo(slo) ? round(r.requests > 0 ? good / r.requests : 0, 4) : null,
    ...(hasSlo(slo) ? { slo_misses: misses, attainment_by_prompt: attainmentByPrompt(r, slo) } : {}),
    scrape_interval_ms: r.scrapeIntervalMs,
    refusals: Object.fromEntries(Object.entries(r.refusals).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))),
  };
  if (o.byPriority && r.byClass) s.by_priority = byPriority(r, slo);
  if (!o.omitWallTime) s.sim_wall_ms = Math.round(r.wallMs);
  return s;
}

function byPriority(r: SimResult, slo: Slo): Record<PriorityClass, ClassSummary> {
  const bc = r.byClass!;
  const c = r.completed;
  const ttft: number[][] = [[], [], []];
  const good = [0, 0, 0];
  for (let i = 0; i < c.arrival.length; i++) {
    const k = c.cls?.[i] ?? 1;
    const t = c.firstToken[i]! - c.arrival[i]!;
    const e = c.finish[i]! - c.arrival[i]!;
    const out = c.outputTokens[i]!;
    const tp = out > 1 && c.fromCache?.[i] !== 1 ? (e - t) / (out - 1) : undefined;
    ttft[k]!.push(t);
    if (meetsSlo(slo, t, tp, c.promptTokens[i]!)) good[k]!++;
  }
  const shedLatency: number[][] = [[], [], []];
  for (let i = 0; i < bc.refused.cls.length; i++) {
    if (bc.refused.status[i] !== 400) shedLatency[bc.refused.cls[i]!]!.push(bc.refused.latencyMs[i]!);
  }
  const out = {} as Record<PriorityClass, ClassSummary>;
  PRIORITY_CLASSES.forEach((cls, k) => {
    const t = distribution(ttft[k]!);
    const sl = distribution(shedLatency[k]!);
    const requests = bc.requests[k]!;
    out[cls] = {
      requests,
      completed: ttft[k]!.length,
      shed: shedLatency[k]!.length,
      queued: bc.queued[k]!,
      ttft_ms: { p50: t.p50, p90: t.p90, p99: t.p99 },
      shed_latency_ms: { p50: sl.p50, p99: sl.p99 },
      goodput_fraction: requests > 0 ? round(good[k]! / requests, 4) : 0,
    };
  });
  return out;
}
