/**
 * The kvgate policy's knobs, in groups, with their defaults and one line each. The README beside
 * this file gives the formula each one enters and the evidence for its default.
 */
import { z } from 'zod';
import { DEFAULT_TIER_WEIGHTS } from '../../../kv/tiers.js';
import { GPUS } from '../../../hardware/gpus.js';
import { PREFIX_INDEX_DEFAULTS } from '../../index/prefix-index.js';
import type { KnobGroup } from '../../types.js';
import { booleanKnob, choiceKnob, indexKnobs, numberKnob, removedKnob } from '../knobs.js';

/** Scorer weights: the weighted sum the picker ranks the near band by. */
const weights = {
  wPrefix: numberKnob(3, 'weight of the prefix scorer (expected prefix hit) in the near band'),
  wTtft: numberKnob(1, 'weight of the ttft scorer (min TTFT / TTFT)'),
  wHeadroom: numberKnob(2, 'weight of the headroom scorer (free KV blocks left after the request)'),
  wQueue: numberKnob(0.25, 'weight of the queue scorer (fewest waiting)'),
  wLoad: numberKnob(0.25, 'weight of the load scorer (fewest running)'),
  wSession: numberKnob(0.5, "weight of the session scorer (the session's last worker)"),
};

/**
 * The picker (the load guard). The near band and the spill test compare costs and are relative so
 * they scale with the workload: an absolute allowance larger than a short request's whole cost
 * lets cache affinity pile short prompts onto the workers that first saw their prefix. Most of the
 * spill test's slack comes from spillSavedFraction, which scales with the prefix: a long shared
 * prefix is worth keeping home, a short one is cheap to recompute anywhere.
 */
const picker = {
  nearRelative: numberKnob(
    0.25,
    "near band: workers with cost ≤ min cost · (1 + nearRelative) + nearAbsoluteMs whose TTFT exceeds the cheapest's by at most nearRelative · its TTFT and decode cost + nearAbsoluteMs (the best-cached worker too)",
  ),
  nearAbsoluteMs: numberKnob(0, 'absolute slack of the near band, ms'),
  spillRelative: numberKnob(
    0.25,
    "keep the best-cached worker while its cost ≤ the near pick's · (1 + spillRelative) + spillAbsoluteMs + saved prefill",
  ),
  spillAbsoluteMs: numberKnob(0, 'absolute slack of the spill test, ms'),
  spillSavedFraction: numberKnob(
    0.75,
    "share of the prefill time the best-cached worker's extra cached tokens save that it may be slower by",
  ),
  minHitGain: numberKnob(0.05, 'the best-cached worker must hold this much more of the prompt to be preferred'),
  leastLoadedCandidates: numberKnob(
    0,
    'price only the workers holding part of the prompt (and the session\'s), plus this many of the rest with the least estimated TTFT, as many with KV room and as many best rated (prune.ts); 0: price every worker',
    { min: 0 },
  ),
  loraAffinity: booleanKnob(
    true,
    "place a LoRA adapter's requests by the workers' --max-loras slots: spread while free slots outnumber the adapters running nowhere, else stay on the workers running it while they keep up, never where other adapters hold every slot while another worker will do (filters/lora-affinity.ts); off: by cost alone",
  ),
  loraSpreadRisk: numberKnob(
    0.1,
    "with loraAffinity, when slots are scarce, an adapter's requests may also go to workers with a free slot if the chance that the slots left then fall short of the requests needing a fresh slot while it runs is at most this (filters/lora-affinity.ts); 0: stay on the workers running it",
    { min: 0, max: 1 },
  ),
};

/**
 * The speeds the estimate starts from. decodeStepMs and decodeMsPer1kContext are memory reads
 * (the weights once per step; each request's KV per step), so both scale with the bandwidth:
 *   decodeStepMs ≈ weight bytes / (0.7 · bandwidth) + ~0.5 ms   (Llama-3.1-8B bf16, H100: 7.5)
 *   decodeMsPer1kContext ≈ 1000 · KV bytes per token / (0.7 · bandwidth)   (128 KiB, H100: 0.056)
 */
