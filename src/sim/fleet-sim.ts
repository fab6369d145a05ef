/**
 * The discrete-event fleet simulation behind `kvgate bench`: N copies of the engine model in
 * virtual time, routed by the gateway's own Router and policy code.
 *
 * Events, in a binary heap on (time, insertion order):
 * - arrival — read lazily from the request source (one request of lookahead, so a trace is never
 *   loaded whole): optional admission hook, then Router.route, then the engine on the chosen
 *   worker (after an optional constant gateway/network overhead).
 * - session turn — closed loop: when a request that carries `next` (a session's turn) finishes, or
 *   is rejected or shed, `next(now)` gives the session's following turn, which becomes an arrival
 *   event at its own time (now + think time). Turns arriving at the same instant as a request of
 *   the source come after it.
 * - step done — each worker's engine steps at its own pace: step() is planned when the previous
 *   step ends (or, at an idle worker, at the instant work arrives — after every arrival of that
 *   instant, so requests arriving together share a step) and its results become visible at
 *   start + durationMs; then first tokens go to Router.firstToken, finished requests to
 *   Router.complete, and the next step starts.
 * - scrape — every scrape interval each worker's WorkerState gets a snapshot of engine.stats(),
 *   as the live gateway gets one from /metrics. Between scrapes policies see only the snapshot
 *   plus the router's own in-flight accounting. Only a policy with usesOracle set (`oracle`,
 *   `oracle-greedy`) gets a live probe.
 * - KV events — for a policy with usesKvEvents set (`dynamo`, `llm-d-precise`) the engines publish
 *   their KV-cache events, and each step's events are applied to the policy's prefix index when
 *   the step's results become visible, through the same mapper (fleet/kv-events-mapper.ts) the
 *   gateway's subscribers use. The simulated stream loses nothing, so every worker's view is
 *   event-fed from the start; other policies get no events and the engines record none.
 * - KV sample — per-worker KV usage for the report.
 * - admission (optional, `admission`) — the gateway's own AdmissionController (src/admission/),
 *   on this run's virtual clock and WorkerStates: at arrival a request is admitted (routed now),
 *   queued, or refused (shed); the queue is pumped after every step's results and every scrape
 *   (capacity freed), and at queue deadlines (timer events), exactly as the live admission stage
 *   pumps it on request ends and on a timer. A request's class comes from its integer priority
 *   (absent: standard) through `vllmPriority`.
 *
 * - response cache (optional, `cache`) — in the arrival path, after admission and before routing,
 *   the gateway's own ResponseCache decides, with its in-memory store in virtual time: every
 *   request is taken as a temperature-0 completion of its prompt tokens, keyed by tenant, model,
 *   prompt and max_tokens like a live request. A hit is answered at arrival + overheadMs without
 *   touching a worker; a request identical to one in flight follows it (single-flight: its first
 *   token and finish are the leader's, or its own arrival if later) and is refused with the
 *   leader's status if the leader is refused; a miss is routed, and its answer is stored when it
 *   finishes.
 *
 * - replicas (optional, `replicas`) — N gateway replicas (src/sim/replicas.ts): each has its own
 *   Router, policy and WorkerStates (in-flight accounting); arrivals go round-robin; scrapes and KV
 *   events reach every replica; with sharing, each replica's own prefix knowledge reaches the
 *   others' indexes after the sharing delay (a share event), and with shareLoad its in-flight
 *   accounting (dispatch, first token, end) the others' WorkerStates.
 *
 * - speculative cascade (optional, `speculative`) — src/sim/cascade-sim.ts: a draft pool of its own
 *   engines beside the workers (the target pool); a routed request asks the gateway's cascade
 *   controller for its first k and runs the live cascade's rounds (src/speculative/rounds.ts) as
 *   draft and verification requests on the engines, as call events on this queue; its first token
 *   and finish are recorded like a plain request's. A first k of 0 leaves it to the plain path.
 *
 * Metrics follow vLLM's benchmark_serving.py. The engine runs with emitTokens off, so there are no
 * per-token events: TTFT and E2E come from the step in which the first token / last token appeared;
 * TPOT = (E2E − TTFT)/(output − 1); ITL samples are step durations, each counted once per sequence
 * that decoded a token in that step (a decoding sequence gets a token every step, so the gap between
 * its tokens is the step's duration). The gap after a preemption (recompute) is not sampled as ITL;
 * it still shows in that request's TPOT.
 */
import { Engine } from '../engine/engine.js';
import type { EngineConfig, EngineRequest, EngineStats, FinishedOutput, StepResult, TokenContext } from '../engine/types.js';
import { KvEventMapper } from '../fleet/kv-events-mapper.js';
import { SpeedClasses } from '../fleet/speed-classes.js';
import { WorkerState, type MetricsSnapshot } from '../fleet/worker-state.js';
import type { Tenant } from '../admission/tenants.js';
import { PROMPT_ADAPTER, PROMPT_SALT } from '../kv/prompt-blocks.js';
import type { CacheEntry } from '../cache/entry.js';
import type { ResponseCache } from '../cache/response-cache.js';
import type { KvEvent } from '../kv/events.js';
import { Router } from '../scheduler/router.js';
import type { Policy, RouteRequest } from '../scheduler/types.js';
import { answerToken, answerTokens, mix32, synthText } from '../workload/tokens.js';
import type { BenchRequest } from '../workload/types.js';
import { VirtualClock } from '../util/clock.js';
import { seededRng } from '../util/rng.js';
import { RequestState } from '../util/state.js';
import { SimCascade, type SimSpecResult, type SimSpeculation } from './cascade-sim.js';
import { EventQueue } from './des-queue.js';
import { connectReplicas, deliver, replicaOf, type ReplicaOptions, type SharedKnowledge } from './replicas.js';
import { classOfVllmPriority, CLASS_RANK, DEFAULT_VLLM_PRIORITY, type VllmPriorityMap } from '../admission/classes.js';
import { AdmissionController, type AdmissionSettings, type AdmissionTicket } from '../admission/controller.js';

