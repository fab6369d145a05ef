/**
 * What the live dashboard (/dashboard) shows, computed from what the gateway already keeps: the
 * worker registry's per-worker view (the same as /admin/workers) and the Prometheus registry
 * (the same series as /metrics). Nothing on the request path writes to it.
 *
 * Rates and latency quantiles are taken over a sliding window: a `DashboardSampler` keeps the
 * samples it took in the last `windowMs` and compares the newest against the oldest, as
 * Prometheus' `rate()` and `histogram_quantile()` over `[window]` would. Samples are taken only
 * when a dashboard asks (at most one per `minIntervalMs`, shared by every viewer), so an unwatched
 * gateway does no work.
 */
import type { MetricObjectWithValues, MetricValue, MetricValueWithName, Registry } from 'prom-client';

/** One worker's row on the dashboard. */
export interface DashboardWorker {
  id: string;
  pool: string;
  /** The worker's declared hardware, or null. */
  hardware: string | null;
  /**
   * What sets it apart in its pool's speed classes: its hardware, or, unlabelled in a pool split
   * by KV capacity, its capacity ("8000 blocks"); null when the pool is one class.
   */
  kind: string | null;
  model: string;
  /** LoRA adapters it serves (configured and loaded at run time). */
  adapters: string[];
  healthy: boolean;
  /** closed | open | half-open (the circuit breaker). */
  circuit: string;
  /** Taken out of routing by an operator (/admin/workers/{id}/drain). */
  draining: boolean;
  stale: boolean;
  kvUsage: number | null;
  running: number | null;
  waiting: number | null;
  /** Requests the gateway has in flight at the worker right now. */
  inflight: number;
  /** Requests routed to it since start. */
  routed: number;
  /** The worker's own prefix-cache hit rate over the window (Δhits/Δqueries, tokens), or null. */
  prefixHitRate: number | null;
  /** The routing policy's prefix index for this worker, when the policy keeps one. */
  prefixIndex: { source: string; blocks: number; capacity: number | null } | null;
}

export interface DashboardPriorityRow {
  model: string;
  priority: string;
  /** Requests waiting in the admission queue now. */
  queued: number;
  /** Decisions in the window, by decision (admitted, queued, shed, queue_full, rate_limited, …). */
  decisions: Record<string, number>;
  /** Requests shed in the window for any reason: KV pressure (shed), the picked worker's prefill backlog or its decode pace. */
  shed: number;
}

export interface DashboardSpecSeries {
  /** Metric name, e.g. kvgate_spec_acceptance_rate. */
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface DashboardState {
  /** Wall-clock ms of the newest sample. */
  at: number;
  /** Seconds between the two samples the rates compare (0 on the first sample: rates are null). */
  windowSeconds: number;
  workers: DashboardWorker[];
  totals: {
    /** Requests answered per second (every status), over the window. */
    requestRate: number | null;
    /** Share of those answered with a 5xx. */
    errorRatio: number | null;
    inflight: number;
    /** Streamed requests' time to first byte (s), over the window. */
    ttftP50: number | null;
    ttftP99: number | null;
    /** Streamed answers' time per output token (s), over the window. */
    tpotP50: number | null;
    tpotP99: number | null;
    /** Output tokens answered per second, over the window. */
    outputTokenRate: number | null;
    /** End-to-end duration p99 (s), over the window. */
    e2eP99: number | null;
    /** Mean share of each prompt the router expected the chosen worker to hold cached. */
    routedPrefixHit: number | null;
    /** The workers' own prefix-cache hit rate, all workers together (Δhits/Δqueries). */
    fleetPrefixHit: number | null;
    /** Response cache: (hit + coalesced) / cacheable requests over the window; null when it is off. */
    responseCacheHit: number | null;
  };
  /** Estimated fleet KV usage per model (admission's view). */
  fleetKv: { model: string; usage: number }[];
  admission: DashboardPriorityRow[];
  /**
   * Speculative decoding, read generically from the registry (the cascade is not imported):
   * every gauge named `kvgate_spec…` that mentions acceptance (e.g.
   * kvgate_spec_acceptance_rate{model,class}) as it is, and every counter pair
   * `kvgate_spec…accepted…` / the same name with `proposed` or `draft` in its place, as the ratio of
   * their increases in the window, per label set. Empty when no cascade exports any.
   */
  speculative: DashboardSpecSeries[];
}

interface Sample {
  at: number;
  metrics: Map<string, MetricObjectWithValues<MetricValue<string>>>;
  workers: Record<string, unknown>[];
}

export interface DashboardSamplerOptions {
  registry: Registry;
  /** The per-worker view (WorkerRegistry.describeAll). */
  describeWorkers: () => Record<string, unknown>[];
  now?: () => number;
  /** Window for rates and quantiles (default 10 s). */
  windowMs?: number;
  /** Viewers polling faster than this share one sample (default 250 ms). */
  minIntervalMs?: number;
}

export class DashboardSampler {
  private readonly samples: Sample[] = [];
  private readonly now: () => number;
  private readonly windowMs: number;
  private readonly minIntervalMs: number;
  private pending: Promise<Sample> | null = null;

