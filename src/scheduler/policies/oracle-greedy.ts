/**
 * Policy `oracle-greedy`: not a real router. Reads each simulated engine's exact cache and queue
 * (WorkerState.oracle, available only in the fleet simulation) and picks the worker with the
 * lowest estimated TTFT:
 *
 *   healthy → kv-fit (exact: probe's free blocks, whenNoneFits 'all') → oracle-greedy picker
 *
 *   ttft(w) = 1000 · (pending prefill tokens + this prompt's uncached tokens) / prefillTokensPerSec
 *             + decodeMsPerRunning · running
 *
 * Ties at random; reason 'prefix' if the winner holds part of the prompt, else 'load'. A
 * reference for cache-aware routing on perfect information; `oracle` (kvgate's rules on the same
 * information) is the other. Workers without a probe count as holding nothing, with the gateway's
 * own in-flight prefill and count as their queue.
 */
import { z } from 'zod';
import type { WorkerState } from '../../fleet/worker-state.js';
import { blockKeysOf } from '../../kv/prompt-blocks.js';
import { healthyFilter } from '../filters/healthy.js';
import { kvFitFilter } from '../filters/kv-fit.js';
import { argminRandom } from '../pickers/argmin-random.js';
import { PipelinePolicy } from '../pipeline.js';
import type { Picker, PolicyDefinition, RouteRequest } from '../types.js';
import { kvgateOptions } from './kvgate/index.js';

/** The same TTFT constants as kvgate's estimate, with the same defaults. */
export const oracleGreedyOptions = kvgateOptions.pick({ prefillTokensPerSec: true, decodeMsPerRunning: true });

export type OracleGreedyOptions = z.output<typeof oracleGreedyOptions>;

export function createOraclePolicy(o: OracleGreedyOptions): PipelinePolicy {
  const rate = o.prefillTokensPerSec;
  const decodeMs = o.decodeMsPerRunning;
  const est = (req: RouteRequest, w: WorkerState) => {
    const prompt = req.promptTokens.length;
    const probe = w.oracle;
    const cached = probe ? Math.min(prompt, probe.cachedPrefixTokens(req.promptTokens, blockKeysOf(req.state))) : 0;
    const pending = probe ? probe.pendingPrefillTokens() : w.inflightPrefillTokens;
    const running = probe ? probe.running() : w.inflightCount;
    return { cached, ttft: (1000 * (pending + prompt - cached)) / rate + decodeMs * running };
  };
  const picker: Picker = {
    name: 'oracle',
    pick(req, candidates, ctx) {
      const e = new Map(candidates.map((c) => [c, est(req, c.worker)]));
      const best = argminRandom(candidates, (c) => e.get(c)!.ttft, ctx.rng);
      if (!best) return null;
      const x = e.get(best)!;
      return {
        worker: best,
        reason: x.cached > 0 ? 'prefix' : 'load',
        expectedPrefixHit: req.promptTokens.length > 0 ? x.cached / req.promptTokens.length : 0,
      };
    },
  };
  return new PipelinePolicy({
    name: 'oracle-greedy',
    filters: [healthyFilter, kvFitFilter(null, { whenNoneFits: 'all', overfullSlackBlocks: 0 })],
    scorers: [],
    picker,
    usesOracle: true,
  });
}

export const oracleGreedyPolicy: PolicyDefinition<typeof oracleGreedyOptions> = {
  name: 'oracle-greedy',
  description: 'Simulation only: exact engine cache and queue, always the lowest estimated TTFT.',
  options: oracleGreedyOptions,
  create: createOraclePolicy,
};
