/**
 * The seam between validation and routing. Admission control, the response cache and the
 * speculative cascade are stages: each sees the validated, tokenized request before a worker is
 * picked, and may
 *   - let it pass ('continue'), possibly after waiting (an admission queue) or after narrowing
 *     `ctx.candidates` / changing `ctx.body` (set `ctx.bodyModified`);
 *   - answer it itself ('handled': e.g. a cache hit replayed as JSON or SSE) — the stage then
 *     owns the response and must end it;
 *   - refuse it by throwing an ApiError (429/503 with Retry-After, ...).
 * To observe the outcome a stage registers `ctx.taps` (relayed body chunks) and `ctx.onFinish`.
 * What a stage derives for later stages or hooks goes into `ctx.state` under a typed key that the
 * stage declares (see `RequestContext.state`).
 * The gateway's own stages run in the one order STAGE_ORDER declares (gateway/pipeline/stages.ts);
 * a stage added with `gateway.use(stage)` runs after them, in the order added. An `early` stage
 * runs before the prompt is tokenized — `ctx.routeRequest` is not built yet and it must not read
 * it — so that a stage that answers without routing (the response cache) does not wait for
 * tokenization; early stages run before all others.
 *
 * This folder (src/request/) is the contract between the gateway and the stages that plug into
 * it: the gateway and the speculative stages both import it, neither imports the other's inside.
 */
import type { RequestContext } from './context.js';

export type StageResult = 'continue' | 'handled';

export interface GatewayStage {
  readonly name: string;
  /** Run before tokenization (ctx.routeRequest not built yet). */
  readonly early?: boolean;
  handle(ctx: RequestContext): StageResult | Promise<StageResult>;
}

/**
 * Runs the stages in order; 'handled' as soon as one answers the request. Synchronous while the
 * stages are (the common case: admission admits at once): a promise only from the first stage that
 * returns one.
 */
export function runStages(stages: readonly GatewayStage[], ctx: RequestContext): StageResult | Promise<StageResult> {
  for (let i = 0; i < stages.length; i++) {
    const r = stages[i]!.handle(ctx);
    if (typeof r !== 'string') return finishStages(stages, i, r, ctx);
    if (r === 'handled' || ctx.aborted) return 'handled';
  }
  return 'continue';
}

/** The rest of runStages once stage `i` returned a promise. */
async function finishStages(stages: readonly GatewayStage[], i: number, pending: Promise<StageResult>, ctx: RequestContext): Promise<StageResult> {
  if ((await pending) === 'handled' || ctx.aborted) return 'handled';
  for (let j = i + 1; j < stages.length; j++) {
    const r = stages[j]!.handle(ctx);
    const v = typeof r === 'string' ? r : await r;
    if (v === 'handled' || ctx.aborted) return 'handled';
  }
  return 'continue';
}
