/**
 * `kvgate bench`: replay a trace or a built-in workload against a simulated fleet, once per
 * policy, and compare them.
 */
import { closeSync, existsSync, openSync, readSync, statSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { availableParallelism } from 'node:os';
import { parseArgs } from 'node:util';
import { listGpus, listModels, resolveGpu, resolveModel } from '../engine/profiles.js';
import { RooflineTimeModel } from '../engine/time-model.js';
import { formatKnobValue } from '../scheduler/policies/knobs.js';
import { describePolicies, policyDefinition, policyNames } from '../scheduler/registry.js';
import { loadTrace, TRACE_FORMATS, TraceError, type AzureOptions, type TraceFormat } from '../workload/loaders.js';
import { createProgressBar, type ProgressBar } from '../bench/progress.js';
import { offeredLine, renderReport } from '../bench/report.js';
import { runBenchParallel } from './bench-parallel.js';
import { checkPolicies, GPU_HOUR_COST, runBench, type BenchOptions, type BenchOutput } from '../bench/run.js';
import { gpuMixLabel, parseGpuMix, type GpuShare } from '../bench/gpu-mix.js';
import { describeSlo } from '../bench/slo.js';
import { parseAcceptance, parseAcceptanceByTenant, parseAcceptanceShift, parseSpecMode, specModeName, type BenchSpecOptions, type SpecAcceptance } from '../bench/spec.js';
import { bandLines, cacheLines, gpuLines, isolationLines, priorityLines, specLines, summaryTable } from '../bench/table.js';
import { boundsAtCapacity, describeBoundsAtCapacity } from '../bench/work-bound.js';
import { parsePriorityMix } from '../admission/classes.js';
import { ADMISSION_DEFAULTS, type AdmissionSettings } from '../admission/controller.js';
import { PEER_ADMISSIONS, type PeerAdmissionName } from '../sim/peer-admission.js';
import { RESERVE_OUTPUT_TOKENS_CAP } from '../scheduler/router.js';
import type { BenchSource } from '../workload/types.js';
import { describeWorkloads, LORA_WORKLOAD_ADAPTERS, workloadNames, workloadSource } from '../workload/workloads.js';
import { customKvLink, isKvLinkPreset, KV_LINKS, KvTransferModel, type KvLink } from '../engine/kv-link.js';
import { disaggCaption, disaggTable, parseDisaggSplit, runDisaggBench, type DisaggBenchOptions, type DisaggBenchResults } from '../bench/disagg.js';
import { disaggregationSection } from '../config/schema/disaggregation.js';

const DEFAULT_POLICIES = ['round-robin', 'least-load', 'kvgate'];

export const help = `Usage: kvgate bench (--workload NAME | --trace FILE) [options]

Replays requests against a simulated fleet of vLLM workers in virtual time, once per policy on a
fresh fleet, routing with the gateway's own scheduler code. Prints a summary table.

Source (one of):
  --workload NAME         built-in workload: ${workloadNames().join(', ')}
  --size N                requests to generate, every turn of a session counted (default: per
                          workload, see --list)
  --rate R                mean arrival rate, requests/s (default: per workload, see --list)
  --burstiness B          Gamma shape of arrival gaps, 1 = Poisson (default: per workload)
  --repeat-fraction F     fraction of requests, 0 ≤ F < 1, that exactly repeat an earlier request
                          of the same tenant (drawn from the last 2,000; default 0)
  --trace FILE            replay a trace file, read line by line
  --format F              trace format: ${TRACE_FORMATS.join(' | ')}
                          (default: for .csv, burstgpt if its header names Request tokens, else
                          azure; mooncake if the first row has hash_ids; else jsonl)
  --azure-shared-prefix X give Azure (or BurstGPT) prompts a synthetic shared prefix: X tokens, or
                          the fraction X of each prompt when X < 1 (default: none)
  --azure-prefix-groups N distinct shared prefixes for --azure-shared-prefix (default 16)
  --skip-bad              skip and count malformed trace rows instead of failing

Fleet:
  --workers N             simulated workers (default 8; with a GPU mix, its total)
  --gpu NAME              GPU profile: ${listGpus().map((g) => g.name).join(', ')} (default h100)
  --gpu NAME:N,NAME:N     a mixed fleet, e.g. h100:4,a100:4 (workers interleaved by kind; the
                          GPU-hour cost is the mix's mean; no work bound is computed for it)
  --gpu-labels on|off     a mixed fleet's workers declare their GPU as their \`hardware\`, as an
                          operator labels a mixed pool (default on; off: no labels, kinds
                          told apart only by the KV capacity each reports)
  --model NAME            model profile: ${listModels().map((m) => m.name).join(', ')} (default llama-3.1-8b)
  --tp N                  tensor-parallel GPUs per worker (default 1)
  --max-loras N           LoRA adapters one worker batches at once (vLLM --max-loras): a request
                          whose adapter would be one too many waits (default 1 with --workload
                          lora, else no limit; only requests naming an adapter are affected)
  --kv-events             feed every policy that keeps a prefix index (kvgate too) from the
                          engines' KV events, as a gateway whose workers have kvEvents does
                          (default: only policies built on events, dynamo and llm-d-precise)
  --cpu-offload-gib N     give every worker a host-memory KV tier of N GiB (vLLM's CPU offloading
                          connector): prefix blocks evicted from the GPU are loaded back at PCIe
                          speed instead of recomputed, and KV events carry their medium, so
                          policies that read events credit such hits by tier (default none)

Run:
  --policy a,b,c          policies to compare (default ${DEFAULT_POLICIES.join(',')}); known: see --list
  --set POLICY.KNOB=V     set one of a policy's options (repeatable; knobs and defaults: see --list),
                          e.g. --set kvgate.spillRelative=0.5
  --rate-scale X          multiply the arrival rate by X (divides arrival times and sessions' think
                          times, not answer times; default 1)
  --limit N               replay at most N requests (sessions' later turns counted)
  --seed S                seed for workloads, synthetic tokens and tie-breaks (default 0)
  --jobs N                run the policies on N worker threads at once (default: the machine's
                          cores, ${availableParallelism()} here); each policy's runs stay on one thread, and
                          once every policy has one, the threads left over run the capacity
                          searches' next probes ahead (each search takes only the probes a serial
                          search makes), so the results are those of --jobs 1; the run-wide
                          figures (ideal hit rate, work bound) are computed beside them, even for
                          one policy (which then runs on the main thread, the run-wide pass on a
                          worker thread). --jobs 1: everything in turn on the main thread. The
                          status line's ETA counts each policy's runs left (with --capacity, the
                          probes its search has left: exact once it has bracketed its capacity)
                          at the mean run time so far, shared by the threads
  --declared-max-tokens N every request sends max_tokens = max(N, its output length), capped by the
                          context left after its prompt, and its answer ends at its EOS: as clients
                          send a fixed cap, so routers and admission cannot read each answer's
                          length from it (default: max_tokens is exactly the output length)
  --scrape-interval MS    metrics scrape interval for every policy (default: the policy's own, else 1000;
                          50 with --admission llm-d)
  --overhead-ms MS        constant gateway + network delay per request (default 0)
  --slo-ttft MS           TTFT SLO for goodput and attainment (default: none; 1000 with --capacity)
  --slo-ttft-per-1k MS    extra TTFT allowed per 1,000 prompt tokens (default: none; 100 with
                          --capacity; needs --slo-ttft otherwise)
  --slo-tpot MS           TPOT SLO for goodput and attainment (default: none; 50 with --capacity)
                          A request meets the SLO when TTFT ≤ slo-ttft + slo-ttft-per-1k × prompt/1000
                          and TPOT ≤ slo-tpot; rejected and shed requests miss it. With an SLO the
                          table and JSON give each policy's attainment (fraction meeting it).
                          Policies configured with the SLO they are run to (kvgate, oracle: their
                          tpotTargetMs and tpotWorthMs) are given this one unless --set says else
  --gpu-hour-cost USD     $ per GPU-hour (default ${Object.entries(GPU_HOUR_COST).map(([g, c]) => `${g} ${c.toFixed(2)}`).join(', ')})

Gateway replicas:
  --replicas N            run N gateway replicas (default 1): each has its own policy instance
                          (prefix index, session table) and in-flight accounting; arrivals are split
                          round-robin, as a Kubernetes Service spreads them. Metrics scrapes and KV
                          events (dynamo, llm-d-precise) reach every replica. Not with --admission
  --replica-sharing on|off  share routing knowledge between replicas (default off): each replica's
                          pick-time predictions and confirmed blocks (worker, block-hash run) reach
                          the other replicas' prefix indexes, as the gateway's Redis channel does
  --sharing-delay-ms D    propagation delay of shared knowledge, virtual ms (default 0)
  --share-load on|off     with --replica-sharing on, also share in-flight accounting (dispatches,
                          first tokens, ends) after the same delay, so every replica sees the whole
                          fleet's load between scrapes (default off), as the live gateway's
                          shared.load does through Redis (published every 25 ms by default)

Response cache:
  --cache on|off          run with the gateway's response cache (default off): each request is a
                          temperature-0 request of its prompt, looked up in the cache's in-memory
                          store in virtual time after admission and before routing; a hit is
                          answered after --overhead-ms without a worker, an identical request in
                          flight is joined (single-flight). Each policy is run once more without the
                          cache, for the GPU time saved; the table adds 'cache hit' and a line per
                          policy gives hit rate, GPU-seconds saved and TTFT with and without it
  --cache-ttl-ms MS       lifetime of an entry, virtual ms (default 300000)
  --cache-max-bytes N     the in-memory store's bound (default 268435456)

Admission control:
  --admission on|off|llm-d|llm-d-admitter
                          on: run the gateway's KV-pressure admission (src/admission/) in the
                          simulation, on its virtual clock: per request admit, queue or shed from
                          the fleet's estimated KV usage and the request's class (default off:
                          every request is routed). llm-d: llm-d's flow control instead, as a peer
                          (src/sim/peer-admission.ts): requests wait in priority bands (critical 1,
                          standard 0, sheddable −1) and dispatch while the pool's saturation
                          (mean of max(waiting/5, KV usage/0.8) per worker, stale scrapes 1) is
                          below 1, shed after 60 s; a dispatched sheddable request is then
                          refused with probability min(S^5·300, 1); scrapes every 50 ms unless
                          --scrape-interval says otherwise, as llm-d's EPP refreshes metrics.
                          llm-d-admitter: llm-d's sample admitter configuration, the same with
                          the detector's thresholds out of reach (waiting 999999999, KV 1.0): the
                          probabilistic admitter alone sheds, flow control holds requests only
                          while every worker's KV is full.
                          Any value adds by_priority to the JSON and a line per policy and class
                          to the table
  --priority-mix MIX      give each request a class drawn from MIX, e.g.
                          critical=0.2,standard=0.3,sheddable=0.5 (weights normalised; replaces the
                          trace's own priorities; default: the trace's "priority", else standard).
                          Classes reach the engine as vLLM integers critical 0, standard 1,
                          sheddable 2 (its priority scheduling), with admission on or off
  --shed-above X          fleet KV usage above which sheddable requests are shed (default 0.85)
  --shed-prefill-backlog N
                          shed a sheddable request when the worker picked for it has more than
                          N uncached prompt tokens awaiting their first token (default 8192;
                          0: off)
  --shed-tpot MS          shed a sheddable request when the answers of the worker picked for it
                          lately took more than MS per output token (default 50; 0: off)
  --queue-above X         fleet KV usage above which standard requests wait (default 0.92)
  --queue-max N           admission queue bound per model (default 256)
  --queue-max-wait MS     longest wait in the queue, virtual ms (default 10000)

Tenant isolation:
  --cache-isolation tenant|none
                          run as a pool with cacheIsolation: tenant (default none): each request's
                          tenant salts its KV blocks on the workers (vLLM's cache_salt) and in the
                          router's index; each policy is run once more shared, and a line per policy
                          gives the prefix-cache hit rate, TTFT, busy GPU time (and with --capacity,
                          capacity) shared → isolated
  --tenants N             reassign requests to N tenants t0 … tN−1 (a session's turns stay
                          together), as when N customers send the same application's prompts
                          (default: the workload's); with --cache-isolation tenant or
                          --spec-acceptance-by-tenant

Speculative cascade (docs/speculative.md):
  --spec-mode MODE        run the gateway's speculative cascade in the simulation: the workers above
                          are the target pool, a draft pool of --draft-workers proposes tokens, and
                          each round is the live cascade's own code (src/speculative/rounds.ts) on
                          the virtual clock: the controller picks k, the draft engine generates k
                          tokens, the target engine verifies them in one prefill-only pass (queued
                          and batched with the other traffic on it), acceptance, correction or
                          bonus token. Requests are temperature-0 completions; the output is the
                          target's exactly. MODE is one of:
                            target-only   no cascade: every request on the target pool (the draft
                                          pool stays idle), the baseline for the figures below
                            fixed:K       K draft tokens every round (K from 1 to 16)
                            adaptive      the adaptive controller (k per round, off when
                                          speculation does not pay, re-probes), pricing draft
                                          and target GPU time at their GPUs' hourly prices
                          Adds per policy 'speculative' to the JSON (target_gpu_seconds,
                          draft_gpu_seconds, spec_acceptance_rate, tokens_from_draft_fraction,
                          mean_k, cost_per_million_output_tokens of both pools' busy GPU time) and
                          a line per policy to the table. Not with --cache on
  --spec-acceptance A     the draft's per-token acceptance rate α, 0 ≤ A ≤ 1 (needed by fixed:K and
                          adaptive, unless --spec-acceptance-shift)
  --spec-acceptance-by-tenant T=A[,T=A...]
                          α per tenant, the controller's prompt class (e.g. t0=0.9,t1=0.2 with
                          --tenants 2: a draft that suits one kind of prompt and not another);
                          other tenants keep --spec-acceptance, which is then needed. Adds
                          by_tenant to the JSON: α configured and measured, mean k, requests
                          down each path. Not with --spec-acceptance-shift
  --spec-acceptance-shift A1:A2@SECONDS
                          α = A1 until SECONDS of virtual time, A2 after (e.g. 0.8:0.3@60); the
                          line and JSON then say when the controller settled after the shift
  --draft-model NAME      the draft's model profile (needed by fixed:K and adaptive; known: as --model)
  --draft-quant Q         the draft's weight dtype: bf16, fp8, int4 (default bf16)
  --draft-gpu NAME        the draft workers' GPU (default: --gpu); one GPU per draft worker
  --draft-workers N       draft workers (default 1)
  --target-engine vllm|sglang
                          the target pool's engine, which sets what a verification costs (default
                          vllm): sglang verifies through /generate with logprob_start_len, which
                          reads the prefix cache up to the last context token, so only the draft
                          tokens and the uncached tail are computed; vllm through the OpenAI route,
                          whose prompt_logprobs skip the prefix cache: the whole context is computed
                          every round (unless --spec-verify-cache on)
  --spec-tpot-budget MS   every request's TPOT budget, as the gateway's speculative.controller.tpotBudgetMs
                          (default none: the adaptive controller keeps a request as fast as the
                          target alone; with a budget it trades speed within it for cost)
  --spec-verify-cache on|off
                          whether a verification reads the target's prefix cache (default: on with
                          sglang, off with vllm); on with vllm: its /inference/v1/generate route with
                          skip_reading_prefix_cache false; off with sglang: its radix cache disabled

Capacity at SLO:
  --capacity              find each policy's capacity: the highest --rate-scale at which at least
                          --attainment of the requests meet the SLO. Brackets by doubling or halving
                          from --rate-scale, then bisects to --capacity-precision; every probe is a fresh
                          fleet on the same request stream (see --capacity-seconds); reports the highest probed scale that met the
                          target, and each policy's capacity over round-robin's and the best peer's
                          (peers: every policy run but kvgate, oracle, oracle-greedy), and the work
                          bound: the rate no policy can sustain beyond, from the requests' least GPU
                          time (src/bench/work-bound.ts), with each capacity ÷ it
  --attainment X          target fraction of requests meeting the SLO, 0 < X ≤ 1 (default 0.9)
  --min-band-attainment X also require X of the completed requests of every prompt-length band
                          (< 2,048 tokens, 2,048–8,191, ≥ 8,192; bands of 20 requests or more) to
                          meet it, 0 < X ≤ 1 (default: no floor), so that no policy reaches its
                          capacity by letting the long prompts miss. Every probe's worst band is in
                          the JSON either way, and the table's attainment_by_prompt lines
  --capacity-precision P  bisect until the bracket's high / low ≤ 1 + P (default 0.02). Attainment
                          near capacity is not monotone in the rate (a probe 1% faster can meet
                          the target where a slower one missed), so a finer search is not a more
                          exact one: compare policies at several fixed --rate-scale values as well
  --max-probes N          at most N probes per policy (default 14; the run at --rate-scale is the
                          first); a search that runs out says so (capacity marked '?', converged false)
  --capacity-seconds S    every probe of a built-in workload replays its requests and then as many
                          more of the same stream as arrive within S virtual seconds at the probe's
                          rate (default 60; 0: exactly --size requests): a short run is absorbed as
                          one burst and meets the SLO at rates the fleet cannot sustain. A trace
                          has the rows it has: each probe's span_s in the JSON says how long it ran
  --capacity-full-probes  run every probe to its end. By default a probe stops as soon as its
                          misses (refusals, and completed requests past the SLO) leave too few
                          requests to reach --attainment: the search needs no more of it, the
                          capacity found is the same, and the probe is marked stopped_early in
                          the JSON with its attainment an upper bound

Prefill/decode disaggregation (docs/disaggregation.md):
  --disagg P:D            compare a disaggregated fleet of P prefill and D decode workers (P + D =
                          --workers; --workers defaults to P + D) with aggregated serving on the
                          same workers: each request is decided by the gateway's decider (prefill on
                          a prefill worker when its uncached prompt tokens on the chosen decode
                          worker reach --disagg-threshold and the prefill pool is not saturated),
                          its KV pulled over the link, decoded on a decode worker; TTFT includes the
                          transfer. With --capacity, each fleet's capacity at SLO and its ratio to
                          the aggregated fleet's. One policy (default kvgate)
  --disagg auto           the same for every split P:(N−P), 1 ≤ P < N, and the best of them
  --kv-link NAME          the link KV crosses: nvlink (NVLink 4, 450 GB/s per direction), ib-400
                          (400 Gb/s InfiniBand, 50 GB/s), tcp-100 (100 Gb/s Ethernet, 10 GB/s
                          effective) (default ib-400)
  --kv-link-gbps N        a link of N Gb/s instead of a preset (with --kv-link-latency-us)
  --kv-link-latency-us N  its fixed cost per transfer, µs (default 10)
  --disagg-prefill-role prefill|both
                          prefill (default): the P workers only prefill for the decode workers;
                          both: they also serve the requests the decider keeps local, as the
                          decode workers do (a fleet of P + D workers that all serve whole
                          requests, P of them taking the long prefills)
  --disagg-threshold N    uncached prompt tokens from which a request is disaggregated (the
                          decider's nonCachedTokens; default 512)

Output:
  --json FILE             write the results as JSON
  --report FILE.html      write a self-contained HTML report (charts as inline SVG)
  --records FILE          write every completed request of each policy's run as a CSV row
                          (arrival_ms, prompt_tokens, cached_tokens, output_tokens, ttft_ms,
                          tpot_ms, e2e_ms, worker, source, class); with several policies, one file each,
                          the policy's name before the extension (records-kvgate.csv)
  --omit-wall-time        leave sim_wall_ms out of the JSON (same seed → byte-identical file)
  --progress              draw a progress bar on stderr even when it is not a terminal
  --quiet                 print nothing but errors
  --list                  list workloads, policies, GPUs and models, then exit
  -h, --help              this help

Exit status: 0 on success, 1 if a run failed, 2 on bad arguments.
`;

const OPTIONS = {
  workload: { type: 'string' },
  'max-loras': { type: 'string' },
  'cpu-offload-gib': { type: 'string' },
  'kv-events': { type: 'boolean' },
  size: { type: 'string' },
  rate: { type: 'string' },
  burstiness: { type: 'string' },
  'repeat-fraction': { type: 'string' },
  cache: { type: 'string' },
  replicas: { type: 'string' },
  'replica-sharing': { type: 'string' },
  'sharing-delay-ms': { type: 'string' },
  'share-load': { type: 'string' },
  admission: { type: 'string' },
  'priority-mix': { type: 'string' },
  'shed-above': { type: 'string' },
  'shed-prefill-backlog': { type: 'string' },
  'shed-tpot': { type: 'string' },
  'queue-above': { type: 'string' },
  'queue-max': { type: 'string' },
  'queue-max-wait': { type: 'string' },
  'cache-ttl-ms': { type: 'string' },
  'cache-max-bytes': { type: 'string' },
  'cache-isolation': { type: 'string' },
  tenants: { type: 'string' },
  trace: { type: 'string' },
  format: { type: 'string' },
  'azure-shared-prefix': { type: 'string' },
  'azure-prefix-groups': { type: 'string' },
  'skip-bad': { type: 'boolean' },
  workers: { type: 'string' },
  gpu: { type: 'string' },
  'gpu-labels': { type: 'string' },
  model: { type: 'string' },
  tp: { type: 'string' },
  policy: { type: 'string' },
  set: { type: 'string', multiple: true },
  'rate-scale': { type: 'string' },
  limit: { type: 'string' },
  seed: { type: 'string' },
  'declared-max-tokens': { type: 'string' },
  'scrape-interval': { type: 'string' },
  'overhead-ms': { type: 'string' },
  'slo-ttft': { type: 'string' },
  'slo-ttft-per-1k': { type: 'string' },
  'slo-tpot': { type: 'string' },
  capacity: { type: 'boolean' },
  attainment: { type: 'string' },
  'min-band-attainment': { type: 'string' },
  'max-probes': { type: 'string' },
  'capacity-seconds': { type: 'string' },
  'capacity-full-probes': { type: 'boolean' },
  'capacity-precision': { type: 'string' },
  'gpu-hour-cost': { type: 'string' },
  'spec-mode': { type: 'string' },
  'spec-acceptance': { type: 'string' },
  'spec-acceptance-shift': { type: 'string' },
  'spec-acceptance-by-tenant': { type: 'string' },
  'draft-model': { type: 'string' },
  'draft-quant': { type: 'string' },
  'draft-gpu': { type: 'string' },
  'draft-workers': { type: 'string' },
  'spec-verify-cache': { type: 'string' },
  disagg: { type: 'string' },
  'kv-link': { type: 'string' },
  'kv-link-gbps': { type: 'string' },
  'kv-link-latency-us': { type: 'string' },
  'disagg-threshold': { type: 'string' },
  'disagg-prefill-role': { type: 'string' },
  'target-engine': { type: 'string' },
  'spec-tpot-budget': { type: 'string' },
  json: { type: 'string' },
  records: { type: 'string' },
  report: { type: 'string' },
  'omit-wall-time': { type: 'boolean' },
  progress: { type: 'boolean' },
  jobs: { type: 'string' },
  quiet: { type: 'boolean' },
  list: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

export class UsageError extends Error {}

/** --records FILE, refused before the run when its folder is not there (the run may take minutes). */
function recordsFile(file: string): string {
  const dir = dirname(resolve(file));
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new UsageError(`--records ${file}: no folder ${dir} to write it in`);
  return file;
}

const SPEC_FLAGS = ['spec-acceptance', 'spec-acceptance-shift', 'spec-acceptance-by-tenant', 'draft-model', 'draft-quant', 'draft-gpu', 'draft-workers', 'spec-verify-cache', 'target-engine', 'spec-tpot-budget'] as const;

/**
 * The speculative cascade's flags → the bench's options (undefined without --spec-mode). Throws
 * UsageError naming the flag on any bad value or combination.
 */
export function parseSpecFlags(v: Partial<Record<'spec-mode' | (typeof SPEC_FLAGS)[number] | 'gpu', string>>): BenchSpecOptions | undefined {
  if (v['spec-mode'] === undefined) {
    const given = SPEC_FLAGS.filter((f) => v[f] !== undefined);
    if (given.length > 0) throw new UsageError(`--${given[0]} applies to --spec-mode only`);
    return undefined;
  }
  const wrap = <T>(flag: string, f: () => T): T => {
    try {
      return f();
    } catch (e) {
      throw new UsageError(`--${flag} ${(e as Error).message}`);
    }
  };
  const mode = wrap('spec-mode', () => parseSpecMode(v['spec-mode']!));
  if (v['spec-acceptance'] !== undefined && v['spec-acceptance-shift'] !== undefined) throw new UsageError('give --spec-acceptance or --spec-acceptance-shift, not both');
  let acceptance: SpecAcceptance | undefined;
  if (v['spec-acceptance'] !== undefined) acceptance = wrap('spec-acceptance', () => parseAcceptance(v['spec-acceptance']!));
  if (v['spec-acceptance-shift'] !== undefined) acceptance = wrap('spec-acceptance-shift', () => parseAcceptanceShift(v['spec-acceptance-shift']!));
  let acceptanceByTenant: Record<string, number> | undefined;
  if (v['spec-acceptance-by-tenant'] !== undefined) {
    if (v['spec-acceptance-shift'] !== undefined) throw new UsageError('give --spec-acceptance-by-tenant or --spec-acceptance-shift, not both');
    if (v['spec-acceptance'] === undefined) throw new UsageError('--spec-acceptance-by-tenant needs --spec-acceptance A for the tenants it does not name');
    acceptanceByTenant = wrap('spec-acceptance-by-tenant', () => parseAcceptanceByTenant(v['spec-acceptance-by-tenant']!));
  }
  const speculating = mode.kind !== 'target-only';
  if (speculating && acceptance === undefined) throw new UsageError(`--spec-mode ${v['spec-mode']} needs the draft's acceptance: --spec-acceptance A or --spec-acceptance-shift A1:A2@SECONDS`);
  if (speculating && v['draft-model'] === undefined) throw new UsageError(`--spec-mode ${v['spec-mode']} needs --draft-model NAME (known: ${listModels().map((m) => m.name).join(', ')})`);
  const draftModel = v['draft-model'] ?? 'llama-3.1-8b';
  if (!listModels().some((m) => m.name === draftModel)) throw new UsageError(`unknown --draft-model '${draftModel}' (known: ${listModels().map((m) => m.name).join(', ')})`);
  const draftQuant = v['draft-quant'] ?? 'bf16';
  if (draftQuant !== 'bf16' && draftQuant !== 'fp8' && draftQuant !== 'int4') throw new UsageError(`--draft-quant must be bf16, fp8 or int4, got '${draftQuant}'`);
  const draftGpu = (v['draft-gpu'] ?? v.gpu ?? 'h100').toLowerCase();
  if (!listGpus().some((g) => g.name === draftGpu)) throw new UsageError(`unknown --draft-gpu '${v['draft-gpu']}' (known: ${listGpus().map((g) => g.name).join(', ')})`);
  const draftWorkers = intFlag(v['draft-workers'], 'draft-workers', 1) ?? 1;
  const vc = v['spec-verify-cache'];
  if (vc !== undefined && vc !== 'on' && vc !== 'off') throw new UsageError(`--spec-verify-cache must be on or off, got '${vc}'`);
  const tbs = v['spec-tpot-budget'];
  const tb = tbs === undefined ? undefined : Number(tbs);
  if (tb !== undefined && (tbs!.trim() === '' || !Number.isFinite(tb) || tb <= 0)) throw new UsageError(`--spec-tpot-budget must be a positive number of milliseconds, got '${tbs}'`);
  const te = v['target-engine'] ?? 'vllm';
  if (te !== 'vllm' && te !== 'sglang') throw new UsageError(`--target-engine must be vllm or sglang, got '${te}'`);
  return {
    mode,
    acceptance: acceptance ?? 0,
    ...(acceptanceByTenant ? { acceptanceByTenant } : {}),
    draftModel,
    draftQuant,
    draftGpu,
    draftWorkers,
    targetEngine: te,
    ...(tb === undefined ? {} : { tpotBudgetMs: tb }),
    ...(vc === undefined ? {} : { verifyPrefixCache: vc === 'on' }),
  };
}

/**
 * --capacity searches for the highest rate at which requests meet the SLO; if an idle worker of
 * every kind in the fleet decodes slower than the TPOT target, none does at any rate, and the
 * search would only halve the rate until its probe budget ran out. Say so at once.
 */
function checkTpotReachable(gpuMix: readonly GpuShare[], modelName: string, tp: number, sloTpotMs: number): void {
  let fastest: { gpu: string; ms: number } | null = null;
  let model: ReturnType<typeof resolveModel>;
  try {
    model = resolveModel(modelName);
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  for (const { gpu } of gpuMix) {
    const ms = new RooflineTimeModel({ gpu: resolveGpu(gpu), model, tp }).stepMs({ prefill: [], decodeSeqs: 1, decodeContextTokens: 0 });
    if (fastest === null || ms < fastest.ms) fastest = { gpu, ms };
  }
  if (fastest !== null && fastest.ms > sloTpotMs) {
    throw new UsageError(
      `--capacity: no rate meets a ${sloTpotMs} ms TPOT SLO here: an idle ${fastest.gpu} worker (tp ${tp}) takes ` +
        `${fastest.ms.toFixed(1)} ms per decode step for ${modelName}. Raise --slo-tpot, or use faster GPUs or a larger --tp`,
    );
  }
}

/**
 * A policy that takes the SLO the fleet is run to (kvgate's tpotTargetMs and tpotWorthMs, the
 * ratio of the TTFT and TPOT targets) is given the run's, as an operator would configure it,
 * unless `--set` gives its own. Policies without such options (the peers) are left as they are.
 */
function runToSlo(policies: readonly string[], options: Record<string, Record<string, string>>, tpotMs: number, ttftMs: number | undefined): void {
  for (const name of policies) {
    const shape = policyDefinition(name).options.shape as Record<string, unknown>;
    if (!('tpotTargetMs' in shape)) continue;
    const o = (options[name] ??= {});
    o['tpotTargetMs'] ??= String(tpotMs);
    if (ttftMs !== undefined && 'tpotWorthMs' in shape) o['tpotWorthMs'] ??= String(ttftMs / tpotMs);
  }
}

/**
 * `--set kvgate.spillRelative=0.5` → { kvgate: { spillRelative: '0.5' } }. Values stay strings:
 * the policy's option schema coerces and checks them exactly as it does a config file's.
 */
function parsePolicySets(sets: readonly string[], policies: readonly string[]): Record<string, Record<string, string>> {
  const out: Record<string, Record<string, string>> = {};
  for (const s of sets) {
    const m = /^([^.=]+)\.([^=]+)=(.*)$/.exec(s);
    if (!m) throw new UsageError(`--set takes POLICY.KNOB=VALUE, got '${s}'`);
    const [, policy, knob, value] = m as unknown as [string, string, string, string];
    if (!policies.includes(policy)) throw new UsageError(`--set ${s}: policy '${policy}' is not among --policy ${policies.join(',')}`);
    (out[policy] ??= {})[knob] = value;
  }
  return out;
}

function intFlag(v: string | undefined, name: string, min: number): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new UsageError(`--${name} must be an integer ≥ ${min}, got '${v}'`);
  return n;
}

function numFlag(v: string | undefined, name: string, opts: { positive?: boolean } = {}): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || n < 0 || (opts.positive && n === 0)) {
    throw new UsageError(`--${name} must be a ${opts.positive ? 'positive' : 'non-negative'} number, got '${v}'`);
  }
  return n;
}

