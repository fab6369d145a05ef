/**
 * The engine model: continuous batching over paged KV blocks with prefix caching, following the
 * vLLM V1 scheduler (vllm/v1/core/sched/scheduler.py).
 *
 * Each step has a token budget (maxNumBatchedTokens). Running requests are served first, in
 * order: a decoding request takes 1 token, a request mid-prefill takes its next chunk (chunked
 * prefill). If a running request needs a block and none is free, the running request with the
 * largest priority value (latest arrival on ties) is preempted — its blocks are freed and it goes
 * back to the waiting queue, to be recomputed later (prompt + output so far, with prefix-cache
 * hits). If nothing was preempted, waiting requests are admitted by (priority, arrival) while the
 * budget, maxNumSeqs and free blocks allow; a waiting request that does not fit stops admission
 * (no skipping ahead). A token is sampled for a request when every one of its known tokens has
 * been computed.
 *
 * Blocks are registered in the prefix cache in the step that fills them with computed tokens —
 * prompt blocks as prefill completes them and output blocks as decoding fills them — with hashes
 * chained incrementally from the previous block, so each block is hashed once per request. Like
 * vLLM (which caches at allocation time), registration happens when the step is planned, so a
 * request admitted later in the same step already hits blocks an earlier one is computing.
 *
 * Cost per step is O(scheduled requests + blocks touched); no per-step copies of prompts.
 *
 * Disaggregated serving (vLLM's KV connectors; see EngineRequest.remoteDecode / remotePrefill):
 * a remote-decode request finishes as usual but keeps its blocks until releaseKv(); a
 * remote-prefill request is admitted in queue order with blocks for its whole prompt (local
 * prefix hits reused), reported in StepResult.kvPulls, and parked (vLLM's
 * WAITING_FOR_REMOTE_KVS) until kvArrived(); it then re-enters the waiting queue with every
 * prompt token but the last computed, as vLLM's scheduler does in _update_waiting_for_remote_kv
 * (vllm/v1/core/sched/scheduler.py), and its pulled blocks enter the prefix cache.
 */

import { BlockManager } from './block-manager.js';
import { chainRoot, hashBlock, hashBlocksInto, saltedRoot } from '../kv/block-hash.js';
import { adapterRoot, type BlockKeys } from '../kv/prompt-blocks.js';
import type { KvEvent } from '../kv/events.js';
import { ArrayPool, IdList, EMPTY_HASHES } from './array-pool.js';
import type {
  AdmissionError,
  EngineConfig,
  EngineModel,
  EngineRequest,
  EngineSpeculation,
  EngineStats,
  FinishReason,
  FinishedOutput,
  KvPull,
  SpecDecodeStats,
  StepResult,
  StepShape,
  TokenContext,
  TokenOutput,
  TokenSampler,
} from './types.js';

const enum Status {
  Waiting,
  Running,
  /** Blocks allocated, prompt KV on its way from a prefill worker. */
  Pulling,
  Done,
}

/** One request inside the engine. */
interface Seq {
  readonly id: string;
  readonly prompt: ArrayLike<number>;
  readonly promptLen: number;
  readonly maxTokens: number;
  readonly sampler: TokenSampler;
  /** EOS id that stops this request, -1 for none. */
  readonly stopToken: number;
  readonly priority: number;
  /** The LoRA adapter, if any (its blocks are keyed by it; see EngineRequest.lora). */
  readonly lora: string | undefined;
  /** Never look the prompt up in the prefix cache (its blocks are still cached for others). */
  readonly skipPrefixCache: boolean;
  /** Hold the blocks after a length finish, for a decode worker to pull. */
  readonly remoteDecode: boolean;
  /** The prompt's KV is to be pulled, not computed (cleared once it has arrived). */
  remotePrefill: boolean;
  /** The pulled KV has arrived and the request waits to be scheduled with its blocks. */
  pulled: boolean;
  /** Read at most this many prompt tokens from the prefix cache (whole blocks). */
  readonly prefixCacheLimit: number;
  /** Admission order; ties on priority go to the earlier arrival. */
  readonly arrival: number;
  /** Tokens generated, kept until the request ends (a preempted one recomputes them). */
  readonly output: IdList;
  /** Reused for every sampler call (the output list grows in place). */
  readonly ctx: TokenContext;
  status: Status;
  /** KV blocks held, in token order. */
  readonly blocks: IdList;
  /** Tokens whose KV is computed (vLLM's num_computed_tokens). */
  numComputed: number;
  /**
   * Content hashes of full blocks, [0, numHashes) known so far (valid across preemptions: tokens
   * never change). Taken from the engine's pool and given back when the request ends.
   */
  hashes: Float64Array;
  numHashes: number;
  /** Root of this request's hash chain: the engine's, or one derived from its cache_salt. */
  readonly root: number;
  /** Blocks [0, numProcessed) have been offered to the prefix cache. */
  numProcessed: number;
  /** Scheduled for the first time already. */
  started: boolean;
  cachedPromptTokens: number;
  /** Index into this step's schedule, -1 if not scheduled in the current step. */
  slot: number;
}

function cmpWaiting(a: Seq, b: Seq): number {
  return a.priority - b.priority || a.arrival - b.arrival;
}

/** Binary min-heap on (priority, arrival) with lazy deletion of entries no longer waiting. */
class WaitingQueue {
  private readonly heap: Seq[] = [];

  get rawSize(): number {
    return this.heap.length;
  }

