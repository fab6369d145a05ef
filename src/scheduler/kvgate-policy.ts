/**
 * `kvgate`: kvgate's own policy. Filters (healthy, KV fit) → scorers (expected prefix hit, KV
 * headroom, queue depth, running load, estimated TTFT, session) → a picker that trades cache
 * affinity against waiting time with hysteresis (the load guard).
 *
 * The estimate at its centre, per worker:
 *
 *   ttftMs = 1000 · (prefill tokens queued ahead + this request's uncached tokens) / prefill rate
 *            + queueMsPerWaiting · waiting + decodeMsPerRunning · running
 *
 * "Queued ahead" is the gateway's own count of prompt tokens dispatched there and not yet past
 * their first token (WorkerState.inflightPrefillTokens), so it is exact for this gateway's traffic
 * and never stale; waiting/running come from the snapshot plus dispatches since, or from the
 * gateway's in-flight count once the snapshot is stale (say so, never fail closed). The prefill
 * rate is configured per deployment and, by default, learned per worker from observed first
 * tokens.
 *
 * The picker (load guard):
 *  1. near = workers whose ttft ≤ min ttft · (1 + nearRelative) + nearAbsoluteMs;
 *  2. A = the near worker with the best weighted score (prefix weighs most): among near-least-
 *     loaded workers the best cache match still wins, affinity is never discarded (SGLang's fall
 *     back to pure least-load collapses hit rate);
 *  3. B = the worker with the largest expected prefix hit overall;
 *  4. if B holds clearly more of the prompt than A and its ttft is within spillRelative /
 *     spillAbsoluteMs of A's plus spillSavedFraction of the prefill time its extra cached tokens
 *     save, take B ('prefix') — so a long prefix keeps its home through more load than a short
 *     one that is cheap to recompute anywhere; otherwise A ('spill' when B was the better cache
 *     match but too busy — the prefix then gets cached on A as well, Preble's explore step).
 * Ties break at random (ctx.rng). At pick time the prompt's blocks are inserted into the index as
 * predictions, so a burst sharing a prefix co-locates before any worker reports anything, and the
 * Router's synchronous reservation makes each pick visible to the next.
 */
import type { WorkerState } from '../fleet/worker-state.js';
import { healthyFilter } from './filters.js';
import { kvFitFilter } from './kv-fit-filter.js';
import { boolOption, choiceOption, numberOption } from './options.js';
import { PipelinePolicy, clamp01 } from './pipeline.js';
import type { PolicyOptions } from './policy-registry.js';
import { PrefixIndex } from './index/prefix-index.js';
import { PrefixMatcher } from './index/prefix-match.js';
import type { Picker, RouteRequest, RoutingContext, ScoredWorker, Scorer } from './types.js';

/** Every tunable of the kvgate policy, with its default. */
export interface KvgateParams {
  /** Assumed prefill throughput per worker, tokens/s, before anything is learned (default 10,000). */
  prefillTokensPerSec: number;
  /** Learn each worker's effective prefill rate from observed first tokens (default true). */
  learnPrefillRate: boolean;
  /** Weight of a new observation in the learned rate (default 0.2). */
  learnAlpha: number;
  /** Ignore first tokens of requests that had fewer tokens to prefill than this (default 256). */
  learnMinTokens: number;
  /** Added to the ttft estimate per waiting request at the worker, ms (default 2). */
  queueMsPerWaiting: number;
  /** Added to the ttft estimate per running request (decode steps share the batch), ms (default 0.5). */
  decodeMsPerRunning: number;
  /**
   * Near-least-loaded band: relative (default 0.25) and absolute (default 0 ms) slack. The slack
   * is relative so it scales with the workload: an absolute allowance (15 ms was the old default)
   * is larger than a whole short request's TTFT, and let cache affinity pile short chat prompts
   * onto the workers that first saw their prefix while others idled.
   */
  nearRelative: number;
  nearAbsoluteMs: number;
  /**
   * Stay on the best-cached worker while its ttft is within this of the alternative's: relative
   * (default 0.25; a larger share of a busy worker's whole ttft let shared documents pile their
   * decodes onto one worker, costing TPOT) and absolute (default 0 ms, for the same reason as
   * nearAbsoluteMs). The ttft estimate already charges the uncached tokens, so the slack is only
   * the exploit bias; most of it comes from spillSavedFraction, which scales with the prefix.
   */
  spillRelative: number;
  spillAbsoluteMs: number;
  /**
   * Plus this fraction (default 0.75) of the time B's extra cached tokens would take to prefill on
   * A. A long shared prefix is worth keeping home (moving it costs a long recompute and splits
   * its cache); a short one is cheap to recompute anywhere, so load balance wins.
   */
  spillSavedFraction: number;
  /** B must hold at least this much more of the prompt than A to be preferred (default 0.05). */
  minHitGain: number;
  /** Scorer weights used inside the near band. */
  wPrefix: number;
  wTtft: number;
  wHeadroom: number;
  wQueue: number;
  wLoad: number;
  wSession: number;
  /** KV fit when nobody fits now: keep all that could fit when idle, or the least overfull. */
  whenNoneFits: 'all' | 'least-overfull';
  overfullSlackBlocks: number;
  /**
   * Prefix index: bytes bound (default 256 MiB), lifetime of a pick-time prediction not yet
   * confirmed by a first token (default 15 s — a safety net: failed requests withdraw theirs),
   * window of routed blocks since last use (default Infinity: capacity ageing only).
   */
  indexMaxBytes: number;
  predictedTtlMs: number;
  approxTtlMs: number;
  maxWorkers: number;
  /** Session keys remembered for affinity (default 100,000). */
  sessionCapacity: number;
}

