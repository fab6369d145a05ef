/**
 * Policy `dynamo`: a baseline modelled on NVIDIA Dynamo's KV router with its defaults, built from
 * the same pipeline as kvgate's policies so a side-by-side benchmark compares policies, not
 * plumbing. `dynamo-approx` (dynamo-approx.ts) is the same cost with Dynamo's approximate index
 * (`use_kv_events=false`) instead of KV events.
 *
 *   healthy → dynamo picker
 *
 *   cost(w) = prefillLoadScale · max((active prefill tokens + prompt tokens) / block size
 *                                    − overlapScoreCredit · decay(w) · GPU overlap blocks
 *                                    − hostCacheHitWeight · host blocks − diskCacheHitWeight · disk blocks, 0)
 *             + active decode blocks + this prompt's blocks not already active at w
 *             + decodeActiveRequestWeight · active requests at w
 *
 *   decay(w) = 1 / (1 + overlapScoreCreditDecay · ((active prefill tokens(w) − the least of any
 *              candidate) / block size) / ceil(prompt tokens / block size))
 *
 * The lowest cost wins (temperature 0), ties at random; reason 'prefix' if the winner holds part of
 * the prompt, else 'load'. Everything is counted router-side, per worker:
 * - active prefill tokens: each request dispatched there and not yet past its first token counts
 *   its prompt tokens minus the tokens its overlap covered (Dynamo's `new_tokens`), released at
 *   the first token or the end;
 * - active decode blocks: the distinct full prompt blocks of the requests active there, each
 *   counted once however many requests share it (reference-counted, `router_assume_kv_reuse`),
 *   plus the incoming request's full blocks beyond the longest prefix already active
 *   (`potential_decode_blocks`). With assumeKvReuse false every request's blocks count apart, as
 *   Dynamo's random per-request hashes make them;
 * - active requests: the requests dispatched there and not yet ended;
 * - overlap blocks: the leading full prompt blocks the worker holds, from an index fed by the
 *   workers' KV events (`use_kv_events=true`, usesKvEvents), each weighted by the tier it is on:
 *   1 on the GPU (decayed with the worker's excess prefill backlog), hostCacheHitWeight in host
 *   memory, diskCacheHitWeight on disk, neither decayed (`cache_hit_estimates_from_tiered_matches`).
 *   Nothing is predicted at pick time (`router_predicted_ttl_secs` is unset by default).
 *
 * Defaults and rules as published in ai-dynamo/dynamo:
 * - `lib/kv-router/src/scheduling/config.rs` (KvRouterConfig::default, default_* functions):
 *   overlap_score_credit 1.0 (in [0, 1]), overlap_score_credit_decay 0.0,
 *   prefill_load_scale 1.0, decode_active_request_weight 0.0, router_temperature 0.0,
 *   use_kv_events true, router_track_active_blocks true, router_track_output_blocks false,
 *   router_assume_kv_reuse true, router_track_prefill_tokens true, router_predicted_ttl_secs None,
 *   router_ttl_secs 120 (approximate mode only), host_cache_hit_weight 0.75,
 *   disk_cache_hit_weight 0.25 (media mapped by `lib/kv-router/src/protocols.rs`
 *   StorageTier::from_kv_medium; src/kv/tiers.ts), router_queue_threshold 16.0,
 *   router_queue_policy fcfs.
 * - `lib/kv-router/src/scheduling/selector/default.rs` @ 07a6c9ce3bb0 (worker_logit,
 *   minimum_cost_index): the cost and the decay above (GPU credit only; host, disk and shared
 *   credits do not decay), the active-request term; random choice among equal lowest costs.
 * - `lib/kv-router/src/scheduling/selector/mod.rs` (worker load input): raw prefill blocks =
 *   (active prefill tokens + uncached + cached prompt tokens) / block size; decode cost =
 *   potential decode blocks.
 * - `lib/kv-router/src/sequences/single.rs` (ActiveSequences): each worker's active prompt blocks
 *   reference-counted by hash, a request's prefill tokens tracked until `mark_prefill_completed`
 *   (first token) or `free` (end); output blocks are not tracked by default.
 * - `lib/kv-router/src/sequences/multi_worker.rs` (`potential_blocks_and_tokens`): potential
 *   blocks = active blocks + query blocks − the depth of the longest active prefix; added prefill
 *   tokens = ISL − overlap · block size.
 * Not modelled: the router queue (`router_queue_threshold` 16 with `router_queue_policy` fcfs or
 * wspt, `lib/kv-router/src/scheduling/queue.rs`): a request is held only while every worker's
 * active prefill tokens exceed 16 × its max_num_batched_tokens (131,072 at vLLM's 8,192; workers
 * that report none count as 10,000,000, DEFAULT_MAX_BATCHED_TOKENS), which needs a router-side
 * hold the pipeline has no seam for; a worker that far behind is seconds past any TTFT target, so
 * the queue only acts beyond capacity. Also not modelled: softmax sampling at temperature > 0,
 * the shared (fleet-wide) cache tier, session affinity headers.
 */
