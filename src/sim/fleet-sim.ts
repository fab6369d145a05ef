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
 *
 * Each optional feature is an object beside the event loop, in a file of its own:
 * - admission (`admission`) — admission-sim.ts: the gateway's AdmissionController admits, queues or
 *   sheds each arrival; its queue is pumped after every step's results, every scrape, and at queue
 *   deadlines (timer events).
 * - response cache (`cache`) — response-cache-sim.ts: after admission and before routing, a hit is
 *   answered without a worker and an identical request in flight is followed (single-flight).
 * - n sampled answers (BenchRequest.sampleTokens) — n-samples.ts: one engine sequence per answer.
 * - session turns (BenchRequest.next) — session-turns.ts, as above.
 * - replicas (`replicas`) — replicas.ts and gateway-replica.ts: N gateway replicas, each with its own
 *   Router, policy and WorkerStates; arrivals go round-robin; scrapes and KV events reach every
 *   replica; with sharing, each replica's own prefix knowledge reaches the others' indexes after the
 *   sharing delay (a share event), and with shareLoad its in-flight accounting (dispatch, first
 *   token, end) the others' WorkerStates (load-mirror.ts).
 * - prefill/decode disaggregation (`disagg`) — disagg-sim.ts: a prefill pool and a decode pool, each
 *   request decided by the gateway's decider; a disaggregated one prefills on a prefill worker, its
 *   KV crosses the link (Call events) and it decodes on a decode worker.
 * - speculative cascade (`speculative`) — cascade-sim.ts: a draft pool of its own engines beside the
 *   workers (the target pool); a routed request runs the live cascade's rounds
 *   (src/speculative/rounds.ts) as draft and verification requests on the engines, as call events
 *   on this queue. A first k of 0 leaves it to the plain path.
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
import type { MetricsSnapshot, WorkerState } from '../fleet/worker-state.js';
import type { ResponseCache } from '../cache/response-cache.js';
import type { KvEvent } from '../kv/events.js';
import { recordLeadingPart } from '../kv/leading-part.js';
import type { Router } from '../scheduler/router.js';
import type { Policy, RouteOutcome, RouteRequest } from '../scheduler/types.js';
import { answerToken } from '../workload/tokens.js';
import type { BenchRequest } from '../workload/types.js';
import { VirtualClock, type Clock } from '../util/clock.js';
import { LatencyHistogram } from '../util/latency-histogram.js';
import { classOfVllmPriority, CLASS_RANK, DEFAULT_VLLM_PRIORITY, type VllmPriorityMap } from '../admission/classes.js';
import type { AdmissionSettings } from '../admission/controller.js';
import { releaseTicket, SimAdmission } from './admission-sim.js';
import type { PeerAdmissionHost, SimAdmitter } from './peer-admission.js';
import { SimCascade, type SimSpecResult, type SimSpeculation } from './cascade-sim.js';
import { modelPrefillRate, SimDisagg, type SimDisaggOptions, type SimDisaggResult } from './disagg-sim.js';
import { EventQueue } from './des-queue.js';
import { createReplica, type SimReplica } from './gateway-replica.js';
import { LoadMirror } from './load-mirror.js';
import { NSamples } from './n-samples.js';
import { connectReplicas, deliver, replicaOf, type ReplicaOptions, type SharedKnowledge } from './replicas.js';
import { SimResponseCache, type SimCacheCounts } from './response-cache-sim.js';
import { SessionTurns } from './session-turns.js';
import { SampledSeries } from './sampled-series.js';
import { sampled, SimRouteRequest, type SimRequest } from './sim-request.js';

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
  /** A peer's admission instead (peer-admission.ts), built on the run's clock, workers and host. */
  peerAdmission?: (host: PeerAdmissionHost, clock: Clock, workers: WorkerState[]) => SimAdmitter;
  /**
   * The response cache, built on a MemoryStore whose clock is this run's virtual clock
   * (`VirtualClock` passed in `clock`): fresh per run.
   */
  cache?: { cache: ResponseCache; clock: VirtualClock };
  /** Called every `progressEvery` arrivals with the number of arrivals so far. */
  onProgress?: (arrivals: number, nowMs: number) => void;
  /**
   * Asked every STOP_CHECK_MS of virtual time (as an event) with the result so far, the virtual time
   * and the requests in flight: true ends the run there (`stoppedEarly` set; requests in flight are
   * not counted). A capacity probe whose misses have already decided it stops so (bench/run.ts).
   */
  stopWhen?: (sofar: SimResult, now: number, inflight: Iterable<SimRequest>) => boolean;
  /**
   * Tenant isolation of cached prompts (a pool with `cacheIsolation: tenant`): each request's
   * tenant is its engine cache_salt and salts the router's block hashes (and, for policies that
   * match characters, prefixes its text), as the live gateway does.
   */
  cacheIsolation?: boolean;
  /** The LoRA adapters every worker serves (as a pool's `adapters`), for requests naming one. */
  adapters?: readonly string[];
  /**
   * Feed every policy that keeps a prefix index from the engines' KV events, as a gateway whose
   * workers have `kvEvents` configured does (kvgate's view is then event-fed); by default only
   * policies that declare usesKvEvents get them.
   */
  kvEvents?: boolean;
  /** Receives every call made to the router and every snapshot applied, in order. */
  routerTrace?: (e: RouterTraceEvent) => void;
  /**
   * Take a worker's pure decode steps as one run (Engine.decodeRun), default true: the same
   * figures, without an event per step. Off, every step is an event (the tests compare the two).
   */
  decodeRuns?: boolean;
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
  /**
   * Prefill/decode disaggregation (src/sim/disagg-sim.ts): the first `prefill` workers prefill,
   * the others decode. Not combined with replicas, admission, the cache, the cascade or n answers.
   */
  disagg?: SimDisaggOptions;
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
  /** KV usage (0..1) sampled every kvSampleMs from time 0, in bounded memory. */
  kvUsage: SampledSeries;
  final: EngineStats;
}

