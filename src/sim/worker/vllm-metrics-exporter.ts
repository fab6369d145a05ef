/**
 * The simulated worker's /metrics: vLLM V1's Prometheus names, labels, meanings and histogram
 * buckets (vllm/v1/metrics/loggers.py). Gauges and engine counters are read from engine.stats()
 * at scrape time; latency histograms are observed by the HTTP layer as requests progress.
 *
 * Each worker has its own prom-client Registry: several simulated workers share a process in the
 * tests and the demo, and must not share metrics.
 *
 * `legacyNames` emits the names vLLM used before 0.9 (vllm:gpu_cache_usage_perc,
 * vllm:gpu_prefix_cache_{queries,hits}) instead of the current ones, so scrapers can be tested
 * against both.
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { EngineModel, FinishReason } from '../../engine/types.js';
import { VLLM_METRICS as V } from '../../kv/vllm-metric-names.js';

// vLLM's buckets (seconds).
const TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0,
  640.0, 2560.0,
];
const ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
const REQUEST_LATENCY_BUCKETS = [
  0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0,
  7680.0,
];

/** 1, 2, 5, 10, 20, 50, ... up to max (vLLM's build_1_2_5_buckets for token-count histograms). */
function buckets125(max: number): number[] {
  const out: number[] = [];
  for (let exp = 1; ; exp *= 10) {
    for (const m of [1, 2, 5]) {
      if (m * exp > max) return out;
      out.push(m * exp);
    }
  }
}

export interface VllmMetricsOptions {
  /** Served model name (label model_name). */
  modelName: string;
  /** Data-parallel engine index (label engine). Default "0". */
  engineIndex?: string;
  legacyNames?: boolean;
  /** Reported in vllm:cache_config_info. */
  gpuMemoryUtilization?: number;
}

export class VllmMetrics {
  readonly registry = new Registry();
  private readonly labels: { model_name: string; engine: string };
  private readonly ttft: Histogram<'model_name' | 'engine'>;
  private readonly itl: Histogram<'model_name' | 'engine'>;
  private readonly e2e: Histogram<'model_name' | 'engine'>;
  private readonly queue: Histogram<'model_name' | 'engine'>;
  private readonly prefill: Histogram<'model_name' | 'engine'>;
  private readonly decode: Histogram<'model_name' | 'engine'>;
  private readonly promptTokens: Histogram<'model_name' | 'engine'>;
  private readonly generationTokens: Histogram<'model_name' | 'engine'>;
  private readonly success: Counter<'model_name' | 'engine' | 'finished_reason'>;
  private readonly clientAborts: Counter<'model_name' | 'engine'>;

