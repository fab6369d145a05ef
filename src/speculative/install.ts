/**
 * Wires the configured cascades (`speculative.cascades`) into a gateway: resolves each cascade's
 * pools, checks at start-up that the workers can do what verification needs (probe.ts) and
 * refuses the configuration otherwise, then adds the cascade stage and its metrics.
 *
 * With `speculative.routing.enabled`, also adds the stage that routes between workers that
 * speculate inside the engine and plain ones (spec-routing.ts); with `speculative.perRequest`, the
 * stage that sets llama.cpp's per-request speculation settings (per-request.ts).
 *
 * Called by the gateway's start() (src/gateway/lifecycle.ts) before it listens, which places the
 * stages where STAGE_ORDER (src/gateway/pipeline/stages.ts) says; a gateway configured with none
 * of these gets no stage.
 */
import { ConfigError } from '../config/index.js';
import type { Registry } from 'prom-client';
import type { GatewayConfig } from '../config/index.js';
import type { GatewayStage } from '../request/stage.js';
import type { WorkerRegistry } from '../fleet/registry.js';
import type { Router } from '../scheduler/router.js';
import type { Logger } from '../telemetry/logger.js';
import { EOS_TOKEN_ID } from '../tokenizer/vocabulary.js';
import { systemClock, type Clock } from '../util/clock.js';
import { AcceptanceTracker } from './acceptance.js';
import { cascadeStage, type CascadeModel, type DraftWatch } from './cascade.js';
import { DraftDeadlines } from './draft-deadline.js';
import { AdaptiveK, FixedK, type KChooser } from './controller.js';
import { seededRng, type Rng } from '../util/rng.js';
import { SpecMetrics } from './metrics.js';
import { perRequestSpeculationStage } from './per-request.js';
import { probeCascade } from './probe.js';
import { specRoutingStage } from './spec-routing.js';
import { WorkerPools } from './worker-calls.js';

export interface SpeculativeOptions {
  clock?: Clock;
  /** Check the workers' capabilities before installing (default true). */
  probe?: boolean;
  /** Chooses k per round; default: as `speculative.controller` configures. */
  controller?: KChooser;
  /** Random source of the adaptive controller's probes (default: seeded from policy.seed, else random). */
  rng?: Rng;
}

export interface SpeculativeInstall {
  models: ReadonlyMap<string, CascadeModel>;
  tracker: AcceptanceTracker;
  metrics: SpecMetrics;
}

/** What the speculative stages need of the gateway that runs them. */
export interface SpeculativeHost {
  readonly config: GatewayConfig;
  readonly registry: WorkerRegistry;
  readonly router: Router;
  readonly logger: Logger;
  /** The gateway's outlier detection, told of draft calls. */
  readonly outliers: DraftWatch | null;
  /** The gateway's Prometheus registry. */
  readonly metricsRegistry: Registry;
  /** Put a stage in its place in STAGE_ORDER. */
  place(stage: GatewayStage): void;
  /** Close this with the gateway. */
  onClose(close: () => Promise<void>): void;
}

/** Install the configured cascades; throws ConfigError naming what a pool's workers cannot do. */
export async function installSpeculative(gw: SpeculativeHost, opts: SpeculativeOptions = {}): Promise<SpeculativeInstall | null> {
  const sc = gw.config.speculative;
  if (sc.routing.enabled) gw.place(specRoutingStage(sc.routing, gw.metricsRegistry));
  if (sc.cascades.length === 0 && sc.perRequest.length === 0) return null;
  const problems: string[] = [];
  const models = new Map<string, CascadeModel>();
  const pools = new WorkerPools(gw.config.timeouts.connectMs);
  const ks = new Map<string, number>();
  for (const [i, c] of sc.cascades.entries()) {
    const at = `speculative.cascades[${i}]`;
    const drafts = gw.registry.workers.filter((w) => w.pool === c.draftPool);
    const targets = gw.registry.workers.filter((w) => w.pool === c.targetPool);
    const tokenizer = gw.config.tokenizers.models[c.model] ?? gw.config.tokenizers.default;
    let eos = c.eosTokenIds;
    if (eos === undefined) {
      if (tokenizer === 'estimate') eos = [EOS_TOKEN_ID];
      else {
        problems.push(`${at}.eosTokenIds: required when the model's tokenizer is not 'estimate' (vLLM's API does not report end-of-sequence ids: take eos_token_id from the model's generation_config.json)`);
        continue;
      }
    }
    const cm: CascadeModel = {
      model: c.model,
      draftModel: drafts[0]!.model,
      targetPool: c.targetPool,
      draftPool: c.draftPool,
      topLogprobs: c.topLogprobs,
      eosTokenIds: new Set(eos),
      maxModelLen: null,
    };
    if (opts.probe !== false) {
      const found = await probeCascade({ at, cascade: cm, drafts, targets, pools, timeoutMs: sc.probeTimeoutMs });
      problems.push(...found.problems);
      cm.maxModelLen = found.maxModelLen;
    }
    models.set(c.model, cm);
    ks.set(c.model, c.k);
  }
  if (problems.length > 0) {
    await pools.close();
    throw new ConfigError(problems);
  }
  const cc = sc.controller;
  const tracker = new AcceptanceTracker(cc.halfLifeTokens);
  const metrics = new SpecMetrics(gw.metricsRegistry, tracker);
  const rng = opts.rng ?? seededRng(gw.config.policy.seed ?? (Math.random() * 2 ** 32) >>> 0);
  if (sc.perRequest.length > 0) {
    gw.place(
      perRequestSpeculationStage({
        models: new Map(sc.perRequest.map((m) => [m.model, m])),
        control: cc,
        tracker,
        metrics,
        rng,
      }),
    );
  }
  if (models.size === 0) {
    await pools.close();
    return { models, tracker, metrics };
  }
  const { mode: _m, classBy: _c, tpotBudgetMs: _t, halfLifeTokens: _h, targetTokenMs, ...adaptive } = cc;
  const controller =
    opts.controller ??
    (cc.mode === 'adaptive'
      ? new AdaptiveK(tracker, { ...adaptive, targetTokenMs: targetTokenMs ?? null })
      : new FixedK(ks));
  gw.place(
    cascadeStage({
      models,
      router: gw.router,
      registry: gw.registry,
      pools,
      clock: opts.clock ?? systemClock,
      logger: gw.logger,
      metrics,
      tracker,
      controller,
      callTimeoutMs: sc.callTimeoutMs,
      draftDeadlines: new DraftDeadlines({ ...sc.draftDeadline, callTimeoutMs: sc.callTimeoutMs, tpotBudgetMs: cc.tpotBudgetMs ?? null }),
      outliers: gw.outliers,
      tpotBudgetMs: cc.tpotBudgetMs ?? null,
      classBy: cc.classBy,
    }),
  );
  gw.onClose(() => pools.close());
  return { models, tracker, metrics };
}