export const KVGATE_DEFAULTS: Readonly<KvgateParams> = Object.freeze({
  prefillTokensPerSec: 10_000,
  learnPrefillRate: true,
  learnAlpha: 0.2,
  learnMinTokens: 256,
  queueMsPerWaiting: 2,
  decodeMsPerRunning: 0.5,
  nearRelative: 0.25,
  nearAbsoluteMs: 0,
  spillRelative: 0.25,
  spillAbsoluteMs: 0,
  spillSavedFraction: 0.75,
  minHitGain: 0.05,
  wPrefix: 3,
  wTtft: 1,
  wHeadroom: 0.5,
  wQueue: 0.25,
  wLoad: 0.25,
  wSession: 0.5,
  whenNoneFits: 'all',
  overfullSlackBlocks: 0,
  indexMaxBytes: 256 * 1024 * 1024,
  predictedTtlMs: 15_000,
  approxTtlMs: Infinity,
  maxWorkers: 1024,
  sessionCapacity: 100_000,
});

export function kvgateParams(o?: PolicyOptions): KvgateParams {
  const d = KVGATE_DEFAULTS;
  const n = (k: keyof KvgateParams, min = 0) => numberOption(o, k, d[k] as number, min);
  return {
    prefillTokensPerSec: n('prefillTokensPerSec', 1),
    learnPrefillRate: boolOption(o, 'learnPrefillRate', d.learnPrefillRate),
    learnAlpha: n('learnAlpha'),
    learnMinTokens: n('learnMinTokens'),
    queueMsPerWaiting: n('queueMsPerWaiting'),
    decodeMsPerRunning: n('decodeMsPerRunning'),
    nearRelative: n('nearRelative'),
    nearAbsoluteMs: n('nearAbsoluteMs'),
    spillRelative: n('spillRelative'),
    spillAbsoluteMs: n('spillAbsoluteMs'),
    spillSavedFraction: n('spillSavedFraction'),
    minHitGain: n('minHitGain'),
    wPrefix: n('wPrefix'),
    wTtft: n('wTtft'),
    wHeadroom: n('wHeadroom'),
    wQueue: n('wQueue'),
    wLoad: n('wLoad'),
    wSession: n('wSession'),
    whenNoneFits: choiceOption(o, 'whenNoneFits', ['all', 'least-overfull'] as const, d.whenNoneFits),
    overfullSlackBlocks: n('overfullSlackBlocks'),
    indexMaxBytes: n('indexMaxBytes', 1024),
    predictedTtlMs: n('predictedTtlMs'),
    approxTtlMs: n('approxTtlMs'),
    maxWorkers: n('maxWorkers', 1),
    sessionCapacity: n('sessionCapacity', 1),
  };
}

