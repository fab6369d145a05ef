/**
 * What the gateway knows about one worker: its identity, health, the last metrics snapshot it
 * scraped, and its own accounting of the requests it has sent there. The live gateway fills the
 * snapshot from HTTP scrapes of /metrics; the fleet simulation fills it from the engine model at
 * the same interval. Policies read only this — never an engine's live state (except `oracle`).
 */
import { ArrivalRate } from './arrival-rate.js';
import { DecodePace } from './decode-pace.js';
import { peakHeldTokens, type GrowingRequests } from './peak-usage.js';
import type { BlockKeys } from '../kv/prompt-blocks.js';

/** One scrape of a worker's /metrics, reduced to what routing uses. */
export interface MetricsSnapshot {
  /** Clock time (ms) the scrape completed. */
  at: number;
  /** vllm:kv_cache_usage_perc (or the older vllm:gpu_cache_usage_perc), 0..1. */
  kvUsage: number;
  running: number;
  waiting: number;
  /** From vllm:cache_config_info, when the worker publishes it. */
  numGpuBlocks?: number;
  blockSize?: number;
  /** Cumulative counters, in tokens. */
  prefixQueries?: number;
  prefixHits?: number;
  preemptions?: number;
  specDrafts?: number;
  specDraftTokens?: number;
  specAcceptedTokens?: number;
  /**
   * vllm:lora_requests_info, on a worker serving LoRA adapters: its --max-loras and the adapters
   * of its running and waiting requests.
   */
  lora?: { maxLoras: number; running: readonly string[]; waiting: readonly string[] };
}

/** A request the gateway has dispatched to this worker and not yet seen finish. */
export interface InflightRequest {
  id: string;
  promptTokens: number;
  /** Prompt tokens the policy expects the worker to compute (not served from its cache). */
  uncachedTokens: number;
  maxTokens: number;
  /** KV blocks reserved for this request at pick time (uncached prompt + expected output). */
  blocks: number;
  /** Sequences it runs at the worker (a batch's prompts × n; RouteRequest.sequences). Absent: 1. */
  sequences?: number;
  dispatchedAt: number;
  /** The LoRA adapter it runs with, if any. */
  adapter?: string;
  /** Set when the first token came back: the prefill is done. */
  firstTokenAt?: number;
}

/**
 * Exact view into a simulated engine, available only inside the fleet simulation and used only by
 * the `oracle` policy (an upper bound, not a real router).
 */
export interface OracleProbe {
  cachedPrefixTokens(prompt: ArrayLike<number>, keys?: BlockKeys): number;
  running(): number;
  waiting(): number;
  freeBlocks(): number;
  /** Prompt tokens queued or mid-prefill that the engine still has to compute. */
  pendingPrefillTokens(): number;
}

/** A worker's part in prefill/decode disaggregation (WorkerIdentity.role). */
export type WorkerRole = 'prefill' | 'decode' | 'both';

export interface WorkerIdentity {
  id: string;
  url: string;
  pool: string;
  model: string;
  /** LoRA adapters the worker serves on top of `model` (vLLM --lora-modules): model names too. */
  adapters?: readonly string[];
  /**
   * Also serve the adapters the worker lists in its /v1/models under `model` (loaded at start or at
   * run time, vLLM /v1/load_lora_adapter). Default false here; the config turns it on per pool.
   */
  discoverAdapters?: boolean;
  /**
   * A regular expression (the whole name must match): requests naming a model no pool serves that
   * it matches come here too, as LoRA adapters the worker loads on demand (vLLM's LoRA resolvers).
   */
  resolveAdapters?: string;
  /** KV capacity from configuration or a profile, until the worker reports its own. */
  numGpuBlocks?: number;
  blockSize?: number;
  /** Headers sent with every request to the worker (its --api-key as `authorization`), lower-case names. */
  upstreamHeaders?: Record<string, string>;
  /**
   * The worker's kind of hardware (`h100`, `a100-tp2`…), where a pool mixes kinds: workers of one
   * kind share what a policy learns of their speed (WorkerState.speedClass).
   */
  hardware?: string;
  /**
   * What the worker does in a disaggregated fleet (its pool's `role`): `prefill` (prompts only,
   * their KV then pulled by a decode worker), `decode`, or `both` (the default: serves requests
   * whole, and may prefill or decode for others).
   */
  role?: WorkerRole;
  /** The inference server behind the URL (its metric names, its native routes). Default vllm. */
  engine?: EngineKind;
}