/**
 * Trace format from the file: .csv is BurstGPT when its header names `Request tokens`, else Azure;
 * a JSON first row with hash_ids is Mooncake; else kvgate's JSONL.
 */
function sniffFormat(path: string): TraceFormat {
  const fd = openSync(path, 'r');
  try {
    const buf = Buffer.alloc(4096);
    const n = readSync(fd, buf, 0, buf.length, 0);
    const first = buf.subarray(0, n).toString('utf8').split('\n')[0] ?? '';
    if (path.toLowerCase().endsWith('.csv')) return /(^|,)\s*request tokens\s*(,|$)/i.test(first) ? 'burstgpt' : 'azure';
    return first.includes('"hash_ids"') ? 'mooncake' : 'jsonl';
  } finally {
    closeSync(fd);
  }
}

function listing(): string {
  const lines = ['Workloads (default size, rate, burstiness):'];
  for (const w of describeWorkloads()) {
    lines.push(`  ${w.name.padEnd(14)} ${String(w.size).padStart(6)} req  ${String(w.rate).padStart(4)} req/s  b=${w.burstiness}  ${w.description}`);
  }
  lines.push('Policies (options with their defaults, set as policy.options in the gateway config):');
  for (const p of describePolicies()) {
    lines.push(`  ${p.name.padEnd(20)} ${p.description}`);
    if (p.sameOptionsAs !== undefined) lines.push(`      (the options of ${p.sameOptionsAs})`);
    else {
      let group: string | undefined;
      for (const k of p.options) {
        if (k.group !== undefined && k.group !== group) lines.push(`    ${(group = k.group)}`);
        lines.push(`      ${`${k.name}: ${formatKnobValue(k.default)}`.padEnd(34)} ${k.description}`);
      }
    }
  }
  lines.push('GPUs:', ...listGpus().map((g) => `  ${g.name.padEnd(8)} ${g.description}`));
  lines.push('Models:', ...listModels().map((m) => `  ${m.name}`));
  return lines.join('\n') + '\n';
}

