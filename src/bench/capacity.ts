/**
 * Capacity at SLO: the highest arrival-rate multiplier (`--rate-scale`) at which at least a target
 * fraction of requests (default 0.9) meets the SLO (slo.ts), for one policy. Optionally
 * (`minBandAttainment`) every prompt-length band must also meet a floor (metrics.ts,
 * attainment_by_prompt): a policy cannot then reach its capacity by letting the long prompts miss
 * while the short ones, the larger share, carry the aggregate.
 *
 * Search, each probe a fresh fleet replaying the same request stream at rate × scale (for a
 * built-in workload, lengthened to last at least CAPACITY_MIN_SECONDS: run.ts):
 * 1. Bracket from the starting scale: if it meets the target, double until a probe misses;
 *    otherwise halve until one meets it.
 * 2. Bisect the bracket geometrically (the midpoint of log scale) until high / low ≤ 1 + precision
 *    (2% by default).
 * 3. Report the highest probed scale that met the target. Attainment is not perfectly monotone in
 *    the rate (a different rate changes batching, eviction and routing), so the search never
 *    claims more than it measured.
 *
 * The number of probes is capped (default 14): a bracket that takes many doublings or halvings
 * leaves fewer for bisection, and the result then says it did not converge (`converged: false`,
 * with the bracket it reached). If no probe meets the target the capacity is null.
 */

import type { BandAttainment } from './metrics.js';

export interface CapacityProbe {
  rate_scale: number;
  /**
   * The probe stopped as soon as its misses decided it: `attainment` is then the most it could
   * have reached, and its band figures are not measured.
   */
  stopped_early?: true;
  /** Offered arrival rate of this probe, requests/s. */
  requests_per_s: number;
  attainment: number;
  /** Requests the probe replayed, and the time between their first and last arrival, s. */
  requests?: number;
  span_s?: number;
  /** The lowest attainment of a prompt-length band with enough requests (when the probe measured it). */
  worst_band_attainment?: number;
  /** Attainment per prompt-length band (when the probe measured it). */
  attainment_by_prompt?: BandAttainment[];
}

export interface CapacityResult {
  /** Highest probed rate scale that met the target; null if none did. */
  rate_scale: number | null;
  /** Offered rate at that scale, requests/s. */
  requests_per_s: number | null;
  /**
   * The work bound (work-bound.ts) of the requests replayed at that scale, requests/s: no policy
   * sustains more on them (set by the bench, which knows the time model; absent otherwise).
   */
  work_bound_rps?: number | null;
  /** Attainment measured at that scale. */
  attainment: number | null;
  /** The lowest prompt-length band's attainment at that scale, and every band's (when measured). */
  worst_band_attainment?: number | null;
  attainment_by_prompt?: BandAttainment[] | null;
  /** Final bracket: highest scale that met the target, lowest above it that missed (null: none found). */
  bracket: [number | null, number | null];
  /** Whether the bracket closed to the requested precision within the probe budget. */
  converged: boolean;
  /** Every probe, in the order run. */
  probes: CapacityProbe[];
}

export interface CapacitySearchOptions {
  /** Scale of the first probe (the run's --rate-scale). Default 1. */
  start?: number;
  /** Attainment to meet, 0–1. Default 0.9. */
  target?: number;
  /** Relative precision of the bracket. Default 0.02. */
  precision?: number;
  /** Probe budget. Default 14. */
  maxProbes?: number;
  /** Also required of every prompt-length band (the probe's worst_band_attainment), 0–1. Default: none. */
  minBandAttainment?: number;
  /**
   * Told, before each probe (`probing`) is awaited, the scales the search probes next if it meets
   * the target and if it misses (null: the search would stop): a caller with idle threads may
   * start those probes ahead. The search still asks `probe` for exactly the scales a serial search asks for,
   * in the same order, so its result is the serial one.
   */
  ahead?: (probing: number, ifMet: number | null, ifMissed: number | null) => void;
}

const CAPACITY_DEFAULTS = { target: 0.9, precision: 0.02, maxProbes: 14 } as const;

