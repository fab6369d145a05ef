/**
 * Filter `lora-affinity`: places a request naming a LoRA adapter where the adapter will not wait
 * for a slot. vLLM batches at most --max-loras adapters at once (default 1) and passes over a
 * waiting request whose adapter would be one too many, however idle the worker is otherwise, until
 * the requests of an adapter in the batch are done (WorkerState.adapterSlot says where an adapter
 * stands on a worker). Kept, in order:
 *
 *   1. while the workers' free slots outnumber the pool's adapters active nowhere (each may need
 *      one when its next request comes), the workers where the adapter is active and those with
 *      a free slot: spreading an adapter then takes no slot another adapter will miss;
 *   2. else the workers where the adapter is active with at most a step of prompt tokens waiting
 *      (BACKLOG_TOKENS): the adapter stays where it runs, leaving the other workers' slots to the
 *      other adapters;
 *   3. else the workers where it is active and those with a free slot: a busy adapter spreads;
 *   4. else (every slot held by other adapters) every worker: the scorers pick.
 *
 * Requests of the base model pass untouched, as do all requests when no worker reports
 * vllm:lora_requests_info (its limit is unknown; a worker that does not report counts as having
 * a free slot). llm-d's LoRA affinity prefers active workers in the same way, choosing between the
 * two kinds at random; here the slots left and the backlog decide, and the policy's scorers pick
 * within the set.
 */
import type { WorkerState } from '../../fleet/worker-state.js';
import { PROMPT_ADAPTER } from '../../kv/prompt-blocks.js';
import type { Filter } from '../types.js';

/**
 * Prompt tokens waiting for their first token (this gateway's, WorkerState.inflightPrefillTokens)
 * past which an adapter's worker counts as backed up: one engine step at vLLM's default
 * max_num_batched_tokens, the line the admission's prefill backlog draws too.
 */
const BACKLOG_TOKENS = 8192;

export const loraAffinityFilter: Filter = {
  name: 'lora-affinity',
  filter: (req, workers) => {
    const adapter = req.state.get(PROMPT_ADAPTER);
    if (adapter === undefined) return workers as WorkerState[];
    // Where the adapter is active: with room (at most a step of prompt tokens waiting) or backed up.
    const room: WorkerState[] = [];
    const busy: WorkerState[] = [];
    const free: WorkerState[] = [];
    let reported = false;
    let freeSlots = 0;
    const activeAnywhere = new Set<string>();
    for (const w of workers) {
      const slot = w.adapterSlot(adapter);
      if (slot === 'unknown') {
        free.push(w);
        continue;
      }
      reported = true;
      freeSlots += w.freeAdapterSlots(activeAnywhere);
      if (slot === 'free') free.push(w);
      else if (slot === 'active') (w.inflightPrefillTokens <= BACKLOG_TOKENS ? room : busy).push(w);
    }
    if (!reported) return workers as WorkerState[];
    // The other adapters these workers serve (each its own set, with adapters loaded at run time)
    // that run nowhere: each may want a free slot.
    const inactive = new Set<string>();
    for (const w of workers) for (const a of w.adapters) if (!activeAnywhere.has(a) && a !== adapter) inactive.add(a);
    if (room.length > 0 && freeSlots <= inactive.size) return room;
    const kept = room.concat(busy, free);
    return kept.length > 0 ? kept : (workers as WorkerState[]);
  },
};