  push(s: Seq): void {
    const h = this.heap;
    h.push(s);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (cmpWaiting(h[p]!, s) <= 0) break;
      h[i] = h[p]!;
      i = p;
    }
    h[i] = s;
  }

  /** First request still waiting, dropping stale entries on the way. */
  peek(): Seq | undefined {
    const h = this.heap;
    while (h.length > 0 && h[0]!.status !== Status.Waiting) this.pop();
    return h[0];
  }

  pop(): Seq | undefined {
    const h = this.heap;
    const top = h[0];
    const last = h.pop();
    if (h.length > 0 && last) {
      let i = 0;
      const n = h.length;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= n) break;
        const r = l + 1;
        const c = r < n && cmpWaiting(h[r]!, h[l]!) < 0 ? r : l;
        if (cmpWaiting(h[c]!, last) >= 0) break;
        h[i] = h[c]!;
        i = c;
      }
      h[i] = last;
    }
    return top;
  }

  *[Symbol.iterator](): IterableIterator<Seq> {
    for (const s of this.heap) if (s.status === Status.Waiting) yield s;
  }
}


/** One step's batch as the scheduler builds it. */
interface StepBatch {
  /** Tokens the step may still schedule (max_num_batched_tokens less what is scheduled). */
  budget: number;
  /**
   * Scheduled sequences, by slot, in sched[0 … count) (null: preempted after being scheduled).
   * The two arrays are the engine's, reused by every step: a step of a few sequences would
   * otherwise allocate them afresh, and a fleet takes millions of steps.
   */
  sched: Array<Seq | null>;
  /** New tokens scheduled for each slot. */
  schedNew: number[];
  count: number;
  preempted: string[];
  started: Array<{ id: string; cachedPromptTokens: number }>;
  finished: FinishedOutput[];
  /** Remote-prefill requests admitted (blocks allocated, KV to be pulled). */
  pulls: KvPull[];
}
/** Shared by every step when emitTokens is false; frozen so a stray push fails loudly. */
const NO_TOKENS = Object.freeze([]) as unknown as TokenOutput[];
/** What decodeStep returns when no sequence finished (frozen, as NO_TOKENS). */
const NO_FINISHED: readonly FinishedOutput[] = Object.freeze([]);

export class Engine implements EngineModel {
  readonly config: EngineConfig;
  private readonly bm: BlockManager;
  private readonly bs: number;
  private readonly root: number;
  private readonly caching: boolean;
  private readonly emitTokens: boolean;
  private readonly live = new Map<string, Seq>();
  /** The requests' hash arrays, reused. */
  private readonly hashArrays = new ArrayPool<Float64Array>((n) => new Float64Array(n));
  private readonly blockArrays = new ArrayPool<Int32Array>((n) => new Int32Array(n));
  private readonly tokenArrays = new ArrayPool<Int32Array>((n) => new Int32Array(n));
  private runningSeqs: Seq[] = [];
  private readonly waitingQueue = new WaitingQueue();
  private numWaiting = 0;
  /** Remote-prefill requests holding blocks while their KV is transferred. */
  private numPulling = 0;
  /** Blocks of finished remote-decode requests, held until the decode worker has pulled them. */
  private readonly held = new Map<string, number[]>();
  private arrivals = 0;
  /** Prompt (or recompute) tokens queued or mid-prefill, maintained incrementally. */
  private pendingPrefill = 0;
  private readonly scratch: Int32Array;
  private readonly hitScratch: number[] = [];
  /** The shape decodeRun prices its steps with (reused: a fleet plans millions). */
  private readonly runShape: StepShape = { prefill: [], decodeSeqs: 0, decodeContextTokens: 0 };
  private readonly schedSlots: Array<Seq | null> = [];
  private readonly schedNewSlots: number[] = [];
  /** Blocks admitted this step from the host-memory tier (their load is priced into the step). */
  private hostLoadBlocks = 0;
  private readonly counters = {
    prefixQueries: 0,
    prefixHits: 0,
    /** Prompt tokens loaded back from the host-memory tier instead of recomputed. */
    hostHits: 0,
    preemptions: 0,
    prefillPreemptions: 0,
    promptTokens: 0,
    generationTokens: 0,
    finished: { stop: 0, length: 0, abort: 0 } as Record<FinishReason, number>,
  };
  private readonly spec: EngineSpeculation | null;
  private readonly specStats: SpecDecodeStats | null;

  constructor(config: EngineConfig) {
    for (const k of ['maxModelLen', 'maxNumSeqs', 'maxNumBatchedTokens'] as const) {
      if (!Number.isInteger(config[k]) || config[k] < 1) throw new Error(`${k} must be a positive integer, got ${config[k]}`);
    }
    this.config = config;
    this.bs = config.blockSize;
    this.bm = new BlockManager(config.numGpuBlocks, config.blockSize, config.kvEvents, config.cpuOffload?.numBlocks ?? 0);
    this.root = chainRoot(config.hashSeed);
    this.caching = config.enablePrefixCaching;
    this.emitTokens = config.emitTokens !== false;
    this.scratch = new Int32Array(config.blockSize);
    this.spec = config.speculative ?? null;
    if (this.spec && (!Number.isInteger(this.spec.k) || this.spec.k < 1)) throw new Error(`speculative k must be a positive integer, got ${this.spec.k}`);
    this.specStats = this.spec ? { numDrafts: 0, numDraftTokens: 0, numAcceptedTokens: 0, acceptedPerPos: new Array<number>(this.spec.k).fill(0) } : null;
  }

  check(prompt: number, maxTokens: number): AdmissionError | null {
    const { maxModelLen, numGpuBlocks } = this.config;
    const total = prompt + maxTokens;
    if (total > maxModelLen) {
      return {
        code: 'context_length_exceeded',
        message:
          `This model's maximum context length is ${maxModelLen} tokens. However, you requested ` +
          `${total} tokens (${prompt} in the messages, ${maxTokens} in the completion). ` +
          `Please reduce the length of the messages or completion.`,
      };
    }
    const blocks = Math.ceil(prompt / this.bs) + 1;
    if (blocks > numGpuBlocks) {
      return {
        code: 'exceeds_kv_capacity',
        message:
          `The prompt (${prompt} tokens) needs ${blocks} KV cache blocks of ${this.bs} tokens, ` +
          `but the engine's KV cache has only ${numGpuBlocks} blocks ` +
          `(${numGpuBlocks * this.bs} tokens). Please reduce the length of the prompt.`,
      };
    }
    return null;
  }