/** A search's settings with the defaults applied: what it judges a probe by, and how far it goes. */
export interface CapacitySettings {
  target: number;
  precision: number;
  maxProbes: number;
  minBandAttainment: number | undefined;
}

export function capacitySettings(o: Pick<CapacitySearchOptions, 'target' | 'precision' | 'maxProbes' | 'minBandAttainment'>): CapacitySettings {
  return {
    target: o.target ?? CAPACITY_DEFAULTS.target,
    precision: o.precision ?? CAPACITY_DEFAULTS.precision,
    maxProbes: o.maxProbes ?? CAPACITY_DEFAULTS.maxProbes,
    minBandAttainment: o.minBandAttainment,
  };
}

/** Whether a probe met the search's target (and the band floor, if one is set). */
export function meetsTarget(p: Pick<CapacityProbe, 'attainment' | 'worst_band_attainment'>, target: number, floor: number | undefined): boolean {
  return p.attainment >= target && (floor === undefined || (p.worst_band_attainment !== undefined && p.worst_band_attainment >= floor));
}

/** Bisections that close a bracket [lo, hi] to hi / lo ≤ 1 + precision (each halves its log width). */
function bisectionsToClose(lo: number, hi: number, precision: number): number {
  const width = Math.log(hi / lo) / Math.log(1 + precision);
  return width <= 1 ? 0 : Math.ceil(Math.log2(width));
}

/**
 * How many more probes searchCapacity makes after these outcomes (in the order probed), for a
 * progress estimate. Exact once the bracket has both ends: the bisections left. Before that, one
 * more doubling or halving and the bisections of the factor-2 bracket it would close (a capacity
 * several doublings away takes more). Never more than the budget left.
 */
export function probesLeft(outcomes: ReadonlyArray<{ scale: number; met: boolean }>, precision: number = CAPACITY_DEFAULTS.precision, maxProbes: number = CAPACITY_DEFAULTS.maxProbes): number {
  let lo: number | null = null;
  let hi: number | null = null;
  for (const o of outcomes) {
    if (o.met) lo = o.scale;
    else hi = o.scale;
  }
  const budget = Math.max(0, maxProbes - outcomes.length);
  const left = lo !== null && hi !== null ? bisectionsToClose(lo, hi, precision) : (outcomes.length === 0 ? 2 : 1) + bisectionsToClose(1, 2, precision);
  return Math.min(budget, left);
}

/** Runs one probe at `rateScale`: a fresh fleet, the same request stream. */
export type ProbeFn = (
  rateScale: number,
) => Promise<{ attainment: number; requests_per_s: number; requests?: number; span_s?: number; worst_band_attainment?: number; attainment_by_prompt?: BandAttainment[]; stopped_early?: true }>;

const r6 = (x: number): number => Math.round(x * 1e6) / 1e6;

