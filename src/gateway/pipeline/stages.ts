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
 * The gateway's own stages run in the one order STAGE_ORDER declares; a stage added with
 * `gateway.use(stage)` runs after them, in the order added. An `early` stage runs before the
 * prompt is tokenized — `ctx.routeRequest` is not built yet and it must not read it — so that a
 * stage that answers without routing (the response cache) does not wait for tokenization; early
 * stages run before all others.
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
 * The gateway's stages, in the order a request meets them. Each is present only when configured:
 *   response-cache            (early) a hit answers before tokenization   cache.enabled or a tenant's cache
 *   admission                 KV-pressure queue, rate limits, pools        always (admits at once when off)
 *   response-affinity         a Responses continuation goes where its previous response is
 *   speculation-aware-routing workers speculating in the engine vs plain    speculative.routing.enabled
 *   per-request-speculation   llama.cpp's per-request draft settings        speculative.perRequest
 *   speculative-cascade       draft/verify across two pools                 speculative.cascades
 * Admission runs before the speculative stages so that a cascade request is counted and narrowed
 * like any other; the cascade runs last because it answers the request itself.
 */
export const STAGE_ORDER = [
  'response-cache',
  'admission',
  'response-affinity',
  'speculation-aware-routing',
  'per-request-speculation',
  'speculative-cascade',
] as const;

export type StageName = (typeof STAGE_ORDER)[number];

/**
 * The stages of one gateway: the declared ones in STAGE_ORDER, then those added with use(). The
 * `early` and `late` arrays are the ones the handler runs; they keep their identity as stages are
 * placed, so a stage placed after the handler was built (the speculative ones, at start) runs.
 */
export class Pipeline {
  readonly early: GatewayStage[] = [];
  readonly late: GatewayStage[] = [];
  private readonly placed = new Map<StageName, GatewayStage>();
  private readonly added: GatewayStage[] = [];

  /** Put the gateway's own stage in its declared place; its name must be the place's name. */
  place(stage: GatewayStage): void {
    const name = stage.name as StageName;
    if (!STAGE_ORDER.includes(name)) throw new Error(`stage '${stage.name}' has no place in STAGE_ORDER`);
    if (this.placed.has(name)) throw new Error(`stage '${stage.name}' placed twice`);
    this.placed.set(name, stage);
    this.rebuild();
  }

  /** Add a stage after the declared ones (gateway.use). */
  add(stage: GatewayStage): void {
    this.added.push(stage);
    this.rebuild();
  }

  /** Names of the stages in the order they run (early ones first). */
  names(): string[] {
    return [...this.early, ...this.late].map((s) => s.name);
  }

  private rebuild(): void {
    const all = [...STAGE_ORDER.flatMap((n) => this.placed.get(n) ?? []), ...this.added];
    this.early.splice(0, this.early.length, ...all.filter((s) => s.early === true));
    this.late.splice(0, this.late.length, ...all.filter((s) => s.early !== true));
  }
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