export const parseFlags = (args: string[]) => parseArgs({ args, options: OPTIONS, strict: true, allowPositionals: false }).values;
export type BenchFlags = ReturnType<typeof parseFlags>;

/** The request source the flags name (a built-in workload or a trace), and its size if known. */
function sourceFromFlags(v: BenchFlags, seed: number): { source: BenchSource; total: number | undefined } {
  let source: BenchSource;
  let total: number | undefined;
  if ((v.workload === undefined) === (v.trace === undefined)) throw new UsageError('give exactly one of --workload NAME or --trace FILE');
  if (v.workload !== undefined) {
    for (const f of ['format', 'azure-shared-prefix', 'azure-prefix-groups'] as const) {
      if (v[f] !== undefined) throw new UsageError(`--${f} applies to --trace only`);
    }
    const size = intFlag(v.size, 'size', 1);
    const repeatFraction = numFlag(v['repeat-fraction'], 'repeat-fraction');
    if (repeatFraction !== undefined && repeatFraction >= 1) throw new UsageError(`--repeat-fraction must be in [0, 1), got '${v['repeat-fraction']}'`);
    try {
      source = workloadSource(v.workload, {
        size,
        rate: numFlag(v.rate, 'rate', { positive: true }),
        burstiness: numFlag(v.burstiness, 'burstiness', { positive: true }),
        repeatFraction,
        seed,
      });
    } catch (e) {
      throw new UsageError((e as Error).message);
    }
    total = size ?? describeWorkloads().find((w) => w.name === v.workload)!.size;
  } else {
    for (const f of ['size', 'rate', 'burstiness', 'repeat-fraction'] as const) {
      if (v[f] !== undefined) throw new UsageError(`--${f} applies to --workload only (use --rate-scale and --limit with a trace)`);
    }
    const path = v.trace!;
    let format: TraceFormat;
    if (v.format !== undefined) {
      if (!TRACE_FORMATS.includes(v.format as TraceFormat)) {
        throw new UsageError(`--format must be one of ${TRACE_FORMATS.join(', ')}, got '${v.format}'`);
      }
      format = v.format as TraceFormat;
    } else {
      try {
        format = sniffFormat(path);
      } catch (e) {
        throw new UsageError(`cannot read trace ${path}: ${(e as Error).message}`);
      }
    }
    const loaderOpts: AzureOptions = { skipBad: v['skip-bad'] === true, seed };
    const sp = numFlag(v['azure-shared-prefix'], 'azure-shared-prefix');
    const groups = intFlag(v['azure-prefix-groups'], 'azure-prefix-groups', 1);
    if ((sp !== undefined || groups !== undefined) && format !== 'azure' && format !== 'burstgpt') {
      throw new UsageError('--azure-shared-prefix applies to --format azure and burstgpt only');
    }
    if (sp !== undefined) loaderOpts.sharedPrefix = sp < 1 ? { fraction: sp, groups } : { tokens: Math.floor(sp), groups };
    else if (groups !== undefined) throw new UsageError('--azure-prefix-groups needs --azure-shared-prefix');
    source = loadTrace(path, format, loaderOpts);
    total = undefined;
  }
  return { source, total };
}

