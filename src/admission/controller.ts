/**
 * KV-pressure admission: per model, decide for each request whether it starts now, waits in the
 * model's admission queue, or is refused — before a worker is picked, from the fleet's estimated
 * KV usage (kv-pressure.ts) and the request's class:
 *
 *   class      admitted now when (usage counts this request's blocks)       otherwise
 *   critical   some routable worker can fit it                              queued
 *   standard   it fits and fleet usage ≤ thresholds.standard (0.92)         queued
 *   sheddable  it fits and fleet usage ≤ thresholds.sheddable (0.85)        refused: 503 + Retry-After
 *              and, once routed (checkPick), the picked worker's prefill
 *              backlog is ≤ thresholds.prefillBacklogTokens (8192) and its
 *              recent TPOT ≤ thresholds.sheddableTpotMs (50)
 *
 * A worker's prefill backlog is the uncached prompt tokens of the requests the gateway has sent
 * there that have not produced a first token yet (fleet/worker-state.ts keeps it exactly, without
 * a scrape). KV usage alone does not see a fleet short of compute rather than memory: long prompts
 * queue for prefill, and every step that carries a prefill chunk stretches the inter-token latency
 * of every request decoding beside it. So a sheddable request is shed when the worker the router
 * picks for it already has more than one step's worth of prefill waiting (8192 is vLLM's default
 * max_num_batched_tokens for `vllm serve` on large GPUs). The check follows the pick rather than
 * narrowing the candidates: moved off a busy worker, a request would recompute, on another, the
 * prefix that is cached where the router wanted it, loading the fleet more, not less. This is the
 * compute half of the Gateway API Inference Extension's saturation detector
 * (pkg/epp/saturationdetector/config.go: a pod is saturated from 5 waiting requests), counted in
 * tokens of prefill work rather than in requests.
 *
 * Neither sees a worker whose decode batch has grown so large, with the prefills that keep joining
 * it, that the requests decoding there miss their TPOT: every request admitted there adds to it.
 * So a sheddable request is also shed when the answers streaming from the picked worker show a
 * recent TPOT above thresholds.sheddableTpotMs (fleet/decode-pace.ts, measured, no scrape). The
 * default is the TPOT target the kvgate policy routes for (50 ms): a request started where answers
 * already decode slower than that would likely miss it too, so shedding it there gives up little
 * goodput of its own and spares the requests decoding beside it. A lower figure protects the other
 * classes more, at the cost of sheddable requests that would have met the target (docs/admission.md).
 * No recent answers, no figure, no shedding.
 *
 * "Fits" is per worker, with the conservative per-worker estimate of kv-pressure.ts (which counts
 * the output that requests in flight will still write): an admitted request's ticket lists the
 * workers it fits on, and the gateway narrows the request's candidates to them, so the router
 * never puts it where the blocks already promised would run out (the engine would preempt).
 *
 * A request never overtakes a waiting one of a more important class (strict priority: a waiting
 * critical request is not passed by standard ones, and a sheddable request arriving while others
 * wait is refused at once). Within a class requests start oldest first while they fit; when the
 * oldest waiting one (the head) does not, a younger one of its class that does may start ahead of
 * it (backfill), on any worker it fits but the one with the most room for the head, which is kept
 * for the head. In strict arrival order one long prompt at the head held back every request
 * behind it until the fleet had room for all of its blocks: on bursty traffic at the capacity of
 * the fleet without admission, 2,609 of 4,000 requests queued and 41% met the SLO, against 91%
 * with backfill (docs/admission.md#with-one-class, for the measurements and what it does to
 * long prompts). The queue is bounded (`queue.maxSize`; full: 429, unless a less important
 * request waits: the newest of those is evicted, 429, to make room) and each entry carries the
 * latest time it may still start (from the request's budget, at most `queue.maxWaitMs` after
 * arrival); past it the request is refused with 503 + Retry-After. `pump()` admits waiting
 * requests, head first, then backfills; callers pump when capacity may have been freed (a request
 * ended, a scrape arrived) and now and then for deadlines.
 *
 * A request that can never fit any worker (more blocks than the largest one has) and a model with
 * no routable worker are admitted: the router answers them (400 / 503) as it does without
 * admission control. A standard or sheddable request larger than its threshold's share of the
 * whole fleet (one long prompt on a small fleet) starts alone, on a worker with nothing of the
 * gateway's in flight, rather than waiting for a usage it can never reach.
 *
 * Plain code with an injected clock: the live gateway's admission stage and `kvgate bench` (the
 * fleet simulation, virtual time) run this same class.
 */
