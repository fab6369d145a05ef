/**
 * Which candidates the kvgate estimate prices (knob `leastLoadedCandidates`, k): the workers the
 * prefix index says hold part of the prompt, the session's last worker, and among the rest the k
 * with the least estimated TTFT (with the delay its prefill puts on the requests arriving behind
 * it), the k least with KV room now (the kv-fit filter's KV_ROOM) and the k best rated by the
 * scorers that rate a worker holding none of the prompt (ttft, headroom, queue, load), and with e2eTail the k whose batches hold the least context (where a long answer loses
 * least of its E2E). With k = 0, or a pool of at most 4k workers, every candidate is priced.
 *
 * Why this loses little: a worker holding none of the prompt differs from another only by its
 * load. Its ttft estimate (the prefill queued there and the whole prompt at its prefill rate, plus
 * its waiting and running requests) is a lower bound of its cost, every other term being ≥ 0, so
 * the least of them anchors the near band, and the least TTFT the ttft scorer divides by is always
 * priced. The near band's pick is the best weighted score in it, which among such workers is the
 * best rated by the cheap ratings above. The holders are all priced, so the picker's best cache
 * match (its B) is the full decision's. The queue and load scorers rate a candidate against every
 * candidate's range, not the priced ones' (KVGATE_FLEET_RANGES), so a priced worker's score is what
 * full scoring gives it. The decision differs from the full one where the cheapest worker by whole
 * cost is none of these (its batch's decode and stall terms outweigh its queue; or, the requests
 * arriving behind its prefill priced, the near band's best rated is not among the k best rated
 * overall), and in ties, drawn from a smaller set (test/scheduler/policies/kvgate/prune.test.ts
 * measures both at 64 workers).
 *
 * Peers prune the same way, more coarsely: SGLang's router (sgl-router
 * src/policies/cache_aware.rs) looks at two workers, the longest prefix match and, when load is
 * imbalanced, the shortest queue; the Gateway API Inference Extension's scheduler that llm-d
 * builds on (pkg/epp/scheduling filter.go, leastQueuingFilterFunc) keeps the pods whose queue lies
 * in the lowest (max − min) / pods of the range before its prefix scorer runs. At k = 8, on mixed,
 * shared-prefix and multi-turn at 64 workers (600 decisions each, each made both ways on the same
 * state), the decisions that differ from full scoring beyond a draw among equal workers are 14 of
 * 600 on mixed and at most 3 on the others (prune.test.ts). The default is 0 (price every
 * worker): at 64 workers pruning saved no decision time and one capacity search (mixed, one seed) found 4% less
 * capacity with it (docs/simulation.md).
 *
 * What remains per candidate is a pass over counters (queue, in-flight prefill, free blocks, the
 * match the kv-fit filter already made), no estimate. Ties among the rest are broken by a start
 * that moves one worker per decision, so an idle fleet's k are not always its first k.
 */
import type { WorkerState } from '../../../fleet/worker-state.js';
import { tierCredit, type TierWeights } from '../../../kv/tiers.js';
import { stateKey } from '../../../util/state.js';
import { clamp01 } from '../../pipeline.js';
import { behindDelayMs } from './stall.js';
import type { PrefixMatcher } from '../../index/prefix-match.js';
import { KV_ROOM } from '../../state-keys.js';
import type { RouteRequest, RoutingContext } from '../../types.js';

/** Waiting and running ranges over every candidate of a pruned decision (the scorers' normalisation). */
interface FleetRanges {
  minWait: number;
  maxWait: number;
  minRun: number;
  maxRun: number;
}
export const KVGATE_FLEET_RANGES = stateKey<FleetRanges>('kvgate.fleet-ranges');

interface KvgatePruneOptions {
  /** Non-holders kept by least TTFT (and as many with KV room); 0 keeps every candidate. */
  leastLoaded: number;
  matcher: PrefixMatcher;
  queueMsPerWaiting: number;
  decodeMsPerRunning: number;
  /** Weights of the ratings a worker holding none of the prompt gets (the policy's). */
  wTtft: number;
  wHeadroom: number;
  wQueue: number;
  wLoad: number;
  tierWeights: TierWeights;
  prefillRate(w: WorkerState): number;
  sessionWorker(sessionKey: string): string | undefined;
  /** The context tokens of w's batch as the estimate counts them (given with e2eTail: k least are kept too). */
  contextAt?(w: WorkerState, ctx: RoutingContext): number;
}

/**
 * The k smallest keys seen, with their indexes, ascending (insertion into a short sorted array:
 * k is a handful). A key equal to the worst kept does not displace it: the earlier one wins.
 */
class Smallest {
  readonly keys: number[] = [];
  readonly at: number[] = [];
  constructor(private readonly k: number) {}

  offer(key: number, i: number): void {
    const { keys, at, k } = this;
    if (keys.length === k && key >= keys[k - 1]!) return;
    let j = keys.length === k ? k - 1 : keys.length;
    while (j > 0 && keys[j - 1]! > key) {
      keys[j] = keys[j - 1]!;
      at[j] = at[j - 1]!;
      j--;
    }
    keys[j] = key;
    at[j] = i;
  }
}

/**
 * A pool of at most SMALL_POOL · k candidates is priced whole: the three sets of k cover most of
 * it, and the pass would cost more than it saves.
 */
const SMALL_POOL = 4;