  add(req: EngineRequest): void {
    if (this.live.has(req.id)) throw new Error(`request id already in use: ${req.id}`);
    const promptLen = req.prompt.length;
    if (promptLen < 1) throw new Error(`request ${req.id}: prompt must not be empty`);
    if (!Number.isInteger(req.maxTokens) || req.maxTokens < 1) {
      throw new Error(`request ${req.id}: maxTokens must be a positive integer, got ${req.maxTokens}`);
    }
    const err = this.check(promptLen, req.maxTokens);
    if (err) throw new Error(err.message);
    const output = new IdList(this.tokenArrays);
    const root = this.requestRoot(req);
    const s: Seq = {
      id: req.id,
      prompt: req.prompt,
      promptLen,
      maxTokens: req.maxTokens,
      sampler: req.sampler,
      stopToken: req.ignoreEos || req.eosTokenId === undefined ? -1 : req.eosTokenId,
      priority: req.priority ?? 0,
      lora: req.lora === '' ? undefined : req.lora,
      skipPrefixCache: req.skipPrefixCache === true,
      remoteDecode: req.remoteDecode === true,
      remotePrefill: req.remotePrefill === true,
      pulled: false,
      prefixCacheLimit: req.prefixCacheLimit ?? Infinity,
      arrival: this.arrivals++,
      output,
      ctx: { prompt: req.prompt, output },
      status: Status.Waiting,
      blocks: new IdList(this.blockArrays),
      numComputed: 0,
      hashes: EMPTY_HASHES,
      numHashes: 0,
      root,
      numProcessed: 0,
      started: false,
      cachedPromptTokens: 0,
      slot: -1,
    };
    this.takeKnownHashes(s, req);
    this.live.set(s.id, s);
    this.waitingQueue.push(s);
    this.numWaiting++;
    this.pendingPrefill += this.pendingOf(s);
  }

  abort(id: string): boolean {
    const s = this.live.get(id);
    if (!s) return this.releaseKv(id);
    if (s.status === Status.Pulling) {
      this.numPulling--;
    } else if (s.status === Status.Running) {
      const i = this.runningSeqs.indexOf(s);
      if (i >= 0) this.runningSeqs.splice(i, 1);
    } else if (s.status === Status.Waiting) {
      this.numWaiting--; // the heap entry is dropped lazily
    }
    this.retire(s, 'abort');
    return true;
  }

  hasWork(): boolean {
    return this.runningSeqs.length > 0 || this.numWaiting > 0;
  }

  kvArrived(id: string): boolean {
    const s = this.live.get(id);
    if (!s || s.status !== Status.Pulling) return false;
    this.numPulling--;
    // Every prompt token but the last is now computed; the last is recomputed for the first
    // token's logits (vLLM: num_computed_tokens − 1 when the pulled KV covers the whole prompt).
    s.remotePrefill = false;
    s.pulled = true;
    s.numComputed = s.promptLen - 1;
    if (this.caching) this.cacheFullBlocks(s, s.numComputed);
    s.status = Status.Waiting;
    this.pendingPrefill += this.pendingOf(s);
    this.waitingQueue.push(s);
    this.numWaiting++;
    return true;
  }

  releaseKv(id: string): boolean {
    const blocks = this.held.get(id);
    if (!blocks) return false;
    this.held.delete(id);
    this.bm.freeAll(blocks);
    return true;
  }

  step(): StepResult | null {
    if (!this.hasWork()) return null;
    const b: StepBatch = { budget: this.config.maxNumBatchedTokens, sched: this.schedSlots, schedNew: this.schedNewSlots, count: 0, preempted: [], started: [], finished: [], pulls: [] };
    // 1. Running requests, in order.
    this.scheduleRunning(b);
    // Register the blocks this step fills, now rather than after the step, as vLLM does at
    // allocation time: a waiting request admitted below can already hit them.
    const bs = this.bs;
    if (this.caching) {
      for (let k = 0; k < b.count; k++) {
        const s = b.sched[k];
        if (s && s.numComputed + b.schedNew[k]! >= (s.numProcessed + 1) * bs) this.cacheFullBlocks(s, s.numComputed + b.schedNew[k]!);
      }
    }

    // 2. Waiting requests, unless this step had to preempt (vLLM admits nothing then).
    if (b.preempted.length === 0) this.scheduleWaiting(b);
    // Nothing could be scheduled: the waiting requests wait for blocks that are held (KV being
    // pulled, or held for a decode worker); the driver steps again when they are freed.
    if (b.count === 0 && b.pulls.length === 0 && b.finished.length === 0 && b.preempted.length === 0) return null;
    // 3. Execute: advance computed tokens, sample where a sequence is fully computed.
    const { shape, draftShape, prefillTokens, decodeTokens, tokens, firstTokens } = this.execute(b);
    const running = this.runningSeqs;
    // Drop finished and preempted requests from the running list, keeping order.
    let w = 0;
    for (let i = 0; i < running.length; i++) {
      const s = running[i]!;
      if (s.status === Status.Running) running[w++] = s;
    }
    running.length = w;

    // Blocks loaded back from host memory this step cross PCIe before the forward pass uses them.
    // A step that only admitted pulls ran no forward pass.
    let durationMs = b.count === 0 && b.pulls.length > 0 ? 0 : this.config.timeModel.stepMs(shape) + this.hostLoadBlocks * (this.config.cpuOffload?.loadMsPerBlock ?? 0);
    this.hostLoadBlocks = 0;
    if (draftShape && draftShape.decodeSeqs > 0) durationMs += this.spec!.k * this.spec!.draftTimeModel.stepMs(draftShape);
    return {
      durationMs,
      tokens,
      firstTokens,
      finished: b.finished,
      preempted: b.preempted,
      started: b.started,
      prefillTokens,
      decodeTokens,
      kvEvents: this.bm.takeEvents(),
      kvPulls: b.pulls,
    };
  }