import type { Clock } from '../util/clock.js';
import type { PriorityClass } from './classes.js';
import { fleetKv, requestBlocks, workerUsedBlocks, type FleetKv, type KvWorkerView } from './kv-pressure.js';
import { ClassQueue, type QueueEntry } from './queue.js';

export interface AdmissionSettings {
  /**
   * Fleet KV usage (0..1) above which each class stops being admitted at once; and the prefill
   * backlog (uncached prompt tokens awaiting their first token, per worker) above which a worker
   * takes no sheddable request (0: no backlog limit); and the recent TPOT, ms per output token,
   * above which it takes none either (0: no TPOT limit).
   */
  thresholds: { sheddable: number; standard: number; prefillBacklogTokens: number; sheddableTpotMs: number };
  queue: {
    /** Waiting requests per model; a request arriving at a full queue gets 429. */
    maxSize: number;
    /** The longest a request may wait, ms (its own budget may allow less). */
    maxWaitMs: number;
  };
  /** Retry-After on 503 refusals, s. */
  retryAfterSeconds: number;
  /** Output tokens reserved per request at most (as the router reserves). */
  reserveOutputCap: number;
}

export const ADMISSION_DEFAULTS: AdmissionSettings = {
  thresholds: { sheddable: 0.85, standard: 0.92, prefillBacklogTokens: 8192, sheddableTpotMs: 50 },
  queue: { maxSize: 256, maxWaitMs: 10_000 },
  retryAfterSeconds: 1,
  reserveOutputCap: 1024,
};

export interface AdmissionRequest {
  id: string;
  model: string;
  cls: PriorityClass;
  /** Every prompt's tokens (a batch's, all of them). */
  promptTokens: number;
  /** Prompt tokens expected to be served from some worker's prefix cache (default 0). */
  cachedTokens?: number;
  /** The most output tokens of one sequence. */
  maxTokens: number;
  /** Sequences the request starts (a batch's prompts × n; default 1), each with its own output. */
  sequences?: number;
  /** Latest clock time at which the request may still start (Infinity: only queue.maxWaitMs). */
  latestStart: number;
}

/** What admission counts (metric `decision` label values). */
/**
 * What happened to a request at admission. `shed_backlog` and `shed_tpot` follow an `admitted` (or
 * `dequeued`): the request passed the KV check, and checkPick then shed it for the picked worker's
 * prefill backlog or its recent TPOT; so requests admitted and served = admitted + dequeued −
 * shed_backlog − shed_tpot − cancelled ones.
 * `evicted`: a queued request pushed out of a full queue by a more important one (answered 429
 * queue_full); a queued request ends as exactly one of dequeued, queue_timeout, cancelled, evicted.
 */
export type AdmissionDecision = 'admitted' | 'queued' | 'dequeued' | 'shed' | 'shed_backlog' | 'shed_tpot' | 'queue_full' | 'queue_timeout' | 'cancelled' | 'evicted';

export interface Refusal {
  status: 429 | 503;
  code: 'overloaded' | 'queue_full' | 'queue_timeout';
  message: string;
  retryAfterSeconds: number;
}

export interface AdmissionListener<W extends KvWorkerView = KvWorkerView> {
  onAdmit(ticket: AdmissionTicket<W>): void;
  onRefuse(r: Refusal): void;
}

export interface AdmissionObserver {
  decision(model: string, cls: PriorityClass, d: AdmissionDecision): void;
  /** Time a request spent queued (dequeued, expired or cancelled), ms. */
  waited(model: string, cls: PriorityClass, ms: number): void;
}

