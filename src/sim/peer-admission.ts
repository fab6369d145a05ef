/**
 * A peer's admission in the fleet simulation (FleetSimOptions.admission with `peer`): llm-d's flow
 * control with its probabilistic admitter (`kvgate bench --admission llm-d`), beside kvgate's own
 * AdmissionController (admission-sim.ts). Modelled on llm-d/llm-d-router @ ebab6879:
 *
 * - Flow control (`pkg/epp/flowcontrol/`, the `flowControl` feature gate on;
 *   `pkg/epp/requestcontrol/admission.go`, FlowControlAdmissionController): every request waits in
 *   its priority band (one band per priority, highest first; FCFS within a band —
 *   `fcfs-ordering-policy`, `global-strict-fairness-policy`). A dispatch cycle runs at each arrival
 *   and on a 1 ms ticker (`controller/internal/processor.go`, dispatchCycle): it reads the pool's
 *   saturation S and, while S < the band's usage limit (1.0, `usagelimits` StaticUsageLimitPolicy),
 *   dispatches the head of the highest non-empty band — one request per cycle; at S ≥ 1.0 nothing
 *   is dispatched (head-of-line blocking across bands). A request waiting longer than
 *   defaultRequestTTL (60 s, `controller/config.go`) is shed, and one arriving at a band holding
 *   maxRequests (5,000, `registry/config.go` defaultPriorityBandMaxRequests) is rejected; both 429.
 * - Saturation detector (`pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization/`,
 *   the default with flow control on): S = mean over the pool's workers of
 *   max(waiting / queueDepthThreshold, KV usage / kvCacheUtilThreshold), a worker with no scrape or
 *   one older than metricsStalenessThreshold counting 1.0; defaults 5, 0.8, 200 ms.
 * - Probabilistic admitter (`pkg/epp/framework/plugins/requestcontrol/admitter/
 *   probabilisticadmitter/plugin.go`), run after flow control dispatches a request and before
 *   scheduling (`pkg/epp/requestcontrol/director.go`): a sheddable request (priority < 0) is refused
 *   with probability min(S'^power · k, 1), S' the same roofline mean with its own thresholds (a worker
 *   with no metrics 1.0; no staleness test); defaults power 5, k 300, thresholds 5 and 0.8. llm-d
 *   answers such a refusal with an internal error; here it counts as shed (429) like the others.
 *
 * kvgate's classes map onto llm-d priorities as its InferenceObjectives do: critical 1, standard 0,
 * sheddable −1 (priority < 0 is sheddable, `requtil.IsSheddable`). The detector reads the scrapes
 * the simulation takes (llm-d's EPP refreshes metrics every 50 ms; `kvgate bench --admission llm-d`
 * scrapes at that interval unless told otherwise).
 */
import type { PriorityClass } from '../admission/classes.js';
import type { WorkerState } from '../fleet/worker-state.js';
import type { Clock } from '../util/clock.js';
import { seededRng, type Rng } from '../util/rng.js';
import type { AdmissionHost } from './admission-sim.js';
import type { SimRequest } from './sim-request.js';

/** llm-d's knobs, its names in the comments. */
export interface LlmdFlowControlSettings {
  /** Utilization detector: waiting requests at which a worker is saturated (queueDepthThreshold). */
  queueDepthThreshold: number;
  /** Utilization detector: KV usage at which a worker is saturated (kvCacheUtilThreshold). */
  kvCacheUtilThreshold: number;
  /** Utilization detector: a scrape older than this counts as saturated, ms (metricsStalenessThreshold). */
  metricsStalenessMs: number;
  /** Saturation at or above which no band dispatches (the static usage limit). */
  usageLimit: number;
  /** Longest wait in a band before the request is shed, ms (defaultRequestTTL). */
  requestTtlMs: number;
  /** Requests a band holds; more are rejected (maxRequests). */
  bandMaxRequests: number;
  /** Dispatch ticker period, ms. */
  tickMs: number;
  /** Probabilistic admitter on (sheddable requests only); false: flow control alone. */
  admitter: boolean;
  admitterQueueDepthThreshold: number;
  admitterKvCacheUtilThreshold: number;
  /** Steepness of the shedding curve (power). */
  power: number;
  /** Where the curve reaches 1: at S' = (1/k)^(1/power) (k). */
  k: number;
}

