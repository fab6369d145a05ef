/**
 * llm-d's prefix-cache scorer (llm-d/llm-d-router,
 * pkg/epp/framework/plugins/scheduling/scorer/prefix/): each worker's score is the fraction of the
 * prompt's blocks it holds as a leading run, matched blocks / prompt blocks. Where the matches come
 * from (an index fed by routing or by KV events, over characters or tokens) is the policy's choice.
 */
import type { WorkerState } from '../../fleet/worker-state.js';
import type { PrefixMatch } from '../index/prefix-match.js';
import type { RouteRequest, RoutingContext, Scorer } from '../types.js';

export function prefixFractionScorer(
  matches: (req: RouteRequest, workers: readonly WorkerState[], ctx: RoutingContext) => Map<WorkerState, PrefixMatch>,
): Scorer {
  return {
    name: 'prefix',
    score(req, ws, ctx) {
      const m = matches(req, ws, ctx);
      return ws.map((w) => {
        const x = m.get(w)!;
        return x.promptBlocks > 0 ? x.blocks / x.promptBlocks : 0;
      });
    },
  };
}
