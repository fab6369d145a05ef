/**
 * Requests of n sampled answers (BenchRequest.sampleTokens) in the fleet simulation: one engine
 * sequence per answer, added together, as vLLM adds a request's n children (the prompt's blocks
 * shared through the prefix cache). Sequence k of request idx is `${idx}/${k}`; the request ends
 * with its last answer. The cascade does not speculate for them (it cannot reproduce n answers
 * exactly), and the response cache does not answer them.
 */
import type { EngineRequest, FinishedOutput } from '../engine/types.js';
import { mix32 } from '../workload/tokens.js';
import type { BenchRequest } from '../workload/types.js';
import type { SimRequest } from './sim-request.js';

/** What the fleet simulation lends n-sample requests. */
export interface SamplesHost {
  /** The engine request that generates `maxTokens` tokens of `req`'s answer from `seed`. */
  engineRequest(id: string, req: BenchRequest, maxTokens: number, seed: number): EngineRequest;
  /** Queue an engine request on worker w. */
  submit(w: number, req: EngineRequest, now: number): void;
  /** Request `rec` finished on worker w (`answeredTokens`: every answer's tokens). */
  finish(w: number, rec: SimRequest, f: FinishedOutput, now: number, answeredTokens: number): void;
}

export class NSamples {
  constructor(private readonly host: SamplesHost) {}

  /** True for an engine sequence id that is one of a request's n answers. */
  static owns(seqId: string): boolean {
    return seqId.includes('/');
  }

  /** Start `rec`'s n answers on worker w. */
  dispatch(w: number, rec: SimRequest, now: number): void {
    const { req, idx } = rec;
    const lens = req.sampleTokens!;
    rec.samples = { left: lens.length, outputTokens: 0, allTokens: 0, cachedTokens: 0, aborted: false };
    for (let k = 0; k < lens.length; k++) {
      this.host.submit(w, this.host.engineRequest(`${idx}/${k}`, req, lens[k]!, k === 0 ? req.outputSeed : mix32(req.outputSeed, k)), now);
    }
  }

  /**
   * One of `rec`'s n answers finished. The last one finishes the request: its output tokens are
   * the longest answer's (so its TPOT is the pace of its slowest answer), its cached prompt tokens
   * the first answer's; the router is told every answer's tokens, as a worker's usage counts them.
   */
  finished(w: number, rec: SimRequest, f: FinishedOutput, now: number): void {
    const s = rec.samples!;
    if (f.outputTokens > s.outputTokens) s.outputTokens = f.outputTokens;
    s.allTokens += f.outputTokens;
    if (f.id.endsWith('/0')) s.cachedTokens = f.cachedPromptTokens;
    if (f.reason === 'abort') s.aborted = true;
    if (--s.left > 0) return;
    rec.samples = undefined;
    this.host.finish(w, rec, { ...f, id: rec.id, outputTokens: s.outputTokens, cachedPromptTokens: s.cachedTokens, reason: s.aborted ? 'abort' : f.reason }, now, s.allTokens);
  }
}