  constructor(private readonly o: DashboardSamplerOptions) {
    this.now = o.now ?? Date.now;
    this.windowMs = o.windowMs ?? 10_000;
    this.minIntervalMs = o.minIntervalMs ?? 250;
  }

  async state(): Promise<DashboardState> {
    const cur = await this.sample();
    // The oldest sample still inside the window (or the newest older one, when polling is slow).
    let base: Sample | null = null;
    for (const s of this.samples) {
      if (s === cur) break;
      base = s;
      if (cur.at - s.at <= this.windowMs) break;
    }
    return summarize(cur, base);
  }

  private async sample(): Promise<Sample> {
    const last = this.samples[this.samples.length - 1];
    if (last && this.now() - last.at < this.minIntervalMs) return last;
    this.pending ??= (async () => {
      try {
        // prom-client hands out its live value objects: copy them, or every sample would read now.
        const json = structuredClone(await this.o.registry.getMetricsAsJSON());
        const s: Sample = { at: this.now(), metrics: new Map(json.map((m) => [m.name, m])), workers: this.o.describeWorkers() };
        this.samples.push(s);
        // Keep one sample older than the window as the baseline when polling is slow.
        while (this.samples.length > 2 && s.at - this.samples[1]!.at > this.windowMs) this.samples.shift();
        return s;
      } finally {
        this.pending = null;
      }
    })();
    return this.pending;
  }
}

type Values = MetricValueWithName<string>[];

function values(s: Sample | null, name: string): Values {
  return (s?.metrics.get(name)?.values ?? []) as Values;
}

/** Sum of a counter's (or a histogram part's) samples, optionally filtered by labels. */
function sum(s: Sample | null, name: string, where: (labels: Record<string, unknown>) => boolean = () => true, metricName?: string): number {
  let t = 0;
  for (const v of values(s, name)) {
    if (metricName !== undefined && v.metricName !== metricName) continue;
    if (where(v.labels as Record<string, unknown>)) t += v.value;
  }
  return t;
}

/**
 * The q-quantile of the observations made between two samples of a histogram, interpolated
 * linearly inside the bucket as Prometheus' histogram_quantile() does; null with no observations.
 */
export function histogramQuantile(q: number, buckets: { le: number; count: number }[]): number | null {
  const bs = [...buckets].sort((a, b) => a.le - b.le);
  const total = bs.length > 0 ? bs[bs.length - 1]!.count : 0;
  if (total <= 0) return null;
  const rank = q * total;
  let prevLe = 0;
  let prevCount = 0;
  for (const b of bs) {
    if (b.count >= rank) {
      // Above the highest finite bucket: report that bucket's bound (as Prometheus does).
      if (!Number.isFinite(b.le)) return prevLe;
      const inBucket = b.count - prevCount;
      return inBucket <= 0 ? b.le : prevLe + (b.le - prevLe) * ((rank - prevCount) / inBucket);
    }
    prevLe = b.le;
    prevCount = b.count;
  }
  return prevLe;
}

/** Bucket counts of a histogram (all label sets together) observed between `base` and `cur`. */
function bucketDelta(cur: Sample, base: Sample | null, name: string): { le: number; count: number }[] {
  const byLe = new Map<number, number>();
  const add = (s: Sample | null, sign: number): void => {
    for (const v of values(s, name)) {
      if (v.metricName !== `${name}_bucket`) continue;
      const leRaw = (v.labels as Record<string, unknown>).le;
      const le = leRaw === '+Inf' ? Infinity : Number(leRaw);
      byLe.set(le, (byLe.get(le) ?? 0) + sign * v.value);
    }
  };
  add(cur, 1);
  add(base, -1);
  return [...byLe].map(([le, count]) => ({ le, count }));
}

function ratio(num: number, den: number): number | null {
  return den > 0 ? num / den : null;
}

/** The admission decisions that refuse a request as shed (admission/controller.ts). */
const SHED_DECISIONS = new Set(['shed', 'shed_backlog', 'shed_tpot']);

export function summarize(cur: Sample, base: Sample | null): DashboardState {
  const dt = base ? (cur.at - base.at) / 1000 : 0;
  const delta = (name: string, where?: (l: Record<string, unknown>) => boolean, metricName?: string): number =>
    sum(cur, name, where, metricName) - (base ? sum(base, name, where, metricName) : 0);

  const prevWorkers = new Map((base?.workers ?? []).map((w) => [String(w.id), w]));
  let hitsAll = 0;
  let queriesAll = 0;
  const workers: DashboardWorker[] = cur.workers.map((w) => {
    const p = prevWorkers.get(String(w.id));
    const num = (x: unknown): number | null => (typeof x === 'number' && Number.isFinite(x) ? x : null);
    let prefixHitRate: number | null = null;
    const h = num(w.prefixHits);
    const q = num(w.prefixQueries);
    const ph = num(p?.prefixHits);
    const pq = num(p?.prefixQueries);
    if (h !== null && q !== null && ph !== null && pq !== null && q >= pq && h >= ph) {
      prefixHitRate = ratio(h - ph, q - pq);
      hitsAll += h - ph;
      queriesAll += q - pq;
    }
    const pi = w.prefixIndex as { source?: unknown; blocks?: unknown; capacity?: unknown } | undefined;
    return {
      id: String(w.id),
      pool: String(w.pool),
      hardware: typeof w.hardware === 'string' ? w.hardware : null,
      kind: kindOf(w),
      model: String(w.model),
      adapters: Array.isArray(w.adapters) ? w.adapters.map(String) : [],
      healthy: w.healthy === true,
      circuit: String(w.circuitState ?? (w.circuitOpen ? 'open' : 'closed')),
      draining: w.draining === true,
      stale: w.stale === true,
      kvUsage: num(w.kvUsage),
      running: num(w.running),
      waiting: num(w.waiting),
      inflight: num(w.inflight) ?? 0,
      routed: num(w.routed) ?? 0,
      prefixHitRate,
      prefixIndex: pi ? { source: String(pi.source), blocks: num(pi.blocks) ?? 0, capacity: num(pi.capacity) } : null,
    };
  });

  const requests = base ? delta('kvgate_requests_total') : 0;
  const errors5xx = base ? delta('kvgate_requests_total', (l) => String(l.status).startsWith('5')) : 0;
  const prefixCount = delta('kvgate_route_prefix_hit_ratio', undefined, 'kvgate_route_prefix_hit_ratio_count');
  const prefixSum = delta('kvgate_route_prefix_hit_ratio', undefined, 'kvgate_route_prefix_hit_ratio_sum');
  const cacheOn = cur.metrics.has('kvgate_cache_requests_total');
  const cacheServed = delta('kvgate_cache_requests_total', (l) => l.result === 'hit' || l.result === 'coalesced');
  const cacheAll = delta('kvgate_cache_requests_total', (l) => l.result !== 'bypass' && l.result !== 'refresh');
  const ttft = base ? bucketDelta(cur, base, 'kvgate_request_ttft_seconds') : [];
  const e2e = base ? bucketDelta(cur, base, 'kvgate_request_duration_seconds') : [];
  const tpot = base ? bucketDelta(cur, base, 'kvgate_request_tpot_seconds') : [];
  const outputTokens = base ? delta('kvgate_generation_tokens_total') : 0;

  const fleetKv = values(cur, 'kvgate_fleet_kv_usage').map((v) => ({ model: String(v.labels.model), usage: v.value }));

  const rows = new Map<string, DashboardPriorityRow>();
  const row = (model: string, priority: string): DashboardPriorityRow => {
    const k = `${model}\u0000${priority}`;
    let r = rows.get(k);
    if (!r) rows.set(k, (r = { model, priority, queued: 0, decisions: {}, shed: 0 }));
    return r;
  };
  for (const v of values(cur, 'kvgate_queue_depth')) row(String(v.labels.model), String(v.labels.priority)).queued = v.value;
  const prevDecision = new Map<string, number>();
  for (const v of values(base, 'kvgate_admission_total')) prevDecision.set(`${v.labels.model}\u0000${v.labels.priority}\u0000${v.labels.decision}`, v.value);
  for (const v of values(cur, 'kvgate_admission_total')) {
    const k = `${v.labels.model}\u0000${v.labels.priority}\u0000${v.labels.decision}`;
    // Without a baseline the counts are since start.
    const d = v.value - (prevDecision.get(k) ?? 0);
    const r = row(String(v.labels.model), String(v.labels.priority));
    r.decisions[String(v.labels.decision)] = (r.decisions[String(v.labels.decision)] ?? 0) + d;
    if (SHED_DECISIONS.has(String(v.labels.decision))) r.shed += d;
  }

  const speculative = speculativeSeries(cur, base);

  return {
    at: cur.at,
    windowSeconds: dt,
    workers,
    totals: {
      requestRate: base && dt > 0 ? requests / dt : null,
      errorRatio: base ? ratio(errors5xx, requests) : null,
      inflight: sum(cur, 'kvgate_inflight_requests'),
      ttftP50: histogramQuantile(0.5, ttft),
      ttftP99: histogramQuantile(0.99, ttft),
      tpotP50: histogramQuantile(0.5, tpot),
      tpotP99: histogramQuantile(0.99, tpot),
      outputTokenRate: base && dt > 0 ? outputTokens / dt : null,
      e2eP99: histogramQuantile(0.99, e2e),
      routedPrefixHit: ratio(prefixSum, prefixCount),
      fleetPrefixHit: ratio(hitsAll, queriesAll),
      responseCacheHit: cacheOn ? ratio(cacheServed, cacheAll) : null,
    },
    fleetKv,
    admission: [...rows.values()].sort((a, b) => (a.model === b.model ? 0 : a.model < b.model ? -1 : 1)),
    speculative,
  };
}

const labelKey = (labels: Record<string, unknown>): string =>
  Object.keys(labels)
    .sort()
    .map((k) => `${k}=${String(labels[k])}`)
    .join(',');
const stringLabels = (labels: Record<string, unknown>): Record<string, string> =>
  Object.fromEntries(Object.entries(labels).map(([k, x]) => [k, String(x)]));

function speculativeSeries(cur: Sample, base: Sample | null): DashboardSpecSeries[] {
  const out: DashboardSpecSeries[] = [];
  for (const [name, m] of cur.metrics) {
    if (!name.startsWith('kvgate_spec') || !/accept/.test(name)) continue;
    const type = String(m.type);
    if (type === 'gauge') {
      for (const v of m.values) out.push({ name, labels: stringLabels(v.labels), value: v.value });
      continue;
    }
    if (type !== 'counter' || !/accepted/.test(name)) continue;
    const denName = ['proposed', 'draft', 'drafted'].map((w) => name.replace('accepted', w)).find((n) => cur.metrics.has(n));
    if (denName === undefined) continue;
    const by = (s: Sample | null, n: string): Map<string, number> => new Map(values(s, n).map((v) => [labelKey(v.labels), v.value]));
    const den = by(cur, denName);
    const num0 = by(base, name);
    const den0 = by(base, denName);
    for (const v of m.values) {
      const k = labelKey(v.labels);
      const d = (den.get(k) ?? 0) - (den0.get(k) ?? 0);
      if (d > 0) out.push({ name: `${name} / ${denName}`, labels: stringLabels(v.labels), value: (v.value - (num0.get(k) ?? 0)) / d });
    }
  }
  return out;
}

/** DashboardWorker.kind from /admin/workers' `hardware` and `speedClass` ("pool · 8000 blocks"). */
function kindOf(w: Record<string, unknown>): string | null {
  if (typeof w.hardware === 'string') return w.hardware;
  const cls = typeof w.speedClass === 'string' ? w.speedClass : '';
  const prefix = `${String(w.pool)} · `;
  return cls.startsWith(prefix) ? cls.slice(prefix.length) : null;
}