import { z } from 'zod';
import type { WorkerState } from '../../fleet/worker-state.js';
import { stateKey } from '../../util/state.js';
import { healthyFilter } from '../filters/healthy.js';
import { PrefixIndex } from '../index/prefix-index.js';
import { PrefixMatcher, type PrefixMatch } from '../index/prefix-match.js';
import { tierCredit } from '../../kv/tiers.js';
import { argminRandom } from '../pickers/argmin-random.js';
import { PipelinePolicy } from '../pipeline.js';
import type { Picker, PolicyDefinition, RouteRequest } from '../types.js';
import { booleanKnob, indexKnobs, numberKnob, retuneInPlace } from './knobs.js';
import { OrderedMap53 } from '../../util/ordered-map53.js';

/** The cost's knobs, shared with dynamo-approx; Dynamo's names in parentheses. */
export const dynamoCostKnobs = {
  prefillLoadScale: numberKnob(1, 'weight of the prompt-side prefill blocks against the decode blocks (prefill_load_scale)'),
  overlapScoreCredit: numberKnob(1, 'credit of each cached GPU prompt block against the prefill blocks (overlap_score_credit)', { max: 1 }),
  overlapScoreCreditDecay: numberKnob(
    0,
    "how fast the GPU overlap credit fades with the worker's prefill backlog above the least loaded, per request-size of backlog (overlap_score_credit_decay; 0: never)",
  ),
  decodeActiveRequestWeight: numberKnob(0, 'blocks charged per request active at the worker (decode_active_request_weight)'),
  hostCacheHitWeight: numberKnob(0.75, 'credit of a cached block in host memory, a GPU block being 1 (host_cache_hit_weight)', { max: 1 }),
  diskCacheHitWeight: numberKnob(0.25, 'credit of a cached block on disk, a GPU block being 1 (disk_cache_hit_weight)', { max: 1 }),
  assumeKvReuse: booleanKnob(
    true,
    'count a prompt block shared by several active requests of a worker once (router_assume_kv_reuse)',
  ),
};

export const dynamoOptions = z.strictObject({
  ...dynamoCostKnobs,
  indexMaxBytes: indexKnobs.indexMaxBytes,
  maxWorkers: indexKnobs.maxWorkers,
});

export type DynamoOptions = z.output<typeof dynamoOptions>;
export type DynamoCostOptions = Pick<DynamoOptions, keyof typeof dynamoCostKnobs>;

/** One worker's active sequences as Dynamo's router counts them. */
interface ActiveLoad {
  /** Reference count of each active full prompt block (kvgate hash), when blocks are shared. */
  readonly blocks: OrderedMap53;
  /** Active blocks counted per request (assumeKvReuse false). */
  unshared: number;
  /** Prompt tokens still to prefill of the requests not yet past their first token. */
  prefillTokens: number;
  /** Requests dispatched there and not yet ended. */
  requests: number;
}