/** The inference servers kvgate knows how to watch and call. */
export type EngineKind = 'vllm' | 'sglang';

/** Capacity assumed for a worker that has not said (llm-d's fallback, vLLM's block size). */
const DEFAULT_NUM_GPU_BLOCKS = 31_250;
const DEFAULT_BLOCK_SIZE = 16;
/**
 * How long peakInflightBlocks' computation stands, ms (then only raised by what begins): at most a
 * hundred sorts a second per worker, however fast requests come.
 */
const PEAK_REFRESH_MS = 10;
/** Weight of the latest request in decodeMsPerToken's moving average. */
const DECODE_ALPHA = 0.2;

export class WorkerState {
  readonly id: string;
  readonly url: string;
  readonly pool: string;
  readonly model: string;
  /** LoRA adapters from the configuration (WorkerIdentity.adapters). */
  readonly configuredAdapters: readonly string[];
  /** Serve the adapters the worker lists in /v1/models too (WorkerIdentity.discoverAdapters). */
  readonly discoverAdapters: boolean;
  /** The names of adapters it loads on demand (WorkerIdentity.resolveAdapters, anchored), or null. */
  readonly resolveAdapters: RegExp | null;
  /**
   * Adapters served beyond the configured ones: listed by the worker's /v1/models (discovery) or
   * loaded through /admin/adapters. Changed only through the registry, which indexes them.
   */
  private loaded: ReadonlySet<string> = new Set();
  /** configuredAdapters, then the loaded ones not configured; rebuilt when `loaded` changes. */
  private served: readonly string[];
  /**
   * Bumped by every change to the loaded adapters made by an operator (/admin/adapters): a model
   * list read that began before it is out of date and not applied (fleet/health.ts).
   */
  adapterEpoch = 0;
  /** Of configuredAdapters, those the worker's /v1/models did not list when last read (fleet/health.ts). */
  unlistedAdapters: readonly string[] = [];
  /** The worker's declared kind of hardware, or null (the pool's workers are alike). */
  readonly hardware: string | null;
  /** Its part in prefill/decode disaggregation (WorkerIdentity.role). */
  readonly role: WorkerRole;
  /** The inference server behind the URL: which metric names its /metrics has, which native routes it serves. */
  readonly engine: EngineKind;
  /**
   * What the worker shares its learned speed with: its pool's workers of the same declared
   * hardware, or, unlabelled, its pool's workers of about the same KV capacity (set by
   * fleet/speed-classes.ts; the pool until a capacity is known). A policy learns prefill and decode
   * speed per speed class, not per worker (see scheduler/policies/kvgate/learners/prefill-rate.ts for why).
   */
  speedClass: string;
  /** Headers sent with every request to the worker (credentials); never shown in /admin/workers. */
  readonly upstreamHeaders: Readonly<Record<string, string>>;

  /** Health probes passing. Unhealthy workers are filtered out of routing. */
  healthy = true;
  /** Set by the circuit breaker after repeated upstream failures. */
  circuitOpen = false;
  /**
   * Set by passive outlier detection (gateway/fleet-watch/outliers.ts): the worker owes bytes and has been
   * silent for longer than its expected time to first token, or a scrape or probe timed out. It
   * is routed around until a byte arrives from it again.
   */
  suspected = false;
  /**
   * Taken out of routing by an operator (POST /admin/workers/{id}/drain), for maintenance: it gets
   * no new requests while those it is serving finish; its health probes and scrapes go on.
   */
  draining = false;
  /** May be given new requests: health probes passing, circuit closed, not draining. */
  get routable(): boolean {
    return this.healthy && !this.circuitOpen && !this.draining;
  }
  /** Clock time (ms) of the last byte received from the worker on any connection. */
  lastByteAt = -Infinity;
  /** The recent TPOT of the answers streaming from here (fleet/decode-pace.ts). */
  readonly decodePace = new DecodePace();
  /** How often this gateway has sent it requests lately (every replica's, when mirrored). */
  readonly arrivals = new ArrivalRate();
  /**
   * Removed from the configuration by a reload (fleet/registry.ts retire()): it gets no new
   * requests (it is also marked unhealthy, which every filter already skips), while the requests
   * it is serving finish.
   */
  retired = false;

