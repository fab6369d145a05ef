/**
 * Policy `aibrix`: a baseline modelled on AIBrix's gateway routing algorithm `prefix-cache`
 * (its local-indexer path, the default: no remote tokenizer, no KV-event sync), built from the
 * same pipeline as kvgate's policies so a side-by-side benchmark compares policies, not plumbing.
 *
 *   healthy → aibrix-prefix-cache picker
 *
 * Load is the gateway's own count of requests running at each worker (AIBrix's
 * `realtime_num_requests_running`, kept by the gateway per pod: here the in-flight count).
 *
 * 1. Imbalance: if max − min running > imbalanceAbsCount, only the workers with the fewest running
 *    are matched against below.
 * 2. The prompt's UTF-8 bytes (AIBrix's default "character" tokenizer) are cut into blocks of
 *    blockSizeBytes and chain-hashed; each worker's match is the percentage of the prompt's blocks
 *    it holds as a leading run, ⌊(i + 1) · 100 / blocks⌋, from a table of blockNumber blocks shared
 *    by all workers and learned only from this policy's own picks (index/block-lru-table.ts).
 * 3. If any worker matched: the matched are ordered by match descending, then running ascending,
 *    then at random, and the first whose running count is ≤ mean + standardDeviationFactor · σ
 *    wins ('prefix'); mean and σ (sample, n − 1) are over every candidate's running count.
 * 4. Otherwise, or if no matched worker is within that bound ('prefix-skipped'), the least running
 *    worker wins, at random among ties ('least-request').
 *
 * Every block of the prompt is then stamped for the chosen worker. Blocks not stamped for
 * evictionDurationMs are dropped every evictionIntervalMs. The expected hit reported is the
 * chosen worker's match percentage.
 *
 * Source: vllm-project/aibrix at commit e3e10f9e4aebe9aac5e7d992fb87d2648e01628b
 * (pkg/plugins/gateway/algorithms/prefix_cache.go last changed in ab083c05bf9b):
 * - `pkg/plugins/gateway/algorithms/prefix_cache.go`: routeOriginal, getTargetPodListOnLoadImbalance,
 *   getTargetPodFromMatchedPods (shuffle, stable sort, mean + factor · σ), the defaults
 *   AIBRIX_PREFIX_CACHE_POD_RUNNING_REQUEST_IMBALANCE_ABS_COUNT = 8 and
 *   AIBRIX_PREFIX_CACHE_STANDARD_DEVIATION_FACTOR = 1, tokenizer type "character".
 * - `pkg/plugins/gateway/algorithms/least_request.go`: selectTargetPodWithLeastRequestCount (random
 *   among the least), getRequestCounts; `util.go`: mean, standardDeviation (n − 1).
 * - `pkg/utils/prefixcacheindexer/hash.go`: block size 4, block number 200,000, eviction duration
 *   20 min checked every 1 s; seqSearchPrefix, AddPrefix, getPrefixHashes (full blocks only).
 * - `pkg/utils/tokenizer/local_characters.go`: the "character" tokenizer is the text's bytes.
 */
import { z } from 'zod';
import { PromptBlocks } from '../../kv/prompt-blocks.js';
import { seedFromString } from '../../util/rng.js';
import { stateKey } from '../../util/state.js';
import { healthyFilter } from '../filters/healthy.js';
import { BlockLruTable } from '../index/block-lru-table.js';
import { PipelinePolicy } from '../pipeline.js';
import type { Picker, PolicyDefinition, RouteRequest, RoutingContext, ScoredWorker } from '../types.js';
import { numberKnob, retuneInPlace } from './knobs.js';

/** AIBrix's environment variables in parentheses. */
export const aibrixOptions = z.strictObject({
  imbalanceAbsCount: numberKnob(
    8,
    'max − min running above this: match only among the least running (AIBRIX_PREFIX_CACHE_POD_RUNNING_REQUEST_IMBALANCE_ABS_COUNT)',
    { infinite: true },
  ),
  standardDeviationFactor: numberKnob(
    1,
    'a matched worker qualifies while its running count ≤ mean + this × σ (AIBRIX_PREFIX_CACHE_STANDARD_DEVIATION_FACTOR)',
    { infinite: true },
  ),
  blockSizeBytes: numberKnob(4, 'prefix block size, bytes of UTF-8 prompt text (AIBRIX_PREFIX_CACHE_BLOCK_SIZE)', { min: 1 }),
  blockNumber: numberKnob(200_000, 'blocks the shared prefix table keeps, all workers together (AIBRIX_PREFIX_CACHE_BLOCK_NUMBER)', { min: 1 }),
  evictionDurationMs: numberKnob(1_200_000, 'drop blocks not stamped for this long, ms (AIBRIX_PREFIX_CACHE_EVICTION_DURATION_MINS)', {
    infinite: true,
  }),
  evictionIntervalMs: numberKnob(1_000, 'look for such blocks this often, ms (AIBRIX_PREFIX_CACHE_EVICTION_INTERVAL_SECONDS)', { min: 1 }),
});