  // ---- Decode runs (the virtual-time driver: src/sim/fleet-sim.ts) ----

  /**
   * How many of the next steps are pure decode steps of the running batch, if nothing is added
   * to the engine meanwhile: steps in which every running sequence decodes one token, nothing is
   * admitted or preempted and no sequence finishes before the last of them. Fills `durations`
   * with their durations (step() would return the same) and returns their number, at most
   * `durations.length`; 0 when the next step is not one — a request waits, a sequence is still
   * prefilling, the blocks would run out, or the engine speculates, emits tokens or KV events, or
   * a sequence may stop on a token. The caller then takes those steps with decodeStep(), each at
   * the time step() would have been called, and reads or adds nothing in between that it would
   * not have at those times.
   *
   * Why: most steps of a busy fleet are of this kind (96% of the 2.6M steps of `kvgate bench
   * --workload mixed --workers 16 --size 100000`), and a driver that knows when the batch will
   * next change needs no event per step.
   */
  decodeRun(durations: Float64Array): number {
    const running = this.runningSeqs;
    const n = running.length;
    if (n === 0 || this.numWaiting > 0 || this.numPulling > 0 || this.spec !== null || this.emitTokens || this.bm.recordsEvents) return 0;
    if (n > this.config.maxNumBatchedTokens) return 0;
    const bs = this.bs;
    let steps = durations.length;
    let context = 0;
    for (let i = 0; i < n; i++) {
      const s = running[i]!;
      const numTokens = s.promptLen + s.output.length;
      if (s.status !== Status.Running || s.output.length === 0 || s.numComputed !== numTokens - 1 || s.stopToken !== -1) return 0;
      // It finishes in the step that samples its last token: the run ends with that step.
      const left = s.maxTokens - s.output.length;
      if (left < steps) steps = left;
      context += s.numComputed;
    }
    if (steps < 1) return 0;
    // Blocks the batch takes over its first k steps; the run stops before one would find none
    // free (step() would preempt there). Nothing is freed before the run's last step.
    const free = this.bm.numFree;
    const taken = (k: number): number => {
      let t = 0;
      for (let i = 0; i < n; i++) {
        const s = running[i]!;
        const more = Math.ceil((s.numComputed + k) / bs) - s.blocks.length;
        if (more > 0) t += more;
      }
      return t;
    };
    if (taken(steps) > free) {
      if (taken(1) > free) return 0;
      let lo = 1;
      let hi = steps; // taken(lo) <= free < taken(hi)
      while (hi - lo > 1) {
        const mid = (lo + hi) >>> 1;
        if (taken(mid) <= free) lo = mid;
        else hi = mid;
      }
      steps = lo;
    }
    const shape = this.runShape;
    shape.decodeSeqs = n;
    const tm = this.config.timeModel;
    const load = this.hostLoadBlocks * (this.config.cpuOffload?.loadMsPerBlock ?? 0);
    for (let j = 1; j <= steps; j++) {
      shape.decodeContextTokens = context + j * n;
      durations[j - 1] = tm.stepMs(shape) + load;
    }
    return steps;
  }

  /**
   * One step of a run that decodeRun announced: the same changes step() makes in such a step
   * (blocks taken in batch order, full blocks offered to the prefix cache, a token sampled per
   * sequence), without planning it. Returns the sequences that finished (only in a run's last step).
   */
  decodeStep(): readonly FinishedOutput[] {
    const running = this.runningSeqs;
    const n = running.length;
    const bm = this.bm;
    const bs = this.bs;
    for (let i = 0; i < n; i++) {
      const s = running[i]!;
      const need = Math.ceil((s.numComputed + 1) / bs) - s.blocks.length;
      if (need > bm.numFree) throw new Error('decodeStep outside a run decodeRun announced: no free block');
      bm.allocateInto(s.blocks, need);
    }
    if (this.caching) {
      for (let i = 0; i < n; i++) {
        const s = running[i]!;
        if (s.numComputed + 1 >= (s.numProcessed + 1) * bs) this.cacheFullBlocks(s, s.numComputed + 1);
      }
    }
    let finished: FinishedOutput[] | null = null;
    for (let i = 0; i < n; i++) {
      const s = running[i]!;
      s.numComputed++;
      s.output.push(s.sampler(s.ctx));
      this.counters.generationTokens++;
      if (s.output.length >= s.maxTokens) this.finishRunning(s, 'length', (finished ??= []));
    }
    if (finished === null) return NO_FINISHED;
    let w = 0;
    for (let i = 0; i < n; i++) {
      const s = running[i]!;
      if (s.status === Status.Running) running[w++] = s;
    }
    running.length = w;
    return finished;
  }

  /** Schedule the running sequences' next tokens, in order, preempting for blocks as vLLM does. */
  private scheduleRunning(b: StepBatch): void {
    const running = this.runningSeqs;
    const bm = this.bm;
    const bs = this.bs;
    for (let i = 0; i < running.length && b.budget > 0; i++) {
      const s = running[i]!;
      if (s.status !== Status.Running) continue; // preempted earlier in this loop
      const numTokens = s.promptLen + s.output.length;
      const n = Math.min(numTokens - s.numComputed, b.budget);
      if (n <= 0) continue;
      // A speculating decode also holds slots for its k draft tokens (vLLM's lookahead slots).
      const lookahead = this.spec && n === 1 && s.output.length > 0 && s.numComputed === numTokens - 1 ? Math.min(this.spec.k, s.maxTokens - s.output.length) : 0;
      const need = Math.ceil((s.numComputed + n + lookahead) / bs) - s.blocks.length;
      let ok = true;
      while (need > bm.numFree) {
        const victim = this.pickVictim();
        if (victim === s) {
          if (this.countRunning() === 1) {
            // Alone and still out of blocks: the sequence has outgrown the whole cache. vLLM
            // would spin forever here; end it as a length stop instead.
            this.finishRunning(s, 'length', b.finished);
          } else {
            this.preempt(s, b.preempted);
          }
          ok = false;
          break;
        }
        if (victim.slot >= 0) {
          b.budget += b.schedNew[victim.slot]!;
          b.sched[victim.slot] = null;
          victim.slot = -1;
        }
        this.preempt(victim, b.preempted);
      }
      if (!ok) break;
      bm.allocateInto(s.blocks, need);
      this.schedule(b, s, n);
    }
  }

