/**
 * Policy `oracle-greedy`: a simulation-only reference that reads the engines' exact state.
 */
import type { WorkerState } from '../../fleet/worker-state.js';
import { healthyFilter } from '../filters/healthy.js';
import { kvFitFilter } from '../filters/kv-fit.js';
import { argminRandom } from '../pickers/argmin-random.js';
import { PipelinePolicy } from '../pipeline.js';
import type { Picker, PolicyDefinition, PolicyOptions, RouteRequest } from '../types.js';
import { numberOption } from './options.js';

/**
 * Not a real router: reads each simulated engine's exact cache and queue (WorkerState.oracle,
 * available only in the fleet simulation) and picks the worker with the lowest estimated TTFT =
 * (pending prefill tokens + this prompt's uncached tokens) / prefill rate + a decode-interference
 * term. An upper bound for what cache-aware routing could achieve. Workers without a probe count
 * as holding nothing, with the gateway's own in-flight prefill as their queue.
 */
export function createOraclePolicy(o?: PolicyOptions): PipelinePolicy {
  const rate = numberOption(o, 'prefillTokensPerSec', 10_000, 1);
  const decodeMs = numberOption(o, 'decodeMsPerRunning', 0.5, 0);
  const est = (req: RouteRequest, w: WorkerState) => {
    const prompt = req.promptTokens.length;
    const probe = w.oracle;
    const cached = probe ? Math.min(prompt, probe.cachedPrefixTokens(req.promptTokens)) : 0;
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

export const oracleGreedyPolicy: PolicyDefinition = {
  name: 'oracle-greedy',
  description: 'Simulation only: exact engine cache and queue, always the lowest estimated TTFT.',
  create: createOraclePolicy,
};
