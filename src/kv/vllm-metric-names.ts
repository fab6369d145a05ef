/**
 * vLLM's Prometheus metric names (V1 engine, vllm/v1/metrics/loggers.py), shared by the scraper
 * that reads real workers and the simulated worker that exports them, so the two cannot drift.
 * Counters are listed without the `_total` suffix Prometheus clients append. `legacy*` are the
 * names vLLM used before 0.9, still accepted from older workers.
 */
export const VLLM_METRICS = {
  running: 'vllm:num_requests_running',
  waiting: 'vllm:num_requests_waiting',
  kvUsage: 'vllm:kv_cache_usage_perc',
  legacyKvUsage: 'vllm:gpu_cache_usage_perc',
  prefixQueries: 'vllm:prefix_cache_queries',
  prefixHits: 'vllm:prefix_cache_hits',
  legacyPrefixQueries: 'vllm:gpu_prefix_cache_queries',
  legacyPrefixHits: 'vllm:gpu_prefix_cache_hits',
  preemptions: 'vllm:num_preemptions',
  promptTokens: 'vllm:prompt_tokens',
  generationTokens: 'vllm:generation_tokens',
  requestSuccess: 'vllm:request_success',
  cacheConfigInfo: 'vllm:cache_config_info',
  /** A gauge set to the current time, labelled max_lora, running_lora_adapters, waiting_lora_adapters. */
  loraInfo: 'vllm:lora_requests_info',
  specDrafts: 'vllm:spec_decode_num_drafts',
  specDraftTokens: 'vllm:spec_decode_num_draft_tokens',
  specAcceptedTokens: 'vllm:spec_decode_num_accepted_tokens',
  specAcceptedTokensPerPos: 'vllm:spec_decode_num_accepted_tokens_per_pos',
  ttft: 'vllm:time_to_first_token_seconds',
  itl: 'vllm:inter_token_latency_seconds',
  e2e: 'vllm:e2e_request_latency_seconds',
  queueTime: 'vllm:request_queue_time_seconds',
  prefillTime: 'vllm:request_prefill_time_seconds',
  decodeTime: 'vllm:request_decode_time_seconds',
  requestPromptTokens: 'vllm:request_prompt_tokens',
  requestGenerationTokens: 'vllm:request_generation_tokens',
} as const;
