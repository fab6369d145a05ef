/**
 * SGLang's Prometheus metric names, shared by the scraper that reads real SGLang workers and the
 * simulated worker that exports them (`kvgate sim --engine sglang`), so the two cannot drift.
 *
 * The four routing signals are the ones the Gateway API Inference Extension's model-server
 * protocol lists for SGLang (kubernetes-sigs/gateway-api-inference-extension, proposal
 * 003-model-server-protocol, its README); the rest are SGLang's own exporter's
 * (sgl-project/sglang python/sglang/srt/observability/metrics_collector.py, earlier
 * python/sglang/srt/metrics/collector.py). Counters are listed without the `_total` suffix.
 */
export const SGLANG_METRICS = {
  /** Gauge: requests running in the batch. */
  running: 'sglang:num_running_reqs',
  /** Gauge: requests waiting in the scheduler's queue. */
  waiting: 'sglang:num_queue_reqs',
  /** Gauge, 0..1: share of the KV pool's token slots in use. */
  tokenUsage: 'sglang:token_usage',
  /** Gauge = 1 with labels page_size and num_pages (the KV capacity), up to SGLang v0.5.10. */
  cacheConfigInfo: 'sglang:cache_config_info',
  /** Gauges carrying the same capacity as values, from SGLang v0.5.11 on. */
  pageSize: 'sglang:page_size',
  numPages: 'sglang:num_pages',
  /** Gauge: the KV pool's size in tokens (every version; the capacity when nothing else says). */
  maxTotalNumTokens: 'sglang:max_total_num_tokens',
  /** Counters, in tokens: prompt tokens received, and those served from the radix cache. */
  promptTokens: 'sglang:prompt_tokens',
  cachedTokens: 'sglang:cached_tokens',
  generationTokens: 'sglang:generation_tokens',
  /** Counter: requests retracted (SGLang's preemption) when the KV pool ran out. */
  retractedRequests: 'sglang:num_retracted_requests',
  /** Gauge: the radix cache's recent hit rate (informational). */
  cacheHitRate: 'sglang:cache_hit_rate',
  ttft: 'sglang:time_to_first_token_seconds',
  itl: 'sglang:inter_token_latency_seconds',
  e2e: 'sglang:e2e_request_latency_seconds',
  numRequests: 'sglang:num_requests',
} as const;
