/**
 * Policy `dynamo`: a baseline modelled on NVIDIA Dynamo's KV router in approximate mode, built
 * from the same pipeline as kvgate's policies so a side-by-side benchmark compares policies, not
 * plumbing.
 */
import type { WorkerState } from '../../fleet/worker-state.js';
import { stateKey } from '../../util/state.js';
import { healthyFilter } from '../filters/healthy.js';
import { PrefixIndex } from '../index/prefix-index.js';
import { PrefixMatcher } from '../index/prefix-match.js';
import { argminRandom } from '../pickers/argmin-random.js';
import { PipelinePolicy } from '../pipeline.js';
import type { Picker, PolicyDefinition, PolicyOptions, RouteRequest } from '../types.js';
import { numberOption } from './options.js';

/**
 * Modelled on NVIDIA Dynamo's KV router (ai-dynamo/dynamo `docs/components/router/`) in
 * approximate mode: cost = prefill_load_scale · max(active prefill blocks + prompt blocks −
 * overlap blocks, 0) + active decode blocks; the lowest cost wins (temperature 0, ties at random).
 * Active prefill blocks are the router's own not-yet-first-token prompt tokens at the worker,
 * active decode blocks the prompt blocks of its active sequences, both counted router-side.
 * Overlap comes from its own index of what it routed, each entry living 120 s since last use.
 */
/** Prompt blocks the request added to its worker's active blocks at dispatch. */
const DYNAMO_ACTIVE_BLOCKS = stateKey<number>('dynamo.active-blocks');

export function createDynamoPolicy(o?: PolicyOptions): PipelinePolicy {
  const scale = numberOption(o, 'prefillLoadScale', 1, 0);
  const index = new PrefixIndex({
    maxBytes: numberOption(o, 'indexMaxBytes', 256 * 1024 * 1024, 1024),
    maxWorkers: numberOption(o, 'maxWorkers', 1024, 1),
    predictedTtlMs: 0,
    approxTtlMs: numberOption(o, 'cacheWindowMs', 120_000, 0),
  });
  const matcher = new PrefixMatcher(index);
  /** Prompt blocks of the sequences active at each worker (router-side accounting). */
  const activeBlocks = new Map<string, number>();
  const cost = (req: RouteRequest, w: WorkerState, overlap: number) => {
    const bs = w.blockSize;
    const promptBlocks = Math.ceil(req.promptTokens.length / bs);
    const prefill = Math.ceil(w.inflightPrefillTokens / bs);
    return scale * Math.max(prefill + promptBlocks - overlap, 0) + (activeBlocks.get(w.id) ?? 0);
  };
  const picker: Picker = {
    name: 'dynamo',
    pick(req, candidates, ctx) {
      const m = matcher.matches(req, candidates.map((c) => c.worker), ctx);
      const best = argminRandom(candidates, (c) => cost(req, c.worker, m.get(c.worker)!.blocks), ctx.rng);
      if (!best) return null;
      const x = m.get(best.worker)!;
      return {
        worker: best,
        reason: x.blocks > 0 ? 'prefix' : 'load',
        expectedPrefixHit: req.promptTokens.length > 0 ? x.tokens / req.promptTokens.length : 0,
      };
    },
  };
  return new PipelinePolicy({
    name: 'dynamo',
    filters: [healthyFilter],
    scorers: [],
    picker,
    prefixIndex: index,
    onDispatch(req, d, ctx) {
      matcher.record(req, d.worker, ctx.now);
      const b = Math.ceil(req.promptTokens.length / d.worker.blockSize);
      activeBlocks.set(d.worker.id, (activeBlocks.get(d.worker.id) ?? 0) + b);
      req.state.set(DYNAMO_ACTIVE_BLOCKS, b);
    },
    onComplete(req, w) {
      const b = req.state.get(DYNAMO_ACTIVE_BLOCKS) ?? 0;
      activeBlocks.set(w.id, Math.max(0, (activeBlocks.get(w.id) ?? 0) - b));
    },
  });
}

export const dynamoPolicy: PolicyDefinition = {
  name: 'dynamo',
  description: 'NVIDIA Dynamo KV router (approximate): lowest prefill_load_scale·new prefill blocks + active decode blocks, 120 s overlap window.',
  create: createDynamoPolicy,
};
