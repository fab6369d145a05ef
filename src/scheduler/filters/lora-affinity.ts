/**
 * Filter `lora-affinity`: places a request naming a LoRA adapter where the adapter will not wait
 * for a slot. vLLM batches at most --max-loras adapters at once (default 1) and passes over a
 * waiting request whose adapter would be one too many, however idle the worker is otherwise, until
 * the requests of an adapter in the batch are done (WorkerState.adapterSlot says where an adapter
 * stands on a worker). In order:
 *
 *   1. workers where the adapter is active, if one of them has at most a step of prompt tokens
 *      waiting (BACKLOG_TOKENS): an adapter stays where it runs, leaving the other workers' slots
 *      to other adapters;
 *   2. else those workers and the ones with a free slot: a busy adapter spreads;
 *   3. else (every slot taken by other adapters) every worker: the scorers pick.
 *
 * Requests of the base model pass untouched, as do all requests when no worker reports
 * vllm:lora_requests_info (its limit is unknown; a worker that does not report counts as having
 * a free slot). llm-d's LoRA affinity prefers active workers in the same way, choosing between the
 * two kinds at random; here the backlog decides, and the policy's scorers pick within the set.
 */
import type { WorkerState } from '../../fleet/worker-state.js';
import { PROMPT_ADAPTER } from '../../kv/prompt-blocks.js';
import type { Filter } from '../types.js';

/**
 * Prompt tokens waiting for their first token (this gateway's, WorkerState.inflightPrefillTokens)
 * past which an adapter's worker counts as backed up: one engine step at vLLM's default
 * max_num_batched_tokens, the line the admission's prefill backlog draws too.
 */
export const BACKLOG_TOKENS = 8192;

export const loraAffinityFilter: Filter = {
  name: 'lora-affinity',
  filter: (req, workers) => {
    const adapter = req.state.get(PROMPT_ADAPTER);
    if (adapter === undefined) return workers as WorkerState[];
    const active: WorkerState[] = [];
    const free: WorkerState[] = [];
    let reported = false;
    let roomActive = false;
    for (const w of workers) {
      const slot = w.adapterSlot(adapter);
      if (slot !== 'unknown') reported = true;
      if (slot === 'active') {
        active.push(w);
        if (w.inflightPrefillTokens <= BACKLOG_TOKENS) roomActive = true;
      } else if (slot !== 'taken') free.push(w);
    }
    if (!reported) return workers as WorkerState[];
    if (roomActive) return active;
    const kept = active.concat(free);
    return kept.length > 0 ? kept : (workers as WorkerState[]);
  },
};