/** Raw outcome of one run; src/bench/metrics.ts turns it into the summary. */
export interface SimResult {
  policy: string;
  /** The run ended when `stopWhen` said so, before its requests were all done. */
  stoppedEarly?: true;
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
  /** What disaggregation did (absent without `disagg`). */
  disagg?: SimDisaggResult;
  /**
   * Inter-token gaps: each step's duration (ms), weighted by the decode tokens it produced, in a
   * fixed-size histogram (one sample per step would grow past V8's array limit in a long replay).
   */
  itl: LatencyHistogram;
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
  Call,
  StopCheck,
  RunDone,
}

type SimEvent =
  | { k: Kind.Arrival; req: BenchRequest }
  | { k: Kind.StepStart; w: number }
  | { k: Kind.StepDone; w: number; res: StepResult }
  | { k: Kind.Dispatch; w: number; rec: SimRequest }
  | { k: Kind.Scrape }
  | { k: Kind.KvSample }
  | { k: Kind.AdmissionTimer }
  | { k: Kind.Share; share: SharedKnowledge }
  | { k: Kind.Call; fn: () => void }
  | { k: Kind.StopCheck }
  | { k: Kind.RunDone; w: number; gen: number };

/** Longest decode run, in steps (a run is also cut short by its first finish or a new request). */
const MAX_RUN_STEPS = 512;

/**
 * A worker's run of pure decode steps (Engine.decodeRun): one RunDone event at its end instead of
 * one event per step. The engine takes each step (decodeStep) when something reads or changes it
 * at a later time than the step's start, or at the run's end, so everything outside sees the
 * engine as it would be had each step been planned at its start. A request added to the worker
 * cuts the run after the step in progress, whose end is then the run's.
 */
interface DecodeRun {
  active: boolean;
  /** Bumped whenever the run's end moves: a RunDone of an older one is ignored. */
  gen: number;
  /** Steps in the run, and how many the engine has taken. */
  steps: number;
  taken: number;
  /** Sequences decoding in each step (its ITL weight). */
  seqs: number;
  readonly durations: Float64Array;
  /** End time of each step: the previous one's end plus its duration, as an event per step would have it. */
  readonly ends: Float64Array;
  /** What the last step taken finished. */
  finished: readonly FinishedOutput[];
}

/**
 * The max_tokens the request sends: its declared cap (at least its output; no more than the
 * context left after the prompt, as a client that sizes its cap to the model does), else exactly
 * its output length.
 */
function declaredMaxTokens(req: BenchRequest, maxModelLen: number): number {
  if (req.declaredMaxTokens === undefined) return req.maxTokens;
  return Math.max(req.maxTokens, Math.min(req.declaredMaxTokens, maxModelLen - req.promptTokens.length));
}