export const LLMD_FLOW_CONTROL_DEFAULTS: Readonly<LlmdFlowControlSettings> = Object.freeze({
  queueDepthThreshold: 5,
  kvCacheUtilThreshold: 0.8,
  metricsStalenessMs: 200,
  usageLimit: 1,
  requestTtlMs: 60_000,
  bandMaxRequests: 5000,
  tickMs: 1,
  admitter: true,
  admitterQueueDepthThreshold: 5,
  admitterKvCacheUtilThreshold: 0.8,
  power: 5,
  k: 300,
});

/** llm-d priorities of kvgate's classes (InferenceObjective priority; < 0 is sheddable). */
const LLMD_PRIORITY: Readonly<Record<PriorityClass, number>> = Object.freeze({ critical: 1, standard: 0, sheddable: -1 });

/**
 * The roofline saturation of a pool: the mean over workers of max(waiting / queueThreshold,
 * KV usage / kvThreshold); a worker without a scrape, or (staleMs given) with one older than
 * staleMs at `now`, counts 1. An empty pool is saturated (1).
 */
export function rooflineSaturation(
  workers: readonly WorkerState[],
  queueThreshold: number,
  kvThreshold: number,
  now: number,
  staleMs = Infinity,
): number {
  if (workers.length === 0) return 1;
  let total = 0;
  for (const w of workers) {
    const s = w.snapshot;
    total += s === null || now - s.at > staleMs ? 1 : Math.max(s.waiting / queueThreshold, s.kvUsage / kvThreshold);
  }
  return total / workers.length;
}

/** The probabilistic admitter's chance of refusing a sheddable request at saturation s. */
export function sheddingProbability(s: number, power: number, k: number): number {
  return Math.min(s ** power * k, 1);
}

/** What FleetSim needs of an admission stage, kvgate's (SimAdmission) or a peer's. */
export interface SimAdmitter {
  admit(rec: SimRequest, cls: PriorityClass, sequences: number): boolean;
  checkPick(rec: SimRequest, worker: WorkerState): { status: number; code: string } | null;
  pump(): void;
  queueDepth(): number;
}

/** The host's hooks plus a timer: `wake(t)` pumps the admission at virtual time t. */
export interface PeerAdmissionHost extends AdmissionHost {
  wake(t: number): void;
}

interface Waiting {
  rec: SimRequest;
  sheddable: boolean;
  deadline: number;
}

/** llm-d's flow control and probabilistic admitter on the simulation's clock and workers. */
export class SimLlmdFlowControl implements SimAdmitter {
  /** Bands by priority, highest first. */
  private readonly bands = new Map<number, Waiting[]>();
  private readonly order: number[];
  private readonly rng: Rng;
  private nextTick = -Infinity;
  /** The tick a wake-up is already pending for. */
  private armed = -Infinity;
  private waiting = 0;

  constructor(
    private readonly s: LlmdFlowControlSettings,
    private readonly clock: Clock,
    private readonly workers: readonly WorkerState[],
    private readonly host: PeerAdmissionHost,
    seed: number,
  ) {
    this.order = [...new Set(Object.values(LLMD_PRIORITY))].sort((a, b) => b - a);
    for (const p of this.order) this.bands.set(p, []);
    this.rng = seededRng(seed ^ 0x11d);
  }

  /** The detector's saturation of the pool now. */
  saturation(): number {
    return rooflineSaturation(this.workers, this.s.queueDepthThreshold, this.s.kvCacheUtilThreshold, this.clock.now(), this.s.metricsStalenessMs);
  }

  admit(rec: SimRequest, cls: PriorityClass): boolean {
    const priority = LLMD_PRIORITY[cls];
    const band = this.bands.get(priority)!;
    if (band.length >= this.s.bandMaxRequests) {
      this.host.refuse(rec, 429, 'flow_control_capacity');
      return false;
    }
    const now = this.clock.now();
    const item: Waiting = { rec, sheddable: priority < 0, deadline: now + this.s.requestTtlMs };
    band.push(item);
    this.waiting++;
    // A cycle runs as the request arrives; it may dispatch this request or one ahead of it.
    const out = this.cycle();
    if (out === item) {
      return this.admitted(item);
    }
    // Still in its band: it waits.
    this.host.queued(rec, item.deadline);
    if (out) this.proceed(out);
    this.armTicker();
    return false;
  }