  /** Admit waiting sequences while the token budget, the sequence limit and the free blocks allow. */
  private scheduleWaiting(b: StepBatch): void {
    const bm = this.bm;
    const bs = this.bs;
    let numRunning = this.countRunning();
    const maxSeqs = this.config.maxNumSeqs;
    // vLLM's max_loras: the adapters of this step's batch; a waiting request that would bring
    // one too many is passed over (vllm/v1/core/sched/scheduler.py) and waits for the next step.
    const maxLoras = this.config.maxLoras;
    const loras = maxLoras === undefined ? null : this.batchAdapters(b);
    let passedOver: Seq[] | null = null;
    while (b.budget > 0 && numRunning < maxSeqs) {
      const s = this.waitingQueue.peek();
      if (!s) break;
      if (loras !== null && s.lora !== undefined && !loras.has(s.lora) && loras.size >= maxLoras!) {
        this.waitingQueue.pop();
        (passedOver ??= []).push(s);
        continue;
      }
      if (s.pulled) {
        if (!this.admitPulled(s, b)) break;
        numRunning++;
        continue;
      }
      const numTokens = s.promptLen + s.output.length;
      if (Math.ceil(numTokens / bs) > bm.numBlocks) {
        // Only reachable by a preempted sequence that has outgrown the cache.
        this.waitingQueue.pop();
        this.numWaiting--;
        this.retire(s, 'length', b.finished);
        continue;
      }
      const hits = this.hitScratch;
      hits.length = 0;
      let hitFree = 0;
      let hostHits = 0;
      if (this.caching && !s.skipPrefixCache) {
        const maxBlocks = Math.floor(Math.min(numTokens - 1, s.prefixCacheLimit) / bs);
        let i = 0;
        for (; i < maxBlocks; i++) {
          // Sixteen blocks' index slots at a time in independent loads (the lookups wait on none).
          if ((i & 15) === 0) this.warmLookups(s, i, Math.min(i + 16, maxBlocks));
          const blk = bm.lookup(this.hashAt(s, i));
          if (blk < 0) break;
          hits.push(blk);
          if (bm.isFree(blk)) hitFree++;
        }
        // Past the GPU's prefix, the host tier's: loaded into fresh GPU blocks, not recomputed.
        if (bm.numHostBlocks > 0) while (i + hostHits < maxBlocks && bm.inHost(this.hashAt(s, i + hostHits))) hostHits++;
      }
      const hitTokens = (hits.length + hostHits) * bs;
      if (s.remotePrefill) {
        if (!this.admitRemote(s, hitTokens, hostHits, hitFree, b)) break;
        continue;
      }
      const n = Math.min(numTokens - hitTokens, b.budget);
      const need = Math.ceil((hitTokens + n) / bs) - hits.length;
      if (need > bm.numFree - hitFree) break;

      this.waitingQueue.pop();
      this.numWaiting--;
      const pendingBefore = this.pendingOf(s);
      // Room for every block the request can come to hold, so that decoding never grows the list.
      s.blocks.reserve(Math.ceil((s.promptLen + s.maxTokens + (this.spec?.k ?? 0)) / bs) - s.blocks.length);
      for (let k = 0; k < hits.length; k++) {
        bm.touch(hits[k]!);
        s.blocks.push(hits[k]!);
      }
      // The host blocks being loaded are the most recently used: the allocations below evict others.
      for (let k = 0; k < hostHits; k++) bm.touchHost(this.hashAt(s, hits.length + k));
      bm.allocateInto(s.blocks, need);
      this.hostLoadBlocks += hostHits;
      s.numComputed = hitTokens;
      s.numProcessed = hits.length;
      this.pendingPrefill += this.pendingOf(s) - pendingBefore;
      s.status = Status.Running;
      this.runningSeqs.push(s);
      numRunning++;
      if (!s.started) {
        s.started = true;
        s.cachedPromptTokens = hitTokens;
        this.counters.promptTokens += s.promptLen;
        if (this.caching && !s.skipPrefixCache) {
          this.counters.prefixQueries += s.promptLen;
          this.counters.prefixHits += hits.length * bs;
          this.counters.hostHits += hostHits * bs;
        }
        b.started.push({ id: s.id, cachedPromptTokens: hitTokens });
      }
      if (this.caching) this.cacheFullBlocks(s, hitTokens + n);
      if (loras !== null && s.lora !== undefined) loras.add(s.lora);
      this.schedule(b, s, n);
    }
    if (passedOver !== null) for (const s of passedOver) this.waitingQueue.push(s);
  }