  snapshot: MetricsSnapshot | null = null;
  lastScrapeError: string | null = null;
  lastScrapeAttemptAt = -Infinity;

  readonly inflight = new Map<string, InflightRequest>();
  /** This gateway's requests in flight here, per LoRA adapter. */
  readonly inflightAdapters = new Map<string, number>();
  /** Sums over `inflight`, kept incrementally so routing never iterates requests. */
  inflightPrefillTokens = 0;
  /** Uncached prompt tokens of every request charged here so far (only grows). */
  prefillTokensDispatched = 0;
  inflightTokens = 0;
  inflightBlocks = 0;
  /** Requests dispatched after the current snapshot was taken (the snapshot cannot show them). */
  dispatchedSinceSnapshot = 0;
  /** KV blocks reserved by in-flight requests dispatched after the current snapshot. */
  blocksReservedSinceSnapshot = 0;
  /**
   * KV blocks the current snapshot counted as used that requests ending since have freed (what
   * they held when it was taken, at least).
   */
  blocksFreedSinceSnapshot = 0;
  /** This gateway's requests whose first token arrived after the current snapshot. */
  firstTokensSinceSnapshot = 0;
  /** This gateway's requests that ended after the current snapshot (finished, failed, cancelled). */
  endedSinceSnapshot = 0;
  /** Decisions made for this worker (for /admin/workers and tests). */
  routed = 0;
  /**
   * The longest prompt plus output the worker's model takes (`max_model_len` in its /v1/models,
   * read by the health prober); null if it did not say, undefined until asked.
   */
  maxModelLen: number | null | undefined = undefined;
  /**
   * Time per output token of this gateway's streamed requests here (a moving average, ms; 0 until
   * one has finished). It tells how far along its answer a decoding request is (peakInflightBlocks).
   */
  decodeMsPerToken = 0;

  /**
   * peakInflightBlocks' last computation (at), plus the blocks of every request begun since (each
   * can add no more than its reservation to the peak).
   */
  private peak = { blocks: 0, at: -Infinity };
  private growing: GrowingRequests = { held: new Float64Array(16), left: new Float64Array(16), sequences: new Float64Array(16), n: 0 };
  private order = new Uint32Array(16);

  oracle?: OracleProbe;

  private configuredBlocks?: number;
  private configuredBlockSize?: number;

  constructor(identity: WorkerIdentity) {
    this.id = identity.id;
    this.url = identity.url;
    this.pool = identity.pool;
    this.model = identity.model;
    this.configuredAdapters = identity.adapters ?? [];
    this.discoverAdapters = identity.discoverAdapters ?? false;
    this.resolveAdapters = identity.resolveAdapters === undefined ? null : new RegExp(`^(?:${identity.resolveAdapters})$`);
    this.served = this.configuredAdapters;
    this.hardware = identity.hardware ?? null;
    this.role = identity.role ?? 'both';
    this.engine = identity.engine ?? 'vllm';
    this.speedClass = this.hardware === null ? this.pool : `${this.pool}\u0000${this.hardware}`;
    this.upstreamHeaders = identity.upstreamHeaders ?? {};
    this.configuredBlocks = identity.numGpuBlocks;
    this.configuredBlockSize = identity.blockSize;
  }

  /** LoRA adapters served on top of `model`, configured and loaded; requests naming one come here too. */
  get adapters(): readonly string[] {
    return this.served;
  }

  /** Adapters served beyond the configured ones (WorkerRegistry.setLoadedAdapters changes them). */
  get loadedAdapters(): ReadonlySet<string> {
    return this.loaded;
  }

  /** Registry only: replace the loaded adapters (the registry keeps its model index in step). */
  replaceLoadedAdapters(names: ReadonlySet<string>): void {
    this.loaded = names;
    const configured = new Set(this.configuredAdapters);
    this.served = [...this.configuredAdapters, ...[...names].filter((a) => !configured.has(a))];
  }