export type SubmitResult<W extends KvWorkerView = KvWorkerView> =
  | { kind: 'admitted'; ticket: AdmissionTicket<W> }
  | { kind: 'queued'; entry: QueueEntry<Waiting<W>> }
  | { kind: 'refused'; refusal: Refusal };

/** An admitted request. release() when it is over (any outcome); idempotent. */
export class AdmissionTicket<W extends KvWorkerView = KvWorkerView> {
  released = false;
  constructor(
    readonly id: string,
    readonly model: string,
    readonly cls: PriorityClass,
    /** Blocks counted as pending until a worker is charged for the request. */
    readonly blocks: number,
    /** Time spent queued, ms (0 if admitted at once). */
    readonly queuedMs: number,
    /**
     * The workers it fits on (route among these), or null: any worker (no routable worker, or a
     * request no worker can ever hold — the router answers those).
     */
    readonly workers: readonly W[] | null,
  ) {}
  release(): void {
    this.released = true;
  }
}

interface Waiting<W extends KvWorkerView> {
  req: AdmissionRequest;
  blocks: number;
  listener: AdmissionListener<W>;
}

interface ModelState<W extends KvWorkerView> {
  queue: ClassQueue<Waiting<W>>;
  /** Admitted tickets no worker has been charged for yet (pruned lazily). */
  pending: AdmissionTicket<W>[];
}

export interface AdmissionControllerOptions<W extends KvWorkerView = KvWorkerView> {
  settings: AdmissionSettings;
  clock: Clock;
  /** Snapshots older than this count as missing (the router's staleAfterMs). */
  staleAfterMs: number;
  /** The workers serving a model (undefined: unknown model). */
  workersFor: (model: string) => readonly W[] | undefined;
  observer?: AdmissionObserver;
}

/** 'admit' with the workers the request fits on (null: any). */
type Verdict<W> = { v: 'admit'; workers: readonly W[] | null } | { v: 'wait' } | { v: 'shed' };

const WAIT = { v: 'wait' } as const;
const SHED = { v: 'shed' } as const;

export class AdmissionController<W extends KvWorkerView = KvWorkerView> {
  private readonly models = new Map<string, ModelState<W>>();
  private s: AdmissionSettings;

  constructor(private readonly o: AdmissionControllerOptions<W>) {
    this.s = o.settings;
  }

  /**
   * New thresholds, queue size and wait (config reload), for the next decision. Requests already
   * queued keep their deadlines; a smaller queue turns new arrivals away and evicts nobody.
   */
  retune(settings: AdmissionSettings): void {
    this.s = settings;
    for (const m of this.models.values()) m.queue.maxSize = settings.queue.maxSize;
  }

  /** Decide on a new request. A queued request's listener is called later, from pump(). */
  submit(req: AdmissionRequest, listener: AdmissionListener<W>): SubmitResult<W> {
    const now = this.o.clock.now();
    const m = this.state(req.model);
    const workers = this.o.workersFor(req.model) ?? [];
    const kv = this.fleet(m, workers, now);
    const blocks = requestBlocks(req.promptTokens, req.cachedTokens ?? 0, Math.min(req.maxTokens, this.s.reserveOutputCap), kv.blockSize, req.sequences ?? 1);
    const v = this.arrivalVerdict(req.cls, blocks, kv, m, workers, now);
    if (v.v === 'admit') return { kind: 'admitted', ticket: this.admit(m, req, blocks, 0, 'admitted', v.workers) };
    if (v.v === 'shed') {
      this.o.observer?.decision(req.model, req.cls, 'shed');
      return { kind: 'refused', refusal: this.overloaded(req, kv) };
    }
    const deadline = Math.min(req.latestStart, now + this.s.queue.maxWaitMs);
    if (deadline <= now) {
      this.o.observer?.decision(req.model, req.cls, 'queue_timeout');
      return { kind: 'refused', refusal: this.timeout(req) };
    }
    // A full queue makes room for a more important request: the newest of the least important is
    // told (429 queue_full, Retry-After) and leaves.
    const evicted = m.queue.size >= m.queue.maxSize ? m.queue.evictFor(req.cls) : null;
    if (evicted) {
      const r = evicted.value.req;
      this.o.observer?.decision(r.model, r.cls, 'evicted');
      this.o.observer?.waited(r.model, r.cls, now - evicted.enqueuedAt);
      evicted.value.listener.onRefuse({
        status: 429,
        code: 'queue_full',
        message: `the admission queue of model '${r.model}' is full (${this.s.queue.maxSize} requests waiting): this ${r.cls} request was evicted to make room for a ${req.cls} one; retry later`,
        retryAfterSeconds: this.s.retryAfterSeconds,
      });
    }
    const entry = m.queue.push({ req, blocks, listener }, req.cls, now, deadline);
    if (!entry) {
      this.o.observer?.decision(req.model, req.cls, 'queue_full');
      return {
        kind: 'refused',
        refusal: {
          status: 429,
          code: 'queue_full',
          message: `the admission queue of model '${req.model}' is full (${this.s.queue.maxSize} requests waiting); retry later`,
          retryAfterSeconds: this.s.retryAfterSeconds,
        },
      };
    }
    this.o.observer?.decision(req.model, req.cls, 'queued');
    return { kind: 'queued', entry };
  }