/** What the policy estimated for one worker, kept on the request for the picker and the hooks. */
export interface KvgateEstimate {
  hit: number;
  cachedTokens: number;
  uncachedTokens: number;
  aheadTokens: number;
  ttftMs: number;
  /** Milliseconds per prefill token at this worker (1000 / its prefill rate). */
  msPerToken: number;
  headroom: number;
  waiting: number;
  running: number;
  session: boolean;
}

const EST_KEY = 'kvgate.estimates';
const TABLE_KEY = 'kvgate.table';

interface EstimateTable {
  ws: readonly WorkerState[];
  est: KvgateEstimate[];
  minTtft: number;
  minWait: number;
  maxWait: number;
  minRun: number;
  maxRun: number;
}

export class KvgatePolicy extends PipelinePolicy {
  readonly params: KvgateParams;
  readonly matcher: PrefixMatcher;
  override readonly prefixIndex: PrefixIndex;
  /** Learned prefill throughput per worker id, tokens/s. */
  readonly prefillRates = new Map<string, number>();
  /** Session key → worker id of its last pick (insertion-ordered, bounded). */
  private readonly sessions = new Map<string, string>();

  /**
   * Read each worker's exact cache and queue through WorkerState.oracle (simulation only) instead
   * of the index and the metrics: the `oracle` policy, kvgate's decision rules with perfect
   * information. It bounds how much better information alone could buy, not what any router
   * could achieve: the rules are heuristics, and on some workloads exact state steers them no
   * better (occasionally worse, e.g. when the exact cache shows a conversation's decoded tokens
   * and the affinity rules consolidate on it) than kvgate's own estimate. `oracle-greedy`
   * (always the lowest estimated TTFT on exact state) is the other reference.
   */
  readonly exact: boolean;

  constructor(options?: PolicyOptions, name = 'kvgate', exact = false) {
    const p = kvgateParams(options);
    const index = new PrefixIndex({
      maxBytes: p.indexMaxBytes,
      maxWorkers: p.maxWorkers,
      predictedTtlMs: p.predictedTtlMs,
      approxTtlMs: p.approxTtlMs,
    });
    const matcher = new PrefixMatcher(index);
    const self: { policy?: KvgatePolicy } = {};
    /**
     * The candidates' estimates and their ranges, computed once per request for all scorers
     * (they are all handed the same candidate array).
     */
    const table = (req: RouteRequest, ws: readonly WorkerState[], ctx: RoutingContext): EstimateTable => {
      const cached = req.memo.get(TABLE_KEY) as EstimateTable | undefined;
      if (cached && cached.ws === ws) return cached;
      const m = self.policy!.estimate(req, ws, ctx);
      const est = ws.map((w) => m.get(w)!);
      const t: EstimateTable = { ws, est, minTtft: Infinity, minWait: Infinity, maxWait: -Infinity, minRun: Infinity, maxRun: -Infinity };
      for (const e of est) {
        if (e.ttftMs < t.minTtft) t.minTtft = e.ttftMs;
        if (e.waiting < t.minWait) t.minWait = e.waiting;
        if (e.waiting > t.maxWait) t.maxWait = e.waiting;
        if (e.running < t.minRun) t.minRun = e.running;
        if (e.running > t.maxRun) t.maxRun = e.running;
      }
      req.memo.set(TABLE_KEY, t);
      return t;
    };
    const part = (name: string, f: (e: KvgateEstimate, t: EstimateTable) => number): Scorer => ({
      name,
      score(req, ws, ctx) {
        const t = table(req, ws, ctx);
        const out = new Array<number>(t.est.length);
        for (let i = 0; i < out.length; i++) out[i] = f(t.est[i]!, t);
        return out;
      },
    });
    const lowIsGood = (v: number, lo: number, hi: number) => (hi > lo ? (hi - v) / (hi - lo) : 1);
    super({
      name,
      filters: [healthyFilter, kvFitFilter(matcher, { whenNoneFits: p.whenNoneFits, overfullSlackBlocks: p.overfullSlackBlocks, exact })],
      scorers: [
        { scorer: part('prefix', (e) => e.hit), weight: p.wPrefix },
        { scorer: part('ttft', (e, t) => (e.ttftMs > 0 ? t.minTtft / e.ttftMs : 1)), weight: p.wTtft },
        { scorer: part('headroom', (e) => e.headroom), weight: p.wHeadroom },
        { scorer: part('queue', (e, t) => lowIsGood(e.waiting, t.minWait, t.maxWait)), weight: p.wQueue },
        { scorer: part('load', (e, t) => lowIsGood(e.running, t.minRun, t.maxRun)), weight: p.wLoad },
        { scorer: part('session', (e) => (e.session ? 1 : 0)), weight: p.wSession },
      ],
      picker: kvgatePicker(p),
      expectedPrefixHit: (req, picked) => (req.memo.get(EST_KEY) as Map<WorkerState, KvgateEstimate>).get(picked.worker)?.hit ?? 0,
      onDispatch: (req, d, ctx) => self.policy!.dispatched(req, d.worker, ctx),
      onFirstToken: (req, w, ctx) => self.policy!.firstTokenAt(req, w, ctx),
      onComplete: (req, w, ok, ctx) => self.policy!.completed(req, w, ok, ctx),
    });
    self.policy = this;
    this.exact = exact;
    if (exact) this.usesOracle = true;
    this.params = p;
    this.matcher = matcher;
    this.prefixIndex = index;
  }