  get numGpuBlocks(): number {
    return this.snapshot?.numGpuBlocks ?? this.configuredBlocks ?? DEFAULT_NUM_GPU_BLOCKS;
  }

  /** The KV capacity the worker reported, else the one configured for it, else undefined. */
  get knownGpuBlocks(): number | undefined {
    return this.snapshot?.numGpuBlocks ?? this.configuredBlocks;
  }

  get blockSize(): number {
    return this.snapshot?.blockSize ?? this.configuredBlockSize ?? DEFAULT_BLOCK_SIZE;
  }

  /** Recent milliseconds per output token of the answers streaming from here, if enough were seen. */
  recentTpotMs(now: number): number | undefined {
    return this.decodePace.msPerToken(now);
  }

  get inflightCount(): number {
    return this.inflight.size;
  }

  /**
   * Sequences of this gateway's requests in flight here: inflightCount, but a request of n answers
   * or a batch of prompts counts each (the engine runs and reports each as a request of its own).
   */
  inflightSequences = 0;

  /**
   * The most KV blocks this gateway's requests in flight here will hold at once if they all decode
   * to their reserved ends and nothing more is sent (fleet/peak-usage.ts). inflightBlocks counts
   * every one at its final size at once; requests end at different steps, so this is lower: a
   * request that has decoded for d ms at decodeMsPerToken has d / decodeMsPerToken of its output
   * behind it (none before its first token, or before any decode speed is known). Computed at most
   * every PEAK_REFRESH_MS: in between, a request begun adds its reservation and one ended takes
   * nothing off, which can only overstate the peak, and never above inflightBlocks. So a request
   * costs O(1) here, and the sort runs at most a hundred times a second per worker.
   */
  peakInflightBlocks(now: number): number {
    const p = this.peak;
    if (now - p.at < PEAK_REFRESH_MS) return Math.min(p.blocks, this.inflightBlocks);
    const bs = this.blockSize;
    const n = this.inflight.size;
    if (this.growing.held.length < n) {
      const cap = Math.max(n, 2 * this.growing.held.length);
      this.growing = { held: new Float64Array(cap), left: new Float64Array(cap), sequences: new Float64Array(cap), n: 0 };
      this.order = new Uint32Array(cap);
    }
    const g = this.growing;
    const msPerToken = this.decodeMsPerToken;
    let i = 0;
    for (const r of this.inflight.values()) {
      const seqs = r.sequences ?? 1;
      // The blocks reserved hold the uncached prompt and, per sequence, the output reserved.
      const prompt = Math.min(r.uncachedTokens, r.blocks * bs);
      const out = (r.blocks * bs - prompt) / seqs;
      const done = r.firstTokenAt !== undefined && msPerToken > 0 ? Math.min(out, (now - r.firstTokenAt) / msPerToken) : 0;
      g.held[i] = prompt + seqs * done;
      g.left[i] = out - done;
      g.sequences[i] = seqs;
      i++;
    }
    g.n = n;
    p.blocks = Math.ceil(peakHeldTokens(g, this.order) / bs);
    p.at = now;
    return p.blocks;
  }

  /** A streamed request here finished after `msPerToken` per output token (after its first). */
  learnDecode(msPerToken: number): void {
    if (!(msPerToken > 0) || !Number.isFinite(msPerToken)) return;
    this.decodeMsPerToken = this.decodeMsPerToken > 0 ? this.decodeMsPerToken + DECODE_ALPHA * (msPerToken - this.decodeMsPerToken) : msPerToken;
  }

  /** True if the snapshot is missing or older than `staleAfterMs`. */
  isStale(now: number, staleAfterMs: number): boolean {
    return this.snapshot === null || now - this.snapshot.at > staleAfterMs;
  }

  applySnapshot(s: MetricsSnapshot): void {
    this.snapshot = s;
    this.lastScrapeError = null;
    this.lastScrapeAttemptAt = s.at;
    this.dispatchedSinceSnapshot = 0;
    this.blocksReservedSinceSnapshot = 0;
    this.blocksFreedSinceSnapshot = 0;
    this.firstTokensSinceSnapshot = 0;
    this.endedSinceSnapshot = 0;
  }