const lowIsGood = (v: number, lo: number, hi: number): number => (hi > lo ? (hi - v) / (hi - lo) : 1);

export class KvgatePruner {
  /** Where the next decision's scan starts: moves one worker per decision (ties rotate). */
  private cursor = 0;
  // Per-candidate scratch of one decision, reused.
  private ttft = new Float64Array(64);
  private waiting = new Float64Array(64);
  private running = new Float64Array(64);
  private bound = new Float64Array(64);

  constructor(private readonly o: () => KvgatePruneOptions) {}

  /** The candidates to price, in their original order (`ws` itself when all are kept). */
  prune(req: RouteRequest, ws: readonly WorkerState[], ctx: RoutingContext): readonly WorkerState[] {
    const o = this.o();
    const k = Math.floor(o.leastLoaded);
    const n = ws.length;
    req.state.delete(KVGATE_FLEET_RANGES);
    if (k <= 0 || n <= SMALL_POOL * k) return ws;
    if (this.ttft.length < n) {
      this.ttft = new Float64Array(2 * n);
      this.waiting = new Float64Array(2 * n);
      this.running = new Float64Array(2 * n);
      this.bound = new Float64Array(2 * n);
    }
    const { ttft, waiting, running, bound } = this;
    const matches = o.matcher.matches(req, ws, ctx);
    const room = req.state.get(KV_ROOM);
    const session = req.sessionKey !== undefined ? o.sessionWorker(req.sessionKey) : undefined;
    const prompt = req.promptTokens.length;
    const keep = new Uint8Array(n);
    const r: FleetRanges = { minWait: Infinity, maxWait: -Infinity, minRun: Infinity, maxRun: -Infinity };
    let minTtft = Infinity;
    // Pass 1: each candidate's queue and ttft estimate (estimate.ts's, term for term), the ranges.
    for (let i = 0; i < n; i++) {
      const w = ws[i]!;
      const q = w.currentQueue(ctx.now, ctx.staleAfterMs);
      waiting[i] = q.waiting;
      running[i] = q.running;
      if (q.waiting < r.minWait) r.minWait = q.waiting;
      if (q.waiting > r.maxWait) r.maxWait = q.waiting;
      if (q.running < r.minRun) r.minRun = q.running;
      if (q.running > r.maxRun) r.maxRun = q.running;
      const x = matches.get(w);
      let cached = 0;
      if (x !== undefined && x.tokens > 0) {
        keep[i] = 1;
        cached = Math.min(prompt, Math.round((x.tokens * tierCredit(x.tiers, o.tierWeights)) / x.blocks));
      } else if (session !== undefined && w.id === session) keep[i] = 1;
      const msPerToken = 1000 / o.prefillRate(w);
      const ahead = Math.max(0, w.inflightPrefillTokens);
      const t = msPerToken * (ahead + prompt - cached) + o.queueMsPerWaiting * q.waiting + o.decodeMsPerRunning * q.running;
      ttft[i] = t;
      // The cost's lower bound adds what the prefill puts before the requests arriving behind it.
      bound[i] = t + behindDelayMs(w.arrivals.perMs(ctx.now), msPerToken * ahead, msPerToken * (prompt - cached));
      if (t < minTtft) minTtft = t;
    }
    // Pass 2, over the others from a moving start: the k least ttft with the wait the prefill puts
    // before the arrivals behind it (the cheapest, the near band's anchor), the k least with KV room, and the k best by the ratings the scorers give a worker
    // holding none of the prompt (the near band's likely pick).
    const least = new Smallest(k);
    const leastWithRoom = room !== undefined ? new Smallest(k) : null;
    const best = new Smallest(k);
    const leastContext = o.contextAt !== undefined ? new Smallest(k) : null;
    const start = this.cursor++ % n;
    if (this.cursor >= n) this.cursor = 0;
    for (let j = 0; j < n; j++) {
      const i = start + j < n ? start + j : start + j - n;
      if (keep[i] === 1) continue;
      const w = ws[i]!;
      const t = ttft[i]!;
      least.offer(bound[i]!, i);
      if (leastWithRoom !== null && room!.has(w)) leastWithRoom.offer(bound[i]!, i);
      const free = w.estimatedFreeBlocks(ctx.now, ctx.staleAfterMs);
      const headroom = clamp01((free - Math.ceil(prompt / w.blockSize)) / Math.max(1, w.numGpuBlocks));
      const score =
        o.wTtft * (t > 0 ? minTtft / t : 1) +
        o.wHeadroom * headroom +
        o.wQueue * lowIsGood(waiting[i]!, r.minWait, r.maxWait) +
        o.wLoad * lowIsGood(running[i]!, r.minRun, r.maxRun);
      best.offer(-score, i);
      if (leastContext !== null) leastContext.offer(o.contextAt!(w, ctx), i);
    }
    for (const i of least.at) keep[i] = 1;
    for (const i of best.at) keep[i] = 1;
    if (leastWithRoom !== null) for (const i of leastWithRoom.at) keep[i] = 1;
    if (leastContext !== null) for (const i of leastContext.at) keep[i] = 1;
    const out: WorkerState[] = [];
    for (let i = 0; i < n; i++) if (keep[i] === 1) out.push(ws[i]!);
    if (out.length === n) return ws;
    req.state.set(KVGATE_FLEET_RANGES, r);
    return out;
  }
}