  /** What /admin/workers shows for this policy per worker. */
  describeWorker(w: WorkerState): Record<string, unknown> {
    return { kvgate: { prefillTokensPerSec: Math.round(this.prefillRate(w)), prefillRateLearned: this.prefillRates.has(w.id) } };
  }

  prefillRate(w: WorkerState): number {
    return this.prefillRates.get(w.id) ?? this.params.prefillTokensPerSec;
  }

  /** Per-worker estimates for this request (memoised; extended when new workers are asked for). */
  estimate(req: RouteRequest, ws: readonly WorkerState[], ctx: RoutingContext): Map<WorkerState, KvgateEstimate> {
    let m = req.memo.get(EST_KEY) as Map<WorkerState, KvgateEstimate> | undefined;
    if (!m) {
      m = new Map();
      req.memo.set(EST_KEY, m);
    }
    if (ws.every((w) => m!.has(w))) return m;
    const p = this.params;
    const matches = this.matcher.matches(req, ws, ctx);
    const prompt = req.promptTokens.length;
    const sessionWorker = req.sessionKey !== undefined ? this.sessions.get(req.sessionKey) : undefined;
    for (const w of ws) {
      if (m.has(w)) continue;
      const probe = this.exact ? w.oracle : undefined;
      const cached = Math.min(prompt, probe ? probe.cachedPrefixTokens(req.promptTokens) : (matches.get(w)?.tokens ?? 0));
      const uncached = prompt - cached;
      const stale = !probe && w.isStale(ctx.now, ctx.staleAfterMs);
      if (stale) req.memo.set('usedStaleMetrics', true);
      const q = probe ? { running: probe.running(), waiting: probe.waiting() } : w.estimatedQueue(ctx.now, ctx.staleAfterMs);
      // The engine's pending prefill counts every gateway's traffic but not the chunk of the step
      // in flight (taken off at the step's start, its first token due only at the step's end);
      // the gateway's own in-flight prefill still counts that step. Take the larger.
      const ahead = Math.max(0, probe ? Math.max(probe.pendingPrefillTokens(), w.inflightPrefillTokens) : w.inflightPrefillTokens);
      const msPerToken = 1000 / this.prefillRate(w);
      const ttftMs =
        msPerToken * (ahead + uncached) + p.queueMsPerWaiting * q.waiting + p.decodeMsPerRunning * q.running;
      const free = probe ? probe.freeBlocks() : w.estimatedFreeBlocks(ctx.now, ctx.staleAfterMs);
      const need = Math.ceil(uncached / w.blockSize);
      m.set(w, {
        hit: prompt > 0 ? cached / prompt : 0,
        cachedTokens: cached,
        uncachedTokens: uncached,
        aheadTokens: ahead,
        ttftMs,
        msPerToken,
        headroom: clamp01((free - need) / Math.max(1, w.numGpuBlocks)),
        waiting: q.waiting,
        running: q.running,
        session: sessionWorker === w.id,
      });
    }
    return m;
  }