  /** A scrape failed or returned garbage: keep the old snapshot (it goes stale), note why. */
  markScrapeFailed(now: number, error: string): void {
    this.lastScrapeError = error;
    this.lastScrapeAttemptAt = now;
  }

  /**
   * Requests queued or running at the worker as best known: the snapshot's count plus what was
   * dispatched since (a snapshot cannot show those), or the gateway's own in-flight count when
   * there is no usable snapshot.
   */
  estimatedQueue(now: number, staleAfterMs: number): { running: number; waiting: number } {
    if (this.isStale(now, staleAfterMs)) return { running: this.inflightSequences, waiting: 0 };
    const s = this.snapshot!;
    return { running: s.running, waiting: s.waiting + this.dispatchedSinceSnapshot };
  }

  /**
   * Requests queued and running at the worker now, as best known: the snapshot moved forward by
   * what this gateway saw happen since — its dispatches join the queue, its first tokens move a
   * request from the queue to the batch, its completions leave the batch — or the gateway's own
   * in-flight count when there is no usable snapshot. Between scrapes a busy worker's batch turns
   * over (bursty traffic at 16 workers: a scrape a second, requests of a few seconds); the
   * snapshot alone, plus dispatches, still counts the requests that left, and the kvgate policy
   * read a worker that had emptied as full. Engine-side moves (a preemption sends a running
   * request back to the queue) show at the next scrape. A non-streamed request's first token is
   * seen only at its end: it counts as queued until it leaves, which keeps the total right.
   */
  currentQueue(now: number, staleAfterMs: number): { running: number; waiting: number } {
    if (this.isStale(now, staleAfterMs)) return { running: this.inflightSequences, waiting: 0 };
    const s = this.snapshot!;
    const waiting = Math.max(0, s.waiting + this.dispatchedSinceSnapshot - this.firstTokensSinceSnapshot);
    const running = Math.max(0, s.running + this.firstTokensSinceSnapshot - this.endedSinceSnapshot);
    return { running, waiting };
  }

  /**
   * Free KV blocks as the routing policies read them: the scrape's, net of blocks reserved by
   * requests dispatched since. Blocks freed since are not counted back, so between scrapes this
   * errs towards full (freeBlocksNow counts them).
   */
  estimatedFreeBlocks(now: number, staleAfterMs: number): number {
    const total = this.numGpuBlocks;
    if (this.isStale(now, staleAfterMs)) return Math.max(0, total - this.inflightBlocks);
    const used = Math.round(this.snapshot!.kvUsage * total);
    return Math.max(0, total - used - this.blocksReservedSinceSnapshot);
  }

  /**
   * Free KV blocks now, as admission reads them: estimatedFreeBlocks plus the blocks the scrape saw
   * held by requests that have ended since. Measured just before each scrape in the simulation,
   * this halves the estimate's error or better (docs/admission.md). The routing policies keep
   * estimatedFreeBlocks: their weights were set against it, and this one made no difference to
   * their capacity beyond the bisection's noise (−3.5% to +5.5% over 16 runs, most unchanged).
   */
  freeBlocksNow(now: number, staleAfterMs: number): number {
    const free = this.estimatedFreeBlocks(now, staleAfterMs);
    if (this.isStale(now, staleAfterMs)) return free;
    return Math.min(this.numGpuBlocks, free + this.blocksFreedSinceSnapshot);
  }

  /**
   * Blocks `r` held at clock time `t`, at least: its uncached prompt and the output written by
   * then (at decodeMsPerToken) once its first token had come, else none (a request waiting at the
   * engine holds no blocks; one mid-prefill is counted as none, erring towards less free).
   */
  private heldAt(r: InflightRequest, t: number): number {
    if (r.firstTokenAt === undefined || r.firstTokenAt > t) return 0;
    const seqs = r.sequences ?? 1;
    const bs = this.blockSize;
    const prompt = Math.min(r.uncachedTokens, r.blocks * bs);
    const out = (r.blocks * bs - prompt) / seqs;
    const written = this.decodeMsPerToken > 0 ? Math.min(out, (t - r.firstTokenAt) / this.decodeMsPerToken) : 0;
    return Math.floor((prompt + seqs * written) / bs);
  }