  constructor(engine: EngineModel, opts: VllmMetricsOptions) {
    const labels = { model_name: opts.modelName, engine: opts.engineIndex ?? '0' };
    this.labels = labels;
    const labelNames = ['model_name', 'engine'] as const;
    const registers = [this.registry];
    const legacy = opts.legacyNames === true;

    new Gauge({
      name: V.running,
      help: 'Number of requests in model execution batches.',
      labelNames,
      registers,
      collect() {
        this.set(labels, engine.stats().running);
      },
    });
    new Gauge({
      name: V.waiting,
      help: 'Number of requests waiting to be processed.',
      labelNames,
      registers,
      collect() {
        this.set(labels, engine.stats().waiting);
      },
    });
    new Gauge({
      name: legacy ? V.legacyKvUsage : V.kvUsage,
      help: 'KV-cache usage. 1 means 100 percent usage.',
      labelNames,
      registers,
      collect() {
        this.set(labels, engine.stats().kvUsage);
      },
    });

    const maxLoras = engine.config.maxLoras;
    if (maxLoras !== undefined && engine.adapterState !== undefined) {
      // vLLM's LoRA state (vllm/v1/metrics/loggers.py, gauge_lora_info): one series set to the
      // time of the update. vLLM keeps the series of earlier label sets too; this one only the last.
      const adapters = engine.adapterState.bind(engine);
      new Gauge({
        name: V.loraInfo,
        help: 'Running stats on lora requests.',
        labelNames: ['max_lora', 'waiting_lora_adapters', 'running_lora_adapters'],
        registers,
        collect() {
          this.reset();
          const a = adapters();
          this.set({ max_lora: String(maxLoras), waiting_lora_adapters: a.waiting.join(','), running_lora_adapters: a.running.join(',') }, Date.now() / 1000);
        },
      });
    }

    // Engine counters mirrored at scrape time (the engine owns the counts).
    const mirror = (name: string, help: string, read: () => number): void => {
      new Counter({
        name,
        help,
        labelNames,
        registers,
        collect() {
          this.reset();
          this.inc(labels, read());
        },
      });
    };
    mirror(`${legacy ? V.legacyPrefixQueries : V.prefixQueries}_total`, 'Prefix cache queries, in terms of number of queried tokens.', () => engine.stats().prefixQueries);
    mirror(`${legacy ? V.legacyPrefixHits : V.prefixHits}_total`, 'Prefix cache hits, in terms of number of cached tokens.', () => engine.stats().prefixHits);
    mirror(`${V.preemptions}_total`, 'Cumulative number of preemption from the engine.', () => engine.stats().preemptions);
    mirror(`${V.promptTokens}_total`, 'Number of prefill tokens processed.', () => engine.stats().promptTokens);
    mirror(`${V.generationTokens}_total`, 'Number of generation tokens processed.', () => engine.stats().generationTokens);
    if (engine.stats().specDecode) {
      // Only a speculating engine has these, as on vLLM (vllm/v1/spec_decode/metrics.py).
      const sd = () => engine.stats().specDecode!;
      mirror(`${V.specDrafts}_total`, 'Number of spec decoding drafts.', () => sd().numDrafts);
      mirror(`${V.specDraftTokens}_total`, 'Number of draft tokens.', () => sd().numDraftTokens);
      mirror(`${V.specAcceptedTokens}_total`, 'Number of accepted tokens.', () => sd().numAcceptedTokens);
      new Counter({
        name: `${V.specAcceptedTokensPerPos}_total`,
        help: 'Accepted tokens per draft position.',
        labelNames: [...labelNames, 'position'],
        registers,
        collect() {
          this.reset();
          sd().acceptedPerPos.forEach((n, position) => this.inc({ ...labels, position: String(position) }, n));
        },
      });
    }

    this.success = new Counter({
      name: `${V.requestSuccess}_total`,
      help: 'Count of successfully processed requests.',
      labelNames: ['model_name', 'engine', 'finished_reason'],
      registers,
    });
    for (const reason of ['stop', 'length', 'abort'] as const) this.success.inc({ ...labels, finished_reason: reason }, 0);

    this.clientAborts = new Counter({
      name: 'vllm_sim:client_disconnects_total',
      help: 'Requests aborted because the client closed the connection before the response ended.',
      labelNames,
      registers,
    });
    this.clientAborts.inc(labels, 0);

    const cfg = engine.config;
    const cacheInfo = new Gauge({
      name: V.cacheConfigInfo,
      help: 'Information of the LLMEngine CacheConfig',
      labelNames: [
        'block_size',
        'cache_dtype',
        'enable_prefix_caching',
        'gpu_memory_utilization',
        'num_cpu_blocks',
        'num_gpu_blocks',
        'num_gpu_blocks_override',
        'prefix_caching_hash_algo',
        'engine',
      ],
      registers,
    });
    // vLLM renders the config values with Python's str(): True/False/None.
    cacheInfo.set(
      {
        block_size: String(cfg.blockSize),
        cache_dtype: 'auto',
        enable_prefix_caching: cfg.enablePrefixCaching ? 'True' : 'False',
        gpu_memory_utilization: String(opts.gpuMemoryUtilization ?? 0.9),
        num_cpu_blocks: 'None',
        num_gpu_blocks: String(cfg.numGpuBlocks),
        num_gpu_blocks_override: 'None',
        prefix_caching_hash_algo: 'sha256',
        engine: labels.engine,
      },
      1,
    );

    const histogram = (name: string, help: string, buckets: number[]) => {
      const h = new Histogram({ name, help, labelNames, buckets, registers });
      h.zero(labels); // present (all zero) from the first scrape, as vLLM's are
      return h;
    };
    this.ttft = histogram(V.ttft, 'Histogram of time to first token in seconds.', TTFT_BUCKETS);
    this.itl = histogram(V.itl, 'Histogram of inter-token latency in seconds.', ITL_BUCKETS);
    this.e2e = histogram(V.e2e, 'Histogram of e2e request latency in seconds.', REQUEST_LATENCY_BUCKETS);
    this.queue = histogram(V.queueTime, 'Histogram of time spent in WAITING phase for request.', REQUEST_LATENCY_BUCKETS);
    this.prefill = histogram(V.prefillTime, 'Histogram of time spent in PREFILL phase for request.', REQUEST_LATENCY_BUCKETS);
    this.decode = histogram(V.decodeTime, 'Histogram of time spent in DECODE phase for request.', REQUEST_LATENCY_BUCKETS);
    const tokenBuckets = buckets125(cfg.maxModelLen);
    this.promptTokens = histogram(V.requestPromptTokens, 'Number of prefill tokens processed.', tokenBuckets);
    this.generationTokens = histogram(V.requestGenerationTokens, 'Number of generation tokens processed.', tokenBuckets);
  }

  observeTimeToFirstToken(seconds: number): void {
    this.ttft.observe(this.labels, seconds);
  }

  observeInterTokenLatency(seconds: number): void {
    this.itl.observe(this.labels, seconds);
  }

  /** A request finished (any reason): count it and record its phase latencies (seconds). */
  observeFinished(
    reason: FinishReason,
    r: { e2e: number; queue: number | null; prefill: number | null; decode: number | null; promptTokens: number; outputTokens: number },
  ): void {
    this.success.inc({ ...this.labels, finished_reason: reason });
    this.e2e.observe(this.labels, r.e2e);
    if (r.queue !== null) this.queue.observe(this.labels, r.queue);
    if (r.prefill !== null) this.prefill.observe(this.labels, r.prefill);
    if (r.decode !== null) this.decode.observe(this.labels, r.decode);
    this.promptTokens.observe(this.labels, r.promptTokens);
    this.generationTokens.observe(this.labels, r.outputTokens);
  }

  countClientDisconnect(): void {
    this.clientAborts.inc(this.labels);
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  render(): Promise<string> {
    return this.registry.metrics();
  }
}
