/** The gateway's pipeline of stages: one declared order (STAGE_ORDER) and the stages of one gateway in it. */
import type { GatewayStage } from '../../request/stage.js';

/**
 * The gateway's stages, in the order a request meets them. Each is present only when configured:
 *   response-cache            (early) a hit answers before tokenization   cache.enabled or a tenant's cache
 *   admission                 KV-pressure queue, rate limits, pools        always (admits at once when off)
 *   response-affinity         a Responses continuation goes where its previous response is
 *   speculation-aware-routing workers speculating in the engine vs plain    speculative.routing.enabled
 *   per-request-speculation   llama.cpp's per-request draft settings        speculative.perRequest
 *   speculative-cascade       draft/verify across two pools                 speculative.cascades
 *   disaggregation            prefill on a prefill worker, decode elsewhere workers with a `role`
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
  'disaggregation',
] as const;

type StageName = (typeof STAGE_ORDER)[number];

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