/** --admission and its thresholds as the bench's KV-pressure admission settings. */
function admissionFromFlags(v: BenchFlags): { admissionOn: boolean; kvAdmission: AdmissionSettings | undefined; peer: PeerAdmissionName | undefined } {
  const peer = PEER_ADMISSIONS.find((p) => p === v.admission);
  if (v.admission !== undefined && v.admission !== 'on' && v.admission !== 'off' && !peer) {
    throw new UsageError(`--admission must be on, off or ${PEER_ADMISSIONS.join(', ')}, got '${v.admission}'`);
  }
  const admissionOn = v.admission === 'on';
  for (const f of ['shed-above', 'shed-prefill-backlog', 'shed-tpot', 'queue-above', 'queue-max', 'queue-max-wait'] as const) {
    if (!admissionOn && v[f] !== undefined) throw new UsageError(`--${f} applies to --admission on only`);
  }
  const fraction = (f: 'shed-above' | 'queue-above', d: number): number => {
    const x = numFlag(v[f], f, { positive: true }) ?? d;
    if (x > 1) throw new UsageError(`--${f} must be a fraction in (0, 1], got '${v[f]}'`);
    return x;
  };
  const kvAdmission = admissionOn
    ? {
        thresholds: {
          sheddable: fraction('shed-above', ADMISSION_DEFAULTS.thresholds.sheddable),
          standard: fraction('queue-above', ADMISSION_DEFAULTS.thresholds.standard),
          prefillBacklogTokens: intFlag(v['shed-prefill-backlog'], 'shed-prefill-backlog', 0) ?? ADMISSION_DEFAULTS.thresholds.prefillBacklogTokens,
          sheddableTpotMs: numFlag(v['shed-tpot'], 'shed-tpot') ?? ADMISSION_DEFAULTS.thresholds.sheddableTpotMs,
        },
        queue: {
          maxSize: intFlag(v['queue-max'], 'queue-max', 0) ?? ADMISSION_DEFAULTS.queue.maxSize,
          maxWaitMs: numFlag(v['queue-max-wait'], 'queue-max-wait', { positive: true }) ?? ADMISSION_DEFAULTS.queue.maxWaitMs,
        },
        retryAfterSeconds: ADMISSION_DEFAULTS.retryAfterSeconds,
        reserveOutputCap: RESERVE_OUTPUT_TOKENS_CAP,
      }
    : undefined;
  return { admissionOn, kvAdmission, peer };
}