const decode = {
  prefillTokensPerSec: numberKnob(
    10_000,
    "prefill throughput assumed per worker, tokens/s (kvgate: until it has learned its pool's)",
    { min: 1 },
  ),
  queueMsPerWaiting: numberKnob(2, 'added to the TTFT estimate per request waiting at the worker, ms'),
  decodeMsPerRunning: numberKnob(0.5, 'added to the TTFT estimate per running request (decodes share the batch), ms'),
  decodeStepMs: numberKnob(7.5, 'a decode step with an empty batch (reading the weights), ms', { min: 0 }),
  decodeMsPer1kContext: numberKnob(
    0.06,
    "how much a decode step lengthens per 1,000 context tokens in the worker's batch, ms (KV bytes per token / memory bandwidth; 0 ignores decode crowding)",
  ),
  decodeFiguresGpu: choiceKnob(
    Object.keys(GPUS) as [string, ...string[]],
    'h100',
    "the GPU decodeStepMs and decodeMsPer1kContext describe: a worker whose `hardware` names another known GPU starts from them scaled by the two GPUs' memory bandwidths, until its kind's decode speed is learned",
  ),
};

/**
 * What the request's placement costs in decode time: its own TPOT, the stall its prefill puts in
 * the worker's batch, and the risk of a preemption, all in ms of TTFT.
 */
const stall = {
  tpotTargetMs: numberKnob(50, 'TPOT target, ms: a worker whose batch would put this request near it costs it more', {
    min: 1,
  }),
  tpotWorthMs: numberKnob(20, 'what a millisecond of TPOT is worth in milliseconds of TTFT (the ratio of the TTFT and TPOT targets)'),
  stallWeight: numberKnob(
    1,
    "what the delay the request causes the worker's other requests counts for against its own (1: all alike; 0: own TTFT and decode only)",
  ),
  prefillChunkTokens: numberKnob(
    8192,
    "the workers' prefill token budget per step (vLLM's --max-num-batched-tokens; 8192 is its default for the OpenAI server on GPUs of 70 GiB or more other than the A100, 2048 below): a prompt sent where another is still in prefill takes the rest of the step in which that one finishes, delaying its first token, and pays for that delay (0: not counted)",
    { min: 0 },
  ),
  stallModel: choiceKnob(
    ['linear', 'misses'],
    'linear',
    "what a prefill's stall costs the worker's other requests: tpotWorthMs per ms of each one's TPOT (linear); a TPOT target's worth for each one it pushes past the target, and at most that for the request's own TPOT (misses: lower TTFT p99 on rag at round-robin's capacity, long prompts held on bursty; less capacity on agentic)",
    {
      learned:
        "stallModel 'learned' was removed: it won no built-in case over 'misses', which prices the same misses without the worker's TPOT history; use 'misses' or 'linear'",
    },
  ),
  e2eTail: booleanKnob(
    false,
    "price the end-to-end time of answers longer than the mean in flight: this request's own decode at (tokens − 1 − mean) ms per ms of TPOT where that is more than its TPOT is worth, and a prefill's stall on such neighbours by the share of their E2E it delays (linear). Lower E2E p99 where long answers crowd together (bursty), higher TPOT p99 where long prompts then stall short answers (product-mix)",
  ),
  /**
   * The likelihood of a preemption counts every request on the worker at its full length at once,
   * which they seldom reach together: an upper bound, weighed accordingly.
   */
  preemptionWeight: numberKnob(
    4,
    'what the expected cost of a preemption for lack of KV (its recompute and the stall that puts in the batch) counts for in the cost (0: ignored)',
    { min: 0 },
  ),
};