  /**
   * The router picked `worker` for an admitted request (and charged it there, `uncachedTokens` of
   * prefill included). A sheddable request is refused if the prefill already waiting at that
   * worker, before its own, is above `thresholds.prefillBacklogTokens`, or if the answers
   * streaming from it lately took more than `thresholds.sheddableTpotMs` per token: it is shed
   * where it would have run rather than moved to a worker that would recompute its cached prefix.
   * The caller undoes the router's charge. Other classes, and limits of 0, always pass.
   */
  checkPick(t: AdmissionTicket<W>, worker: W, uncachedTokens: number): Refusal | null {
    if (t.cls !== 'sheddable') return null;
    const { prefillBacklogTokens: limit, sheddableTpotMs } = this.s.thresholds;
    const before = worker.inflightPrefillTokens - uncachedTokens;
    if (limit > 0 && before > limit) {
      return this.shed(t, 'shed_backlog', `the worker for this request has ${Math.round(before)} prompt tokens waiting for prefill, more than ${limit}`);
    }
    const tpot = sheddableTpotMs > 0 ? worker.recentTpotMs(this.o.clock.now()) : undefined;
    if (tpot !== undefined && tpot > sheddableTpotMs) {
      return this.shed(t, 'shed_tpot', `the answers of the worker for this request take ${tpot.toFixed(1)} ms per token, more than ${sheddableTpotMs}`);
    }
    return null;
  }

  private shed(t: AdmissionTicket<W>, decision: 'shed_backlog' | 'shed_tpot', why: string): Refusal {
    this.o.observer?.decision(t.model, t.cls, decision);
    return {
      status: 503,
      code: 'overloaded',
      message: `model '${t.model}' is overloaded (${why}): ${t.cls} requests are shed; retry later`,
      retryAfterSeconds: this.s.retryAfterSeconds,
    };
  }

  /**
   * Refuse queued requests whose deadline has passed, then admit from the head while the head may
   * start. For one model, or every model.
   */
  pump(model?: string): void {
    if (model === undefined) {
      for (const k of [...this.models.keys()]) this.pump(k);
      return;
    }
    const m = this.models.get(model);
    if (!m || m.queue.size === 0) return;
    const now = this.o.clock.now();
    for (const e of m.queue.expire(now)) {
      const r = e.value.req;
      this.o.observer?.decision(model, r.cls, 'queue_timeout');
      this.o.observer?.waited(model, r.cls, now - e.enqueuedAt);
      e.value.listener.onRefuse(this.timeout(r));
    }
    const workers = this.o.workersFor(model) ?? [];
    for (let e = m.queue.peek(); e !== null; e = m.queue.peek()) {
      const kv = this.fleet(m, workers, now);
      const v = this.verdict(e.cls, e.value.blocks, kv, m, workers, now);
      if (v.v !== 'admit') {
        this.backfill(m, e, workers, now);
        return;
      }
      this.dequeue(m, e, v.workers, now);
    }
  }

