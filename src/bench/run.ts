/**
 * One bench: the same request source replayed once per policy, each on a fresh simulated fleet,
 * summarised into the results JSON and the data the HTML report draws. With `capacity`, each
 * policy's capacity at SLO is searched too (capacity.ts): more fresh fleets on the same request stream
 * at other rate scales; the run at the given rate scale is the first probe.
 */
import { MemoryStore } from '../cache/memory-store.js';
import { ResponseCache } from '../cache/response-cache.js';
import { buildEngineConfig, listGpus } from '../engine/profiles.js';
import type { EngineConfig } from '../engine/types.js';
import { createPolicy, policyNames, type PolicyOptions } from '../scheduler/registry.js';
import { simulateFleet, type AdmitResult, type SimResult } from '../sim/fleet-sim.js';
import type { SimRequest } from '../sim/sim-request.js';
import type { RouteRequest } from '../scheduler/types.js';
import { expandSessions, scaleArrivals, takeLasting, takeRequests } from '../workload/sessions.js';
import { mix32 } from '../workload/tokens.js';
import { capacityRatios, capacitySettings, searchCapacity, type CapacityProbe, type CapacityRatios, type CapacityResult } from './capacity.js';
import { idealHitRate } from './ideal-hit.js';
import { workBound, type WorkBound } from './work-bound.js';
import { gpuMixLabel, meanHourCost, parseGpuMix, workerGpus } from './gpu-mix.js';
import { RooflineTimeModel } from '../engine/time-model.js';
import { AttainmentWatch, attainmentByPrompt, attainmentOf, distribution, sloOf, summarize, worstBandAttainment, type BandAttainment, type Dist, type PolicySummary, type SummaryOptions } from './metrics.js';
import { VirtualClock } from '../util/clock.js';
import { hasSlo, type Slo } from './slo.js';
import { draftEngineConfig, simSpeculation, summarizeSpec, type BenchSpecOptions, type SpecSummary } from './spec.js';
import type { BenchRequest, BenchSource } from '../workload/types.js';
import { classOfDraw, DEFAULT_VLLM_PRIORITY, type PriorityClass } from '../admission/classes.js';
import type { AdmissionSettings } from '../admission/controller.js';
import { peerAdmission, type PeerAdmissionName } from '../sim/peer-admission.js';
import type { SimDisaggOptions } from '../sim/disagg-sim.js';
import { summarizeDisagg, type DisaggRunSummary } from './disagg-summary.js';
import { recordsPath, writeRecords } from './records.js';

/** $/GPU-hour defaults: the GPU profiles' prices (src/engine/profiles.ts, with their sources). */
export const GPU_HOUR_COST: Record<string, number> = Object.fromEntries(listGpus().map((g) => [g.name, g.hourlyUsd]));

