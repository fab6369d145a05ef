/**
 * The kvgate policy's six scorers. Each reads the candidates' estimates that the
 * `kvgate-estimate` producer wrote (estimate.ts) and rates them in [0,1], higher
 * better; the policy weighs them (wPrefix, wTtft, wHeadroom, wQueue, wLoad, wSession) and its
 * picker uses the weighted sum inside its near-least-loaded band.
 *
 * | scorer   | rating of candidate w                                   |
 * |----------|---------------------------------------------------------|
 * | prefix   | expected prefix hit (cached / prompt tokens)            |
 * | ttft     | min ttft over the candidates / ttft(w); 1 if ttft is 0  |
 * | headroom | free KV blocks left after the request / numGpuBlocks    |
 * | queue    | (max − waiting) / (max − min) over the candidates; 1 if all equal |
 * | load     | (max − running) / (max − min) over the candidates; 1 if all equal |
 * | session  | 1 if the session key was last routed to w, else 0       |
 *
 * No options of their own.
 */
import type { WorkerState } from '../../../fleet/worker-state.js';
import { kvgateEstimateTable, type KvgateEstimate, type KvgateEstimateTable } from './estimate.js';
import type { RouteRequest, Scorer } from '../../types.js';

function rate(
  req: RouteRequest,
  ws: readonly WorkerState[],
  f: (e: KvgateEstimate, t: KvgateEstimateTable) => number,
): number[] {
  const t = kvgateEstimateTable(req, ws);
  const out = new Array<number>(t.est.length);
  for (let i = 0; i < out.length; i++) out[i] = f(t.est[i]!, t);
  return out;
}

const lowIsGood = (v: number, lo: number, hi: number): number => (hi > lo ? (hi - v) / (hi - lo) : 1);

// The ratings, hoisted so scoring allocates nothing beyond its output.
const hit = (e: KvgateEstimate): number => e.hit;
const ttft = (e: KvgateEstimate, t: KvgateEstimateTable): number => (e.ttftMs > 0 ? t.minTtft / e.ttftMs : 1);
const headroom = (e: KvgateEstimate): number => e.headroom;
const fewestWaiting = (e: KvgateEstimate, t: KvgateEstimateTable): number => lowIsGood(e.waiting, t.minWait, t.maxWait);
const fewestRunning = (e: KvgateEstimate, t: KvgateEstimateTable): number => lowIsGood(e.running, t.minRun, t.maxRun);
const session = (e: KvgateEstimate): number => (e.session ? 1 : 0);

export const kvgatePrefixScorer: Scorer = { name: 'prefix', score: (req, ws) => rate(req, ws, hit) };
export const kvgateTtftScorer: Scorer = { name: 'ttft', score: (req, ws) => rate(req, ws, ttft) };
export const kvgateHeadroomScorer: Scorer = { name: 'headroom', score: (req, ws) => rate(req, ws, headroom) };
export const kvgateQueueScorer: Scorer = { name: 'queue', score: (req, ws) => rate(req, ws, fewestWaiting) };
export const kvgateLoadScorer: Scorer = { name: 'load', score: (req, ws) => rate(req, ws, fewestRunning) };
export const kvgateSessionScorer: Scorer = { name: 'session', score: (req, ws) => rate(req, ws, session) };
