/**
 * kvgate's own Prometheus metrics (`kvgate_*`), in a registry per gateway so several gateways can
 * live in one process (tests, the bench). Per-worker gauges are computed at scrape time from the
 * worker registry, so the request path never touches them.
 */
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import type { WorkerRegistry } from '../fleet/registry.js';
import { RequestCounter, RequestHistogram } from './request-metrics.js';

/** How often the event-loop lag metric samples the loop, ms (prom-client's default is 10). */
const EVENT_LOOP_SAMPLE_MS = 100;

const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
/** Time per output token: fine where TPOT targets are set (tens of ms). */
const TPOT_BUCKETS = [0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5];

export class GatewayMetrics {
  readonly registry = new Registry();
  // Counted on every request: request-metrics.ts (no label hashing per call).
  readonly requestsBy: RequestCounter;
  readonly ttftBy: RequestHistogram;
  readonly durationBy: RequestHistogram;
  readonly tpotBy: RequestHistogram;
  readonly promptTokensBy: RequestCounter;
  readonly generationTokensBy: RequestCounter;
  readonly cachedPromptTokensBy: RequestCounter;
  readonly attemptsBy: RequestCounter;
  readonly decisionsBy: RequestCounter;
  readonly prefixHitBy: RequestHistogram;
  /** Requests being handled (kvgate_inflight_requests, read when Prometheus scrapes). */
  inflight = 0;
  // Counted on failures and fleet events only.
  readonly upstreamFailures: Counter<'worker' | 'reason'>;
  readonly scrapeFailures: Counter<'worker'>;
  readonly outlierSuspicions: Counter<'worker'>;
  readonly breakerTransitions: Counter<'worker' | 'state'>;