export interface BenchOptions {
  source: BenchSource;
  policies: string[];
  workers: number;
  /** One GPU kind (`h100`) or a mix (`h100:4,a100:4`, whose counts add up to `workers`): gpu-mix.ts. */
  gpu: string;
  /**
   * A mixed fleet's workers declare their GPU as their `hardware` (default true), as an operator
   * of a mixed pool would label them; false shows what a policy does with the pool unlabelled.
   */
  gpuLabels?: boolean;
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
  /** Extra TTFT allowed per 1,000 prompt tokens, ms (goodput, attainment and capacity). */
  sloTtftPer1kMs?: number;
  sloTpotMs?: number;
  /** Search each policy's capacity at SLO (needs an SLO). */
  capacity?: {
    target?: number;
    precision?: number;
    maxProbes?: number;
    minBandAttainment?: number;
    /**
     * Every probe's arrivals last at least this long (virtual s), taking more of the source's
     * requests at higher rates (built-in workloads; a trace has the rows it has). Default
     * CAPACITY_MIN_SECONDS; 0: every probe replays exactly the run's requests.
     */
    minSeconds?: number;
    /**
     * Run every probe to its end (default false: a probe stops once its misses decide it, its
     * attainment then an upper bound; the capacity found is the same either way).
     */
    fullProbes?: boolean;
  };
  gpuHourCost?: number;
  /** vLLM's --max-loras on every worker (requests naming an adapter; BenchRequest.adapter). */
  maxLoras?: number;
  /** Host-memory KV offload tier on every worker, GiB (EngineConfig.cpuOffload). */
  cpuOffloadGib?: number;
  /** Feed every policy with a prefix index from the engines' KV events (FleetSimOptions.kvEvents). */
  kvEvents?: boolean;
  /** The LoRA adapters every worker serves (a pool's `adapters`). */
  adapters?: readonly string[];
  overheadMs?: number;
  kvSampleMs?: number;
  omitWallTime?: boolean;
  /** Write each policy's completed requests as CSV (records.ts); perPolicy: one file each, named by policy. */
  records?: { file: string; perPolicy: boolean };
  /** Options per policy name (as in the config's `policy.options`); policies not named take their defaults. */
  policyOptions?: Readonly<Record<string, PolicyOptions>>;
  /**
   * Run with the gateway's response cache (in memory, virtual time), and each policy once more
   * without it for the GPU time it saves.
   */
  cache?: { ttlMs?: number; maxBytes?: number };
  /**
   * Tenant isolation of cached prompts (`cacheIsolation: tenant`): each policy runs isolated, and
   * once more shared, to show what isolation costs in prefix-cache hit rate, TTFT and (with
   * --capacity) capacity. `tenants` reassigns requests to that many tenants (by session, else by
   * request), as when many customers send the same application's prompts.
   */
  isolation?: { tenants?: number };
  /**
   * Reassign requests to this many tenants (t0 … tN−1) without isolation, e.g. as the prompt
   * classes of the speculative cascade's per-tenant acceptance. `isolation.tenants` wins.
   */
  tenants?: number;
  /** Admission control seam, created fresh per policy run. */
  admission?: () => (req: RouteRequest, now: number) => AdmitResult;
  /**
   * KV-pressure admission (`--admission on`): the gateway's AdmissionController in every run,
   * on the run's virtual clock. Absent: every request is routed (`--admission off`).
   */
  kvAdmission?: AdmissionSettings;
  /** A peer's admission instead (`--admission llm-d`: llm-d's flow control, src/sim/peer-admission.ts). */
  peerAdmission?: PeerAdmissionName;
  /**
   * Give each request a priority class drawn from this mix (`--priority-mix`), replacing the
   * source's own priorities; a session's turns share the class of its first turn.
   */
  priorityMix?: Record<PriorityClass, number>;
  /**
   * Every request declares max_tokens = max(this, its output length) (`--declared-max-tokens`):
   * the router and admission see the declared value, the engine stops at the output length.
   * Absent: max_tokens is the output length.
   */
  declaredMaxTokens?: number;
  /** Report by_priority per policy (set by --admission, --priority-mix). */
  byPriority?: boolean;
  /**
   * Gateway replicas (`--replicas`, src/sim/replicas.ts): `count` fresh policy instances per run,
   * arrivals round-robin, with or without shared routing knowledge. Absent: one gateway.
   */
  replicas?: { count: number; sharing: boolean; sharingDelayMs: number; shareLoad?: boolean };
  /**
   * The speculative cascade (`--spec-mode`, spec.ts): a draft pool beside the workers, which are
   * the target pool, and the gateway's cascade and controller in virtual time. Absent: no cascade.
   */
  speculative?: BenchSpecOptions;
  /** A disaggregated fleet (src/sim/disagg-sim.ts; `kvgate bench --disagg`, src/bench/disagg.ts). Absent: aggregated. */
  disagg?: SimDisaggOptions;
  /** Called before each fleet run: a policy's run, or one of its capacity probes (rateScale differs). */
  onPolicyStart?: (name: string, rateScale: number) => void;
  onProgress?: (name: string, arrivals: number, virtualMs: number) => void;
  /** Called after each fleet run with its summary. */
  onPolicyDone?: (summary: PolicySummary) => void;
  /** Called after each capacity probe. */
  onProbe?: (name: string, probe: CapacityProbe) => void;
  /**
   * Compute the run-wide figures, ideal_hit_rate and work_bound (default true); false leaves them
   * 0 and null, for a run of some of the policies whose figures join another's (--jobs).
   */
  runWide?: boolean;
  /**
   * Runs a capacity probe elsewhere (a worker thread, --jobs) if a thread is idle now: the
   * probe's figures, or null to run it here. Asked only for probes the search may need next
   * (capacity.ts, `ahead`); a probe's figures are the same wherever it runs.
   */
  remoteProbe?: (policy: string, rateScale: number, isolated: boolean | undefined) => RemoteProbe | null;
}

export interface WorkerSummary {
  id: string;
  /** The worker's GPU (its kind in a mixed fleet). */
  gpu: string;
  routed: number;
  preemptions: number;
  /** Of those, requests preempted while still prefilling their prompt. */
  preemptions_in_prefill: number;
  busy_gpu_s: number;
  kv_usage_mean: number;
  kv_usage_max: number;
}

/** What the response cache did in a policy's run, against the same policy without it. */
export interface CacheRunSummary {
  hits: number;
  /** Requests that followed an identical request in flight (single-flight). */
  coalesced: number;
  misses: number;
  stored: number;
  evictions: number;
  /**
   * GPU time the answered requests would have cost: the run without the cache's busy GPU time,
   * times their share of the tokens it processed (prompt tokens not served from the prefix
   * cache, plus output tokens), s. An average-cost estimate: in a batch, one more sequence costs
   * less than the average.
   */
  gpu_seconds_saved: number;
  /** Output tokens no worker had to generate. */
  output_tokens_saved: number;
  busy_gpu_seconds_without_cache: number;
  /** Busy GPU time with the cache minus without it, s (measured; near 0 while workers never idle). */
  busy_gpu_seconds_delta: number;
  ttft_ms_without_cache: Dist;
  tpot_ms_without_cache: Dist;
  e2e_ms_without_cache: Dist;
  /** TTFT of the requests a worker generated in the cache run. */
  ttft_ms_workers: Dist;
}

export type PolicyResult = PolicySummary & {
  workers: WorkerSummary[];
  /** Capacity at SLO (with --capacity), else null. */
  capacity: CapacityResult | null;
  /** The response cache's effect (with --cache on), else null. */
  cache: CacheRunSummary | null;
  /** What tenant isolation cost (with --cache-isolation tenant): the same policy without it. */
  isolation: IsolationSummary | null;
  /** The speculative cascade's figures (with --spec-mode), else null. */
  speculative: SpecSummary | null;
  /** What disaggregation did (a disaggregated fleet only). */
  disagg?: DisaggRunSummary;
};

export interface IsolationSummary {
  tenants: number | null;
  prefix_hit_rate_shared: number;
  ttft_ms_shared: Dist;
  busy_gpu_seconds_shared: number;
  /** Capacity without isolation (with --capacity), as a rate scale. */
  capacity_rate_scale_shared: number | null;
}

/** Run-level capacity settings and ratios (with --capacity). */
export interface CapacitySummary extends CapacityRatios {
  target_attainment: number;
  /** The floor every prompt-length band had to meet too (--min-band-attainment), or null. */
  min_band_attainment: number | null;
  /** How long every probe's arrivals lasted at least, virtual s (built-in workloads; 0: not extended). */
  min_seconds: number;
  precision: number;
  max_probes: number;
}

