/**
 * Policy `dynamo`: a baseline modelled on NVIDIA Dynamo's KV router (ai-dynamo/dynamo
 * `docs/components/router/`) in approximate mode, built from the same pipeline as kvgate's
 * policies so a side-by-side benchmark compares policies, not plumbing.
 *
 *   healthy → dynamo picker
 *
 *   cost(w) = prefillLoadScale · max(active prefill blocks + prompt blocks − overlap blocks, 0)
 *             + active decode blocks
 *
 * The lowest cost wins (temperature 0, ties at random); reason 'prefix' if the winner overlaps
 * the prompt, else 'load'. Active prefill blocks are the router's own not-yet-first-token prompt
 * tokens at the worker, active decode blocks the prompt blocks of its active sequences, both
 * counted router-side. Overlap comes from its own index of what it routed, each entry living
 * cacheWindowMs since last use.
 */
import { z } from 'zod';
import type { WorkerState } from '../../fleet/worker-state.js';
import { stateKey } from '../../util/state.js';
import { healthyFilter } from '../filters/healthy.js';
import { PrefixIndex } from '../index/prefix-index.js';
import { PrefixMatcher } from '../index/prefix-match.js';
import { argminRandom } from '../pickers/argmin-random.js';
import { PipelinePolicy } from '../pipeline.js';
import type { Picker, PolicyDefinition, RouteRequest } from '../types.js';
import { indexKnobs, numberKnob } from './knobs.js';

/** Dynamo's names in parentheses. */
export const dynamoOptions = z.strictObject({
  prefillLoadScale: numberKnob(1, 'weight of the new prefill blocks against the active decode blocks (prefill_load_scale)'),
  cacheWindowMs: numberKnob(120_000, 'lifetime of a routed block in the overlap index since its last use, ms', {
    infinite: true,
  }),
  indexMaxBytes: indexKnobs.indexMaxBytes,
  maxWorkers: indexKnobs.maxWorkers,
});

export type DynamoOptions = z.output<typeof dynamoOptions>;

/** Prompt blocks the request added to its worker's active blocks at dispatch. */
const DYNAMO_ACTIVE_BLOCKS = stateKey<number>('dynamo.active-blocks');

export function createDynamoPolicy(o: DynamoOptions): PipelinePolicy {
  const scale = o.prefillLoadScale;
  const index = new PrefixIndex({
    maxBytes: o.indexMaxBytes,
    maxWorkers: o.maxWorkers,
    predictedTtlMs: 0,
    approxTtlMs: o.cacheWindowMs,
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

export const dynamoPolicy: PolicyDefinition<typeof dynamoOptions> = {
  name: 'dynamo',
  description: 'NVIDIA Dynamo KV router (approximate): lowest prefill_load_scale·new prefill blocks + active decode blocks, overlap from its own routing.',
  options: dynamoOptions,
  create: createDynamoPolicy,
};