  checkPick(): null {
    return null;
  }

  pump(): void {
    const now = this.clock.now();
    this.expire(now);
    if (now >= this.nextTick) {
      this.nextTick = Math.floor(now / this.s.tickMs) * this.s.tickMs + this.s.tickMs;
      const out = this.cycle();
      if (out) this.proceed(out);
    }
    this.armTicker();
  }

  queueDepth(): number {
    return this.waiting;
  }

  /** One dispatch cycle: the head of the highest non-empty band, if the pool is below its limit. */
  private cycle(): Waiting | null {
    if (this.waiting === 0 || this.saturation() >= this.s.usageLimit) return null;
    for (const p of this.order) {
      const band = this.bands.get(p)!;
      if (band.length > 0) {
        this.waiting--;
        return band.shift()!;
      }
    }
    return null;
  }

  /** A dispatched request meets the probabilistic admitter; true when it goes on to routing. */
  private admitted(item: Waiting): boolean {
    if (this.s.admitter && item.sheddable) {
      const s = rooflineSaturation(this.workers, this.s.admitterQueueDepthThreshold, this.s.admitterKvCacheUtilThreshold, this.clock.now());
      if (this.rng() < sheddingProbability(s, this.s.power, this.s.k)) {
        this.host.refuse(item.rec, 429, 'llm_d_admitter_shed');
        return false;
      }
    }
    return true;
  }

  private proceed(item: Waiting): void {
    if (this.admitted(item)) this.host.proceed(item.rec, this.clock.now());
  }

  /** Shed what has waited past its TTL. */
  private expire(now: number): void {
    for (const band of this.bands.values()) {
      while (band.length > 0 && band[0]!.deadline <= now) {
        const item = band.shift()!;
        this.waiting--;
        this.host.refuse(item.rec, 429, 'flow_control_ttl');
      }
    }
  }

  /** While something could dispatch, the ticker runs: wake at its next tick. */
  private armTicker(): void {
    if (this.waiting === 0 || this.saturation() >= this.s.usageLimit) return;
    const now = this.clock.now();
    if (this.nextTick <= now) this.nextTick = Math.floor(now / this.s.tickMs) * this.s.tickMs + this.s.tickMs;
    if (this.armed === this.nextTick) return;
    this.armed = this.nextTick;
    this.host.wake(this.nextTick);
  }
}

/**
 * llm-d-router's sample configuration for the probabilistic admitter
 * (llm-d/llm-d-router deploy/config/probabilistic-admitter-epp-config.yaml, and the plugin's page there):
 * the utilization detector kept, as the EPP requires one, but with thresholds it cannot reach
 * (queueDepthThreshold 999999999, kvCacheUtilThreshold 1.0), so that the admitter alone sheds.
 * Flow control then holds requests only while every worker's KV is full (or its scrape stale).
 */
export const LLMD_ADMITTER_ONLY: Readonly<LlmdFlowControlSettings> = Object.freeze({
  ...LLMD_FLOW_CONTROL_DEFAULTS,
  queueDepthThreshold: 999_999_999,
  kvCacheUtilThreshold: 1,
});

/** The peer admission policies `kvgate bench --admission` knows beside on and off. */
export const PEER_ADMISSIONS = ['llm-d', 'llm-d-admitter'] as const;
export type PeerAdmissionName = (typeof PEER_ADMISSIONS)[number];

/** A fresh peer admission per run, for FleetSimOptions.peerAdmission. */
export function peerAdmission(name: PeerAdmissionName, seed: number): (host: PeerAdmissionHost, clock: Clock, workers: WorkerState[]) => SimAdmitter {
  switch (name) {
    case 'llm-d':
      return (host, clock, workers) => new SimLlmdFlowControl(LLMD_FLOW_CONTROL_DEFAULTS, clock, workers, host, seed);
    case 'llm-d-admitter':
      return (host, clock, workers) => new SimLlmdFlowControl(LLMD_ADMITTER_ONLY, clock, workers, host, seed);
  }
}