/**
 * Everything the router is told, in order, for tests and debugging: replaying these calls against
 * a fresh Router and WorkerStates reproduces every decision (the policy sees nothing else).
 */
export type RouterTraceEvent =
  | { type: 'snapshot'; t: number; worker: number; snapshot: MetricsSnapshot }
  | { type: 'route'; t: number; req: RouteRequest; worker: string | null; status?: number }
  | { type: 'firstToken'; t: number; id: string }
  /** KV events of `worker` applied to the policy's prefix index (usesKvEvents policies only). */
  | { type: 'kvEvents'; t: number; worker: number; events: readonly KvEvent[] }
  | { type: 'complete'; t: number; id: string; ok: boolean; outputTokens?: number };

/** What an admission hook answers: proceed, or refuse with a status (400 counts as rejected). */
export type AdmitResult = { ok: true } | { ok: false; status: 400 | 429 | 503; code: string };

export interface FleetSimOptions {
  workers: number;
  /**
   * Configuration of every worker's engine. emitTokens is forced off; kvEvents is on exactly when
   * the policy declares usesKvEvents (and keeps a prefix index).
   */
  engineConfig: EngineConfig;
  /**
   * A mixed fleet: worker i's engine is built from `engineConfigs[i]` (one per worker, each with
   * its own GPU's time model and KV capacity), `engineConfig` giving only what all must share
   * (block size, model length). Absent, every worker is `engineConfig`.
   */
  engineConfigs?: readonly EngineConfig[];
  /**
   * Each worker's declared hardware (WorkerIdentity.hardware), as an operator labels a mixed pool;
   * absent, no worker declares any (one speed class for the fleet).
   */
  hardware?: readonly string[];
  /** A fresh policy instance (policies may keep state). */
  policy: Policy;
  seed: number;
  /** Model name the requests ask for and the workers serve. */
  model?: string;
  /**
   * Metrics scrape interval, ms. Default: the policy's own `scrapeIntervalMs` if it declares one,
   * else 1000 (the gateway's default).
   */
  scrapeIntervalMs?: number;
  /** Router staleness threshold, ms. Default max(5000, 5 scrape intervals). */
  staleAfterMs?: number;
  /** Constant gateway + network delay added before a request reaches its worker, ms. */
  overheadMs?: number;
  /** KV-usage sampling interval for the report, ms (default 1000). */
  kvSampleMs?: number;
  /** Admission control seam: called before routing, in virtual time. */
  admit?: (req: RouteRequest, now: number) => AdmitResult;
  /** KV-pressure admission with the gateway's AdmissionController (after `admit`, before the cache). */
  admission?: { settings: AdmissionSettings; vllmPriority?: VllmPriorityMap };
  /**
   * The response cache, built on a MemoryStore whose clock is this run's virtual clock
   * (`VirtualClock` passed in `clock`): fresh per run.
   */
  cache?: { cache: ResponseCache; clock: VirtualClock };
  /** Called every `progressEvery` arrivals with the number of arrivals so far. */
  onProgress?: (arrivals: number, nowMs: number) => void;
  /**
   * Tenant isolation of cached prompts (a pool with `cacheIsolation: tenant`): each request's
   * tenant is its engine cache_salt and salts the router's block hashes (and, for policies that
   * match characters, prefixes its text), as the live gateway does.
   */
  cacheIsolation?: boolean;
  /** The LoRA adapters every worker serves (as a pool's `adapters`), for requests naming one. */
  adapters?: readonly string[];
  /** Receives every call made to the router and every snapshot applied, in order. */
  routerTrace?: (e: RouterTraceEvent) => void;
  progressEvery?: number;
  /**
   * Several gateway replicas (src/sim/replicas.ts): `replicas.policies[0]` must be `policy`.
   * Not combined with `admission` (its controller would see one replica's accounting only).
   */
  replicas?: ReplicaOptions;
  /**
   * The speculative cascade (src/sim/cascade-sim.ts): a draft pool beside the workers (the target
   * pool), and the live cascade's round logic and controller in virtual time. Each call to a
   * worker is delayed by `overheadMs` each way. Not combined with `cache`.
   */
  speculative?: SimSpeculation;
}

export interface WorkerResult {
  id: string;
  /** Requests routed here. */
  routed: number;
  preemptions: number;
  /** Of those, requests preempted mid-prefill (EngineStats.prefillPreemptions). */
  prefillPreemptions: number;
  /** Sum of step durations: modelled GPU busy time, ms. */
  busyMs: number;
  steps: number;
  /** KV usage (0..1) sampled every kvSampleMs from time 0. */
  kvUsage: number[];
  final: EngineStats;
}

export interface SimCacheCounts {
  hits: number;
  coalesced: number;
  misses: number;
  stored: number;
  /** Entries the store evicted to stay within its bytes. */
  evictions: number;
}

/** Raw outcome of one run; src/bench/metrics.ts turns it into the summary. */
export interface SimResult {
  policy: string;
  scrapeIntervalMs: number;
  kvSampleMs: number;
  requests: number;
  rejected: number;
  shed: number;
  /** Reasons for refusals, by code. */
  refusals: Record<string, number>;
  /** Completed requests, one entry each, in completion order. */
  completed: {
    arrival: number[];
    firstToken: number[];
    finish: number[];
    promptTokens: number[];
    /** Output tokens; of n sampled answers (BenchRequest.sampleTokens), the longest's. */
    outputTokens: number[];
    /** Output tokens of every answer: outputTokens, but for n sampled answers their sum (absent: outputTokens). */
    answeredTokens?: number[];
    cachedTokens: number[];
    /** Worker index, or -1 when the response cache answered it. */
    worker: number[];
    /** 0: a worker generated it; 1: a cache hit; 2: it followed an identical request in flight (absent: all 0). */
    fromCache?: number[];
    /** Priority class rank (0 critical, 1 standard, 2 sheddable) of each completed request. */
    cls?: number[];
  };
  /** Per class rank (0 critical, 1 standard, 2 sheddable): what happened to its requests. */
  byClass?: {
    requests: number[];
    /** Requests that waited in the admission queue (whatever came of them). */
    queued: number[];
    /** Refusals (shed, queue full, queue timeout, router 503 / 400), each with its latency from arrival, ms. */
    refused: { cls: number[]; latencyMs: number[]; status: number[] };
  };
  /** Response-cache counts (null or absent without a cache). */
  cache?: SimCacheCounts | null;
  /** What the speculative cascade did (absent without `speculative`). */
  speculative?: SimSpecResult;
  /** Step durations (ms) and the number of decode tokens each produced: weighted ITL samples. */
  itl: { durationMs: number[]; weight: number[] };
  firstArrivalMs: number;
  /** Arrival time of the last request (of the source or a later session turn). */
  lastArrivalMs: number;
  lastFinishMs: number;
  workers: WorkerResult[];
  /** Wall-clock time the run took, ms (the only nondeterministic field). */
  wallMs: number;
  events: number;
}