/** What a dispatched request added to its worker's load, to be taken back. */
interface Charged {
  worker: string;
  /** Its full prompt blocks, when counted as shared; else null and `blockCount` apart. */
  hashes: number[] | null;
  blockCount: number;
  prefillTokens: number;
  prefillDone: boolean;
}

const DYNAMO_CHARGED = stateKey<Charged>('dynamo.charged');

/**
 * Dynamo's overlap credit decay (selector/default.rs, worker_logit): 1 / (1 + decay · excess
 * blocks / request blocks), where the excess is the worker's active prefill tokens above the
 * least loaded candidate's, in blocks, and the request's size is its prompt in blocks, rounded up
 * (at least 1). 1 when decay is 0.
 */
function creditDecay(decay: number, excessPrefillTokens: number, promptTokens: number, blockSize: number): number {
  if (decay <= 0) return 1;
  const requestBlocks = Math.max(1, Math.ceil(promptTokens / blockSize));
  return 1 / (1 + (decay * (Math.max(0, excessPrefillTokens) / blockSize)) / requestBlocks);
}

/**
 * Dynamo's cost over a matcher whose index says what each worker holds: the picker and the
 * router-side active-sequence accounting. `name` is the policy's name.
 */
export function dynamoPipeline(
  name: string,
  o: DynamoCostOptions,
  matcher: PrefixMatcher,
  extra: {
    usesKvEvents?: boolean;
    recordRouted?: boolean;
    /** Options that shaped the index (a reload cannot change them in place); the cost knobs can. */
    fixed: readonly string[];
  },
): PipelinePolicy {
  const loads = new Map<string, ActiveLoad>();
  const loadOf = (id: string): ActiveLoad => {
    let l = loads.get(id);
    if (!l) loads.set(id, (l = { blocks: new OrderedMap53(), unshared: 0, prefillTokens: 0, requests: 0 }));
    return l;
  };
  /**
   * Dynamo's logit of w. `minPrefillTokens`: the least active prefill tokens of any candidate
   * (the decay's floor).
   */
  const cost = (req: RouteRequest, w: WorkerState, x: PrefixMatch, minPrefillTokens: number): number => {
    const bs = matcher.blockSizeOf(w);
    const load = loads.get(w.id);
    const hashes = matcher.hashesFor(req, w);
    const n = hashes.length;
    let active = 0;
    let newBlocks = n;
    let prefillTokens = 0;
    let requests = 0;
    if (load) {
      active = load.blocks.size + load.unshared;
      prefillTokens = load.prefillTokens;
      requests = load.requests;
      if (o.assumeKvReuse) {
        // Active blocks are whole prompt prefixes (chained hashes): the new ones start where the
        // longest active prefix ends.
        let d = 0;
        while (d < n && load.blocks.has(hashes.at(d)!)) d++;
        newBlocks = n - d;
      }
    }
    const promptTokens = req.promptTokens.length;
    const decay = creditDecay(o.overlapScoreCreditDecay, prefillTokens - minPrefillTokens, promptTokens, bs);
    const [gpu, host, disk] = x.tiers;
    const credit = o.overlapScoreCredit * decay * gpu + o.hostCacheHitWeight * host + o.diskCacheHitWeight * disk;
    const rawPrefill = (prefillTokens + promptTokens) / bs;
    return o.prefillLoadScale * Math.max(rawPrefill - credit, 0) + active + newBlocks + o.decodeActiveRequestWeight * requests;
  };
  /** Dynamo's effective overlap: matched blocks weighted by their tier. */
  const overlapOf = (x: PrefixMatch): number => tierCredit(x.tiers, { host: o.hostCacheHitWeight, disk: o.diskCacheHitWeight });
  const picker: Picker = {
    name: 'dynamo',
    pick(req, candidates, ctx) {
      const m = matcher.matches(req, candidates.map((c) => c.worker), ctx);
      // The decay's floor: the least active prefill tokens of any candidate.
      let minPrefill = 0;
      if (o.overlapScoreCreditDecay > 0) minPrefill = Math.min(...candidates.map((c) => loads.get(c.worker.id)?.prefillTokens ?? 0));
      const best = argminRandom(candidates, (c) => cost(req, c.worker, m.get(c.worker)!, minPrefill), ctx.rng);
      if (!best) return null;
      const x = m.get(best.worker)!;
      return {
        worker: best,
        reason: x.blocks > 0 ? 'prefix' : 'load',
        expectedPrefixHit: req.promptTokens.length > 0 ? x.tokens / req.promptTokens.length : 0,
      };
    },
  };
  const release = (c: Charged, prefillOnly: boolean) => {
    const load = loadOf(c.worker);
    if (!c.prefillDone) {
      load.prefillTokens -= c.prefillTokens;
      c.prefillDone = true;
    }
    if (prefillOnly) return;
    load.requests--;
    if (c.hashes) {
      for (const h of c.hashes) {
        const r = load.blocks.get(h)! - 1;
        if (r > 0) load.blocks.set(h, r);
        else load.blocks.delete(h);
      }
    } else load.unshared -= c.blockCount;
  };
  return new PipelinePolicy({
    name,
    filters: [healthyFilter],
    scorers: [],
    picker,
    prefixIndex: matcher.index,
    prepare: (req, ws) => matcher.prehash(req, ws),
    ...(extra.usesKvEvents ? { usesKvEvents: true } : {}),
    // The cost knobs are read per decision (a request charged before keeps how it was charged).
    retune: (next) => retuneInPlace(o as unknown as Record<string, unknown>, next, extra.fixed),
    onDispatch(req, d, ctx) {
      const w = d.worker;
      const overlap = overlapOf(matcher.matches(req, [w], ctx).get(w)!);
      const bs = matcher.blockSizeOf(w);
      const hashes = matcher.hashesFor(req, w);
      const load = loadOf(w.id);
      const c: Charged = {
        worker: w.id,
        hashes: null,
        blockCount: hashes.length,
        prefillTokens: Math.max(0, req.promptTokens.length - Math.round(overlap * bs)),
        prefillDone: false,
      };
      if (o.assumeKvReuse) {
        c.hashes = hashes.all().slice();
        for (const h of c.hashes) load.blocks.set(h, (load.blocks.get(h) ?? 0) + 1);
      } else load.unshared += c.blockCount;
      load.prefillTokens += c.prefillTokens;
      load.requests++;
      req.state.set(DYNAMO_CHARGED, c);
      if (extra.recordRouted) matcher.record(req, w, ctx.now);
    },
    onFirstToken(req) {
      const c = req.state.get(DYNAMO_CHARGED);
      if (c) release(c, true);
    },
    onComplete(req) {
      const c = req.state.get(DYNAMO_CHARGED);
      if (!c) return;
      req.state.delete(DYNAMO_CHARGED);
      release(c, false);
    },
  });
}

function createDynamoPolicy(o: DynamoOptions): PipelinePolicy {
  const index = new PrefixIndex({ maxBytes: o.indexMaxBytes, maxWorkers: o.maxWorkers, predictedTtlMs: 0 });
  return dynamoPipeline('dynamo', o, new PrefixMatcher(index), { usesKvEvents: true, fixed: ['indexMaxBytes', 'maxWorkers'] });
}

export const dynamoPolicy: PolicyDefinition<typeof dynamoOptions> = {
  name: 'dynamo',
  description:
    "NVIDIA Dynamo KV router, defaults: lowest prefill_load_scale·(prefill blocks − KV-event overlap, the credit decayed with the prefill backlog) + active decode blocks (shared blocks once) + the prompt's new blocks + decode_active_request_weight·active requests (decay and weight 0 by default).",
  options: dynamoOptions,
  create: createDynamoPolicy,
};