/** --capacity and its search flags, and the SLO (with --capacity, its defaults filled in). */
function capacityFromFlags(v: BenchFlags): { capacity: BenchOptions['capacity']; sloTtftMs?: number; sloTtftPer1kMs?: number; sloTpotMs?: number } {
  const capacity = v.capacity === true;
  for (const f of ['attainment', 'min-band-attainment', 'max-probes', 'capacity-seconds', 'capacity-precision', 'capacity-full-probes'] as const) {
    if (!capacity && v[f] !== undefined) throw new UsageError(`--${f} applies to --capacity only`);
  }
  const attainment = numFlag(v.attainment, 'attainment', { positive: true });
  if (attainment !== undefined && attainment > 1) throw new UsageError(`--attainment must be a fraction in (0, 1], got '${v.attainment}'`);
  const minBandAttainment = numFlag(v['min-band-attainment'], 'min-band-attainment', { positive: true });
  if (minBandAttainment !== undefined && minBandAttainment > 1) {
    throw new UsageError(`--min-band-attainment must be a fraction in (0, 1], got '${v['min-band-attainment']}'`);
  }
  const maxProbes = intFlag(v['max-probes'], 'max-probes', 1);
  const minSeconds = numFlag(v['capacity-seconds'], 'capacity-seconds');
  const precision = numFlag(v['capacity-precision'], 'capacity-precision', { positive: true });
  let sloTtftMs = numFlag(v['slo-ttft'], 'slo-ttft', { positive: true });
  let sloTtftPer1kMs = numFlag(v['slo-ttft-per-1k'], 'slo-ttft-per-1k');
  let sloTpotMs = numFlag(v['slo-tpot'], 'slo-tpot', { positive: true });
  if (capacity) {
    sloTtftMs ??= 1000;
    sloTtftPer1kMs ??= 100;
    sloTpotMs ??= 50;
  } else if (sloTtftPer1kMs !== undefined && sloTtftMs === undefined) {
    throw new UsageError('--slo-ttft-per-1k needs --slo-ttft (or --capacity)');
  }
  return {
    capacity: capacity ? { target: attainment, precision, maxProbes, minBandAttainment, minSeconds, fullProbes: v['capacity-full-probes'] === true } : undefined,
    sloTtftMs,
    sloTtftPer1kMs,
    sloTpotMs,
  };
}