const enum Kind {
  Arrival,
  StepStart,
  StepDone,
  Dispatch,
  Scrape,
  KvSample,
  AdmissionTimer,
  Share,
  ShareLoad,
  Call,
}

type SimEvent =
  | { k: Kind.Arrival; req: BenchRequest }
  | { k: Kind.StepStart; w: number }
  | { k: Kind.StepDone; w: number; res: StepResult }
  | { k: Kind.Dispatch; w: number; idx: number; req: BenchRequest }
  | { k: Kind.Scrape }
  | { k: Kind.KvSample }
  | { k: Kind.AdmissionTimer }
  | { k: Kind.Share; share: SharedKnowledge }
  | { k: Kind.ShareLoad; apply: () => void }
  | { k: Kind.Call; fn: () => void };

/** Every simulated request asks for the cache's default behaviour (no Cache-Control). */
const NO_CACHE_CONTROL = { noStore: false, noCache: false, maxAgeS: null };

/**
 * The max_tokens the request sends: its declared cap (at least its output; no more than the
 * context left after the prompt, as a client that sizes its cap to the model does), else exactly
 * its output length.
 */
function declaredMaxTokens(req: BenchRequest, maxModelLen: number): number {
  if (req.declaredMaxTokens === undefined) return req.maxTokens;
  return Math.max(req.maxTokens, Math.min(req.declaredMaxTokens, maxModelLen - req.promptTokens.length));
}

/** A RouteRequest whose promptText is synthesised from the tokens only if a policy reads it. */
class SimRouteRequest implements RouteRequest {
  readonly state = new RequestState();
  sessionKey?: string;
  tenant?: string;
  priority?: number;
  sequences?: number;
  private text: string | undefined;
  constructor(
    readonly id: string,
    readonly model: string,
    readonly promptTokens: ArrayLike<number>,
    readonly maxTokens: number,
    text: string | undefined,
  ) {
    this.text = text;
  }
  get promptText(): string {
    let t = (this.text ??= synthText(this.promptTokens));
    if (this.adapterText !== undefined) t = this.adapterText + t;
    if (this.saltText !== undefined) t = this.saltText + t;
    return t;
  }
  private saltText: string | undefined;
  private adapterText: string | undefined;
  /** Route this request as one naming LoRA adapter `name` (as gateway/prepare.ts does). */
  adapter(name: string): void {
    this.state.set(PROMPT_ADAPTER, name);
    this.adapterText = `\u0000lora:${name}\u0000`;
  }
  /** Isolate this request's prefixes per tenant (as gateway/prepare.ts does). */
  salt(s: string): void {
    this.state.set(PROMPT_SALT, s);
    this.saltText = `\u0000${s}\u0000`;
  }
}

/** A request of several sampled answers (BenchRequest.sampleTokens). */
function sampled(req: BenchRequest): boolean {
  return req.sampleTokens !== undefined && req.sampleTokens.length > 1;
}

/** Scrape interval a policy asks for, if it declares one. */
export function policyScrapeInterval(policy: Policy): number | undefined {
  const v = (policy as { scrapeIntervalMs?: unknown }).scrapeIntervalMs;
  return typeof v === 'number' && v > 0 ? v : undefined;
}

function snapshotOf(s: EngineStats, at: number, engine: Engine): MetricsSnapshot {
  const snap: MetricsSnapshot = {
    at,
    kvUsage: s.kvUsage,
    running: s.running,
    waiting: s.waiting,
    numGpuBlocks: s.numGpuBlocks,
    blockSize: s.blockSize,
    prefixQueries: s.prefixQueries,
    prefixHits: s.prefixHits,
    preemptions: s.preemptions,
  };
  // vllm:lora_requests_info, from an engine that serves adapters (--max-loras set).
  const maxLoras = engine.config.maxLoras;
  if (maxLoras !== undefined) snap.lora = { maxLoras, ...engine.adapterState() };
  return snap;
}