/** The live gateway's salt is an HMAC of the tenant id; any per-tenant string does here. */
function saltOf(req: BenchRequest): string {
  return `tenant:${req.tenant ?? 'default'}`;
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

/**
 * Virtual time between two calls of FleetSimOptions.stopWhen. The calls are events of their own,
 * at fixed times, so where a run stops depends on its requests, not on how many events the
 * simulation took to get there.
 */
const STOP_CHECK_MS = 500;

/** Replay `source` (time-ordered) against a fresh fleet. */
export async function simulateFleet(source: Iterable<BenchRequest>, opts: FleetSimOptions): Promise<SimResult> {
  return new FleetSim(opts).run(source);
}

/** Each worker's engine configuration: all `cfg` unless the fleet is mixed (engineConfigs). */
function workerConfigs(opts: FleetSimOptions, cfg: EngineConfig): EngineConfig[] {
  const n = opts.workers;
  if (opts.engineConfigs !== undefined && opts.engineConfigs.length !== n) {
    throw new Error(`engineConfigs has ${opts.engineConfigs.length} entries for ${n} workers`);
  }
  const cfgs: EngineConfig[] = [];
  for (let i = 0; i < n; i++) {
    const own = opts.engineConfigs?.[i];
    if (own !== undefined && (own.blockSize !== cfg.blockSize || own.maxModelLen !== cfg.maxModelLen)) {
      throw new Error(`worker ${i}'s engine differs from the fleet's in block size or model length`);
    }
    cfgs.push(own === undefined ? cfg : { ...own, emitTokens: false, kvEvents: cfg.kvEvents });
  }
  return cfgs;
}

/**
 * Push `v` onto the optional column `key` of the completed requests (the last completed one's), a
 * column that exists only once some request's value differs from what its absence means (`dflt`:
 * answeredTokens = outputTokens, fromCache 0, cls 1): a run without n-sampled answers, a cache or
 * priority classes keeps seven numbers per request, not ten.
 */
function pushSparse(c: SimResult['completed'], key: 'answeredTokens' | 'fromCache' | 'cls', v: number, dflt: number): void {
  const col = c[key];
  if (col !== undefined) col.push(v);
  else if (v !== dflt) {
    const n = c.arrival.length - 1;
    const made = key === 'answeredTokens' ? c.outputTokens.slice(0, n) : new Array<number>(n).fill(key === 'cls' ? 1 : 0);
    made.push(v);
    c[key] = made;
  }
}

function emptyResult(policy: string, scrapeIntervalMs: number, kvSampleMs: number): SimResult {
  return {
    policy,
    scrapeIntervalMs,
    kvSampleMs,
    requests: 0,
    rejected: 0,
    shed: 0,
    refusals: {},
    // answeredTokens, fromCache and cls are made at their first value other than the default.
    completed: { arrival: [], firstToken: [], finish: [], promptTokens: [], outputTokens: [], cachedTokens: [], worker: [] },
    byClass: { requests: [0, 0, 0], queued: [0, 0, 0], refused: { cls: [], latencyMs: [], status: [] } },
    cache: null,
    itl: new LatencyHistogram(),
    firstArrivalMs: NaN,
    lastArrivalMs: NaN,
    lastFinishMs: NaN,
    workers: [],
    wallMs: 0,
    events: 0,
  };
}

/** One run: the fleet, the gateway replicas routing over it, and the event loop. */
class FleetSim {
  private readonly wallStart = performance.now();
  private readonly n: number;
  private readonly model: string;
  private readonly scrapeMs: number;
  private readonly kvSampleMs: number;
  /** Constant gateway + network delay before a request reaches its worker, ms. */
  private readonly overhead: number;
  /** Tenant isolation of cached prompts (cacheIsolation). */
  private readonly isolate: boolean;
  private readonly clock: VirtualClock;
  /** What every worker's engine shares (block size, model length). */
  private readonly cfg: EngineConfig;
  private readonly engines: Engine[];
  /** KV capacity by worker id (sharing between replicas registers a worker with its own). */
  private readonly blocksOf: Map<string, number>;
  private readonly replicas: SimReplica[];
  private readonly workerIndex: Map<string, number>;
  /** Requests routed to each worker, by any replica. */
  private readonly routedTo: number[];
  private readonly busy: boolean[];
  private readonly busyMs: number[];
  private readonly steps: number[];
  private readonly kvUsage: SampledSeries[];
  /** Workers with a step planned or running. */
  private busyCount = 0;
  /** Requests routed and not yet at their worker (overheadMs). */
  private pendingDispatch = 0;
  /** Arrivals so far: the next request's index. */
  private arrivals = 0;
  /** Every request not yet over, by index. */
  private readonly requests = new Map<number, SimRequest>();
  private readonly prioMap: VllmPriorityMap;
  private readonly trace: ((e: RouterTraceEvent) => void) | undefined;
  private readonly q = new EventQueue<SimEvent>();
  private readonly out: SimResult;
  private readonly turns: SessionTurns;
  private readonly samples: NSamples;
  private readonly admission: SimAdmitter | null;
  private readonly cache: SimResponseCache | null;
  /** Shared in-flight accounting between replicas (shareLoad), or null. */
  private readonly mirror: LoadMirror | null;
  private readonly cascade: SimCascade | null;
  private readonly disagg: SimDisagg | null;
  /** Each worker's decode run, or null where runs are off (see `decodeRuns`). */
  private readonly runs: DecodeRun[] | null;

  constructor(private readonly opts: FleetSimOptions) {
    const n = (this.n = opts.workers);
    if (!Number.isInteger(n) || n < 1) throw new Error(`workers must be a positive integer, got ${n}`);
    this.model = opts.model ?? 'model';
    const scrapeMs = (this.scrapeMs = opts.scrapeIntervalMs ?? policyScrapeInterval(opts.policy) ?? 1000);
    if (!(scrapeMs > 0)) throw new Error(`scrape interval must be positive, got ${scrapeMs}`);
    this.kvSampleMs = opts.kvSampleMs ?? 1000;
    this.overhead = opts.overheadMs ?? 0;
    this.isolate = opts.cacheIsolation === true;
    this.clock = opts.cache?.clock ?? new VirtualClock(0);
    const policies = opts.replicas?.policies ?? [opts.policy];
    if (policies.length < 1 || policies[0] !== opts.policy) throw new Error('replicas.policies[0] must be the run\'s policy');
    if (policies.length > 1 && (opts.admission || opts.peerAdmission)) throw new Error('admission control is not simulated with several replicas');
    const staleAfterMs = opts.staleAfterMs ?? Math.max(5000, 5 * scrapeMs);
    const usesEvents = (opts.policy.usesKvEvents === true || opts.kvEvents === true) && opts.policy.prefixIndex !== undefined;
    this.cfg = { ...opts.engineConfig, emitTokens: false, kvEvents: usesEvents };
    const cfgs = workerConfigs(opts, this.cfg);
    this.engines = cfgs.map((c) => new Engine(c));
    this.blocksOf = new Map(cfgs.map((c, i) => [`w${i}`, c.numGpuBlocks]));
    this.disagg = opts.disagg ? this.createDisagg(opts.disagg, policies.length) : null;
    const fleet = { model: this.model, seed: opts.seed, clock: this.clock, staleAfterMs, engines: this.engines, configs: cfgs, blockSize: this.cfg.blockSize, hardware: opts.hardware, adapters: opts.adapters, kvEvents: opts.kvEvents === true, roles: this.disagg?.roles() };
    this.replicas = policies.map((policy, r) => createReplica(policy, r, fleet));
    const states = this.replicas[0]!.states;
    this.workerIndex = new Map(states.map((w, i) => [w.id, i]));
    this.routedTo = new Array<number>(n).fill(0);
    this.busy = new Array<boolean>(n).fill(false);
    this.busyMs = new Array<number>(n).fill(0);
    this.steps = new Array<number>(n).fill(0);
    this.kvUsage = states.map(() => new SampledSeries());
    this.out = emptyResult(opts.policy.name, scrapeMs, this.kvSampleMs);
    this.prioMap = opts.admission?.vllmPriority ?? DEFAULT_VLLM_PRIORITY;
    this.trace = opts.routerTrace;
    this.turns = new SessionTurns((t, req) => this.q.push(t, { k: Kind.Arrival, req }));
    this.samples = new NSamples({
      engineRequest: (id, req, maxTokens, seed) => this.engineRequest(id, req, maxTokens, seed),
      submit: (w, req, now) => this.submit(w, req, now),
      finish: (w, rec, f, now, answered) => this.finishOne(w, rec, f, now, answered),
    });
    this.admission = opts.admission || opts.peerAdmission ? this.createAdmission(opts.admission?.settings, states) : null;
    this.mirror = this.connectReplicas(policies);
    this.cache = opts.cache ? this.createCache(opts.cache.cache) : null;
    this.cascade = opts.speculative ? this.createCascade(opts.speculative) : null;
    // Runs need every read of an engine to go through this class at a known time: not with the
    // oracle (the policy reads the engines), KV events (delivered per step), admission (it reads
    // each step's decode pace), the cascade or disaggregation (they drive engines themselves).
    const runs =
      opts.decodeRuns !== false &&
      !usesEvents &&
      !this.admission &&
      !this.cascade &&
      !this.disagg &&
      !policies.some((p) => p.usesOracle === true);
    this.runs = runs
      ? this.engines.map(() => ({ active: false, gen: 0, steps: 0, taken: 0, seqs: 0, durations: new Float64Array(MAX_RUN_STEPS), ends: new Float64Array(MAX_RUN_STEPS), finished: [] }))
      : null;
  }

  private createAdmission(settings: AdmissionSettings | undefined, states: WorkerState[]): SimAdmitter {
    const host: PeerAdmissionHost = {
      wake: (t) => this.q.push(t, { k: Kind.AdmissionTimer }),
      model: this.model,
      declaredMax: (req) => this.declaredMax(req),
      proceed: (rec, now) => this.proceed(rec, now),
      refuse: (rec, status, code) => this.refuse(rec, status, code),
      queued: (rec, deadline) => {
        this.out.byClass!.queued[rec.cls]!++;
        this.q.push(deadline, { k: Kind.AdmissionTimer });
      },
    };
    if (!settings) return this.opts.peerAdmission!(host, this.clock, states);
    return new SimAdmission(settings, this.clock, this.replicas[0]!.router.staleAfterMs, states, host);
  }

  /** Sharing between replicas (replicas.sharing), and the load mirror if they share load. */
  private connectReplicas(policies: readonly Policy[]): LoadMirror | null {
    const nReplicas = this.replicas.length;
    const sharingDelay = this.opts.replicas?.sharingDelayMs ?? 0;
    if (!(sharingDelay >= 0)) throw new Error(`sharing delay must be ≥ 0 ms, got ${sharingDelay}`);
    const shareLoad = nReplicas > 1 && this.opts.replicas?.shareLoad === true;
    const mirror = shareLoad
      ? new LoadMirror(
          this.replicas.map((r) => r.states),
          sharingDelay,
          () => this.clock.now(),
          (t, fn) => this.q.push(t, { k: Kind.Call, fn }),
        )
      : null;
    if (nReplicas > 1 && this.opts.replicas?.sharing === true) {
      connectReplicas(policies, (share, now) => {
        if (sharingDelay === 0) deliver(share, now, this.blocksOf.get(share.worker) ?? this.cfg.numGpuBlocks);
        else this.q.push(now + sharingDelay, { k: Kind.Share, share });
      });
    }
    return mirror;
  }

  private createCache(cache: ResponseCache): SimResponseCache {
    return new SimResponseCache(cache, {
      model: this.model,
      overheadMs: this.overhead,
      declaredMax: (req) => this.declaredMax(req),
      completeFromCache: (rec, first, finish, outputTokens, fromCache) => this.completeFromCache(rec, first, finish, outputTokens, fromCache),
      followUp: (rec, now) => this.turns.followUp(rec, now),
    });
  }

  private createDisagg(o: SimDisaggOptions, replicas: number): SimDisagg {
    const opts = this.opts;
    if (replicas > 1 || opts.admission || opts.peerAdmission || opts.admit || opts.cache || opts.speculative) {
      throw new Error('disaggregation is not simulated with replicas, admission, the response cache or the speculative cascade');
    }
    const policy = opts.policy as Policy & { prefillRate?: (w: WorkerState) => number };
    const fallback = modelPrefillRate(this.cfg.timeModel);
    const rate = typeof policy.prefillRate === 'function' ? (w: WorkerState) => policy.prefillRate!(w) : () => fallback;
    return new SimDisagg(
      o,
      this.n,
      {
        now: () => this.clock.now(),
        at: (t, fn) => this.q.push(t, { k: Kind.Call, fn }),
        overheadMs: this.overhead,
        engine: (w) => this.engines[w]!,
        submit: (w, req) => this.submit(w, req, this.clock.now()),
        wake: (w) => this.wake(w, this.clock.now()),
        engineRequest: (rec) => this.engineRequest(rec.id, rec.req, rec.req.maxTokens, rec.req.outputSeed),
        routed: (w) => this.routedTo[w]!++,
        workerIndex: (id) => this.workerIndex.get(id)!,
      },
      rate,
    );
  }

  private createCascade(spec: SimSpeculation): SimCascade {
    if (this.opts.cache) throw new Error('the speculative cascade is not simulated with the response cache');
    return new SimCascade(
      spec,
      {
        model: this.model,
        callDelayMs: this.overhead,
        cacheSalt: (req) => (this.isolate ? saltOf(req) : undefined),
        now: () => this.clock.now(),
        at: (t, fn) => this.q.push(t, { k: Kind.Call, fn }),
        submitTarget: (w, req) => this.submit(w, req, this.clock.now()),
        firstToken: (idx) => {
          const rec = this.requests.get(idx)!;
          const now = this.clock.now();
          rec.firstToken = now;
          this.trace?.({ type: 'firstToken', t: now, id: rec.id });
          this.routerOf(idx).firstToken(rec.id);
          this.mirror?.mirror(this.replicaIndex(idx), rec.worker!, (s) => s.firstToken(rec.id, this.clock.now()));
        },
        finish: (idx, w, f) => {
          const rec = this.requests.get(idx)!;
          rec.worker = undefined;
          this.finishOne(w, rec, f, this.clock.now());
          this.admission?.pump();
        },
        targetState: (idx, w) => this.replicas[this.replicaIndex(idx)]!.states[w]!,
      },
      this.opts.seed,
    );
  }

  private declaredMax(req: BenchRequest): number {
    return declaredMaxTokens(req, this.cfg.maxModelLen);
  }

  /** The replica that routed request `idx`. */
  private replicaIndex(idx: number): number {
    return replicaOf(idx, this.replicas.length);
  }

  private routerOf(idx: number): Router {
    return this.replicas[this.replicaIndex(idx)]!.router;
  }

  async run(source: Iterable<BenchRequest>): Promise<SimResult> {
    const opts = this.opts;
    const clock = this.clock;
    const q = this.q;
    const it = source[Symbol.iterator]();
    let next = it.next();
    // The first scrape lands at time 0, as a gateway has scraped its workers before it routes.
    this.scrape(0);
    q.push(this.scrapeMs, { k: Kind.Scrape });
    q.push(0, { k: Kind.KvSample });
    if (opts.stopWhen !== undefined) q.push(STOP_CHECK_MS, { k: Kind.StopCheck });
    let events = 0;
    for (;;) {
      const tq = q.peekTime();
      if (!next.done && next.value.arrivalMs <= tq) {
        const req = next.value;
        if (req.arrivalMs < clock.now()) {
          throw new Error(`request ${this.arrivals}: arrival ${req.arrivalMs} ms is before the previous one (${clock.now()} ms); sources must be time-ordered`);
        }
        clock.set(req.arrivalMs);
        this.arriveNext(req);
        next = it.next();
      } else {
        if (next.done && this.idle()) break;
        const e = q.pop();
        if (!e) break;
        clock.set(e.t);
        this.handle(e.t, e.ev);
      }
      // Yield to the event loop now and then so a progress bar and signals stay responsive.
      if (++events % 200_000 === 0) await new Promise<void>((r) => setImmediate(r));
      if (this.out.stoppedEarly) break;
    }
    if (this.out.stoppedEarly) this.stopRuns(clock.now());
    if (opts.onProgress) opts.onProgress(this.arrivals, clock.now());
    return this.result(events);
  }

  /** Nothing left to happen but scrapes and samples (the source is done). */
  private idle(): boolean {
    return (
      this.busyCount === 0 &&
      this.pendingDispatch === 0 &&
      this.turns.pending === 0 &&
      (this.admission?.queueDepth() ?? 0) === 0 &&
      (this.cascade?.pending ?? 0) === 0 &&
      (this.disagg?.pending ?? 0) === 0
    );
  }

  private handle(t: number, ev: SimEvent): void {
    switch (ev.k) {
      case Kind.Arrival:
        this.turns.arrived();
        this.arriveNext(ev.req);
        break;
      case Kind.StepStart:
        this.startStep(ev.w, t);
        break;
      case Kind.StepDone:
        this.stepDone(ev.w, ev.res, t);
        break;
      case Kind.RunDone:
        this.runDone(ev.w, ev.gen, t);
        break;
      case Kind.Dispatch:
        this.pendingDispatch--;
        this.dispatch(ev.w, ev.rec, t);
        break;
      case Kind.Scrape:
        this.scrape(t);
        this.q.push(t + this.scrapeMs, { k: Kind.Scrape });
        break;
      case Kind.Share:
        deliver(ev.share, t, this.blocksOf.get(ev.share.worker) ?? this.cfg.numGpuBlocks);
        break;
      case Kind.Call:
        ev.fn();
        break;
      case Kind.AdmissionTimer:
        // A queue deadline: expire what is due (and admit what now fits).
        this.admission?.pump();
        break;
      case Kind.StopCheck:
        if (this.opts.stopWhen!(this.out, t, this.requests.values())) this.out.stoppedEarly = true;
        else this.q.push(t + STOP_CHECK_MS, { k: Kind.StopCheck });
        break;
      case Kind.KvSample:
        for (let i = 0; i < this.n; i++) {
          this.catchUp(i, t);
          this.kvUsage[i]!.push(this.engines[i]!.kvUsage);
        }
        this.q.push(t + this.kvSampleMs, { k: Kind.KvSample });
        break;
    }
  }

  /** The next arrival (of the source or a session's later turn), then progress. */
  private arriveNext(req: BenchRequest): void {
    this.arrive(req, this.arrivals++);
    const onProgress = this.opts.onProgress;
    if (onProgress && this.arrivals % (this.opts.progressEvery ?? 1000) === 0) onProgress(this.arrivals, this.clock.now());
  }

  private arrive(req: BenchRequest, idx: number): void {
    const now = this.clock.now();
    const out = this.out;
    out.requests++;
    if (idx === 0) out.firstArrivalMs = now;
    out.lastArrivalMs = now;
    // The router hashes the prompt in its own hash space: a part shared by many prompts (a system
    // prompt, a document) once for all. Not a session's last prompt: asked here first, on the
    // router's chain, it would leave the engine's chain to hash it whole (leading-part.ts).
    if (req.promptPart !== undefined && !req.promptPart.derived) recordLeadingPart(req.promptTokens, req.promptPart);
    const rr = new SimRouteRequest(String(idx), this.model, req.promptTokens, this.declaredMax(req), req.promptText);
    if (req.adapter !== undefined) rr.adapter(req.adapter);
    if (this.isolate) rr.salt(saltOf(req));
    if (req.session !== undefined) rr.sessionKey = req.session;
    if (req.tenant !== undefined) rr.tenant = req.tenant;
    if (req.priority !== undefined) rr.priority = req.priority;
    // n answers: as the gateway marks them (gateway/pipeline/prepare.ts, describeSequences).
    const samples = req.sampleTokens?.length ?? 1;
    if (samples > 1) rr.sequences = samples;
    const cls = classOfVllmPriority(req.priority ?? this.prioMap.standard, this.prioMap);
    const rec: SimRequest = { idx, id: rr.id, req, route: rr, cls: CLASS_RANK[cls], arrivedAt: now, next: req.next };
    this.requests.set(idx, rec);
    out.byClass!.requests[rec.cls]!++;
    if (this.opts.admit) {
      const a = this.opts.admit(rr, now);
      if (!a.ok) return this.refuse(rec, a.status, a.code);
    }
    if (this.admission && !this.admission.admit(rec, cls, samples)) return;
    this.proceed(rec, now);
  }

  /** An admitted request: the response cache, then the router and a worker. */
  private proceed(rec: SimRequest, now: number): void {
    const { req, route: rr, idx } = rec;
    // n sampled answers are not the deterministic traffic a response cache answers.
    if (this.cache && !sampled(req) && this.cache.lookup(rec, now)) return;
    // Admission narrows the candidates to the workers the request fits on.
    const ri = this.replicaIndex(idx);
    const rep = this.replicas[ri]!;
    const workers = rec.ticket?.workers ?? rep.states;
    // As the gateway does where it tokenizes (Policy.prepare), before the decision.
    rep.router.policy.prepare?.(rr, workers);
    // Disaggregated, it is on its way; local, it goes to the decode worker the decider weighed.
    const planned = this.disagg?.route(rec, rep.router, rep.router.policy, this.disagg.pools(workers));
    if (planned === true) return;
    const outcome: RouteOutcome = planned ? { ok: true, decision: planned } : rep.router.route(rr, this.disagg ? this.disagg.pools(workers).decode : workers);
    this.trace?.({ type: 'route', t: now, req: rr, worker: outcome.ok ? outcome.decision.worker.id : null, status: outcome.ok ? undefined : outcome.status });
    if (!outcome.ok) return this.refuse(rec, outcome.status, outcome.code);
    const picked = outcome.decision.worker;
    const refusal = this.admission?.checkPick(rec, picked) ?? null;
    if (refusal) {
      rep.router.complete(rr.id, false);
      return this.refuse(rec, refusal.status, refusal.code);
    }
    // The worker has been charged for it: the admission ticket is no longer pending.
    releaseTicket(rec);
    const w = this.workerIndex.get(picked.id)!;
    this.routedTo[w]!++;
    if (this.mirror) {
      const charged = picked.inflight.get(rr.id);
      if (charged) this.mirror.mirror(ri, w, (s) => s.begin({ ...charged }));
    }
    // The worker answers what it can never run with a 400, as vLLM does; the gateway relays it.
    const err = this.engines[w]!.check(req.promptTokens.length, this.declaredMax(req));
    if (err) {
      this.trace?.({ type: 'complete', t: now, id: rr.id, ok: false });
      rep.router.complete(rr.id, false);
      this.mirror?.mirror(ri, w, (s) => s.end(rr.id));
      return this.refuse(rec, 400, err.code);
    }
    if (this.overhead > 0) {
      this.pendingDispatch++;
      this.q.push(now + this.overhead, { k: Kind.Dispatch, w, rec });
    } else {
      this.dispatch(w, rec, now);
    }
  }

  private dispatch(w: number, rec: SimRequest, now: number): void {
    const { req } = rec;
    if (sampled(req)) return this.samples.dispatch(w, rec, now);
    if (this.cascade) {
      rec.worker = w;
      if (this.cascade.start(rec.idx, w, req)) return;
      rec.worker = undefined;
    }
    this.submit(w, this.engineRequest(rec.id, req, req.maxTokens, req.outputSeed), now);
  }

  /** The engine request that generates `maxTokens` tokens of `req`'s answer from `seed`. */
  private engineRequest(id: string, req: BenchRequest, maxTokens: number, seed: number): EngineRequest {
    return {
      id,
      prompt: req.promptTokens,
      ...(req.promptPart !== undefined ? { promptPart: req.promptPart } : {}),
      maxTokens,
      sampler: (ctx: TokenContext) => answerToken(seed, ctx.output.length),
      ignoreEos: true,
      priority: req.priority ?? 0,
      ...(this.isolate ? { cacheSalt: saltOf(req) } : {}),
      ...(req.adapter !== undefined ? { lora: req.adapter } : {}),
    };
  }

  /** Queue an engine request on worker w. */
  private submit(w: number, req: EngineRequest, now: number): void {
    this.cutRun(w, now);
    this.engines[w]!.add(req);
    this.wake(w, now);
  }

  /** Make an idle worker step (work arrived, or blocks it waits for were freed). */
  private wake(w: number, now: number): void {
    // An idle worker starts its next step as an event at this instant, after every other arrival
    // of the same instant: requests that arrive together are batched together.
    if (!this.busy[w]) {
      this.busy[w] = true;
      this.busyCount++;
      this.q.push(now, { k: Kind.StepStart, w });
    }
  }

  private startStep(w: number, now: number): void {
    if (this.runs !== null && this.startRun(w, now)) return;
    const res = this.engines[w]!.step();
    if (!res) {
      if (this.busy[w]) {
        this.busy[w] = false;
        this.busyCount--;
      }
      return;
    }
    if (!this.busy[w]) {
      this.busy[w] = true;
      this.busyCount++;
    }
    this.busyMs[w]! += res.durationMs;
    this.steps[w]!++;
    if (res.kvPulls.length > 0) this.disagg!.pulls(w, res.kvPulls, now);
    this.q.push(now + res.durationMs, { k: Kind.StepDone, w, res });
  }

  private stepDone(w: number, res: StepResult, now: number): void {
    if (res.kvEvents.length > 0) this.applyKvEvents(w, res.kvEvents, now);
    for (const seqId of res.firstTokens) {
      if (this.cascade?.owns(seqId)) {
        this.cascade.targetFirstToken(seqId);
        continue;
      }
      if (this.disagg) {
        // A prefill half's token is not the client's; a decode's first token ends its handoff.
        if (this.disagg.owns(seqId)) continue;
        this.disagg.firstToken(seqId, now);
      }
      // One of n answers (`idx/k`): the request's first token is the first any of them produces.
      const idx = parseInt(seqId, 10);
      const rec = this.requests.get(idx)!;
      if (rec.firstToken !== undefined) continue;
      rec.firstToken = now;
      this.trace?.({ type: 'firstToken', t: now, id: rec.id });
      this.routerOf(idx).firstToken(rec.id);
      this.mirror?.mirror(this.replicaIndex(idx), w, (s) => s.firstToken(rec.id, this.clock.now()));
    }
    if (res.decodeTokens > 0) {
      this.out.itl.add(res.durationMs, res.decodeTokens);
      // What the gateway reads off the answers streaming from w: each decoding sequence's token
      // came one step after its last (admission's recent TPOT, fleet/decode-pace.ts).
      if (this.admission) this.replicas[0]!.states[w]!.decodePace.observe(res.durationMs * res.decodeTokens, res.decodeTokens, now);
    }
    this.finished(w, res.finished, now);
    this.startStep(w, now);
    // Requests ended: queued ones may start now.
    if (this.admission && res.finished.length > 0) this.admission.pump();
  }

  /** What worker w's step finished, at its end. */
  private finished(w: number, finished: readonly FinishedOutput[], now: number): void {
    for (const f of finished) {
      if (this.cascade?.owns(f.id)) this.cascade.targetFinished(f, now);
      else if (this.disagg?.owns(f.id)) this.disagg.prefillFinished(this.replicas[0]!.router, f, now);
      else if (NSamples.owns(f.id)) this.samples.finished(w, this.requests.get(parseInt(f.id, 10))!, f, now);
      else this.finishOne(w, this.requests.get(Number(f.id))!, f, now);
    }
  }

  /** Start a decode run on worker w if its next steps make one of two steps or more. */
  private startRun(w: number, now: number): boolean {
    const run = this.runs![w]!;
    const steps = this.engines[w]!.decodeRun(run.durations);
    if (steps < 2) return false;
    run.active = true;
    run.gen++;
    run.steps = steps;
    run.taken = 0;
    run.seqs = this.engines[w]!.running();
    run.finished = [];
    let t = now;
    for (let j = 0; j < steps; j++) {
      t += run.durations[j]!;
      run.ends[j] = t;
    }
    if (!this.busy[w]) {
      this.busy[w] = true;
      this.busyCount++;
    }
    this.takeRunStep(w, run); // the first step starts now
    this.q.push(run.ends[steps - 1]!, { k: Kind.RunDone, w, gen: run.gen });
    return true;
  }

  private takeRunStep(w: number, run: DecodeRun): void {
    this.busyMs[w]! += run.durations[run.taken]!;
    this.steps[w]!++;
    run.taken++;
    const f = this.engines[w]!.decodeStep();
    if (f.length > 0) run.finished = f;
  }

  /** Take the steps of worker w's run that have started before `t`. */
  private catchUp(w: number, t: number): void {
    const run = this.runs?.[w];
    if (run === undefined || !run.active) return;
    while (run.taken < run.steps && run.ends[run.taken - 1]! < t) this.takeRunStep(w, run);
  }

  /** A request is added to worker w at `now`: its run ends with the step in progress. */
  private cutRun(w: number, now: number): void {
    const run = this.runs?.[w];
    if (run === undefined || !run.active) return;
    this.catchUp(w, now);
    if (run.taken === run.steps) return;
    run.steps = run.taken;
    run.gen++;
    this.q.push(run.ends[run.steps - 1]!, { k: Kind.RunDone, w, gen: run.gen });
  }

  /**
   * The run stops at `now` with runs in progress: their steps begun by then are taken (the engines
   * are read as they are now), and those ended by then count in the ITL, as their events would.
   */
  private stopRuns(now: number): void {
    for (let w = 0; w < this.n; w++) {
      const run = this.runs?.[w];
      if (run === undefined || !run.active) continue;
      this.catchUp(w, now);
      for (let j = 0; j < run.taken && run.ends[j]! < now; j++) this.out.itl.add(run.durations[j]!, run.seqs);
      run.active = false;
    }
  }

  /** Worker w's run ends: its steps' results, as each step's end would have given them, then its next step. */
  private runDone(w: number, gen: number, now: number): void {
    const run = this.runs![w]!;
    if (!run.active || gen !== run.gen) return;
    this.catchUp(w, now);
    run.active = false;
    for (let j = 0; j < run.steps; j++) this.out.itl.add(run.durations[j]!, run.seqs);
    this.finished(w, run.finished, now);
    this.startStep(w, now);
  }

  /** Worker w's KV events: every replica subscribes to every worker's events. */
  private applyKvEvents(w: number, events: readonly KvEvent[], now: number): void {
    let traced = false;
    for (const r of this.replicas) {
      const mapper = r.mappers[w];
      if (!mapper) continue;
      if (!traced) this.trace?.({ type: 'kvEvents', t: now, worker: w, events });
      traced = true;
      mapper.apply(events, now);
    }
  }

  /** Request `rec` finished on worker w at `now`: record it, tell the router, follow up. */
  private finishOne(w: number, rec: SimRequest, f: FinishedOutput, now: number, answeredTokens = f.outputTokens): void {
    const out = this.out;
    const c = out.completed;
    const first = rec.firstToken ?? now;
    c.arrival.push(rec.arrivedAt);
    c.firstToken.push(first);
    c.finish.push(now);
    c.promptTokens.push(f.promptTokens);
    c.outputTokens.push(f.outputTokens);
    c.cachedTokens.push(f.cachedPromptTokens);
    c.worker.push(w);
    pushSparse(c, 'answeredTokens', answeredTokens, f.outputTokens);
    pushSparse(c, 'fromCache', 0, 0);
    pushSparse(c, 'cls', rec.cls, 1);
    this.forget(rec);
    // A cache hit may have been answered (overheadMs) later than this.
    if (!(now <= out.lastFinishMs)) out.lastFinishMs = now;
    const finished = f.reason !== 'abort';
    this.trace?.({ type: 'complete', t: now, id: f.id, ok: finished, ...(finished ? { outputTokens: answeredTokens } : {}) });
    this.routerOf(rec.idx).complete(f.id, finished, finished ? answeredTokens : undefined);
    this.mirror?.mirror(this.replicaIndex(rec.idx), w, (s) => s.end(f.id));
    this.turns.followUp(rec, now);
    this.cache?.finished(rec, f, first, now);
  }

  /** Record `rec` as completed without a worker (a cache hit, or a follower of one in flight). */
  private completeFromCache(rec: SimRequest, first: number, finish: number, outputTokens: number, fromCache: 1 | 2): void {
    const out = this.out;
    const c = out.completed;
    c.arrival.push(rec.arrivedAt);
    c.firstToken.push(first);
    c.finish.push(finish);
    c.promptTokens.push(rec.req.promptTokens.length);
    c.outputTokens.push(outputTokens);
    c.cachedTokens.push(0);
    c.worker.push(-1);
    pushSparse(c, 'answeredTokens', outputTokens, outputTokens);
    pushSparse(c, 'fromCache', fromCache, 0);
    pushSparse(c, 'cls', rec.cls, 1);
    this.forget(rec);
    if (!(finish <= out.lastFinishMs)) out.lastFinishMs = finish;
  }

  private refuse(rec: SimRequest, status: number, code: string): void {
    const out = this.out;
    const now = this.clock.now();
    if (status === 400) out.rejected++;
    else out.shed++;
    out.refusals[code] = (out.refusals[code] ?? 0) + 1;
    const bc = out.byClass!;
    bc.refused.cls.push(rec.cls);
    bc.refused.latencyMs.push(now - rec.arrivedAt);
    bc.refused.status.push(status);
    this.forget(rec);
    this.turns.followUp(rec, now);
    // Requests following this one (single-flight) would have been refused the same way.
    const f = this.cache?.take(rec);
    if (f) for (const x of f.followers) this.refuse(x, status, code);
  }

  /** The request is over (finished or refused): drop it and its admission ticket. */
  private forget(rec: SimRequest): void {
    this.requests.delete(rec.idx);
    releaseTicket(rec);
  }

  private scrape(now: number): void {
    for (let i = 0; i < this.n; i++) {
      this.catchUp(i, now);
      const snap = snapshotOf(this.engines[i]!.stats(), now, this.engines[i]!);
      this.trace?.({ type: 'snapshot', t: now, worker: i, snapshot: snap });
      for (const r of this.replicas) {
        r.states[i]!.applySnapshot(snap);
        r.speedClasses.update(r.states[i]!, r.states);
      }
    }
    this.admission?.pump();
  }

  private result(events: number): SimResult {
    const out = this.out;
    out.workers = this.engines.map((e, i) => {
      const final = e.stats();
      return {
        id: this.replicas[0]!.states[i]!.id,
        routed: this.routedTo[i]!,
        preemptions: final.preemptions,
        prefillPreemptions: final.prefillPreemptions,
        busyMs: this.busyMs[i]!,
        steps: this.steps[i]!,
        kvUsage: this.kvUsage[i]!,
        final,
      };
    });
    out.events = events;
    if (this.cascade) out.speculative = this.cascade.result();
    if (this.disagg) out.disagg = this.disagg.result();
    if (this.cache) out.cache = { ...this.cache.counts, evictions: this.cache.evictions() };
    out.wallMs = performance.now() - this.wallStart;
    return out;
  }
}