/** --replicas and its sharing flags. */
function replicasFromFlags(v: BenchFlags, admissionOn: boolean): BenchOptions['replicas'] {
  const replicaCount = intFlag(v.replicas, 'replicas', 1);
  const rs = v['replica-sharing'];
  if (rs !== undefined && rs !== 'on' && rs !== 'off') throw new UsageError(`--replica-sharing must be on or off, got '${rs}'`);
  const sharingDelayMs = numFlag(v['sharing-delay-ms'], 'sharing-delay-ms');
  if (replicaCount === undefined && (rs !== undefined || sharingDelayMs !== undefined)) throw new UsageError('--replica-sharing and --sharing-delay-ms apply to --replicas only');
  if (sharingDelayMs !== undefined && rs !== 'on') throw new UsageError('--sharing-delay-ms applies to --replica-sharing on only');
  const sl = v['share-load'];
  if (sl !== undefined && sl !== 'on' && sl !== 'off') throw new UsageError(`--share-load must be on or off, got '${sl}'`);
  if (sl !== undefined && rs !== 'on') throw new UsageError('--share-load applies to --replica-sharing on only');
  if (replicaCount !== undefined && replicaCount > 1 && admissionOn) throw new UsageError(`--replicas above 1 is not simulated with --admission ${v.admission}`);
  return replicaCount !== undefined ? { count: replicaCount, sharing: rs === 'on', sharingDelayMs: sharingDelayMs ?? 0, shareLoad: sl === 'on' } : undefined;
}

