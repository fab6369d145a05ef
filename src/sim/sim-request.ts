/**
 * One simulated request as the fleet simulation keeps it from arrival until it is over (finished,
 * answered by the cache, or refused), and the RouteRequest the router sees for it.
 */
import type { AdmissionTicket } from '../admission/controller.js';
import type { WorkerState } from '../fleet/worker-state.js';
import { PROMPT_ADAPTER, PROMPT_SALT } from '../kv/prompt-blocks.js';
import type { RouteRequest } from '../scheduler/types.js';
import { RequestState } from '../util/state.js';
import { synthText } from '../workload/tokens.js';
import type { BenchRequest } from '../workload/types.js';
import type { ResponseCache } from '../cache/response-cache.js';

/** A RouteRequest whose promptText is synthesised from the tokens only if a policy reads it. */
export class SimRouteRequest implements RouteRequest {
  readonly state = new RequestState();
  sessionKey?: string;
  tenant?: string;
  priority?: number;
  sequences?: number;
  private text: string | undefined;
  constructor(
    readonly id: string,
    readonly model: string,
    readonly promptTokens: ArrayLike<number>,
    readonly maxTokens: number,
    text: string | undefined,
  ) {
    this.text = text;
  }
  get promptText(): string {
    let t = (this.text ??= synthText(this.promptTokens));
    if (this.adapterText !== undefined) t = this.adapterText + t;
    if (this.saltText !== undefined) t = this.saltText + t;
    return t;
  }
  private saltText: string | undefined;
  private adapterText: string | undefined;
  /** Route this request as one naming LoRA adapter `name` (as gateway/pipeline/prepare.ts does). */
  adapter(name: string): void {
    this.state.set(PROMPT_ADAPTER, name);
    this.adapterText = `\u0000lora:${name}\u0000`;
  }
  /** Isolate this request's prefixes per tenant (as gateway/pipeline/prepare.ts does). */
  salt(s: string): void {
    this.state.set(PROMPT_SALT, s);
    this.saltText = `\u0000${s}\u0000`;
  }
}

/** What is known of a request of n answers while some still run (n-samples.ts). */
export interface SamplesProgress {
  /** Answers still running. */
  left: number;
  /** The longest answer so far, tokens. */
  outputTokens: number;
  /** All answers' tokens so far. */
  allTokens: number;
  /** The first answer's cached prompt tokens. */
  cachedTokens: number;
  aborted: boolean;
}

/** A response-cache key being answered by a worker: its plan and the requests waiting on it. */
export interface SimFlight {
  plan: Extract<ReturnType<ResponseCache['plan']>, { key: string }>;
  followers: SimRequest[];
}

/** A request of the run, by its index in arrival order (its id is String(idx)). */
export interface SimRequest {
  readonly idx: number;
  readonly id: string;
  readonly req: BenchRequest;
  readonly route: SimRouteRequest;
  /** Priority class rank: 0 critical, 1 standard, 2 sheddable. */
  readonly cls: number;
  /** Arrival at the gateway, virtual ms (a wait in the admission queue counts in its latency). */
  readonly arrivedAt: number;
  /** When its first token became visible (of n answers: the first of any). */
  firstToken?: number;
  /** Target worker index once dispatched. */
  worker?: number;
  /** Its session's continuation (session-turns.ts), until the request is over. */
  next?: NonNullable<BenchRequest['next']>;
  /** Its admission ticket while the router has not yet charged a worker for it. */
  ticket?: AdmissionTicket<WorkerState>;
  /** Of n sampled answers, what is known while some still run. */
  samples?: SamplesProgress;
  /** The response-cache flight it leads (its answer fills the key; followers wait on it). */
  flight?: SimFlight;
}

/** A request of several sampled answers (BenchRequest.sampleTokens). */
export function sampled(req: BenchRequest): boolean {
  return req.sampleTokens !== undefined && req.sampleTokens.length > 1;
}