  /**
   * Admit a remote-prefill request (the head of the queue, its prefix hits in hitScratch): blocks
   * for the whole prompt now, none of the step's token budget, and a pull of the tokens not hit.
   * False if the blocks are not free (admission stops, as for any request that does not fit).
   */
  private admitRemote(s: Seq, hitTokens: number, hostHits: number, hitFree: number, b: StepBatch): boolean {
    const bm = this.bm;
    const hits = this.hitScratch;
    const need = Math.ceil(s.promptLen / this.bs) - hits.length;
    if (need > bm.numFree - hitFree) return false;
    this.waitingQueue.pop();
    this.numWaiting--;
    for (let k = 0; k < hits.length; k++) {
      bm.touch(hits[k]!);
      s.blocks.push(hits[k]!);
    }
    // Host-tier hits are not loaded: the pull brings those tokens too.
    bm.allocateInto(s.blocks, need);
    const localTokens = hitTokens - hostHits * this.bs;
    s.numComputed = localTokens;
    s.numProcessed = hits.length;
    s.status = Status.Pulling;
    this.numPulling++;
    s.started = true;
    s.cachedPromptTokens = localTokens;
    this.counters.promptTokens += s.promptLen;
    if (this.caching && !s.skipPrefixCache) {
      this.counters.prefixQueries += s.promptLen;
      this.counters.prefixHits += localTokens;
    }
    b.started.push({ id: s.id, cachedPromptTokens: localTokens });
    b.pulls.push({ id: s.id, tokens: s.promptLen - localTokens });
    return true;
  }

  /** Schedule a request whose pulled KV has arrived: it holds its blocks; only the last prompt token is left. */
  private admitPulled(s: Seq, b: StepBatch): boolean {
    const n = Math.min(s.promptLen + s.output.length - s.numComputed, b.budget);
    const need = Math.max(0, Math.ceil((s.numComputed + n) / this.bs) - s.blocks.length);
    if (need > this.bm.numFree) return false;
    this.waitingQueue.pop();
    this.numWaiting--;
    this.bm.allocateInto(s.blocks, need);
    s.pulled = false;
    s.status = Status.Running;
    this.runningSeqs.push(s);
    this.schedule(b, s, n);
    return true;
  }

  /** Run the scheduled batch: advance computed tokens, sample where a sequence is fully computed. */
  private execute(b: StepBatch): { shape: StepShape; draftShape: StepShape | null; prefillTokens: number; decodeTokens: number; tokens: TokenOutput[]; firstTokens: string[] } {
    const shape: StepShape = { prefill: [], decodeSeqs: 0, decodeContextTokens: 0 };
    const spec = this.spec;
    const draftShape: StepShape | null = spec ? { prefill: [], decodeSeqs: 0, decodeContextTokens: 0 } : null;
    let prefillTokens = 0;
    let decodeTokens = 0;
    const tokens = this.emitTokens ? ([] as TokenOutput[]) : NO_TOKENS;
    const firstTokens: string[] = [];
    for (let k = 0; k < b.count; k++) {
      const s = b.sched[k];
      if (!s) continue;
      b.sched[k] = null; // nothing of a step holds a sequence past it
      s.slot = -1;
      const n = b.schedNew[k]!;
      const numTokens = s.promptLen + s.output.length;
      const pendingBefore = this.pendingOf(s);
      const isDecode = n === 1 && s.output.length > 0 && s.numComputed === numTokens - 1;
      s.numComputed += n;
      // Draft tokens this sequence proposes in this step (0 without speculation).
      const kHere = isDecode && spec ? Math.min(spec.k, s.maxTokens - s.output.length - 1) : 0;
      if (kHere > 0) {
        // k draft decode steps, then one target pass over the last token and the k drafts.
        draftShape!.decodeSeqs++;
        draftShape!.decodeContextTokens += s.numComputed + kHere;
        shape.prefill.push({ newTokens: kHere + 1, contextLen: s.numComputed + kHere });
        decodeTokens++;
      } else if (isDecode) {
        shape.decodeSeqs++;
        shape.decodeContextTokens += s.numComputed;
        decodeTokens++;
      } else {
        shape.prefill.push({ newTokens: n, contextLen: s.numComputed });
        prefillTokens += n;
      }
      if (s.numComputed < numTokens) {
        this.pendingPrefill += this.pendingOf(s) - pendingBefore;
        continue; // mid-prefill: nothing to sample yet
      }
      const tok = s.sampler(s.ctx);
      s.output.push(tok);
      this.pendingPrefill += this.pendingOf(s) - pendingBefore;
      this.counters.generationTokens++;
      const index = s.output.length - 1;
      if (this.emitTokens) tokens.push({ id: s.id, token: tok, index });
      if (index === 0) firstTokens.push(s.id);
      if (tok === s.stopToken) this.finishRunning(s, 'stop', b.finished);
      else if (s.output.length >= s.maxTokens) this.finishRunning(s, 'length', b.finished);
      else if (kHere > 0) this.speculate(s, kHere, tokens, b.finished);
      if (kHere > 0) this.countDraft(kHere);
    }
    return { shape, draftShape, prefillTokens, decodeTokens, tokens, firstTokens };
  }

  /**
   * The accepted draft tokens of a speculating sequence whose regular token was just sampled:
   * while each position passes (probability α), one more token from the sampler, its KV computed
   * in the same pass.
   */
  private speculate(s: Seq, k: number, tokens: TokenOutput[], finished: FinishedOutput[]): void {
    const spec = this.spec!;
    const alpha = spec.acceptance(s.id);
    for (let j = 0; j < k; j++) {
      if (!(spec.rng() < alpha)) return;
      this.specStats!.numAcceptedTokens++;
      this.specStats!.acceptedPerPos[j]!++;
      const tok = s.sampler(s.ctx);
      s.output.push(tok);
      s.numComputed++;
      this.counters.generationTokens++;
      if (this.emitTokens) tokens.push({ id: s.id, token: tok, index: s.output.length - 1 });
      if (tok === s.stopToken) return this.finishRunning(s, 'stop', finished);
      if (s.output.length >= s.maxTokens) return this.finishRunning(s, 'length', finished);
    }
  }

  private countDraft(k: number): void {
    this.specStats!.numDrafts++;
    this.specStats!.numDraftTokens += k;
  }

  /** Fraction of the GPU's KV blocks in use (EngineStats.kvUsage, without building the stats). */
  get kvUsage(): number {
    return this.bm.numUsed / this.bm.numBlocks;
  }