  /**
   * The head of the queue cannot start: start the younger requests of its class that can, oldest
   * first, away from the worker kept for the head.
   */
  private backfill(m: ModelState<W>, head: QueueEntry<Waiting<W>>, workers: readonly W[], now: number): void {
    const kept = this.keptFor(m, workers, now);
    // Whatever does not fit, nothing larger of the same class fits either: skip those unasked.
    let refusedAt = Infinity;
    for (const e of m.queue.entriesOf(head.cls)) {
      if (e === head || e.value.blocks >= refusedAt) continue;
      // Read afresh: an admitted request may have been routed (charged to a worker) at once.
      const v = this.besides(kept, this.verdict(e.cls, e.value.blocks, this.fleet(m, workers, now), m, workers, now));
      if (v.v === 'admit') this.dequeue(m, e, v.workers, now);
      else refusedAt = e.value.blocks;
    }
  }

  private dequeue(m: ModelState<W>, e: QueueEntry<Waiting<W>>, workers: readonly W[] | null, now: number): void {
    m.queue.remove(e);
    const ticket = this.admit(m, e.value.req, e.value.blocks, now - e.enqueuedAt, 'dequeued', workers);
    e.value.listener.onAdmit(ticket);
  }

  /**
   * A new request's verdict. A sheddable one is refused while anything of its class or above
   * waits; any other waits behind a more important class; with only its own class waiting it may
   * start now where it fits, as a backfill would (away from the worker kept for the head).
   */
  private arrivalVerdict(cls: PriorityClass, blocks: number, kv: FleetKv, m: ModelState<W>, workers: readonly W[], now: number): Verdict<W> {
    const waiting = m.queue.depthAtOrAbove(cls);
    if (waiting > 0 && cls === 'sheddable') return SHED;
    if (waiting > m.queue.depth(cls)) return WAIT;
    const v = this.verdict(cls, blocks, kv, m, workers, now);
    return waiting > 0 && v.v === 'admit' ? this.besides(this.keptFor(m, workers, now), v) : v;
  }

  /**
   * The worker kept for the head of the queue: the routable one with the most room (blocks free
   * less those admitted and not yet routed), where the head will fit first. Null with none.
   */
  private keptFor(m: ModelState<W>, workers: readonly W[], now: number): W | null {
    const pending = pendingBlocks(m);
    let kept: W | null = null;
    let most = -Infinity;
    for (const w of workers) {
      if (!w.routable) continue;
      const room = w.numGpuBlocks - workerUsedBlocks(w, now, this.o.staleAfterMs) - pending;
      if (room > most) {
        most = room;
        kept = w;
      }
    }
    return kept;
  }

  /** An 'admit' verdict narrowed to the workers other than `kept`; 'wait' if none is left. */
  private besides(kept: W | null, v: Verdict<W>): Verdict<W> {
    if (v.v !== 'admit' || v.workers === null || kept === null) return v;
    const workers = v.workers.filter((w) => w !== kept);
    return workers.length > 0 ? { v: 'admit', workers } : WAIT;
  }

  /** The client went away while queued: the entry leaves the queue now. */
  cancel(entry: QueueEntry<Waiting<W>>): void {
    const m = this.models.get(entry.value.req.model);
    if (!m || !m.queue.remove(entry)) return;
    const r = entry.value.req;
    this.o.observer?.decision(r.model, r.cls, 'cancelled');
    this.o.observer?.waited(r.model, r.cls, this.o.clock.now() - entry.enqueuedAt);
  }

  /** Requests waiting, for a model and class, or in all. */
  queueDepth(model?: string, cls?: PriorityClass): number {
    if (model === undefined) {
      let n = 0;
      for (const m of this.models.values()) n += m.queue.size;
      return n;
    }
    const q = this.models.get(model)?.queue;
    if (!q) return 0;
    return cls === undefined ? q.size : q.depth(cls);
  }

  /** The model's estimated fleet KV usage now (0..1; 0 with no routable worker). */
  usage(model: string): number {
    const m = this.state(model);
    const kv = this.fleet(m, this.o.workersFor(model) ?? [], this.o.clock.now());
    return kv.totalBlocks > 0 ? Math.min(1, (kv.usedBlocks + pendingBlocks(m)) / kv.totalBlocks) : 0;
  }