export interface BenchResults {
  trace: string;
  /** The workload's knobs, when the source is a built-in workload. */
  source_params: Record<string, number | string> | null;
  workers: number;
  gpu: string;
  /** A mixed fleet: whether its workers declared their GPU (BenchOptions.gpuLabels); else null. */
  gpu_labels: boolean | null;
  model: string;
  tp: number;
  seed: number;
  rate_scale: number;
  limit: number | null;
  skipped_rows: number;
  slo_ttft_ms: number | null;
  slo_ttft_per_1k_ms: number | null;
  slo_tpot_ms: number | null;
  gpu_hour_cost: number;
  /** Each policy's options beyond its defaults, as given (`--set`; the SLO a policy is run to). */
  policy_options: Readonly<Record<string, PolicyOptions>>;
  /** The response cache's settings (with --cache on), else null. */
  cache: { ttl_ms: number; max_bytes: number } | null;
  /** KV-pressure admission settings (with --admission on), else null. */
  admission: AdmissionSettings | null;
  /** The peer admission run instead (with --admission llm-d), else null. */
  peer_admission: PeerAdmissionName | null;
  /** The --priority-mix, normalised, else null. */
  priority_mix: Record<PriorityClass, number> | null;
  /** --declared-max-tokens: every request declared max_tokens = max(this, its output); null: its output. */
  declared_max_tokens: number | null;
  /** Gateway replicas (with --replicas), else null: one gateway. */
  replicas: { count: number; sharing: boolean; sharing_delay_ms: number; share_load: boolean } | null;
  /** Hit rate of one worker with unlimited KV on the same requests (ideal-hit.ts). */
  ideal_hit_rate: number;
  /**
   * The highest request rate no policy can sustain beyond (work-bound.ts): the requests' least
   * GPU time, busy_gpu_seconds, against the fleet's GPUs. Null for a time model it cannot read.
   */
  work_bound: { requests_per_s: number; busy_gpu_seconds: number } | null;
  /** Arrivals per second of the run's requests (offeredRate), the same for every policy; capacity probes report their own. */
  offered_rps: number;
  capacity: CapacitySummary | null;
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
/** Throws on an unknown policy name, or on options a policy's schema rejects (naming the knob). */
export function checkPolicies(names: readonly string[], options: Readonly<Record<string, PolicyOptions>> = {}): void {
  const known = policyNames();
  const unknown = names.filter((n) => !known.includes(n));
  if (unknown.length > 0) {
    throw new Error(`unknown policy ${unknown.map((n) => `'${n}'`).join(', ')} (known: ${known.join(', ')})`);
  }
  for (const n of names) createPolicy(n, options[n]);
}

/** How a run reshapes its source's requests (all optional). */
export interface RequestShaping {
  /** Priority classes drawn from a mix (--priority-mix). */
  mix?: { mix: Record<PriorityClass, number>; seed: number };
  /** Reassign to this many tenants (--tenants). */
  tenants?: number;
  /** Every request declares max_tokens = max(this, its output) (--declared-max-tokens). */
  declaredMaxTokens?: number;
}

/** Which of a source's requests a run replays, and how they are shaped. */
export interface RunRequests extends RequestShaping {
  /** Arrival rate multiplier (--rate-scale). */
  rateScale: number;
  /** At most this many requests, sessions counted whole (--limit; default: the whole source). */
  limit?: number;
  /** A capacity probe's least span of arrivals, ms (default 0: the source as is). */
  minMs?: number;
}

/**
 * The requests of one run: the first `limit` of the source (sessions counted whole), at rate ×
 * scale. With `minMs`, a source that can go on (openUnbounded) gives more, until its arrivals
 * last that long (capacity probes; see CAPACITY_MIN_SECONDS).
 */
export function benchRequests(source: BenchSource, run: RunRequests): Iterable<BenchRequest> {
  const { limit, rateScale, minMs = 0 } = run;
  const shaping: RequestShaping = run;
  let out: Iterable<BenchRequest>;
  if (minMs > 0 && limit === undefined && source.openUnbounded && source.size !== undefined) {
    // A probe that must last: the run's own requests, then as many more as arrive by minMs.
    out = takeLasting(scaleArrivals(source.openUnbounded(), rateScale), source.size, minMs);
  } else {
    const src = source.open();
    out = scaleArrivals(limit === undefined ? src : takeRequests(src, limit), rateScale);
  }
  if (shaping.mix) out = withPriorityMix(out, shaping.mix.mix, shaping.mix.seed);
  if (shaping.tenants !== undefined) out = retenant(out, shaping.tenants);
  if (shaping.declaredMaxTokens !== undefined) out = withDeclaredMaxTokens(out, shaping.declaredMaxTokens);
  return out;
}

/**
 * Requests that declare max_tokens = max(cap, output): as clients send a fixed cap and the answer
 * ends at its EOS, so the gateway cannot read each answer's length from the request. A session's
 * later turns declare the same way.
 */
export function* withDeclaredMaxTokens(src: Iterable<BenchRequest>, cap: number): Generator<BenchRequest> {
  const declare = (r: BenchRequest): BenchRequest => {
    const next = r.next;
    return {
      ...r,
      declaredMaxTokens: Math.max(cap, r.maxTokens),
      ...(next ? { next: (t: number) => { const x = next(t); return x && declare(x); } } : {}),
    };
  };
  for (const r of src) yield declare(r);
}

/**
 * Requests with a class drawn from `mix` (as vLLM's integer, DEFAULT_VLLM_PRIORITY): the n-th
 * request of the source draws from a hash of (seed, n), so every policy and every rate scale
 * sees the same classes; a session's later turns keep its first turn's class.
 */
export function* withPriorityMix(src: Iterable<BenchRequest>, mix: Record<PriorityClass, number>, seed: number): Generator<BenchRequest> {
  let n = 0;
  const tag = (r: BenchRequest, priority: number): BenchRequest => {
    const next = r.next;
    const out: BenchRequest = { ...r, priority };
    if (next) out.next = (done) => {
      const t = next(done);
      return t === undefined ? undefined : tag(t, priority);
    };
    return out;
  };
  for (const r of src) {
    const u = mix32(seed ^ 0x70726931, n++) / 2 ** 32;
    yield tag(r, DEFAULT_VLLM_PRIORITY[classOfDraw(mix, u)]);
  }
}

/** Requests reassigned to `n` tenants: a session's turns stay together, other requests spread. */
function* retenant(src: Iterable<BenchRequest>, n: number): Generator<BenchRequest> {
  let i = 0;
  const assign = (r: BenchRequest, tenant: string): BenchRequest => {
    const next = r.next;
    return { ...r, tenant, ...(next ? { next: (t: number) => { const x = next(t); return x && assign(x, tenant); } } : {}) };
  };
  for (const r of src) {
    const key = r.session !== undefined ? hashString(r.session) : mix32(i, 0x7e4a);
    i++;
    yield assign(r, `t${(key >>> 0) % n}`);
  }
}

function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** Arrivals per second between a run's first and last arrival (0 with fewer than two). */
function offeredRate(sim: SimResult): number {
  const span = sim.lastArrivalMs - sim.firstArrivalMs;
  return sim.requests > 1 && span > 0 ? ((sim.requests - 1) * 1000) / span : 0;
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

interface RunContext {
  o: BenchOptions;
  engineConfig: EngineConfig;
  /** A mixed fleet's engine per worker (gpu-mix.ts), else undefined. */
  engineConfigs: EngineConfig[] | undefined;
  /** A mixed fleet's workers' declared hardware (their GPUs), unless gpuLabels is false. */
  hardware: string[] | undefined;
  /** The draft pool's engines (with --spec-mode). */
  draftEngine: EngineConfig | null;
}

const BENCH_CACHE_DEFAULTS = { ttlMs: 300_000, maxBytes: 256 * 1024 * 1024 };

/** A fresh response cache on a MemoryStore in its own virtual time. */
function simCache(c: NonNullable<BenchOptions['cache']>): { cache: ResponseCache; clock: VirtualClock } {
  const clock = new VirtualClock(0);
  const now = () => clock.now();
  const store = new MemoryStore({ maxBytes: c.maxBytes ?? BENCH_CACHE_DEFAULTS.maxBytes, now });
  const cache = new ResponseCache({
    defaults: { enabled: true, ttlMs: c.ttlMs ?? BENCH_CACHE_DEFAULTS.ttlMs, maxEntryBytes: 1024 * 1024, sampled: false },
    singleFlight: true,
    keyPrefix: '',
    store,
    metrics: null,
    now,
    wallNow: now,
  });
  return { cache, clock };
}

/** How one run of a policy differs from the bench's plain run. */
interface FleetRun {
  rateScale: number;
  /** With the response cache (default: when the bench has one); false for the run without it. */
  withCache?: boolean;
  /** Tenant-isolated (default: when the bench isolates); false for the shared run beside it. */
  isolated?: boolean;
  /** A capacity probe's least span of arrivals, ms (benchRequests; default 0: the source as is). */
  minMs?: number;
  /**
   * A capacity probe: the run stops as soon as its attainment can no longer reach `target`
   * (AttainmentWatch), since the search needs no more of a probe than that it missed.
   */
  stopBelow?: { target: number; slo: Slo };
}

/** Runs stopped by their AttainmentWatch: the most attainment each could have ended with, and its requests in all. */
const stoppedRuns = new WeakMap<SimResult, { bound: number; requests: number }>();

/** requestCount's answers, by source and then by limit, rate scale and least span. */
const requestCounts = new WeakMap<BenchSource, Map<string, number>>();

/**
 * How many requests a run of `source` replays (every turn of every session: no run of these
 * requests has more). Counting generates them all, so each count is kept for the later probes at
 * the same scale in this thread (with --jobs 1, the searches of every policy: they begin with the
 * same probes).
 */
function requestCount(source: BenchSource, limit: number | undefined, rateScale: number, minMs: number): number {
  let counts = requestCounts.get(source);
  if (counts === undefined) requestCounts.set(source, (counts = new Map()));
  const key = `${limit}|${rateScale}|${minMs}`;
  let total = counts.get(key);
  if (total === undefined) {
    total = 0;
    for (const _ of expandSessions(benchRequests(source, { limit, rateScale, minMs }))) total++;
    counts.set(key, total);
  }
  return total;
}

async function runFleet(ctx: RunContext, name: string, run: FleetRun): Promise<SimResult> {
  const { rateScale, withCache = ctx.o.cache !== undefined, isolated = ctx.o.isolation !== undefined, minMs = 0 } = run;
  const o = ctx.o;
  const label = !withCache && o.cache !== undefined ? `${name} (no cache)` : !isolated && o.isolation !== undefined ? `${name} (shared)` : name;
  o.onPolicyStart?.(label, rateScale);
  const policy = createPolicy(name, o.policyOptions?.[name]);
  const count = o.replicas?.count ?? 1;
  const replicas =
    o.replicas && count > 1
      ? {
          policies: [policy, ...Array.from({ length: count - 1 }, () => createPolicy(name, o.policyOptions?.[name]))],
          sharing: o.replicas.sharing,
          sharingDelayMs: o.replicas.sharingDelayMs,
          shareLoad: o.replicas.shareLoad === true,
        }
      : undefined;
  let watch: AttainmentWatch | null = null;
  let total = 0;
  if (run.stopBelow) {
    total = requestCount(o.source, o.limit, rateScale, minMs);
    watch = new AttainmentWatch(run.stopBelow.slo, run.stopBelow.target, total);
  }
  const requests = benchRequests(o.source, {
    limit: o.limit,
    rateScale,
    minMs,
    mix: o.priorityMix ? { mix: o.priorityMix, seed: o.seed } : undefined,
    tenants: o.isolation?.tenants ?? o.tenants,
    declaredMaxTokens: o.declaredMaxTokens,
  });
  const sim = await simulateFleet(requests, {
    ...(watch ? { stopWhen: (sofar: SimResult, now: number, inflight: Iterable<SimRequest>) => watch.decided(sofar, now, inflight) } : {}),
    admission: o.kvAdmission ? { settings: o.kvAdmission } : undefined,
    peerAdmission: o.peerAdmission ? peerAdmission(o.peerAdmission, o.seed) : undefined,
    cacheIsolation: isolated,
    ...(o.adapters !== undefined ? { adapters: o.adapters } : {}),
    ...(o.kvEvents ? { kvEvents: true } : {}),
    cache: withCache ? simCache(o.cache!) : undefined,
    workers: o.workers,
    engineConfig: ctx.engineConfig,
    engineConfigs: ctx.engineConfigs,
    hardware: ctx.hardware,
    policy,
    replicas,
    seed: o.seed,
    model: o.model,
    scrapeIntervalMs: o.scrapeIntervalMs,
    overheadMs: o.overheadMs,
    kvSampleMs: o.kvSampleMs,
    admit: o.admission?.(),
    speculative: o.speculative
      ? simSpeculation(o.speculative, { seed: o.seed, model: o.model, tp: o.tp ?? 1, targetGpu: o.gpu, targetEngine: ctx.engineConfig, draftEngine: ctx.draftEngine!, targetWorkers: o.workers })
      : undefined,
    onProgress: o.onProgress ? (n, t) => o.onProgress!(name, n, t) : undefined,
    ...(o.disagg ? { disagg: o.disagg } : {}),
  });
  if (watch && sim.stoppedEarly) stoppedRuns.set(sim, { bound: watch.lastBound, requests: total });
  return sim;
}

/**
 * How long a capacity probe's arrivals last at least, virtual seconds. A probe is a finite run:
 * if its requests all arrive within a few request lifetimes, the fleet absorbs them as one burst —
 * queued prompts and large batches that still meet the SLO — and the search finds a rate the
 * fleet could not sustain. shared-prefix's 2,000 requests at 8 workers did so: a rate at which they
 * arrived in 2.2 s met the SLO for 90% of them, though the fleet then spent 12.8 s on them and its
 * GPU time was 1.5× the work bound (work-bound.ts); with probes of 60 s, kvgate met it for only 26%
 * of the requests at less than a third of that rate. A minute is many lifetimes of every built-in workload's requests
 * at their capacity, so the queue a rate builds has time to show.
 */
const CAPACITY_MIN_SECONDS = 60;

/**
 * Whether a capacity probe at `scale` needs more requests than the run's own (see benchRequests).
 * Judged as takeLasting judges it, on the source's own arrivals (a session's first turn), not on
 * the run's last arrival: a closed-loop workload's later turns go on long after its sessions have
 * stopped starting, and a probe whose sessions all start in the first seconds is a ramp up and a
 * drain, never the steady state the other probes reach (multi-turn's 5,000 requests start their
 * sessions within 15 s at its own rate and send their last turns at 140 s). Compared with the
 * lengthened probes around it, such a probe met the SLO at rates none of them could.
 */
function lengthens(o: BenchOptions, scale: number, minMs: number): boolean {
  if (!(minMs > 0 && o.limit === undefined && o.source.openUnbounded !== undefined)) return false;
  let lastStart = -Infinity;
  for (const r of benchRequests(o.source, { rateScale: scale })) lastStart = r.arrivalMs;
  return lastStart < minMs;
}

/** A capacity probe running on another thread: its figures to come, and a way to stop it unneeded. */
export interface RemoteProbe {
  figures: Promise<ProbeFigures>;
  cancel(): void;
}

/** A capacity probe's figures: attainment, offered rate and the worst prompt-length band. */
export interface ProbeFigures {
  /** With stopped_early, the most the probe could have reached. */
  attainment: number;
  /** The probe stopped once its misses decided it (its attainment is an upper bound). */
  stopped_early?: true;
  requests_per_s: number;
  requests: number;
  span_s: number;
  /** Not measured for a probe stopped early. */
  worst_band_attainment?: number;
  attainment_by_prompt?: BandAttainment[];
}

function probeOf(r: SimResult, slo: Slo): ProbeFigures {
  const stopped = stoppedRuns.get(r);
  if (stopped) {
    // Its misses decided it: the attainment is the most it could have reached, its other figures
    // those of the requests that had arrived when it stopped.
    return {
      attainment: Math.round(stopped.bound * 10000) / 10000,
      requests_per_s: offeredRate(r),
      requests: stopped.requests,
      span_s: Math.round(r.lastArrivalMs - r.firstArrivalMs) / 1000,
      stopped_early: true,
    };
  }
  const bands = attainmentByPrompt(r, slo);
  return {
    attainment: Math.round(attainmentOf(r, slo) * 10000) / 10000,
    requests_per_s: offeredRate(r),
    requests: r.requests,
    span_s: Math.round(r.lastArrivalMs - r.firstArrivalMs) / 1000,
    worst_band_attainment: worstBandAttainment(bands),
    attainment_by_prompt: bands,
  };
}

/** What every run of a bench shares: the fleet, the SLO, the capacity settings, the work bound. */
function policyRunContext(o: BenchOptions): PolicyRunContext {
  checkPolicies(o.policies);
  const rateScale = o.rateScale ?? 1;
  if (!(rateScale > 0) || !Number.isFinite(rateScale)) throw new Error(`rate scale must be a positive number, got ${rateScale}`);
  const tp = o.tp ?? 1;
  const mix = parseGpuMix(o.gpu, o.workers);
  const mixed = mix.length > 1;
  if (mixed && o.speculative) throw new Error('the speculative cascade is not simulated on a mixed fleet');
  const gpuHourCost = o.gpuHourCost ?? meanHourCost(mix, (g) => GPU_HOUR_COST[g] ?? 0);
  const summaryOpts = {
    tp,
    gpuHourCost,
    sloTtftMs: o.sloTtftMs,
    sloTtftPer1kMs: o.sloTtftPer1kMs,
    sloTpotMs: o.sloTpotMs,
    omitWallTime: o.omitWallTime,
    byPriority: o.byPriority === true || o.kvAdmission !== undefined || o.peerAdmission !== undefined || o.priorityMix !== undefined,
  };
  const slo = sloOf(summaryOpts);
  const cap = o.capacity
    ? { ...capacitySettings(o.capacity), minMs: (o.capacity.minSeconds ?? CAPACITY_MIN_SECONDS) * 1000, fullProbes: o.capacity.fullProbes === true }
    : null;
  if (cap && !hasSlo(slo)) throw new Error('the capacity search needs an SLO (TTFT and/or TPOT)');
  const engineOf = (gpu: string): EngineConfig =>
    ({
      ...buildEngineConfig({ gpu, model: o.model, tp, hashSeed: mix32(o.seed, 0x4b56), emitTokens: false, kvEvents: false, cpuOffloadGib: o.cpuOffloadGib }),
      ...(o.maxLoras !== undefined ? { maxLoras: o.maxLoras } : {}),
    });
  const engineConfig = engineOf(mix[0]!.gpu);
  const byGpu = new Map(mix.map((s) => [s.gpu, engineOf(s.gpu)]));
  const engineConfigs = mixed ? workerGpus(mix).map((g) => byGpu.get(g)!) : undefined;
  if (o.speculative && o.cache) throw new Error('the speculative cascade is not simulated with the response cache');
  // The work bound of the requests a probe at `scale` replays (a longer probe's later requests can
  // reuse more of the earlier ones' prefixes, so each probe length has its own).
  // A mixed fleet has no bound of this kind: each request's least GPU time depends on the kind it
  // runs on, and the best split of the work between kinds is a problem of its own.
  const boundAt = (scale: number, minMs: number): WorkBound | null => {
    const tm = engineConfig.timeModel;
    if (mixed) return null;
    return tm instanceof RooflineTimeModel ? workBound(expandSessions(benchRequests(o.source, { limit: o.limit, rateScale: scale, minMs })), tm, o.workers, engineConfig.blockSize) : null;
  };
  const hardware = mixed && o.gpuLabels !== false ? workerGpus(mix) : undefined;
  const ctx: RunContext = { o, engineConfig, engineConfigs, hardware, draftEngine: o.speculative ? draftEngineConfig(o.speculative, mix32(o.seed, 0x4b57)) : null };
  const run: PolicyRunContext = { ...ctx, rateScale, summaryOpts, slo, cap, tp, gpus: workerGpus(mix), gpuHourCost, boundAt };
  return run;
}

/**
 * One capacity probe of `policy` at `rateScale` as the bench `o` would run it (a worker thread's
 * share of a --jobs search): its figures.
 */
export async function runProbe(o: BenchOptions, policy: string, rateScale: number, isolated: boolean | undefined): Promise<ProbeFigures> {
  const run = policyRunContext(o);
  const r = await runFleet(run, policy, { rateScale, minMs: run.cap!.minMs, ...(run.cap!.fullProbes ? {} : { stopBelow: { target: run.cap!.target, slo: run.slo } }), ...(isolated !== undefined ? { isolated } : {}) });
  return probeOf(r, run.slo);
}

export async function runBench(o: BenchOptions): Promise<BenchOutput> {
  const run = policyRunContext(o);
  const { rateScale, cap, tp, gpuHourCost, boundAt } = run;
  const { engineConfig } = run;
  const mix = parseGpuMix(o.gpu, o.workers);
  const mixed = mix.length > 1;
  const policies: PolicyResult[] = [];
  const curves: RunCurves[] = [];
  let offered = 0;
  for (const name of o.policies) {
    const r = await runPolicy(run, name);
    offered = r.offered;
    policies.push(r.result);
    curves.push(r.curves);
  }
  // One pass over the run's requests gives both the work bound and the ideal hit rate.
  const runWide = o.runWide !== false;
  const bound = runWide ? boundAt(rateScale, 0) : null;
  const ideal = bound?.ideal ?? (runWide ? idealHitRate(expandSessions(benchRequests(o.source, { limit: o.limit, rateScale })), engineConfig.blockSize) : { rate: 0 });
  return {
    results: {
      trace: o.source.name,
      source_params: o.source.params ?? null,
      workers: o.workers,
      gpu: gpuMixLabel(mix),
      gpu_labels: mixed ? o.gpuLabels !== false : null,
      model: o.model,
      tp,
      seed: o.seed,
      rate_scale: rateScale,
      limit: o.limit ?? null,
      skipped_rows: o.source.skipped,
      slo_ttft_ms: o.sloTtftMs ?? null,
      slo_ttft_per_1k_ms: o.sloTtftPer1kMs ?? null,
      slo_tpot_ms: o.sloTpotMs ?? null,
      gpu_hour_cost: gpuHourCost,
      // The options each policy was given beyond its defaults (--set, and the SLO it is run to).
      policy_options: o.policyOptions ?? {},
      cache: o.cache ? { ttl_ms: o.cache.ttlMs ?? BENCH_CACHE_DEFAULTS.ttlMs, max_bytes: o.cache.maxBytes ?? BENCH_CACHE_DEFAULTS.maxBytes } : null,
      admission: o.kvAdmission ?? null,
      peer_admission: o.peerAdmission ?? null,
      priority_mix: o.priorityMix ?? null,
      declared_max_tokens: o.declaredMaxTokens ?? null,
      replicas: o.replicas ? { count: o.replicas.count, sharing: o.replicas.sharing, sharing_delay_ms: o.replicas.sharingDelayMs, share_load: o.replicas.shareLoad === true } : null,
      ideal_hit_rate: Math.round(ideal.rate * 10000) / 10000,
      work_bound: bound && { requests_per_s: rps(bound)!, busy_gpu_seconds: Math.round((bound.busyMs * tp) / 10) / 100 },
      offered_rps: Math.round(offered * 1000) / 1000,
      capacity: cap
        ? {
            target_attainment: cap.target,
            min_band_attainment: cap.minBandAttainment ?? null,
            min_seconds: cap.minMs / 1000,
            precision: cap.precision,
            max_probes: cap.maxProbes,
            ...capacityRatios(policies.map((p) => ({ name: p.name, rate_scale: p.capacity?.rate_scale ?? null }))),
          }
        : null,
      policies,
    },
    curves,
  };
}

/** Requests-per-second of a work bound, rounded for the JSON. */
function rps(b: WorkBound | null): number | null {
  return b ? Math.round(b.requestsPerS * 1000) / 1000 : null;
}

/** The capacity search's settings, defaults applied. */
interface CapacitySearch {
  target: number;
  precision: number;
  maxProbes: number;
  minBandAttainment: number | undefined;
  /** Least span of a probe's arrivals, ms. */
  minMs: number;
  /** Every probe runs to its end (no AttainmentWatch). */
  fullProbes: boolean;
}

/** What running one policy needs beyond the fleet: the bench-wide settings runBench derives. */
interface PolicyRunContext extends RunContext {
  rateScale: number;
  summaryOpts: SummaryOptions;
  slo: Slo;
  cap: CapacitySearch | null;
  tp: number;
  /** Each worker's GPU. */
  gpus: string[];
  gpuHourCost: number;
  /** The work bound of the requests a probe at `scale` of least span `minMs` replays (null: none). */
  boundAt: (scale: number, minMs: number) => WorkBound | null;
}

/** One policy's runs: the plain run, its capacity search, and the runs beside it (no cache, shared). */
async function runPolicy(run: PolicyRunContext, name: string): Promise<{ result: PolicyResult; curves: RunCurves; offered: number }> {
  const { o, rateScale, summaryOpts, cap, tp } = run;
  const sim = await runFleet(run, name, { rateScale });
  if (o.records) writeRecords(recordsPath(o.records.file, name, o.records.perPolicy), sim);
  const summary = summarize(sim, summaryOpts);
  o.onPolicyDone?.(summary);
  let capacity: CapacityResult | null = null;
  if (cap) {
    capacity = await searchPolicyCapacity(run, name, sim, {}, (r, probe) => {
      if (r !== null && r !== sim) o.onPolicyDone?.(summarize(r, summaryOpts));
      o.onProbe?.(name, probe);
    });
    if (capacity.rate_scale !== null) capacity.work_bound_rps = rps(run.boundAt(capacity.rate_scale, cap.minMs));
  }
  const { ttft, e2e } = latencies(sim);
  const kv = sim.workers.map((w) => w.kvUsage.points(300));
  const curves: RunCurves = {
    name,
    // quantiles() sorts in place; cacheRunOf reads ttft in completion order.
    ttftQuantiles: quantiles(ttft.slice()),
    e2eQuantiles: quantiles(e2e),
    kvIntervalMs: sim.kvSampleMs * (kv[0]?.factor ?? 1),
    kvUsage: kv.map((k) => k.points),
  };
  const cache = o.cache && sim.cache ? await cacheRunOf(run, name, sim, summary, ttft) : null;
  const isolation = o.isolation ? await isolationOf(run, name) : null;
  const speculative = o.speculative ? summarizeSpec(sim, o.speculative, { tp, targetGpu: o.gpu, targetHourUsd: run.gpuHourCost }) : null;
  const disagg = sim.disagg ? { disagg: summarizeDisagg(sim.disagg) } : {};
  return { result: { ...summary, workers: workerSummaries(sim, run.gpus, tp), capacity, cache, isolation, speculative, ...disagg }, curves, offered: offeredRate(sim) };
}

/**
 * The capacity search of policy `name` on runs like `variant` (the plain run, or the shared one beside
 * an isolated bench). Its first probe is `first` (the run at the bench's rate scale) unless probes
 * must last longer than it did; `onProbe` sees each probe's run and figures.
 */
function searchPolicyCapacity(
  run: PolicyRunContext,
  name: string,
  first: SimResult,
  variant: Pick<FleetRun, 'isolated'>,
  onProbe?: (r: SimResult | null, probe: CapacityProbe) => void,
): Promise<CapacityResult> {
  const { o, rateScale, slo } = run;
  const cap = run.cap!;
  const isFirst = (scale: number): boolean => scale === rateScale && !lengthens(o, rateScale, cap.minMs);
  // Probes started ahead on other threads (o.remoteProbe), by scale; those the search turned away
  // from are stopped, so they take no thread from a probe that is needed.
  const started = new Map<number, RemoteProbe>();
  const ahead = (probing: number, met: number | null, missed: number | null): void => {
    for (const [scale, rp] of started) {
      if (scale === probing || scale === met || scale === missed) continue;
      rp.cancel();
      started.delete(scale);
    }
    for (const scale of [met, missed]) {
      if (scale === null || isFirst(scale) || started.has(scale)) continue;
      const rp = o.remoteProbe!(name, scale, variant.isolated);
      if (rp) started.set(scale, rp);
    }
  };
  const search = searchCapacity(
    async (scale) => {
      const remote = started.get(scale);
      started.delete(scale);
      let r: SimResult | null = null;
      let p: ProbeFigures;
      if (remote) p = await remote.figures;
      else {
        r = isFirst(scale) ? first : await runFleet(run, name, { ...variant, rateScale: scale, minMs: cap.minMs, ...(cap.fullProbes ? {} : { stopBelow: { target: cap.target, slo } }) });
        p = probeOf(r, slo);
      }
      onProbe?.(r, { rate_scale: scale, ...p });
      return p;
    },
    {
      start: rateScale,
      target: cap.target,
      precision: cap.precision,
      maxProbes: cap.maxProbes,
      minBandAttainment: cap.minBandAttainment,
      ...(o.remoteProbe ? { ahead } : {}),
    },
  );
  return search.finally(() => {
    for (const rp of started.values()) rp.cancel();
  });
}

/** Each completed request's TTFT and E2E, ms, in completion order. */
function latencies(sim: SimResult): { ttft: Float64Array; e2e: Float64Array } {
  const c = sim.completed;
  const n = c.arrival.length;
  const ttft = new Float64Array(n);
  const e2e = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    ttft[i] = c.firstToken[i]! - c.arrival[i]!;
    e2e[i] = c.finish[i]! - c.arrival[i]!;
  }
  return { ttft, e2e };
}

function workerSummaries(sim: SimResult, gpus: readonly string[], tp: number): WorkerSummary[] {
  return sim.workers.map((w, i) => {
    return {
      id: w.id,
      gpu: gpus[i]!,
      routed: w.routed,
      preemptions: w.preemptions,
      preemptions_in_prefill: w.prefillPreemptions,
      busy_gpu_s: Math.round((w.busyMs * tp) / 10) / 100,
      kv_usage_mean: Math.round(w.kvUsage.mean * 10000) / 10000,
      kv_usage_max: Math.round(w.kvUsage.max * 10000) / 10000,
    };
  });
}

/**
 * The response cache's effect on policy `name`: the same run once more without the cache, and
 * what the cache saved against it. `ttft` is the cached run's, by completed request.
 */
async function cacheRunOf(run: PolicyRunContext, name: string, sim: SimResult, summary: PolicySummary, ttft: Float64Array): Promise<CacheRunSummary> {
  const { o, rateScale, summaryOpts } = run;
  const c = sim.completed;
  const n = c.arrival.length;
  const baseSim = await runFleet(run, name, { rateScale, withCache: false });
  const base = summarize(baseSim, summaryOpts);
  o.onPolicyDone?.(base);
  const workerTtft: number[] = [];
  let answeredTokens = 0;
  let answeredOutput = 0;
  const miss = 1 - base.prefix_hit_rate;
  for (let i = 0; i < n; i++) {
    if ((c.fromCache?.[i] ?? 0) === 0) workerTtft.push(ttft[i]!);
    else {
      answeredOutput += c.outputTokens[i]!;
      answeredTokens += c.promptTokens[i]! * miss + c.outputTokens[i]!;
    }
  }
  const bc = baseSim.completed;
  let baseTokens = 0;
  for (let i = 0; i < bc.arrival.length; i++) baseTokens += bc.promptTokens[i]! - bc.cachedTokens[i]! + bc.outputTokens[i]!;
  const r3 = (x: number) => Math.round(x * 1000) / 1000;
  return {
    ...sim.cache!,
    gpu_seconds_saved: baseTokens > 0 ? r3((base.busy_gpu_seconds * answeredTokens) / baseTokens) : 0,
    output_tokens_saved: answeredOutput,
    busy_gpu_seconds_without_cache: base.busy_gpu_seconds,
    busy_gpu_seconds_delta: r3(summary.busy_gpu_seconds - base.busy_gpu_seconds),
    ttft_ms_without_cache: base.ttft_ms,
    tpot_ms_without_cache: base.tpot_ms,
    e2e_ms_without_cache: base.e2e_ms,
    ttft_ms_workers: distribution(workerTtft),
  };
}

/** Tenant isolation's effect on policy `name`: the same run once more shared (and its capacity). */
async function isolationOf(run: PolicyRunContext, name: string): Promise<IsolationSummary> {
  const { o, rateScale, summaryOpts } = run;
  const sharedSim = await runFleet(run, name, { rateScale, isolated: false });
  const shared = summarize(sharedSim, summaryOpts);
  o.onPolicyDone?.(shared);
  const sharedCapacity = run.cap ? await searchPolicyCapacity(run, name, sharedSim, { isolated: false }) : null;
  return {
    tenants: o.isolation!.tenants ?? null,
    prefix_hit_rate_shared: shared.prefix_hit_rate,
    ttft_ms_shared: shared.ttft_ms,
    busy_gpu_seconds_shared: shared.busy_gpu_seconds,
    capacity_rate_scale_shared: sharedCapacity?.rate_scale ?? null,
  };
}