/** Replay `source` (time-ordered) against a fresh fleet. */
export async function simulateFleet(source: Iterable<BenchRequest>, opts: FleetSimOptions): Promise<SimResult> {
  const wallStart = performance.now();
  const n = opts.workers;
  if (!Number.isInteger(n) || n < 1) throw new Error(`workers must be a positive integer, got ${n}`);
  const model = opts.model ?? 'model';
  const scrapeMs = opts.scrapeIntervalMs ?? policyScrapeInterval(opts.policy) ?? 1000;
  if (!(scrapeMs > 0)) throw new Error(`scrape interval must be positive, got ${scrapeMs}`);
  const kvSampleMs = opts.kvSampleMs ?? 1000;
  const overhead = opts.overheadMs ?? 0;
  const isolate = opts.cacheIsolation === true;
  // The live gateway's salt is an HMAC of the tenant id; any per-tenant string does here.
  const saltOf = (req: BenchRequest): string => `tenant:${req.tenant ?? 'default'}`;
  const clock = opts.cache?.clock ?? new VirtualClock(0);
  const policies = opts.replicas?.policies ?? [opts.policy];
  if (policies.length < 1 || policies[0] !== opts.policy) throw new Error('replicas.policies[0] must be the run\'s policy');
  if (policies.length > 1 && opts.admission) throw new Error('admission control is not simulated with several replicas');
  const staleAfterMs = opts.staleAfterMs ?? Math.max(5000, 5 * scrapeMs);
  const usesEvents = opts.policy.usesKvEvents === true && opts.policy.prefixIndex !== undefined;
  const cfg: EngineConfig = { ...opts.engineConfig, emitTokens: false, kvEvents: usesEvents };
  if (opts.engineConfigs !== undefined && opts.engineConfigs.length !== n) {
    throw new Error(`engineConfigs has ${opts.engineConfigs.length} entries for ${n} workers`);
  }
  /** Each worker's engine configuration (all `cfg` unless the fleet is mixed). */
  const cfgs: EngineConfig[] = [];
  for (let i = 0; i < n; i++) {
    const own = opts.engineConfigs?.[i];
    if (own !== undefined && (own.blockSize !== cfg.blockSize || own.maxModelLen !== cfg.maxModelLen)) {
      throw new Error(`worker ${i}'s engine differs from the fleet's in block size or model length`);
    }
    cfgs.push(own === undefined ? cfg : { ...own, emitTokens: false, kvEvents: usesEvents });
  }
  const engines: Engine[] = cfgs.map((c) => new Engine(c));
  /** KV capacity by worker id (sharing between replicas registers a worker with its own). */
  const blocksOf = new Map(cfgs.map((c, i) => [`w${i}`, c.numGpuBlocks]));
  const declaredMax = (req: BenchRequest): number => declaredMaxTokens(req, cfg.maxModelLen);
  /** One gateway replica: its router and policy, its own WorkerStates, its KV-event mappers. */
  interface Replica {
    router: Router;
    states: WorkerState[];
    /** Per worker, the mapper feeding its KV events to this replica's index (or null). */
    mappers: (KvEventMapper | null)[];
    /** Its workers' speed classes, re-derived from their scrapes as the gateway's are. */
    speedClasses: SpeedClasses;
  }
  const replicas: Replica[] = policies.map((policy, r) => {
    const router = new Router({ policy, clock, rng: seededRng(r === 0 ? opts.seed : opts.seed + r * 0x9e37), staleAfterMs });
    const eventIndex = policy.usesKvEvents === true ? policy.prefixIndex : undefined;
    const states: WorkerState[] = [];
    const mappers: (KvEventMapper | null)[] = [];
    const useOracle = policy.usesOracle === true;
    for (let i = 0; i < n; i++) {
      const w = new WorkerState({
        id: `w${i}`,
        url: `sim://w${i}`,
        pool: 'default',
        model,
        numGpuBlocks: cfgs[i]!.numGpuBlocks,
        blockSize: cfg.blockSize,
        ...(opts.hardware?.[i] !== undefined ? { hardware: opts.hardware[i] } : {}),
        ...(opts.adapters !== undefined ? { adapters: opts.adapters } : {}),
      });
      // The engine implements OracleProbe; only a policy that declares usesOracle (`oracle`,
      // `oracle-greedy`) is given the live view.
      if (useOracle) w.oracle = engines[i]!;
      states.push(w);
      let mapper: KvEventMapper | null = null;
      if (eventIndex && (eventIndex.hasWorker(w.id) || eventIndex.workerCount < eventIndex.maxWorkers)) {
        // As the gateway's kv-events service does: register the worker with its capacity, then map
        // its events into the index's hash space at its block size.
        if (!eventIndex.hasWorker(w.id)) eventIndex.addWorker(w.id, cfgs[i]!.numGpuBlocks);
        eventIndex.setSource(w.id, 'events', 'simulated engine (lossless)', 0);
        mapper = new KvEventMapper(eventIndex, w.id, { blockSize: cfg.blockSize });
      }
      mappers.push(mapper);
    }
    return { router, states, mappers, speedClasses: new SpeedClasses() };
  });
  const router = replicas[0]!.router;
  const states = replicas[0]!.states;
  const nReplicas = replicas.length;
  /** The replica that routed request `idx`. */
  const routerOf = (idx: number): Router => replicas[replicaOf(idx, nReplicas)]!.router;
  const workerIndex = new Map(states.map((w, i) => [w.id, i]));
  /** Requests routed to each worker, by any replica. */
  const routedTo = new Array<number>(n).fill(0);
  const busy = new Array<boolean>(n).fill(false);
  const busyMs = new Array<number>(n).fill(0);
  const steps = new Array<number>(n).fill(0);
  const kvUsage: number[][] = states.map(() => []);

  const out: SimResult = {
    policy: opts.policy.name,
    scrapeIntervalMs: scrapeMs,
    kvSampleMs,
    requests: 0,
    rejected: 0,
    shed: 0,
    refusals: {},
    completed: { arrival: [], firstToken: [], finish: [], promptTokens: [], outputTokens: [], answeredTokens: [], cachedTokens: [], worker: [], fromCache: [], cls: [] },
    byClass: { requests: [0, 0, 0], queued: [0, 0, 0], refused: { cls: [], latencyMs: [], status: [] } },
    cache: opts.cache ? { hits: 0, coalesced: 0, misses: 0, stored: 0, evictions: 0 } : null,
    itl: { durationMs: [], weight: [] },
    firstArrivalMs: NaN,
    lastArrivalMs: NaN,
    lastFinishMs: NaN,
    workers: [],
    wallMs: 0,
    events: 0,
  };
  // Per in-flight request: arrival and first-token time, by request index.
  const arrivalOf = new Map<number, number>();
  // Class rank of each request not yet over, and its arrival (for refusal latencies).
  const clsOf = new Map<number, number>();
  const arrivedAt = new Map<number, number>();
  const prioMap = opts.admission?.vllmPriority ?? DEFAULT_VLLM_PRIORITY;
  const admission = opts.admission
    ? new AdmissionController<WorkerState>({ settings: opts.admission.settings, clock, staleAfterMs: router.staleAfterMs, workersFor: () => states })
    : null;
  const tickets = new Map<number, AdmissionTicket<WorkerState>>();
  const releaseTicket = (idx: number) => {
    const t = tickets.get(idx);
    if (t) {
      t.release();
      tickets.delete(idx);
    }
  };
  /** The request is over (finished or refused): forget its per-request bookkeeping. */
  const forget = (idx: number) => {
    clsOf.delete(idx);
    arrivedAt.delete(idx);
    releaseTicket(idx);
  };
  // With the cache: each in-flight request, to build the entry its answer fills.
  const requestOf = new Map<number, BenchRequest>();
  const firstTokenOf = new Map<number, number>();
  /** Requests of n answers (dispatchSamples) with answers still running, and what is known of them. */
  const samplesLeft = new Map<number, { left: number; outputTokens: number; allTokens: number; cachedTokens: number; aborted: boolean }>();
  // Closed-loop sessions: the continuation of each in-flight turn that has one, by request index.
  const nextOf = new Map<number, NonNullable<BenchRequest['next']>>();
  let pendingTurns = 0;

  const trace = opts.routerTrace;
  const q = new EventQueue<SimEvent>();
  const sharingDelay = opts.replicas?.sharingDelayMs ?? 0;
  if (!(sharingDelay >= 0)) throw new Error(`sharing delay must be ≥ 0 ms, got ${sharingDelay}`);
  const shareLoad = nReplicas > 1 && opts.replicas?.shareLoad === true;
  /**
   * With shareLoad: apply a change of replica `from`'s in-flight accounting at worker `w` to the
   * other replicas' WorkerStates, after the sharing delay.
   */
  const mirrorLoad = (from: number, w: number, change: (s: WorkerState) => void): void => {
    const apply = () => {
      for (let r = 0; r < nReplicas; r++) if (r !== from) change(replicas[r]!.states[w]!);
    };
    if (sharingDelay === 0) apply();
    else q.push(clock.now() + sharingDelay, { k: Kind.ShareLoad, apply });
  };
  if (nReplicas > 1 && opts.replicas?.sharing === true) {
    const delay = sharingDelay;
    connectReplicas(policies, (share, now) => {
      if (delay === 0) deliver(share, now, blocksOf.get(share.worker) ?? cfg.numGpuBlocks);
      else q.push(now + delay, { k: Kind.Share, share });
    });
  }
  let busyCount = 0;
  let pendingDispatch = 0;

  // ---- speculative cascade ----
  if (opts.speculative && opts.cache) throw new Error('the speculative cascade is not simulated with the response cache');
  const cascade = opts.speculative
    ? new SimCascade(
        opts.speculative,
        {
          model,
          callDelayMs: overhead,
          cacheSalt: (req) => (isolate ? saltOf(req) : undefined),
          now: () => clock.now(),
          at: (t, fn) => q.push(t, { k: Kind.Call, fn }),
          submitTarget: (w, req) => submit(w, req, clock.now()),
          firstToken: (idx) => {
            const now = clock.now();
            firstTokenOf.set(idx, now);
            trace?.({ type: 'firstToken', t: now, id: String(idx) });
            routerOf(idx).firstToken(String(idx));
            if (shareLoad) mirrorLoad(replicaOf(idx, nReplicas), workerOfRun.get(idx)!, (s) => s.firstToken(String(idx), clock.now()));
          },
          finish: (idx, w, f) => {
            workerOfRun.delete(idx);
            finishOne(w, f, clock.now());
            admission?.pump();
          },
          targetState: (idx, w) => replicas[replicaOf(idx, nReplicas)]!.states[w]!,
        },
        opts.seed,
      )
    : null;
  /** Target worker of each request running the cascade. */
  const workerOfRun = new Map<number, number>();

  /** Request `idx` is done (finished or refused) at `now`: schedule its session's next turn. */
  const followUp = (idx: number, now: number) => {
    const next = nextOf.get(idx);
    if (next === undefined) return;
    nextOf.delete(idx);
    const r = next(now);
    if (r === undefined) return;
    pendingTurns++;
    q.push(Math.max(now, r.arrivalMs), { k: Kind.Arrival, req: r });
  };

  const refuse = (idx: number, status: number, code: string) => {
    if (status === 400) out.rejected++;
    else out.shed++;
    out.refusals[code] = (out.refusals[code] ?? 0) + 1;
    const bc = out.byClass!;
    bc.refused.cls.push(clsOf.get(idx) ?? 1);
    bc.refused.latencyMs.push(clock.now() - (arrivedAt.get(idx) ?? clock.now()));
    bc.refused.status.push(status);
    forget(idx);
    followUp(idx, clock.now());
    // Requests following this one (single-flight) would have been refused the same way.
    const f = flightOf(idx);
    if (f) for (const x of f.followers) refuse(x.idx, status, code);
  };

  // ---- response cache ----
  const cache = opts.cache?.cache;
  const tenants = new Map<string, Tenant>();
  const tenantOf = (id: string | undefined): Tenant => {
    const k = id ?? 'default';
    let t = tenants.get(k);
    if (!t) tenants.set(k, (t = { id: k, cache: {}, priority: 'standard', limits: {}, caps: {}, models: null }));
    return t;
  };
  interface SimFlight {
    plan: Extract<ReturnType<ResponseCache['plan']>, { key: string }>;
    leader: number;
    firstToken: number | null;
    followers: Array<{ idx: number; arrival: number; req: BenchRequest }>;
  }
  const flights = new Map<string, SimFlight>();
  const leading = new Map<number, SimFlight>();
  const flightOf = (idx: number): SimFlight | undefined => {
    const f = leading.get(idx);
    if (f) {
      leading.delete(idx);
      flights.delete(f.plan.key);
    }
    return f;
  };
  const record = (idx: number, arrival: number, first: number, finish: number, req: BenchRequest, outputTokens: number, cachedTokens: number, worker: number, fromCache: number) => {
    const c = out.completed;
    c.arrival.push(arrival);
    c.firstToken.push(first);
    c.finish.push(finish);
    c.promptTokens.push(req.promptTokens.length);
    c.outputTokens.push(outputTokens);
    c.answeredTokens!.push(outputTokens);
    c.cachedTokens.push(cachedTokens);
    c.worker.push(worker);
    c.fromCache!.push(fromCache);
    c.cls!.push(clsOf.get(idx) ?? 1);
    forget(idx);
    if (!(finish <= out.lastFinishMs)) out.lastFinishMs = finish;
  };
  /** The answer a worker generated, as the gateway would store it. */
  const answerEntry = (f: SimFlight, req: BenchRequest, idx: number, outputTokens: number): CacheEntry =>
    cache!.entry(f.plan, {
      id: `cmpl-${idx}`,
      object: 'text_completion',
      created: 0,
      model,
      choices: [{ index: 0, text: synthText(answerTokens(req.outputSeed, outputTokens)), logprobs: null, finish_reason: 'length' }],
      usage: { prompt_tokens: req.promptTokens.length, completion_tokens: outputTokens, total_tokens: req.promptTokens.length + outputTokens },
    });
  /** Answer from the cache or join a flight (true: handled); otherwise the request leads its key. */
  const fromCache = (req: BenchRequest, idx: number, now: number): boolean => {
    const plan = cache!.plan(tenantOf(req.tenant), 'completions', { model, prompt: Array.from(req.promptTokens), max_tokens: declaredMax(req), temperature: 0 }, NO_CACHE_CONTROL);
    if (plan.action === 'bypass') return false;
    const r = cache!.lookupNow(plan.key);
    if (r.kind === 'hit' && cache!.usable(r.entry, plan, true)) {
      out.cache!.hits++;
      const usage = r.entry.body.usage as { completion_tokens?: number } | null | undefined;
      record(idx, arrivedAt.get(idx) ?? now, now + overhead, now + overhead, req, usage?.completion_tokens ?? req.maxTokens, 0, -1, 1);
      followUp(idx, now + overhead);
      return true;
    }
    const f = flights.get(plan.key);
    if (f) {
      out.cache!.coalesced++;
      f.followers.push({ idx, arrival: arrivedAt.get(idx) ?? now, req });
      return true;
    }
    out.cache!.misses++;
    const nf: SimFlight = { plan, leader: idx, firstToken: null, followers: [] };
    flights.set(plan.key, nf);
    leading.set(idx, nf);
    return false;
  };

  const startStep = (w: number, now: number) => {
    const res = engines[w]!.step();
    if (!res) {
      if (busy[w]) {
        busy[w] = false;
        busyCount--;
      }
      return;
    }
    if (!busy[w]) {
      busy[w] = true;
      busyCount++;
    }
    busyMs[w]! += res.durationMs;
    steps[w]!++;
    q.push(now + res.durationMs, { k: Kind.StepDone, w, res });
  };

  /** The engine request that generates `maxTokens` tokens of `req`'s answer from `seed`. */
  const engineRequest = (id: string, req: BenchRequest, maxTokens: number, seed: number): EngineRequest => ({
    id,
    prompt: req.promptTokens,
    maxTokens,
    sampler: (ctx: TokenContext) => answerToken(seed, ctx.output.length),
    ignoreEos: true,
    priority: req.priority ?? 0,
    ...(isolate ? { cacheSalt: saltOf(req) } : {}),
    ...(req.adapter !== undefined ? { lora: req.adapter } : {}),
  });

  const dispatch = (w: number, idx: number, req: BenchRequest, now: number) => {
    if (sampled(req)) return dispatchSamples(w, idx, req, now);
    if (cascade) {
      workerOfRun.set(idx, w);
      if (cascade.start(idx, w, req)) return;
      workerOfRun.delete(idx);
    }
    submit(w, engineRequest(String(idx), req, req.maxTokens, req.outputSeed), now);
  };

  /**
   * n answers to one prompt (BenchRequest.sampleTokens): one engine sequence per answer, added
   * together, as vLLM adds a request's n children (the prompt's blocks shared through the prefix
   * cache). Sequence k of request idx is `${idx}/${k}`; the request ends with its last answer.
   * The cascade does not speculate for them (it cannot reproduce n answers exactly).
   */
  const dispatchSamples = (w: number, idx: number, req: BenchRequest, now: number) => {
    const lens = req.sampleTokens!;
    samplesLeft.set(idx, { left: lens.length, outputTokens: 0, allTokens: 0, cachedTokens: 0, aborted: false });
    for (let k = 0; k < lens.length; k++) {
      submit(w, engineRequest(`${idx}/${k}`, req, lens[k]!, k === 0 ? req.outputSeed : mix32(req.outputSeed, k)), now);
    }
  };

  /** Queue an engine request on worker w. */
  const submit = (w: number, req: EngineRequest, now: number) => {
    engines[w]!.add(req);
    // An idle worker starts its next step as an event at this instant, after every other arrival
    // of the same instant: requests that arrive together are batched together.
    if (!busy[w]) {
      busy[w] = true;
      busyCount++;
      q.push(now, { k: Kind.StepStart, w });
    }
  };

  const arrive = (req: BenchRequest, idx: number) => {
    const now = clock.now();
    out.requests++;
    if (idx === 0) out.firstArrivalMs = now;
    out.lastArrivalMs = now;
    if (req.next !== undefined) nextOf.set(idx, req.next);
    const rr = new SimRouteRequest(String(idx), model, req.promptTokens, declaredMax(req), req.promptText);
    if (req.adapter !== undefined) rr.adapter(req.adapter);
    if (isolate) rr.salt(saltOf(req));
    if (req.session !== undefined) rr.sessionKey = req.session;
    if (req.tenant !== undefined) rr.tenant = req.tenant;
    if (req.priority !== undefined) rr.priority = req.priority;
    // n answers: as the gateway marks them (gateway/prepare.ts, describeSequences).
    const samples = req.sampleTokens?.length ?? 1;
    if (samples > 1) rr.sequences = samples;
    const cls = classOfVllmPriority(req.priority ?? prioMap.standard, prioMap);
    const rank = CLASS_RANK[cls];
    clsOf.set(idx, rank);
    arrivedAt.set(idx, now);
    out.byClass!.requests[rank]!++;
    if (opts.admit) {
      const a = opts.admit(rr, now);
      if (!a.ok) return refuse(idx, a.status, a.code);
    }
    if (admission) {
      const r = admission.submit(
        { id: rr.id, model, cls, promptTokens: req.promptTokens.length, maxTokens: declaredMax(req), sequences: samples, latestStart: Infinity },
        {
          onAdmit: (t) => {
            tickets.set(idx, t);
            proceed(req, idx, rr, clock.now());
          },
          onRefuse: (f) => refuse(idx, f.status, f.code),
        },
      );
      if (r.kind === 'refused') return refuse(idx, r.refusal.status, r.refusal.code);
      if (r.kind === 'queued') {
        out.byClass!.queued[rank]!++;
        q.push(r.entry.deadline, { k: Kind.AdmissionTimer });
        return;
      }
      tickets.set(idx, r.ticket);
    }
    proceed(req, idx, rr, now);
  };

  /** An admitted request: the response cache, then the router and a worker. */
  const proceed = (req: BenchRequest, idx: number, rr: SimRouteRequest, now: number) => {
    // n sampled answers are not the deterministic traffic a response cache answers.
    if (cache && !sampled(req) && fromCache(req, idx, now)) return;
    // Admission narrows the candidates to the workers the request fits on.
    const rep = replicas[replicaOf(idx, nReplicas)]!;
    const workers = tickets.get(idx)?.workers ?? rep.states;
    // As the gateway does where it tokenizes (Policy.prepare), before the decision.
    rep.router.policy.prepare?.(rr, workers);
    const outcome = rep.router.route(rr, workers);
    trace?.({ type: 'route', t: now, req: rr, worker: outcome.ok ? outcome.decision.worker.id : null, status: outcome.ok ? undefined : outcome.status });
    if (!outcome.ok) return refuse(idx, outcome.status, outcome.code);
    // A sheddable request whose worker already has more than a step of prefill waiting is shed
    // there (the live relay makes the same check after its first pick).
    const ticket = tickets.get(idx);
    if (admission && ticket) {
      const charged = outcome.decision.worker.inflight.get(rr.id);
      const refusal = charged ? admission.checkPick(ticket, outcome.decision.worker, charged.uncachedTokens) : null;
      if (refusal) {
        rep.router.complete(rr.id, false);
        return refuse(idx, refusal.status, refusal.code);
      }
    }
    // The worker has been charged for it: the admission ticket is no longer pending.
    releaseTicket(idx);
    const w = workerIndex.get(outcome.decision.worker.id)!;
    routedTo[w]!++;
    if (shareLoad) {
      const charged = outcome.decision.worker.inflight.get(rr.id);
      if (charged) mirrorLoad(replicaOf(idx, nReplicas), w, (s) => s.begin({ ...charged }));
    }
    // The worker answers what it can never run with a 400, as vLLM does; the gateway relays it.
    const err = engines[w]!.check(req.promptTokens.length, declaredMax(req));
    if (err) {
      trace?.({ type: 'complete', t: now, id: rr.id, ok: false });
      rep.router.complete(rr.id, false);
      if (shareLoad) mirrorLoad(replicaOf(idx, nReplicas), w, (s) => s.end(rr.id));
      return refuse(idx, 400, err.code);
    }
    // Its arrival, not now: a request that waited in the admission queue counts the wait.
    arrivalOf.set(idx, arrivedAt.get(idx) ?? now);
    if (cache) requestOf.set(idx, req);
    if (overhead > 0) {
      pendingDispatch++;
      q.push(now + overhead, { k: Kind.Dispatch, w, idx, req });
    } else {
      dispatch(w, idx, req, now);
    }
  };

  const stepDone = (w: number, res: StepResult, now: number) => {
    if (res.kvEvents.length > 0) {
      // Every replica subscribes to every worker's events.
      let traced = false;
      for (const r of replicas) {
        const mapper = r.mappers[w];
        if (!mapper) continue;
        if (!traced) trace?.({ type: 'kvEvents', t: now, worker: w, events: res.kvEvents });
        traced = true;
        mapper.apply(res.kvEvents, now);
      }
    }
    for (const seqId of res.firstTokens) {
      if (cascade?.owns(seqId)) {
        cascade.targetFirstToken(seqId);
        continue;
      }
      // One of n answers (`idx/k`): the request's first token is the first any of them produces.
      const idx = parseInt(seqId, 10);
      if (firstTokenOf.has(idx)) continue;
      const id = String(idx);
      firstTokenOf.set(idx, now);
      const lf = leading.get(idx);
      if (lf) lf.firstToken = now;
      trace?.({ type: 'firstToken', t: now, id });
      routerOf(idx).firstToken(id);
      if (shareLoad) mirrorLoad(replicaOf(idx, nReplicas), w, (s) => s.firstToken(id, clock.now()));
    }
    if (res.decodeTokens > 0) {
      out.itl.durationMs.push(res.durationMs);
      out.itl.weight.push(res.decodeTokens);
    }
    for (const f of res.finished) {
      if (cascade?.owns(f.id)) cascade.targetFinished(f, now);
      else if (samplesLeft.size > 0 && f.id.includes('/')) finishSample(w, f, now);
      else finishOne(w, f, now);
    }
    startStep(w, now);
    // Requests ended: queued ones may start now.
    if (admission && res.finished.length > 0) admission.pump();
  };

  /**
   * One of a request's n answers finished. The last one finishes the request: its output tokens
   * are the longest answer's (so its TPOT is the pace of its slowest answer), its cached prompt
   * tokens the first answer's.
   */
  const finishSample = (w: number, f: FinishedOutput, now: number) => {
    const idx = parseInt(f.id, 10);
    const s = samplesLeft.get(idx)!;
    if (f.outputTokens > s.outputTokens) s.outputTokens = f.outputTokens;
    s.allTokens += f.outputTokens;
    if (f.id.endsWith('/0')) s.cachedTokens = f.cachedPromptTokens;
    if (f.reason === 'abort') s.aborted = true;
    if (--s.left > 0) return;
    samplesLeft.delete(idx);
    // The router is told every answer's tokens, as a worker's usage counts them.
    finishOne(w, { ...f, id: String(idx), outputTokens: s.outputTokens, cachedPromptTokens: s.cachedTokens, reason: s.aborted ? 'abort' : f.reason }, now, s.allTokens);
  };

  /** Request f.id finished on worker w at `now`: record it, tell the router, follow up. */
  const finishOne = (w: number, f: FinishedOutput, now: number, answeredTokens = f.outputTokens) => {
    const idx = Number(f.id);
    const c = out.completed;
    c.arrival.push(arrivalOf.get(idx)!);
    c.firstToken.push(firstTokenOf.get(idx) ?? now);
    c.finish.push(now);
    c.promptTokens.push(f.promptTokens);
    c.outputTokens.push(f.outputTokens);
    c.answeredTokens!.push(answeredTokens);
    c.cachedTokens.push(f.cachedPromptTokens);
    c.worker.push(w);
    c.fromCache!.push(0);
    c.cls!.push(clsOf.get(idx) ?? 1);
    forget(idx);
    const first = firstTokenOf.get(idx) ?? now;
    arrivalOf.delete(idx);
    firstTokenOf.delete(idx);
    // A cache hit may have been answered (overheadMs) later than this.
    if (!(now <= out.lastFinishMs)) out.lastFinishMs = now;
    const finished = f.reason !== 'abort';
    trace?.({ type: 'complete', t: now, id: f.id, ok: finished, ...(finished ? { outputTokens: answeredTokens } : {}) });
    routerOf(idx).complete(f.id, finished, finished ? answeredTokens : undefined);
    if (shareLoad) mirrorLoad(replicaOf(idx, nReplicas), w, (s) => s.end(f.id));
    followUp(idx, now);
    if (cache) {
      const req = requestOf.get(idx);
      requestOf.delete(idx);
      const fl = flightOf(idx);
      if (fl && req) {
        if (f.reason !== 'abort' && cache.fillNow(fl.plan, answerEntry(fl, req, idx, f.outputTokens)) === 'stored') out.cache!.stored++;
        for (const x of fl.followers) {
          record(x.idx, x.arrival, Math.max(x.arrival, first), now, x.req, f.outputTokens, 0, -1, 2);
          followUp(x.idx, now);
        }
      }
    }
  };

  const scrape = (now: number) => {
    for (let i = 0; i < n; i++) {
      const snap = snapshotOf(engines[i]!.stats(), now, engines[i]!);
      trace?.({ type: 'snapshot', t: now, worker: i, snapshot: snap });
      for (const r of replicas) {
        r.states[i]!.applySnapshot(snap);
        r.speedClasses.update(r.states[i]!, r.states);
      }
    }
    admission?.pump();
  };

  const it = source[Symbol.iterator]();
  let next = it.next();
  let idx = 0;
  // The first scrape lands at time 0, as a gateway has scraped its workers before it routes.
  scrape(0);
  q.push(scrapeMs, { k: Kind.Scrape });
  q.push(0, { k: Kind.KvSample });
  const progressEvery = opts.progressEvery ?? 1000;
  let events = 0;

  for (;;) {
    const tq = q.peekTime();
    if (!next.done && next.value.arrivalMs <= tq) {
      const req = next.value;
      if (req.arrivalMs < clock.now()) {
        throw new Error(`request ${idx}: arrival ${req.arrivalMs} ms is before the previous one (${clock.now()} ms); sources must be time-ordered`);
      }
      clock.set(req.arrivalMs);
      arrive(req, idx++);
      next = it.next();
      if (opts.onProgress && idx % progressEvery === 0) opts.onProgress(idx, clock.now());
    } else {
      if (next.done && busyCount === 0 && pendingDispatch === 0 && pendingTurns === 0 && (admission?.queueDepth() ?? 0) === 0 && (cascade?.pending ?? 0) === 0) break;
      const e = q.pop();
      if (!e) break;
      clock.set(e.t);
      const ev = e.ev;
      switch (ev.k) {
        case Kind.Arrival:
          pendingTurns--;
          arrive(ev.req, idx++);
          if (opts.onProgress && idx % progressEvery === 0) opts.onProgress(idx, clock.now());
          break;
        case Kind.StepStart:
          startStep(ev.w, e.t);
          break;
        case Kind.StepDone:
          stepDone(ev.w, ev.res, e.t);
          break;
        case Kind.Dispatch:
          pendingDispatch--;
          dispatch(ev.w, ev.idx, ev.req, e.t);
          break;
        case Kind.Scrape:
          scrape(e.t);
          q.push(e.t + scrapeMs, { k: Kind.Scrape });
          break;
        case Kind.Share:
          deliver(ev.share, e.t, blocksOf.get(ev.share.worker) ?? cfg.numGpuBlocks);
          break;
        case Kind.ShareLoad:
          ev.apply();
          break;
        case Kind.Call:
          ev.fn();
          break;
        case Kind.AdmissionTimer:
          // A queue deadline: expire what is due (and admit what now fits).
          admission?.pump();
          break;
        case Kind.KvSample:
          for (let i = 0; i < n; i++) {
            const s = engines[i]!.stats();
            kvUsage[i]!.push(s.kvUsage);
          }
          q.push(e.t + kvSampleMs, { k: Kind.KvSample });
          break;
      }
    }
    // Yield to the event loop now and then so a progress bar and signals stay responsive.
    if (++events % 200_000 === 0) await new Promise<void>((r) => setImmediate(r));
  }
  if (opts.onProgress) opts.onProgress(idx, clock.now());

  out.workers = engines.map((e, i) => {
    const final = e.stats();
    return {
      id: states[i]!.id,
      routed: routedTo[i]!,
      preemptions: final.preemptions,
      prefillPreemptions: final.prefillPreemptions,
      busyMs: busyMs[i]!,
      steps: steps[i]!,
      kvUsage: kvUsage[i]!,
      final,
    };
  });
  out.events = events;
  if (cascade) out.speculative = cascade.result();
  if (cache && out.cache) {
    const store = cache.store as { lru?: { evictions: number } };
    out.cache.evictions = store.lru?.evictions ?? 0;
  }
  out.wallMs = performance.now() - wallStart;
  return out;
}