/** KV room (filters/kv-fit.ts): a preference, not a veto, by default. */
const kvFit = {
  kvFit: choiceKnob(
    ['prefer', 'ever', 'now'],
    'prefer',
    'workers without KV room now for the uncached prompt and expected output: avoided while a worker with room costs no more than the near band allows (prefer), weighed by cost alone (ever), or dropped (now)',
  ),
  whenNoneFits: choiceKnob(
    ['all', 'least-overfull'],
    'all',
    'with kvFit now, when no worker has KV room now: keep every worker that could hold the request when idle, or the least overfull',
  ),
  overfullSlackBlocks: numberKnob(0, 'least-overfull keeps workers within this many blocks of the least overfull'),
};

/** The online learners (learners/). */
const learning = {
  learnPrefillRate: booleanKnob(true, "learn each speed class's prefill rate (a pool's workers of one declared hardware, or of one KV capacity) from observed first tokens"),
  learnAlpha: numberKnob(0.2, 'weight of a new observation in the learned rate'),
  learnMinTokens: numberKnob(256, 'learn only from requests with at least this many tokens to prefill'),
  learnDecodeSpeed: booleanKnob(
    true,
    "scale decodeStepMs and decodeMsPer1kContext by how fast each speed class is seen to decode (the low end of its answers' TPOT against the two)",
  ),
  learnOutputLength: booleanKnob(
    true,
    'expect the share of max_tokens that earlier answers to prompts of the same class used (false: expect max_tokens)',
  ),
};

/** The prefix index and the session table. */
const index = {
  indexMaxBytes: indexKnobs.indexMaxBytes,
  predictedTtlMs: numberKnob(
    PREFIX_INDEX_DEFAULTS.predictedTtlMs,
    'lifetime of a pick-time prediction no first token has confirmed, ms (failed requests withdraw theirs at once)',
    { infinite: true },
  ),
  approxTtlMs: numberKnob(
    PREFIX_INDEX_DEFAULTS.approxTtlMs,
    'lifetime of a routed block since its last use, ms (.inf: only the capacity model ages it)',
    { infinite: true },
  ),
  maxWorkers: indexKnobs.maxWorkers,
  sessionCapacity: numberKnob(100_000, 'session keys remembered for affinity', { min: 1 }),
  hostHitWeight: numberKnob(
    DEFAULT_TIER_WEIGHTS.host,
    "share of a prompt block held in the worker's host memory (KV events with medium CPU) counted as cached; the rest is counted as if recomputed",
    { max: 1 },
  ),
  diskHitWeight: numberKnob(DEFAULT_TIER_WEIGHTS.disk, 'share of a prompt block held on the worker\'s disk tier counted as cached', { max: 1 }),
};

/** Knobs that no longer exist: a config that names one fails with the message. */
const removed = {
  readHeadroom: removedKnob(
    "readHeadroom was removed: it won no built-in case; the KV read a request adds to its neighbours' steps is counted as the time it adds to them (stallModel misses counts it through the TPOT headroom it leaves them)",
  ),
};

const GROUPS = { weights, picker, decode, stall, kvFit, learning, index };

const TITLES: Record<keyof typeof GROUPS, string> = {
  weights: 'scorer weights in the near band',
  picker: 'near band, spill test and placement filters',
  decode: 'prefill and decode speeds the estimate starts from',
  stall: "what a placement costs the request's and its neighbours' decode",
  kvFit: 'KV room',
  learning: 'online learners',
  index: 'prefix index and session table',
};

/** The groups in listing order. */
export const KVGATE_KNOB_GROUPS: readonly KnobGroup[] = Object.entries(GROUPS).map(([name, shape]) => ({
  name,
  title: TITLES[name as keyof typeof GROUPS],
  knobs: Object.keys(shape),
}));

export const kvgateOptions = z.strictObject({ ...weights, ...picker, ...decode, ...stall, ...kvFit, ...learning, ...index, ...removed });

export type KvgateOptions = z.output<typeof kvgateOptions>;