  constructor(private readonly fleet: WorkerRegistry, staleAfterMs: number, now: () => number) {
    const r = this.registry;
    // Process CPU, memory, event-loop lag, GC: kvgate_process_*, kvgate_nodejs_*. The lag is
    // sampled by a timer (perf_hooks.monitorEventLoopDelay); at prom-client's default resolution,
    // 10 ms, it woke an idle gateway 100 times a second (docs/performance.md, "Latency at low load
    // is mostly waking up").
    collectDefaultMetrics({ register: r, prefix: 'kvgate_', eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
    this.requestsBy = new RequestCounter(r, {
      name: 'kvgate_requests_total',
      help: 'Requests answered, by route, model and HTTP status',
      labelNames: ['route', 'model', 'status'],
    });
    this.ttftBy = new RequestHistogram(r, {
      name: 'kvgate_request_ttft_seconds',
      help: "Streamed requests: time from arrival to the first token relayed to the client (the first body byte; a Responses stream's first output event)",
      labelNames: ['route', 'model'],
      buckets: LATENCY_BUCKETS,
    });
    this.durationBy = new RequestHistogram(r, {
      name: 'kvgate_request_duration_seconds',
      help: 'Time from request arrival to the end of the response',
      labelNames: ['route', 'model'],
      buckets: LATENCY_BUCKETS,
    });
    this.tpotBy = new RequestHistogram(r, {
      name: 'kvgate_request_tpot_seconds',
      help: 'Streamed chat and completions answers of one sequence and two or more tokens: time per output token after the first, (end − first byte) / (output tokens − 1)',
      labelNames: ['route', 'model'],
      buckets: TPOT_BUCKETS,
    });
    this.promptTokensBy = new RequestCounter(r, {
      name: 'kvgate_prompt_tokens_total',
      help: "Prompt tokens of answered generations and embeddings, by model and tenant: the answer's usage, else the gateway's own count (the one it reserves KV by)",
      labelNames: ['model', 'tenant'],
    });
    this.cachedPromptTokensBy = new RequestCounter(r, {
      name: 'kvgate_prompt_cached_tokens_total',
      help: "Of the prompt tokens, those the workers served from their prefix caches, by model and tenant, where the answer's usage says (vLLM: --enable-prompt-tokens-details)",
      labelNames: ['model', 'tenant'],
    });
    this.generationTokensBy = new RequestCounter(r, {
      name: 'kvgate_generation_tokens_total',
      help: "Output tokens of answered generations, by model and tenant: the answer's usage, else a stream's token events (as far as relayed, for a stream cut short)",
      labelNames: ['model', 'tenant'],
    });
    const self = this;
    new Gauge({
      name: 'kvgate_inflight_requests',
      help: 'Requests being handled by the gateway',
      registers: [r],
      collect() {
        this.set(self.inflight);
      },
    });
    this.attemptsBy = new RequestCounter(r, {
      name: 'kvgate_upstream_attempts_total',
      help: 'Attempts to serve a request at a worker, by outcome',
      labelNames: ['worker', 'outcome'],
    });
    this.upstreamFailures = new Counter({
      name: 'kvgate_upstream_failures_total',
      help: 'Failed upstream attempts, by reason (connect, status_5xx, first_byte_timeout, deadline, stream_error)',
      labelNames: ['worker', 'reason'],
      registers: [r],
    });
    this.decisionsBy = new RequestCounter(r, {
      name: 'kvgate_route_decisions_total',
      help: 'Routing decisions, by policy, chosen worker and reason',
      labelNames: ['policy', 'worker', 'reason'],
    });
    this.prefixHitBy = new RequestHistogram(r, {
      name: 'kvgate_route_prefix_hit_ratio',
      help: 'Per routing decision: fraction of the prompt the policy expects the chosen worker to hold in its KV cache',
      labelNames: ['policy'],
      buckets: [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1],
    });
    this.scrapeFailures = new Counter({
      name: 'kvgate_scrape_failures_total',
      help: 'Failed or unparseable /metrics scrapes, by worker',
      labelNames: ['worker'],
      registers: [r],
    });
    this.outlierSuspicions = new Counter({
      name: 'kvgate_worker_suspected_total',
      help: 'Times passive outlier detection suspected a worker hung (silent with streams owed, or a scrape/probe timeout), by worker',
      labelNames: ['worker'],
      registers: [r],
    });
    this.breakerTransitions = new Counter({
      name: 'kvgate_circuit_transitions_total',
      help: 'Circuit breaker state changes, by worker and new state',
      labelNames: ['worker', 'state'],
      registers: [r],
    });
    const perWorker = this.gaugePerWorker.bind(this);
    perWorker('kvgate_worker_healthy', '1 if the worker passes health probes, its circuit is closed, it is not draining and not suspected hung', (w) =>
      w.routable && !w.suspected ? 1 : 0,
    );
    perWorker('kvgate_worker_draining', '1 while an operator has the worker drained (/admin/workers/{id}/drain): out of routing on purpose', (w) =>
      w.draining ? 1 : 0,
    );
    perWorker('kvgate_worker_kv_usage_ratio', 'KV cache usage from the last scrape (0..1)', (w) => w.snapshot?.kvUsage ?? null);
    perWorker('kvgate_worker_stale', '1 if the worker’s metrics are missing or older than staleAfterMs', (w) =>
      w.isStale(now(), staleAfterMs) ? 1 : 0,
    );
    perWorker('kvgate_worker_running_requests', 'Running requests from the last scrape', (w) => w.snapshot?.running ?? null);
    perWorker('kvgate_worker_waiting_requests', 'Waiting requests from the last scrape', (w) => w.snapshot?.waiting ?? null);
    perWorker('kvgate_worker_inflight_requests', 'Requests the gateway has in flight at the worker', (w) => w.inflightCount);
    perWorker(
      'kvgate_worker_recent_tpot_seconds',
      'Time per output token of the answers streaming from the worker over the last half second or so (what admission sheds sheddable requests by); no series while none stream',
      (w) => {
        const ms = w.recentTpotMs(now());
        return ms === undefined ? null : ms / 1000;
      },
    );
    // Workers that speculate inside the engine (vLLM --speculative-config) export spec-decode
    // counters; vLLM's definitions: acceptance = accepted/draft tokens, mean acceptance length =
    // 1 + accepted/drafts (the bonus token included). Cumulative since the worker started.
    perWorker('kvgate_worker_spec_acceptance_rate', 'Draft tokens accepted / proposed by the worker’s in-engine speculative decoding', (w) => {
      const s = w.snapshot;
      return s?.specDraftTokens ? (s.specAcceptedTokens ?? 0) / s.specDraftTokens : null;
    });
    perWorker('kvgate_worker_spec_mean_acceptance_length', 'Tokens per speculative step of the worker: 1 + accepted / drafts', (w) => {
      const s = w.snapshot;
      return s?.specDrafts ? 1 + (s.specAcceptedTokens ?? 0) / s.specDrafts : null;
    });
  }

  /** A counter read at scrape time from a running total kept elsewhere; null: not counted (no sample). */
  counterFrom(name: string, help: string, total: () => number | null): void {
    new Counter({
      name,
      help,
      registers: [this.registry],
      collect() {
        this.reset();
        const t = total();
        if (t !== null) this.inc(t);
      },
    });
  }

  /** A gauge read at scrape time from a value kept elsewhere. */
  gaugeFrom(name: string, help: string, value: () => number): void {
    new Gauge({
      name,
      help,
      registers: [this.registry],
      collect() {
        this.set(value());
      },
    });
  }

  /** A per-worker gauge computed at scrape time (labels worker, pool, model); null: no series. */
  gaugePerWorker(name: string, help: string, value: (w: WorkerRegistry['workers'][number]) => number | null): void {
    const fleet = this.fleet;
    new Gauge({
      name,
      help,
      labelNames: ['worker', 'pool', 'model'],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const w of fleet.workers) {
          const v = value(w);
          if (v !== null) this.set({ worker: w.id, pool: w.pool, model: w.model }, v);
        }
      },
    });
  }

  /**
   * Remove every series labelled with a worker that has left the fleet (removed from the config and
   * drained), so /metrics does not report departed workers forever; their cached children go too,
   * so a worker that later comes back under the same id starts new series.
   */
  async forgetWorker(id: string): Promise<void> {
    const byWorker = [this.upstreamFailures, this.scrapeFailures, this.outlierSuspicions, this.breakerTransitions];
    for (const metric of byWorker) {
      const { values } = await metric.get();
      for (const v of values) if (v.labels.worker === id) metric.remove(v.labels as never);
    }
    this.attemptsBy.removeWhere('worker', id);
    this.decisionsBy.removeWhere('worker', id);
  }
}