  /** Models seen so far. */
  modelNames(): string[] {
    return [...this.models.keys()];
  }

  /** Earliest queue deadline over all models (Infinity when nothing waits). */
  nextDeadline(): number {
    let t = Infinity;
    for (const m of this.models.values()) if (m.queue.size > 0) t = Math.min(t, m.queue.nextDeadline());
    return t;
  }

  private verdict(cls: PriorityClass, blocks: number, kv: FleetKv, m: ModelState<W>, workers: readonly W[], now: number): Verdict<W> {
    const ANY = { v: 'admit', workers: null } as const;
    if (kv.workers === 0) return ANY;
    let largest = 0;
    for (const w of workers) if (w.routable && w.numGpuBlocks > largest) largest = w.numGpuBlocks;
    if (blocks > largest) return ANY;
    const pending = pendingBlocks(m);
    const miss = cls === 'sheddable' ? SHED : WAIT;
    let aloneOnly = false;
    if (cls !== 'critical') {
      const limit = cls === 'standard' ? this.s.thresholds.standard : this.s.thresholds.sheddable;
      if ((kv.usedBlocks + pending + blocks) / kv.totalBlocks > limit) {
        // A request larger than the threshold's share of the whole fleet could never pass it, and
        // would wait until it timed out on an idle fleet: it starts alone instead, on a worker the
        // gateway has nothing in flight at, once nothing else is waiting to be placed.
        if (blocks <= limit * kv.totalBlocks || pending > 0) return miss;
        aloneOnly = true;
      }
    }
    // Blocks admitted but not yet charged to a worker may land on any of them.
    const fit: W[] = [];
    for (const w of workers) {
      if (!w.routable) continue;
      if (aloneOnly && w.peakInflightBlocks(now) > 0) continue;
      if (w.numGpuBlocks - workerUsedBlocks(w, now, this.o.staleAfterMs) - pending >= blocks) fit.push(w);
    }
    return fit.length > 0 ? { v: 'admit', workers: fit } : miss;
  }

  private admit(m: ModelState<W>, req: AdmissionRequest, blocks: number, queuedMs: number, d: AdmissionDecision, workers: readonly W[] | null): AdmissionTicket<W> {
    const t = new AdmissionTicket<W>(req.id, req.model, req.cls, blocks, queuedMs, workers);
    m.pending.push(t);
    this.o.observer?.decision(req.model, req.cls, d);
    if (d === 'dequeued') this.o.observer?.waited(req.model, req.cls, queuedMs);
    return t;
  }

  private fleet(m: ModelState<W>, workers: readonly W[], now: number): FleetKv {
    // Tickets whose request a worker has been charged for (or that ended) are no longer pending.
    if (m.pending.length > 0) {
      m.pending = m.pending.filter((t) => !t.released && !workers.some((w) => w.inflight.has(t.id)));
    }
    return fleetKv(workers, now, this.o.staleAfterMs);
  }

  private state(model: string): ModelState<W> {
    let m = this.models.get(model);
    if (!m) this.models.set(model, (m = { queue: new ClassQueue(this.s.queue.maxSize), pending: [] }));
    return m;
  }

  private overloaded(req: AdmissionRequest, kv: FleetKv): Refusal {
    const usage = kv.totalBlocks > 0 ? Math.round((kv.usedBlocks / kv.totalBlocks) * 100) : 100;
    return {
      status: 503,
      code: 'overloaded',
      message: `model '${req.model}' is overloaded (KV cache ${usage}% used): ${req.cls} requests are shed; retry later`,
      retryAfterSeconds: this.s.retryAfterSeconds,
    };
  }

  private timeout(req: AdmissionRequest): Refusal {
    return {
      status: 503,
      code: 'queue_timeout',
      message: `model '${req.model}' is overloaded: the request could not start within its deadline; retry later`,
      retryAfterSeconds: this.s.retryAfterSeconds,
    };
  }
}

function pendingBlocks(m: ModelState<KvWorkerView>): number {
  let n = 0;
  for (const t of m.pending) n += t.blocks;
  return n;
}
