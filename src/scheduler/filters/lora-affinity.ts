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
 *   2. else, where the adapter is active with at most a step of prompt tokens waiting
 *      (BACKLOG_TOKENS), those workers, and with them the workers with a free slot if the slots
 *      left after taking one still cover the requests expected to need a fresh slot meanwhile
 *      (SlotDemand, `spreadRisk`); else those workers alone: the adapter stays where it runs,
 *      leaving the other workers' slots to the other adapters;
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

/** Adapter requests the fresh-slot share is averaged over (an exponential mean's horizon). */
const SHARE_HORIZON = 64;

/**
 * How many requests are expected to need a fresh adapter slot while one request runs, and whether
 * a number of free slots covers them. By Little's law the requests arriving during one mean stay
 * are as many as are in flight, so the fresh-slot arrivals in that time number about the adapter
 * requests in flight times the share of adapter requests that found their adapter active nowhere
 * (an exponential mean over the last SHARE_HORIZON). Arrivals taken as Poisson.
 */
export class SlotDemand {
  private freshShare = 0;
  private seen = 0;

  /** One adapter request decided: whether its adapter was active on no worker. */
  note(fresh: boolean): void {
    this.seen++;
    const a = 1 / Math.min(this.seen, SHARE_HORIZON);
    this.freshShare += a * ((fresh ? 1 : 0) - this.freshShare);
  }

  /**
   * True when `left` free slots fall short of the fresh-slot arrivals during one stay with
   * probability at most `risk`, `inflight` adapter requests being in flight. False until
   * SHARE_HORIZON requests have been seen.
   */
  covers(left: number, inflight: number, risk: number): boolean {
    if (left < 0 || this.seen < SHARE_HORIZON) return false;
    const mean = inflight * this.freshShare;
    // P(Poisson(mean) > left) = 1 − Σ_{k ≤ left} e^{−mean} meanᵏ / k!
    let term = Math.exp(-mean);
    let atMost = term;
    for (let k = 1; k <= left; k++) {
      term *= mean / k;
      atMost += term;
    }
    return 1 - atMost <= risk;
  }
}

export interface LoraAffinityOptions {
  /**
   * Step 2's risk: the highest chance, taken as acceptable, that the slots left after this request
   * takes a free one fall short of the fresh-slot demand while it runs. 0: never spread in step 2.
   */
  spreadRisk: number;
  /**
   * The fresh-slot demand seen so far, kept by the policy so that a filter rebuilt when the
   * policy's options change goes on from it (default: a count of this filter's own).
   */
  demand?: SlotDemand;
}

export function loraAffinityFilter(options: LoraAffinityOptions): Filter {
  const demand = options.demand ?? new SlotDemand();
  return {
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
      let inflight = 0;
      const activeAnywhere = new Set<string>();
      for (const w of workers) {
        const slot = w.adapterSlot(adapter);
        if (slot === 'unknown') {
          free.push(w);
          continue;
        }
        reported = true;
        freeSlots += w.freeAdapterSlots(activeAnywhere);
        for (const n of w.inflightAdapters.values()) inflight += n;
        if (slot === 'free') free.push(w);
        else if (slot === 'active') (w.inflightPrefillTokens <= BACKLOG_TOKENS ? room : busy).push(w);
      }
      if (!reported) return workers as WorkerState[];
      demand.note(room.length === 0 && busy.length === 0);
      // The other adapters these workers serve (each its own set, with adapters loaded at run time)
      // that run nowhere: each may want a free slot.
      const inactive = new Set<string>();
      for (const w of workers) for (const a of w.adapters) if (!activeAnywhere.has(a) && a !== adapter) inactive.add(a);
      if (room.length > 0 && freeSlots <= inactive.size) {
        const spread = free.length > 0 && options.spreadRisk > 0 && demand.covers(freeSlots - 1, inflight, options.spreadRisk);
        return spread ? room.concat(free) : room;
      }
      const kept = room.concat(busy, free);
      return kept.length > 0 ? kept : (workers as WorkerState[]);
    },
  };
}