  private dispatched(req: RouteRequest, w: WorkerState, ctx: RoutingContext): void {
    this.matcher.predict(req, w, ctx.now);
    if (req.sessionKey !== undefined) {
      this.sessions.delete(req.sessionKey);
      this.sessions.set(req.sessionKey, w.id);
      if (this.sessions.size > this.params.sessionCapacity) {
        this.sessions.delete(this.sessions.keys().next().value!);
      }
    }
    req.memo.set('kvgate.dispatchedAt', ctx.now);
  }

  private firstTokenAt(req: RouteRequest, w: WorkerState, ctx: RoutingContext): void {
    this.matcher.confirm(req, w, ctx.now);
    req.memo.set('kvgate.confirmed', true);
    if (!this.params.learnPrefillRate) return;
    const est = (req.memo.get(EST_KEY) as Map<WorkerState, KvgateEstimate> | undefined)?.get(w);
    const at = req.memo.get('kvgate.dispatchedAt') as number | undefined;
    if (!est || at === undefined) return;
    const tokens = est.aheadTokens + est.uncachedTokens;
    const elapsedMs = ctx.now - at;
    if (tokens < this.params.learnMinTokens || elapsedMs <= 0) return;
    const observed = (1000 * tokens) / elapsedMs;
    const base = this.params.prefillTokensPerSec;
    const clamped = Math.min(base * 10, Math.max(base / 10, observed));
    const prev = this.prefillRate(w);
    this.prefillRates.set(w.id, prev + this.params.learnAlpha * (clamped - prev));
  }

  private completed(req: RouteRequest, w: WorkerState, ok: boolean, ctx: RoutingContext): void {
    if (req.memo.get('kvgate.confirmed') === true) return;
    // A non-streamed request may complete without a first-token callback: its prefill is done
    // too. One that failed before its first token never filled the cache: withdraw its prediction.
    if (ok) this.matcher.confirm(req, w, ctx.now);
    else this.matcher.retract(req, w);
  }
}

export function kvgatePicker(p: KvgateParams): Picker {
  return {
    name: 'kvgate',
    pick(req, candidates, ctx) {
      if (candidates.length === 0) return null;
      const est = req.memo.get(EST_KEY) as Map<WorkerState, KvgateEstimate>;
      const e = (c: ScoredWorker) => est.get(c.worker)!;
      let tmin = Infinity;
      for (const c of candidates) tmin = Math.min(tmin, e(c).ttftMs);
      const band = tmin * (1 + p.nearRelative) + p.nearAbsoluteMs;
      // A: best weighted score among the near-least-loaded (reservoir-sampled ties).
      let a: ScoredWorker | null = null;
      let ties = 0;
      for (const c of candidates) {
        if (e(c).ttftMs > band) continue;
        if (a === null || c.score > a.score + 1e-9) {
          a = c;
          ties = 1;
        } else if (Math.abs(c.score - a.score) <= 1e-9 && ctx.rng() * ++ties < 1) a = c;
      }
      // B: best cache match overall; among equals the lower ttft, then random.
      let b: ScoredWorker | null = null;
      ties = 0;
      for (const c of candidates) {
        const ec = e(c);
        if (b === null || ec.hit > e(b).hit + 1e-9 || (Math.abs(ec.hit - e(b).hit) <= 1e-9 && ec.ttftMs < e(b).ttftMs - 1e-9)) {
          b = c;
          ties = 1;
        } else if (Math.abs(ec.hit - e(b).hit) <= 1e-9 && Math.abs(ec.ttftMs - e(b).ttftMs) <= 1e-9 && ctx.rng() * ++ties < 1) b = c;
      }
      const ea = e(a!);
      const eb = e(b!);
      let picked = a!;
      let reason: string;
      if (eb.hit > ea.hit + p.minHitGain) {
        const savedMs = p.spillSavedFraction * ea.msPerToken * (eb.cachedTokens - ea.cachedTokens);
        if (eb.ttftMs <= ea.ttftMs * (1 + p.spillRelative) + p.spillAbsoluteMs + savedMs) {
          picked = b!;
          reason = 'prefix';
        } else reason = 'spill';
      } else if (ea.hit > 0) reason = 'prefix';
      else if (ea.session && p.wSession > 0) reason = 'session';
      else reason = 'load';
      if (req.memo.get('kvOverfull') === true) reason += '+overfull';
      req.memo.set('reason', reason);
      return picked;
    },
  };
}