export async function searchCapacity(probe: ProbeFn, o: CapacitySearchOptions = {}): Promise<CapacityResult> {
  const start = o.start ?? 1;
  const target = o.target ?? CAPACITY_DEFAULTS.target;
  const precision = o.precision ?? CAPACITY_DEFAULTS.precision;
  const maxProbes = o.maxProbes ?? CAPACITY_DEFAULTS.maxProbes;
  if (!(start > 0) || !Number.isFinite(start)) throw new Error(`capacity search: start scale must be positive, got ${start}`);
  if (!(target > 0 && target <= 1)) throw new Error(`capacity search: target attainment must be in (0, 1], got ${target}`);
  if (!(precision > 0)) throw new Error(`capacity search: precision must be positive, got ${precision}`);
  if (!Number.isInteger(maxProbes) || maxProbes < 1) throw new Error(`capacity search: probe budget must be a positive integer, got ${maxProbes}`);
  const floor = o.minBandAttainment;
  if (floor !== undefined && !(floor > 0 && floor <= 1)) throw new Error(`capacity search: band attainment floor must be in (0, 1], got ${floor}`);
  const meets = (p: CapacityProbe): boolean => meetsTarget(p, target, floor);

  const probes: CapacityProbe[] = [];
  const run = async (scale: number): Promise<boolean> => {
    const p = await probe(scale);
    const q: CapacityProbe = { rate_scale: r6(scale), requests_per_s: Math.round(p.requests_per_s * 1000) / 1000, attainment: p.attainment };
    if (p.requests !== undefined) q.requests = p.requests;
    if (p.span_s !== undefined) q.span_s = p.span_s;
    if (p.worst_band_attainment !== undefined) q.worst_band_attainment = p.worst_band_attainment;
    if (p.attainment_by_prompt !== undefined) q.attainment_by_prompt = p.attainment_by_prompt;
    if (p.stopped_early === true) q.stopped_early = true;
    probes.push(q);
    return meets(q);
  };
  let lo: number | null = null; // met the target
  let hi: number | null = null; // missed it
  // 1. Bracket: double from a scale that met the target, halve from one that missed, until both
  //    are known. 2. Bisect on a log scale until the bracket is within the precision.
  const next = (lo: number | null, hi: number | null, probed: number): number | null => {
    if (probed >= maxProbes) return null;
    if (lo === null) return hi! / 2;
    if (hi === null) return lo * 2;
    return hi / lo > 1 + precision ? Math.sqrt(lo * hi) : null;
  };
  for (let s: number | null = start; s !== null; ) {
    o.ahead?.(s, next(s, hi, probes.length + 1), next(lo, s, probes.length + 1));
    if (await run(s)) lo = s;
    else hi = s;
    s = next(lo, hi, probes.length);
  }
  // 3. The highest probed scale that met the target.
  let best: CapacityProbe | null = null;
  for (const p of probes) if (meets(p) && (best === null || p.rate_scale > best.rate_scale)) best = p;
  return {
    rate_scale: best?.rate_scale ?? null,
    requests_per_s: best?.requests_per_s ?? null,
    attainment: best?.attainment ?? null,
    ...(probes.some((p) => p.worst_band_attainment !== undefined)
      ? { worst_band_attainment: best?.worst_band_attainment ?? null, attainment_by_prompt: best?.attainment_by_prompt ?? null }
      : {}),
    bracket: [lo === null ? null : r6(lo), hi === null ? null : r6(hi)],
    converged: lo !== null && hi !== null && hi / lo <= 1 + precision,
    probes,
  };
}

/** Policies that are not peers: kvgate itself and the oracles. */
const NOT_PEERS: readonly string[] = ['kvgate', 'oracle', 'oracle-greedy'];

export interface CapacityRatios {
  /** The peer with the highest capacity among the policies run (null if no peer ran or none met the target). */
  best_peer: string | null;
  /** Each policy's capacity ÷ round-robin's (null when either is missing). */
  vs_round_robin: Record<string, number | null>;
  /** Each policy's capacity ÷ the best peer's. */
  vs_best_peer: Record<string, number | null>;
}

/** Ratios of capacities (rate scales, same requests) to round-robin's and to the best peer's. */
export function capacityRatios(caps: ReadonlyArray<{ name: string; rate_scale: number | null }>): CapacityRatios {
  const by = new Map(caps.map((c) => [c.name, c.rate_scale]));
  let bestPeer: string | null = null;
  for (const c of caps) {
    if (NOT_PEERS.includes(c.name) || c.rate_scale === null) continue;
    if (bestPeer === null || c.rate_scale > by.get(bestPeer)!) bestPeer = c.name;
  }
  const ratio = (a: number | null, b: number | null | undefined): number | null =>
    a === null || b === null || b === undefined || b <= 0 ? null : Math.round((a / b) * 1000) / 1000;
  const rr = by.get('round-robin');
  const peer = bestPeer === null ? null : by.get(bestPeer)!;
  return {
    best_peer: bestPeer,
    vs_round_robin: Object.fromEntries(caps.map((c) => [c.name, ratio(c.rate_scale, rr)])),
    vs_best_peer: Object.fromEntries(caps.map((c) => [c.name, ratio(c.rate_scale, peer)])),
  };
}