  /**
   * Charge a request to this worker. Called synchronously at pick time (the reservation); with
   * `mirrored`, a request another gateway replica routed (not counted in `routed`).
   */
  begin(r: InflightRequest, mirrored = false): void {
    if (this.inflight.has(r.id)) return;
    this.inflight.set(r.id, r);
    this.peak.blocks += r.blocks;
    this.inflightPrefillTokens += r.uncachedTokens;
    this.prefillTokensDispatched += r.uncachedTokens;
    this.inflightTokens += r.promptTokens + r.maxTokens;
    this.inflightBlocks += r.blocks;
    const seqs = r.sequences ?? 1;
    this.inflightSequences += seqs;
    if (r.adapter !== undefined) this.inflightAdapters.set(r.adapter, (this.inflightAdapters.get(r.adapter) ?? 0) + 1);
    this.dispatchedSinceSnapshot += seqs;
    this.blocksReservedSinceSnapshot += r.blocks;
    if (!mirrored) this.routed++;
    this.arrivals.add(r.dispatchedAt);
  }

  /**
   * Where LoRA `adapter` stands here: 'active' (running or waiting at the last scrape, or in flight
   * from this gateway since), 'free' (not active, but fewer adapters are than the worker's
   * --max-loras), 'taken' (as many others are active as the limit: a request for it would wait
   * for one of them to finish), or 'unknown' (the worker reports no vllm:lora_requests_info).
   */
  adapterSlot(adapter: string): 'active' | 'free' | 'taken' | 'unknown' {
    const lora = this.snapshot?.lora;
    if (lora === undefined) return 'unknown';
    if (this.inflightAdapters.has(adapter) || lora.running.includes(adapter) || lora.waiting.includes(adapter)) return 'active';
    return this.freeAdapterSlots() > 0 ? 'free' : 'taken';
  }

  /**
   * Adapter slots free here (--max-loras less the adapters active: running at the last scrape or
   * in flight from this gateway); adds the active adapters, waiting ones too, to `active` if given.
   * 0 without a report.
   */
  freeAdapterSlots(active?: Set<string>): number {
    const lora = this.snapshot?.lora;
    if (lora === undefined) return 0;
    let n = 0;
    for (const a of this.inflightAdapters.keys()) {
      active?.add(a);
      n++;
    }
    for (const a of lora.running) {
      active?.add(a);
      if (!this.inflightAdapters.has(a)) n++;
    }
    for (const a of lora.waiting) active?.add(a);
    return Math.max(0, lora.maxLoras - n);
  }

  /** The request's first token arrived: its prefill no longer loads this worker. */
  firstToken(id: string, now: number): void {
    const r = this.inflight.get(id);
    if (!r || r.firstTokenAt !== undefined) return;
    r.firstTokenAt = now;
    this.inflightPrefillTokens -= r.uncachedTokens;
    this.firstTokensSinceSnapshot += r.sequences ?? 1;
  }

  /** The request finished, failed or was cancelled: release everything charged for it. */
  end(id: string): InflightRequest | undefined {
    const r = this.inflight.get(id);
    if (!r) return undefined;
    this.inflight.delete(id);
    const seqs = r.sequences ?? 1;
    this.inflightSequences -= seqs;
    if (r.adapter !== undefined) {
      const n = (this.inflightAdapters.get(r.adapter) ?? 1) - 1;
      if (n > 0) this.inflightAdapters.set(r.adapter, n);
      else this.inflightAdapters.delete(r.adapter);
    }
    if (r.firstTokenAt === undefined) {
      // Ended before its first token (failed, cancelled, or non-streamed): it leaves the queue.
      this.inflightPrefillTokens -= r.uncachedTokens;
      this.firstTokensSinceSnapshot += seqs;
    }
    this.endedSinceSnapshot += seqs;
    this.inflightTokens -= r.promptTokens + r.maxTokens;
    this.inflightBlocks -= r.blocks;
    if (this.snapshot !== null) {
      if (r.dispatchedAt > this.snapshot.at) this.blocksReservedSinceSnapshot = Math.max(0, this.blocksReservedSinceSnapshot - r.blocks);
      else this.blocksFreedSinceSnapshot += this.heldAt(r, this.snapshot.at);
    }
    return r;
  }
}
