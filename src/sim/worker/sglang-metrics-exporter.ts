/**
 * The simulated SGLang worker's /metrics (`kvgate sim --engine sglang`): SGLang's Prometheus names
 * and labels (sgl-project/sglang python/sglang/srt/observability/metrics_collector.py; names in
 * kv/sglang-metric-names.ts), read from the same engine model the vLLM exporter reads.
 *
 * Capacity is exported as `sglang:cache_config_info{page_size,num_pages}` (the form GIE's
 * model-server protocol names) and `sglang:max_total_num_tokens`; the simulated engine pages its KV
 * in blocks of its block size, which is the page size it reports (SGLang's --page-size).
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { EngineModel, FinishReason } from '../../engine/types.js';
import { SGLANG_METRICS as S } from '../../kv/sglang-metric-names.js';

/** What the worker's HTTP layer tells its /metrics, whichever engine's names it exports. */
export interface SimMetricsExporter {
  observeTimeToFirstToken(seconds: number): void;
  observeInterTokenLatency(seconds: number): void;
  observeFinished(
    reason: FinishReason,
    r: { e2e: number; queue: number | null; prefill: number | null; decode: number | null; promptTokens: number; outputTokens: number },
  ): void;
  countClientDisconnect(): void;
  readonly contentType: string;
  render(): Promise<string>;
}

// SGLang's default buckets (seconds), metrics_collector.py TokenizerMetricsCollector.
const TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400];
const ITL_BUCKETS = [0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8];
const E2E_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400];

export class SglangMetrics implements SimMetricsExporter {
  readonly registry = new Registry();
  private readonly labels: Record<'model_name' | 'engine_type' | 'tp_rank' | 'pp_rank' | 'moe_ep_rank', string>;
  private readonly ttft: Histogram<string>;
  private readonly itl: Histogram<string>;
  private readonly e2e: Histogram<string>;
  private readonly requests: Counter<string>;
  private readonly aborted: Counter<string>;

  constructor(engine: EngineModel, opts: { modelName: string }) {
    const labels = { model_name: opts.modelName, engine_type: 'unified', tp_rank: '0', pp_rank: '0', moe_ep_rank: '0' };
    this.labels = labels;
    const labelNames = Object.keys(labels);
    const registers = [this.registry];
    const gauge = (name: string, help: string, read: () => number): void => {
      new Gauge({
        name,
        help,
        labelNames,
        registers,
        collect() {
          this.set(labels, read());
        },
      });
    };
    gauge(S.running, 'The number of running requests.', () => engine.stats().running);
    gauge(S.waiting, 'The number of requests in the waiting queue.', () => engine.stats().waiting);
    gauge(S.tokenUsage, 'The token usage.', () => engine.stats().kvUsage);
    gauge(S.cacheHitRate, 'The prefix cache hit rate.', () => {
      const s = engine.stats();
      return s.prefixQueries > 0 ? s.prefixHits / s.prefixQueries : 0;
    });
    const cfg = engine.config;
    gauge(S.maxTotalNumTokens, 'Maximum total number of tokens in the KV cache pool.', () => cfg.numGpuBlocks * cfg.blockSize);
    // A work-around Info metric, as SGLang's (and vLLM's): value 1, the configuration in labels.
    new Gauge({ name: S.cacheConfigInfo, help: 'Cache configuration information.', labelNames: ['page_size', 'num_pages'], registers }).set(
      { page_size: String(cfg.blockSize), num_pages: String(cfg.numGpuBlocks) },
      1,
    );

    const mirror = (name: string, help: string, read: () => number): void => {
      new Counter({
        name: `${name}_total`,
        help,
        labelNames,
        registers,
        collect() {
          this.reset();
          this.inc(labels, read());
        },
      });
    };
    mirror(S.promptTokens, 'Number of prefill tokens processed.', () => engine.stats().promptTokens);
    mirror(S.generationTokens, 'Number of generation tokens processed.', () => engine.stats().generationTokens);
    mirror(S.cachedTokens, 'Number of cached prompt tokens.', () => engine.stats().prefixHits);
    mirror(S.retractedRequests, 'Total number of retracted requests.', () => engine.stats().preemptions);

    this.requests = new Counter({ name: `${S.numRequests}_total`, help: 'Number of requests processed.', labelNames, registers });
    this.requests.inc(labels, 0);
    this.aborted = new Counter({ name: 'sglang:num_aborted_requests_total', help: 'Number of requests aborted.', labelNames, registers });
    this.aborted.inc(labels, 0);
    const histogram = (name: string, help: string, buckets: number[]): Histogram<string> => {
      const h = new Histogram({ name, help, labelNames, buckets, registers });
      h.zero(labels);
      return h;
    };
    this.ttft = histogram(S.ttft, 'Histogram of time to first token in seconds.', TTFT_BUCKETS);
    this.itl = histogram(S.itl, 'Histogram of inter-token latency in seconds.', ITL_BUCKETS);
    this.e2e = histogram(S.e2e, 'Histogram of End-to-end request latency in seconds', E2E_BUCKETS);
  }

  observeTimeToFirstToken(seconds: number): void {
    this.ttft.observe(this.labels, seconds);
  }

  observeInterTokenLatency(seconds: number): void {
    this.itl.observe(this.labels, seconds);
  }

  observeFinished(reason: FinishReason, r: { e2e: number }): void {
    this.requests.inc(this.labels);
    if (reason === 'abort') this.aborted.inc(this.labels);
    this.e2e.observe(this.labels, r.e2e);
  }

  countClientDisconnect(): void {
    this.aborted.inc(this.labels);
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  render(): Promise<string> {
    return this.registry.metrics();
  }
}