/** The bench's options from its flags, with its source and that source's size if known. Throws UsageError. */
export function benchFromFlags(v: BenchFlags): { opts: BenchOptions; source: BenchSource; total: number | undefined } {
  let source: BenchSource;
  let total: number | undefined;
  let opts: BenchOptions;
  const seed = intFlag(v.seed, 'seed', 0) ?? 0;
  const limit = intFlag(v.limit, 'limit', 1);
  ({ source, total } = sourceFromFlags(v, seed));
  if (limit !== undefined) total = total === undefined ? limit : Math.min(total, limit);
  const policies = (v.policy ?? (v.disagg !== undefined ? 'kvgate' : DEFAULT_POLICIES.filter((p) => policyNames().includes(p)).join(',')))
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (policies.length === 0) throw new UsageError('--policy needs at least one policy name');
  const policyOptions = parsePolicySets(v.set ?? [], policies);
  try {
    checkPolicies(policies, policyOptions);
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  const disaggSplit = v.disagg !== undefined && v.disagg !== 'auto' ? /^(\d+):(\d+)$/.exec(v.disagg) : null;
  const workersFlag = intFlag(v.workers, 'workers', 1) ?? (disaggSplit ? Number(disaggSplit[1]) + Number(disaggSplit[2]) : undefined);
  let gpuMix: GpuShare[];
  try {
    gpuMix = parseGpuMix(v.gpu ?? 'h100', workersFlag ?? (v.gpu?.includes(':') ? undefined : 8));
  } catch (e) {
    throw new UsageError(`--gpu: ${(e as Error).message}`);
  }
  const gpu = gpuMixLabel(gpuMix);
  const gl = v['gpu-labels'];
  if (gl !== undefined && gl !== 'on' && gl !== 'off') throw new UsageError(`--gpu-labels must be on or off, got '${gl}'`);
  if (gl !== undefined && gpuMix.length < 2) throw new UsageError('--gpu-labels applies to a mixed fleet (--gpu NAME:COUNT,…) only');
  const gpuLabels = gl !== 'off';
  const workers = gpuMix.reduce((a, s) => a + s.count, 0);
  const model = v.model ?? 'llama-3.1-8b';
  const { capacity, sloTtftMs, sloTtftPer1kMs, sloTpotMs } = capacityFromFlags(v);
  if (sloTpotMs !== undefined) runToSlo(policies, policyOptions, sloTpotMs, sloTtftMs);
  if (capacity && sloTpotMs !== undefined) checkTpotReachable(gpuMix, model, intFlag(v.tp, 'tp', 1) ?? 1, sloTpotMs);
  if (v.cache !== undefined && v.cache !== 'on' && v.cache !== 'off') throw new UsageError(`--cache must be on or off, got '${v.cache}'`);
  const cacheOn = v.cache === 'on';
  for (const f of ['cache-ttl-ms', 'cache-max-bytes'] as const) {
    if (!cacheOn && v[f] !== undefined) throw new UsageError(`--${f} applies to --cache on only`);
  }
  const iso = v['cache-isolation'];
  if (iso !== undefined && iso !== 'tenant' && iso !== 'none') throw new UsageError(`--cache-isolation must be tenant or none, got '${iso}'`);
  const tenants = intFlag(v.tenants, 'tenants', 1);
  if (tenants !== undefined && iso !== 'tenant' && v['spec-acceptance-by-tenant'] === undefined) {
    throw new UsageError('--tenants applies to --cache-isolation tenant and --spec-acceptance-by-tenant only');
  }
  const cacheTtlMs = numFlag(v['cache-ttl-ms'], 'cache-ttl-ms', { positive: true });
  const { admissionOn, kvAdmission, peer } = admissionFromFlags(v);
  let priorityMix: ReturnType<typeof parsePriorityMix> | undefined;
  if (v['priority-mix'] !== undefined) {
    try {
      priorityMix = parsePriorityMix(v['priority-mix']);
    } catch (e) {
      throw new UsageError(`--priority-mix: ${(e as Error).message}`);
    }
  }
  const cacheMaxBytes = intFlag(v['cache-max-bytes'], 'cache-max-bytes', 1);
  const replicas = replicasFromFlags(v, admissionOn || peer !== undefined);
  const speculative = parseSpecFlags(v);
  if (speculative && gpuMix.length > 1) throw new UsageError('--spec-mode is not simulated on a mixed fleet (--gpu NAME:COUNT,…)');
  if (speculative && cacheOn) throw new UsageError('--spec-mode is not simulated with --cache on');
  opts = {
    source,
    policies,
    cache: cacheOn ? { ttlMs: cacheTtlMs, maxBytes: cacheMaxBytes } : undefined,
    isolation: iso === 'tenant' ? { tenants } : undefined,
    ...(iso !== 'tenant' && tenants !== undefined ? { tenants } : {}),
    workers,
    gpu,
    gpuLabels,
    model,
    tp: intFlag(v.tp, 'tp', 1) ?? 1,
    maxLoras: intFlag(v['max-loras'], 'max-loras', 1) ?? (v.workload === 'lora' ? 1 : undefined),
      cpuOffloadGib: numFlag(v['cpu-offload-gib'], 'cpu-offload-gib', { positive: true }),
      ...(v['kv-events'] === true ? { kvEvents: true } : {}),
    ...(v.workload === 'lora' ? { adapters: LORA_WORKLOAD_ADAPTERS } : {}),
    seed,
    rateScale: numFlag(v['rate-scale'], 'rate-scale', { positive: true }) ?? 1,
    limit,
    // llm-d's saturation detector counts a scrape older than 200 ms as saturated: its EPP refreshes every 50 ms.
    scrapeIntervalMs: numFlag(v['scrape-interval'], 'scrape-interval', { positive: true }) ?? (peer !== undefined ? 50 : undefined),
    overheadMs: numFlag(v['overhead-ms'], 'overhead-ms'),
    sloTtftMs,
    sloTtftPer1kMs,
    sloTpotMs,
    capacity,
    gpuHourCost: numFlag(v['gpu-hour-cost'], 'gpu-hour-cost'),
    omitWallTime: v['omit-wall-time'] === true,
    ...(v.records !== undefined ? { records: { file: recordsFile(v.records), perPolicy: policies.length > 1 } } : {}),
    policyOptions,
    kvAdmission,
    ...(peer ? { peerAdmission: peer } : {}),
    priorityMix,
    declaredMaxTokens: intFlag(v['declared-max-tokens'], 'declared-max-tokens', 1),
    byPriority: v.admission !== undefined || priorityMix !== undefined,
    speculative,
    replicas,
  };
  return { opts, source, total };
}

/** --disagg and its link and decider flags (undefined without --disagg). Throws UsageError naming the flag. */
export function disaggFromFlags(v: BenchFlags, workers: number, model: string, tp: number, policies: readonly string[]): DisaggBenchOptions | undefined {
  const linkFlags = ['kv-link', 'kv-link-gbps', 'kv-link-latency-us', 'disagg-threshold', 'disagg-prefill-role'] as const;
  if (v.disagg === undefined) {
    const given = linkFlags.find((f) => v[f] !== undefined);
    if (given) throw new UsageError(`--${given} applies to --disagg only`);
    return undefined;
  }
  let split: DisaggBenchOptions['split'];
  try {
    split = parseDisaggSplit(v.disagg, workers);
  } catch (e) {
    throw new UsageError(`--disagg ${(e as Error).message}`);
  }
  if (split === 'auto' && workers < 2) throw new UsageError('--disagg auto needs --workers 2 or more');
  if (policies.length !== 1) throw new UsageError(`--disagg compares fleets under one policy, got --policy ${policies.join(',')}`);
  if (v['kv-link'] !== undefined && v['kv-link-gbps'] !== undefined) throw new UsageError('give --kv-link NAME or --kv-link-gbps N, not both');
  if (v['kv-link-latency-us'] !== undefined && v['kv-link-gbps'] === undefined) throw new UsageError('--kv-link-latency-us applies to --kv-link-gbps only');
  let link: KvLink;
  if (v['kv-link-gbps'] !== undefined) {
    link = customKvLink(numFlag(v['kv-link-gbps'], 'kv-link-gbps', { positive: true })!, numFlag(v['kv-link-latency-us'], 'kv-link-latency-us') ?? 10);
  } else {
    const name = v['kv-link'] ?? 'ib-400';
    if (!isKvLinkPreset(name)) throw new UsageError(`--kv-link must be one of ${Object.keys(KV_LINKS).join(', ')}, got '${name}'`);
    link = KV_LINKS[name];
  }
  if (v.report !== undefined) throw new UsageError('--report is not drawn for --disagg (use --json)');
  for (const [flag, bad] of [['cache', v.cache === 'on'], ['admission', v.admission !== undefined && v.admission !== 'off'], ['replicas', (intFlag(v.replicas, 'replicas', 1) ?? 1) > 1], ['spec-mode', v['spec-mode'] !== undefined]] as const) {
    if (bad) throw new UsageError(`--disagg is not simulated with --${flag}`);
  }
  // The gateway's own defaults (the config's `disaggregation` section), the threshold as given.
  const defaults = disaggregationSection.parse(undefined);
  const nonCachedTokens = intFlag(v['disagg-threshold'], 'disagg-threshold', 1) ?? defaults.nonCachedTokens;
  const decider = { nonCachedTokens, minPromptTokens: defaults.minPromptTokens, saturatedQueueMs: defaults.saturatedQueueMs };
  const role = v['disagg-prefill-role'] ?? 'prefill';
  if (role !== 'prefill' && role !== 'both') throw new UsageError(`--disagg-prefill-role must be prefill or both, got '${role}'`);
  return { split, transfer: new KvTransferModel(link, resolveModel(model), tp), decider, prefillRole: role };
}

export async function run(argv: string[]): Promise<number> {
  let v: BenchFlags;
  try {
    v = parseFlags(argv);
  } catch (e) {
    process.stderr.write(`kvgate bench: ${(e as Error).message}\nRun 'kvgate bench --help' for the options.\n`);
    return 2;
  }
  if (v.help) {
    process.stdout.write(help);
    return 0;
  }
  if (v.list) {
    process.stdout.write(listing());
    return 0;
  }
  const quiet = v.quiet === true;
  let source: BenchSource;
  let total: number | undefined;
  let opts: BenchOptions;
  let jobs: number;
  let disagg: DisaggBenchOptions | undefined;
  try {
    ({ source, total, opts } = benchFromFlags(v));
    disagg = disaggFromFlags(v, opts.workers, opts.model, opts.tp ?? 1, opts.policies);
    jobs = intFlag(v.jobs, 'jobs', 1) ?? availableParallelism();
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    process.stderr.write(`kvgate bench: ${e.message}\n`);
    return 2;
  }

  if (disagg) return runDisagg(v, opts, disagg, quiet);
  const showProgress = !quiet && (v.progress === true || process.stderr.isTTY === true);
  let bar: ProgressBar | null = null;
  if (showProgress) {
    opts.onPolicyStart = (name, scale) => {
      const label = opts.capacity ? `${name} ×${+scale.toFixed(4)}` : name;
      bar = createProgressBar(label.padEnd(20), total);
    };
    opts.onProgress = (_name, n, t) => bar?.update(n, t);
    opts.onPolicyDone = () => bar?.finish();
  }
  if (opts.capacity && !quiet) {
    opts.onProbe = (name, p) => {
      (bar)?.finish();
      const worst = p.worst_band_attainment !== undefined ? `, worst prompt band ${(p.worst_band_attainment * 100).toFixed(1)}%` : '';
      process.stderr.write(`${name}: rate ×${+p.rate_scale.toFixed(4)} (${p.requests_per_s.toFixed(1)} req/s offered): attainment ${(p.attainment * 100).toFixed(1)}%${worst}\n`);
    };
  }
  if (!quiet) {
    process.stdout.write(
      `kvgate bench: ${source.name}, ${opts.gpu.includes(':') ? `${opts.workers} workers (${opts.gpu})` : `${opts.workers}× ${opts.gpu}`}${(opts.tp ?? 1) > 1 ? ` tp${opts.tp}` : ''} ${opts.model}, seed ${opts.seed}` +
        `${opts.rateScale !== 1 ? `, rate ×${opts.rateScale}` : ''}${opts.limit ? `, limit ${opts.limit}` : ''}` +
        `${opts.replicas ? `, ${opts.replicas.count} replica(s), sharing ${opts.replicas.sharing ? `on (${opts.replicas.sharingDelayMs} ms${opts.replicas.shareLoad ? ', load too' : ''})` : 'off'}` : ''}` +
        `${opts.speculative ? `, speculation ${specModeName(opts.speculative.mode)} with ${opts.speculative.draftWorkers}× ${opts.speculative.draftGpu} ${opts.speculative.draftModel} ${opts.speculative.draftQuant} draft(s)` : ''}\n`,
    );
  }
  const wallStart = performance.now();
  let out: BenchOutput;
  try {
    out = jobs > 1 ? await runBenchParallel(argv, opts, jobs, showProgress ? total : null) : await runBench(opts);
  } catch (e) {
    (bar as ProgressBar | null)?.finish();
    const msg = e instanceof TraceError ? `${e.message}${v['skip-bad'] ? '' : ' (use --skip-bad to skip malformed rows)'}` : (e as Error).message;
    process.stderr.write(`kvgate bench: ${msg}\n`);
    return e instanceof TraceError ? 2 : 1;
  }
  const wallS = (performance.now() - wallStart) / 1000;
  if (v.json) writeFileSync(v.json, JSON.stringify(out.results, null, 2) + '\n');
  if (v.report) writeFileSync(v.report, renderReport(out.results, out.curves));
  if (!quiet) printResults(out, v, opts, wallS);
  return 0;
}

/** `--disagg`: the aggregated fleet and the split(s), one after the other, and their table. */
async function runDisagg(v: BenchFlags, opts: BenchOptions, d: DisaggBenchOptions, quiet: boolean): Promise<number> {
  if (!quiet) {
    d.onFleet = (label) => process.stderr.write(`${label}…\n`);
    if (opts.capacity) opts.onProbe = (name, p) => process.stderr.write(`  ${name}: rate ×${+p.rate_scale.toFixed(4)} (${p.requests_per_s.toFixed(1)} req/s): attainment ${(p.attainment * 100).toFixed(1)}%\n`);
  }
  const wallStart = performance.now();
  let r: DisaggBenchResults;
  try {
    r = await runDisaggBench(opts, d);
  } catch (e) {
    const msg = e instanceof TraceError ? `${e.message}${v['skip-bad'] ? '' : ' (use --skip-bad to skip malformed rows)'}` : (e as Error).message;
    process.stderr.write(`kvgate bench: ${msg}\n`);
    return e instanceof TraceError ? 2 : 1;
  }
  if (v.json) writeFileSync(v.json, JSON.stringify(r, null, 2) + '\n');
  if (!quiet) {
    process.stdout.write(`\n${disaggTable(r)}\n${disaggCaption(r)}\n`);
    process.stdout.write(`\n${r.fleets.length} fleet(s) in ${((performance.now() - wallStart) / 1000).toFixed(1)} s wall time\n`);
    if (v.json) process.stdout.write(`results: ${v.json}\n`);
  }
  return 0;
}

/** The summary table and the lines beside it. */
function printResults(out: BenchOutput, v: BenchFlags, opts: BenchOptions, wallS: number): void {
  process.stdout.write('\n' + summaryTable(out.results.policies, { idealHitRate: out.results.ideal_hit_rate, capacity: out.results.capacity }));
  process.stdout.write(offeredLine(out.results.offered_rps) + '\n');
  const gl = gpuLines(out.results.policies);
  if (gl) process.stdout.write('\n' + gl);
  const cl = cacheLines(out.results.policies);
  if (cl) process.stdout.write('\n' + cl);
  const pl = priorityLines(out.results.policies);
  if (pl) process.stdout.write('\n' + pl);
  const il = isolationLines(out.results.policies);
  if (il) process.stdout.write('\n' + il);
  const sl = specLines(out.results.policies);
  if (sl) process.stdout.write('\n' + sl);
  const c = out.results.capacity;
  if (c) {
    process.stdout.write(
      `\ncapacity: highest rate scale with ≥ ${(c.target_attainment * 100).toFixed(0)}% of requests within the SLO (${describeSlo({ ttftMs: opts.sloTtftMs, ttftPer1kMs: opts.sloTtftPer1kMs, tpotMs: opts.sloTpotMs })})` +
        `; best peer: ${c.best_peer ?? 'none'}${out.results.policies.some((p) => p.capacity && !p.capacity.converged) ? `; '?' = probe budget ran out before ${+(c.precision * 100).toPrecision(3)}% precision` : ''}\n`,
    );
    const wb = out.results.work_bound;
    if (wb) {
      const probes = out.results.policies.flatMap((p) => p.capacity?.probes ?? []);
      const shortest = Math.min(...probes.map((q) => q.span_s ?? Infinity));
      const atCapacity = describeBoundsAtCapacity(boundsAtCapacity(out.results.policies));
      process.stdout.write(
        `work bound of the plain run's requests: ${wb.requests_per_s.toFixed(1)} req/s (their least GPU time, ${wb.busy_gpu_seconds} GPU s, on ${out.results.workers} workers)` +
          (Number.isFinite(shortest) ? `; shortest probe ${shortest.toFixed(1)} s of arrivals` : '') +
          (atCapacity ? `\n${atCapacity}` : '') +
          '\n',
      );
    }
    const bl = bandLines(out.results.policies, c.min_band_attainment);
    if (bl) process.stdout.write(bl);
    const unbounded = out.results.policies.filter((p) => p.capacity && p.capacity.bracket[1] === null).map((p) => p.name);
    if (unbounded.length > 0) {
      process.stdout.write(
        `note: no probe of ${unbounded.join(', ')} missed the target, so its capacity is a lower bound. With closed-loop sessions ` +
          'the load cannot exceed what the workload\'s sessions send with one request each in flight: raise --size for more sessions.\n',
      );
    }
  }
  const skipped = out.results.skipped_rows > 0 ? `, ${out.results.skipped_rows} malformed rows skipped` : '';
  process.stdout.write(`\n${out.results.policies.length} run(s) of ${out.results.policies[0]?.requests ?? 0} requests in ${wallS.toFixed(1)} s wall time${skipped}\n`);
  if (v.json) process.stdout.write(`results: ${v.json}\n`);
  if (v.report) process.stdout.write(`report: ${v.report}\n`);
}