  stats(): EngineStats {
    const bm = this.bm;
    const c = this.counters;
    const sp = this.specStats;
    return {
      ...(sp ? { specDecode: { ...sp, acceptedPerPos: [...sp.acceptedPerPos] } } : {}),
      running: this.runningSeqs.length,
      waiting: this.numWaiting + this.numPulling,
      kvUsage: this.kvUsage,
      numGpuBlocks: bm.numBlocks,
      blockSize: this.bs,
      freeBlocks: bm.numFree,
      cachedFreeBlocks: bm.numCachedFree,
      prefixQueries: c.prefixQueries,
      prefixHits: c.prefixHits,
      ...(bm.numHostBlocks > 0 ? { hostHits: c.hostHits, hostBlocks: bm.numHostBlocks, hostCachedBlocks: bm.numHostCached } : {}),
      preemptions: c.preemptions,
      prefillPreemptions: c.prefillPreemptions,
      promptTokens: c.promptTokens,
      generationTokens: c.generationTokens,
      finished: { ...c.finished },
    };
  }

  cachedPrefixTokens(prompt: ArrayLike<number>, keys?: BlockKeys): number {
    if (!this.caching) return 0;
    const bs = this.bs;
    const maxBlocks = Math.floor((prompt.length - 1) / bs);
    let parent = keys === undefined ? this.root : this.keyedRoot(keys.lora, keys.cacheSalt);
    let b = 0;
    for (; b < maxBlocks; b++) {
      parent = hashBlock(parent, prompt, b * bs, bs);
      if (this.bm.lookup(parent) < 0) break;
    }
    return b * bs;
  }

  resetPrefixCache(): void {
    this.bm.resetFreeCache();
  }

  // ---- Extras beyond the EngineModel contract (simulation probes, tests) ----

  /** Prompt tokens (or recompute tokens of preempted requests) still to be prefilled. */
  pendingPrefillTokens(): number {
    return this.pendingPrefill;
  }

  /** Requests currently running (these four methods make an Engine an OracleProbe). */
  running(): number {
    return this.runningSeqs.length;
  }

  /** Requests waiting, including preempted ones. */
  waiting(): number {
    return this.numWaiting;
  }

  /** Free blocks, including evictable cached ones. */
  freeBlocks(): number {
    return this.bm.numFree;
  }

  /**
   * KV events produced outside step() (by resetPrefixCache) and not yet delivered; step() also
   * delivers them with its own.
   */
  takeKvEvents(): KvEvent[] {
    return this.bm.takeEvents();
  }

  /** Every hash currently in the prefix cache (for tests; O(cached blocks)). */
  cachedBlockHashes(): Set<number> {
    return this.bm.cachedHashes();
  }

  /** Blocks held by a live request or for a decode worker's pull (for tests and kv_transfer_params), or undefined. */
  blocksOf(id: string): readonly number[] | undefined {
    return this.live.get(id)?.blocks.toArray() ?? this.held.get(id);
  }

  /** Remote-prefill requests waiting for their KV. */
  pullingRequests(): number {
    return this.numPulling;
  }

  /** Finished remote-decode requests whose blocks are held for a pull. */
  heldRequests(): number {
    return this.held.size;
  }

  // ---- internals ----

  /** The LoRA adapters of this step's scheduled sequences. */
  private batchAdapters(b: StepBatch): Set<string> {
    const loras = new Set<string>();
    for (let k = 0; k < b.count; k++) {
      const s = b.sched[k];
      if (s && s.lora !== undefined) loras.add(s.lora);
    }
    return loras;
  }

  /** Give `s` the batch's next slot, with `n` new tokens. */
  private schedule(b: StepBatch, s: Seq, n: number): void {
    s.slot = b.count;
    b.sched[b.count] = s;
    b.schedNew[b.count] = n;
    b.count++;
    b.budget -= n;
  }

  /** Adapters of the running sequences and of the waiting ones (vllm:lora_requests_info). */
  adapterState(): { running: string[]; waiting: string[] } {
    const running = new Set<string>();
    for (const s of this.runningSeqs) if (s.status === Status.Running && s.lora !== undefined) running.add(s.lora);
    const waiting = new Set<string>();
    for (const s of this.live.values()) if (s.status === Status.Waiting && s.lora !== undefined) waiting.add(s.lora);
    return { running: [...running], waiting: [...waiting] };
  }

  private countRunning(): number {
    let n = 0;
    for (const s of this.runningSeqs) if (s.status === Status.Running) n++;
    return n;
  }

  /** Running request with the largest priority value, latest arrival on ties. */
  private pickVictim(): Seq {
    let v: Seq | undefined;
    for (const s of this.runningSeqs) {
      if (s.status !== Status.Running) continue;
      if (!v || s.priority > v.priority || (s.priority === v.priority && s.arrival > v.arrival)) v = s;
    }
    return v!;
  }

  private preempt(s: Seq, preempted: string[]): void {
    // Still prefilling its prompt: admitted by its first chunk to a cache that could not hold the rest.
    if (s.numComputed < s.promptLen) this.counters.prefillPreemptions++;
    const before = this.pendingOf(s);
    this.bm.freeAll(s.blocks.ids, s.blocks.length);
    s.blocks.release();
    s.numComputed = 0;
    s.numProcessed = 0;
    s.status = Status.Waiting;
    s.slot = -1;
    this.pendingPrefill += this.pendingOf(s) - before;
    this.waitingQueue.push(s);
    this.numWaiting++;
    this.counters.preemptions++;
    preempted.push(s.id);
  }

  /** End a running request (it stays in `running` until the step compacts the list). */
  private finishRunning(s: Seq, reason: FinishReason, finished: FinishedOutput[]): void {
    this.retire(s, reason, finished);
  }

