/**
 * llm-d's prefix-cache scorer (llm-d/llm-d-router,
 * pkg/epp/framework/plugins/scheduling/scorer/prefix/): each worker's score is the fraction of the
 * prompt's blocks it holds as a leading run, matched blocks / prompt blocks. Where the matches come
 * from (an index fed by routing or by KV events, over characters or tokens) is the policy's choice.
 * With tier weights, each matched block counts its tier's weight (llm-d-kv-cache's
 * LongestPrefixScorer with kvCacheBackendConfigs): a block in host memory or on disk counts less.
 */
import type { WorkerState } from '../../fleet/worker-state.js';
import type { PrefixMatch } from '../index/prefix-match.js';
import { tierCredit, type TierWeights } from '../../kv/tiers.js';
import type { RouteRequest, RoutingContext, Scorer } from '../types.js';

export function prefixFractionScorer(
  matches: (req: RouteRequest, workers: readonly WorkerState[], ctx: RoutingContext) => Map<WorkerState, PrefixMatch>,
  tierWeights?: () => TierWeights,
): Scorer {
  return {
    name: 'prefix',
    score(req, ws, ctx) {
      const m = matches(req, ws, ctx);
      return ws.map((w) => {
        const x = m.get(w)!;
        if (x.promptBlocks === 0) return 0;
        return (tierWeights ? tierCredit(x.tiers, tierWeights()) : x.blocks) / x.promptBlocks;
      });
    },
  };
}