export type AibrixOptions = z.output<typeof aibrixOptions>;

/** The prompt's block hashes as AIBrix cuts them (UTF-8 bytes, its block size, per-model chain). */
const AIBRIX_BLOCKS = stateKey<PromptBlocks>('aibrix.blocks');

const utf8 = new TextEncoder();

/** Mean and sample standard deviation (n − 1; 0 for fewer than two values), as AIBrix's util.go. */
export function meanAndSampleStdDev(values: readonly number[]): { mean: number; sd: number } {
  const n = values.length;
  if (n === 0) return { mean: 0, sd: 0 };
  const mean = values.reduce((s, v) => s + v, 0) / n;
  if (n === 1) return { mean, sd: 0 };
  const ss = values.reduce((s, v) => s + (v - mean) ** 2, 0);
  return { mean, sd: Math.sqrt(ss / (n - 1)) };
}

/** Fisher–Yates with the decision's random source (Go's rand.Shuffle). */
function shuffle<T>(xs: T[], rng: () => number): T[] {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1));
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
  return xs;
}

/** The least running candidate, uniformly at random among ties. */
function leastRunning(candidates: readonly ScoredWorker[], ctx: RoutingContext): ScoredWorker | null {
  let min = Infinity;
  for (const c of candidates) min = Math.min(min, c.worker.inflightCount);
  const least = candidates.filter((c) => c.worker.inflightCount === min);
  return least.length > 0 ? least[Math.floor(ctx.rng() * least.length)]! : null;
}

function createAibrixPolicy(o: AibrixOptions): PipelinePolicy {
  const table = new BlockLruTable(o.blockNumber, o.evictionDurationMs);
  let lastEviction = -Infinity;
  const blocksOf = (req: RouteRequest): PromptBlocks => {
    let b = req.state.get(AIBRIX_BLOCKS);
    if (!b) {
      b = new PromptBlocks(utf8.encode(req.promptText), o.blockSizeBytes, seedFromString(`aibrix\u0000${req.model}`));
      req.state.set(AIBRIX_BLOCKS, b);
    }
    return b;
  };

  const picker: Picker = {
    name: 'aibrix-prefix-cache',
    pick(req, candidates, ctx) {
      if (candidates.length === 0) return null;
      if (ctx.now - lastEviction >= o.evictionIntervalMs) {
        lastEviction = ctx.now;
        table.expire(ctx.now);
      }
      const running = candidates.map((c) => c.worker.inflightCount);
      const min = Math.min(...running);
      const max = Math.max(...running);
      const matchable = max - min > o.imbalanceAbsCount ? candidates.filter((c) => c.worker.inflightCount === min) : candidates;
      const matches = table.match(
        blocksOf(req),
        matchable.map((c) => c.worker.id),
      );
      const hit = (c: ScoredWorker) => (matches.get(c.worker.id) ?? 0) / 100;
      if (matches.size > 0) {
        const { mean, sd } = meanAndSampleStdDev(running);
        const bound = mean + o.standardDeviationFactor * sd;
        const ordered = shuffle(
          matchable.filter((c) => matches.has(c.worker.id)),
          ctx.rng,
        ).sort((a, b) => matches.get(b.worker.id)! - matches.get(a.worker.id)! || a.worker.inflightCount - b.worker.inflightCount);
        const chosen = ordered.find((c) => c.worker.inflightCount <= bound);
        if (chosen) return { worker: chosen, reason: 'prefix', expectedPrefixHit: hit(chosen) };
      }
      const least = leastRunning(candidates, ctx);
      return least && { worker: least, reason: matches.size > 0 ? 'prefix-skipped' : 'least-request', expectedPrefixHit: hit(least) };
    },
  };

  return new PipelinePolicy({
    name: 'aibrix',
    filters: [healthyFilter],
    scorers: [],
    picker,
    // It hashes the prompt's text, never its token ids.
    readsPromptTokens: false,
    // The rules' knobs are read at decision time; the table's shape is not changed in place.
    retune(next) {
      if (!retuneInPlace(o, next, ['blockSizeBytes', 'blockNumber'])) return false;
      table.setLimits(o.blockNumber, o.evictionDurationMs);
      return true;
    },
    onDispatch(req, d, ctx) {
      table.add(blocksOf(req), d.worker.id, ctx.now);
    },
  });
}

export const aibrixPolicy: PolicyDefinition<typeof aibrixOptions> = {
  name: 'aibrix',
  description:
    'AIBrix prefix-cache: shared LRU of 4-byte text blocks; best match among workers within mean + 1σ running, least running when max − min > 8 or none qualifies.',
  options: aibrixOptions,
  create: createAibrixPolicy,
};