  private retire(s: Seq, reason: FinishReason, finished?: FinishedOutput[]): void {
    this.pendingPrefill -= this.pendingOf(s);
    // A remote-decode request capped by max_tokens keeps its KV for the decode worker (vLLM's
    // NixlConnector holds blocks only for FINISHED_LENGTH_CAPPED; any other end frees them).
    const hold = s.remoteDecode && reason === 'length';
    if (hold) this.held.set(s.id, s.blocks.toArray());
    else this.bm.freeAll(s.blocks.ids, s.blocks.length);
    s.blocks.release();
    s.status = Status.Done;
    this.hashArrays.give(s.hashes);
    s.hashes = EMPTY_HASHES;
    s.numHashes = 0;
    this.live.delete(s.id);
    this.counters.finished[reason]++;
    finished?.push({
      id: s.id,
      reason,
      promptTokens: s.promptLen,
      outputTokens: s.output.length,
      cachedPromptTokens: s.cachedPromptTokens,
      ...(hold ? { kvHeld: true } : {}),
    });
    // Its length stays: the caller may still read how many tokens it generated.
    s.output.release(true);
  }

  /** Tokens this request still has to prefill (0 when it is decoding or done). */
  private pendingOf(s: Seq): number {
    if (s.status === Status.Done || s.remotePrefill) return 0;
    const numTokens = s.promptLen + s.output.length;
    const left = numTokens - s.numComputed;
    return s.output.length > 0 && left === 1 ? 0 : left;
  }

  /**
   * A hash array for the request, holding the prompt's first block hashes as far as they are
   * known without hashing it: those of the part it begins with, computed once for every prompt
   * built on that part.
   */
  private takeKnownHashes(s: Seq, req: EngineRequest): void {
    if (!this.caching) return;
    const known = req.promptPart === undefined ? null : req.promptPart.hashes(s.root, this.bs);
    s.hashes = this.hashArrays.take(Math.max(Math.ceil(s.promptLen / this.bs) + 1, known?.length ?? 0));
    if (known !== null) {
      s.hashes.set(known);
      s.numHashes = known.length;
    }
  }

  /** Content hash of block b of the request's tokens, hashing forward from the last known one. */
  private hashAt(s: Seq, b: number): number {
    if (b < s.numHashes) return s.hashes[b]!;
    if (b >= s.hashes.length) s.hashes = this.hashArrays.grow(s.hashes, s.numHashes, b + 1);
    const hs = s.hashes;
    const bs = this.bs;
    let i = s.numHashes;
    // The prompt's full blocks in one run; blocks that reach into the output one at a time.
    const inPrompt = Math.min(b + 1, Math.floor(s.promptLen / bs));
    if (i < inPrompt) {
      hashBlocksInto(hs, i, inPrompt, i === 0 ? s.root : hs[i - 1]!, s.prompt, i * bs, bs);
      i = inPrompt;
    }
    // The block the prompt ends in, its tokens gathered from both.
    if (i <= b && i * bs < s.promptLen) {
      const start = i * bs;
      const buf = this.scratch;
      for (let t = start; t < start + bs; t++) buf[t - start] = this.tokenAt(s, t);
      hashBlocksInto(hs, i, i + 1, i === 0 ? s.root : hs[i - 1]!, buf, 0, bs);
      i++;
    }
    // Blocks wholly in the output.
    if (i <= b) hashBlocksInto(hs, i, b + 1, i === 0 ? s.root : hs[i - 1]!, s.output.ids, i * bs - s.promptLen, bs);
    s.numHashes = b + 1;
    return hs[b]!;
  }

  /** Hash blocks [from, to) of the request and bring their index slots into the cache. */
  private warmLookups(s: Seq, from: number, to: number): void {
    this.hashAt(s, to - 1);
    this.bm.warmLookups(s.hashes, from, to);
  }

  /**
   * Root of a request's hash chain: the engine's, keyed by its LoRA adapter and then its
   * cache_salt (vLLM mixes both into the block hashes' extra keys).
   */
  private requestRoot(req: EngineRequest): number {
    return this.keyedRoot(req.lora, req.cacheSalt);
  }

  private keyedRoot(lora: string | undefined, cacheSalt: string | undefined): number {
    let root = this.root;
    if (lora !== undefined && lora !== '') root = adapterRoot(root, lora);
    if (cacheSalt !== undefined && cacheSalt !== '') root = saltedRoot(root, cacheSalt);
    return root;
  }

  private tokenAt(s: Seq, i: number): number {
    return i < s.promptLen ? s.prompt[i]! : s.output.ids[i - s.promptLen]!;
  }

  /**
   * Offer every block that is full once the first `upTo` tokens are computed to the prefix cache,
   * emitting BlockStored for the ones that become cache entries.
   */
  private cacheFullBlocks(s: Seq, upTo: number): void {
    const full = Math.floor(upTo / this.bs);
    if (full <= s.numProcessed) return;
    const bm = this.bm;
    const events = bm.recordsEvents;
    this.hashAt(s, full - 1);
    // Read from the array, not through hashAt: a hash returned from a call is a heap number.
    const hs = s.hashes;
    bm.warmForCache(s.blocks.ids, hs, s.numProcessed, full);
    let runHashes: number[] | null = null;
    let runTokens: number[] | null = null;
    let runParent: number | null = null;
    for (let b = s.numProcessed; b < full; b++) {
      const h = hs[b]!;
      const stored = bm.cache(s.blocks.ids[b]!, h);
      if (!events) continue;
      if (stored) {
        if (!runHashes) {
          runHashes = [];
          runTokens = [];
          runParent = b === 0 ? null : hs[b - 1]!;
        }
        runHashes.push(h);
        const start = b * this.bs;
        for (let t = start; t < start + this.bs; t++) runTokens!.push(this.tokenAt(s, t));
      } else if (runHashes) {
        bm.emitStored(runHashes, runParent, runTokens!, s.lora);
        runHashes = null;
      }
    }
    if (runHashes) bm.emitStored(runHashes, runParent, runTokens!, s.lora);
    s.numProcessed = full;
  }
}
