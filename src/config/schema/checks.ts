/**
 * The checks that look at more than one field: workers exist and have distinct ids, timeouts fit
 * their intervals, speculative cascades and per-request speculation name pools that can serve
 * them, adapters and aliases are names of their own, tenants are distinct and ask for served models.
 */
import type { z } from 'zod';
import { formatPath } from '../../util/field-path.js';
import { configuredWorkers } from '../workers.js';
import { checkEngines } from './engines.js';
import { discoveredPoolName } from './discovery.js';
import { DEFAULT_SCRAPE_INTERVAL_MS } from './fleet.js';
import type { ConfigSections } from './sections.js';

type Ctx = z.RefinementCtx<ConfigSections>;
type Path = Array<string | number>;

const issue = (ctx: Ctx, path: PropertyKey[], message: string): void => ctx.addIssue({ code: 'custom', path, message });

export function checkConfig(c: ConfigSections, ctx: Ctx): void {
  if (c.pools.length === 0 && c.workers.length === 0 && !c.discovery.kubernetes) issue(ctx, ['pools'], 'at least one worker is required (in pools or workers, or discovery)');
  checkDiscovery(c, ctx);
  checkIntervals(c, ctx);
  checkWorkerIds(c, ctx);
  checkAdmission(c, ctx);
  checkEngines(c, ctx);
  const poolModels = modelsByPool(c);
  const cascadeModels = checkCascades(c, poolModels, ctx);
  const baseModels = new Set([...poolModels.values()].flatMap((m) => [...m]));
  const adapterModels = checkAdapters(c, baseModels, ctx);
  const servedModels = new Set([...baseModels, ...adapterModels]);
  checkPerRequest(c, baseModels, cascadeModels, ctx);
  checkAliases(c, servedModels, ctx);
  checkTenants(c, servedModels, ctx);
  checkRoles(c, ctx);
}

/** A model with prefill workers needs workers that decode what they prefill. */
function checkRoles(c: ConfigSections, ctx: Ctx): void {
  const prefillOnly = new Map<string, Path>();
  const decodes = new Set<string>();
  for (const cw of configuredWorkers(c)) {
    if (cw.pool.role === 'prefill') prefillOnly.set(cw.pool.model, cw.poolPath ?? cw.path);
    else decodes.add(cw.pool.model);
  }
  for (const [model, path] of prefillOnly) {
    if (!decodes.has(model)) issue(ctx, [...path, 'role'], `model '${model}' has prefill workers but no worker of role decode or both to decode what they prefill`);
  }
}

/** A timeout shorter than its interval keeps one worker's checks from ever overlapping. */
function checkIntervals(c: ConfigSections, ctx: Ctx): void {
  if (c.scrape.timeoutMs !== undefined && c.scrape.timeoutMs >= (c.scrape.intervalMs ?? DEFAULT_SCRAPE_INTERVAL_MS)) {
    issue(ctx, ['scrape', 'timeoutMs'], 'must be shorter than scrape.intervalMs');
  }
  if (c.health.timeoutMs !== undefined && c.health.timeoutMs >= c.health.intervalMs) {
    issue(ctx, ['health', 'timeoutMs'], 'must be shorter than health.intervalMs');
  }
}

function checkWorkerIds(c: ConfigSections, ctx: Ctx): void {
  const seen = new Map<string, string>();
  for (const cw of configuredWorkers(c)) {
    const path = [...cw.path, cw.w.id !== undefined ? 'id' : 'url'];
    const prev = seen.get(cw.id);
    if (prev) issue(ctx, path, `duplicate worker id '${cw.id}' (also ${prev})`);
    else seen.set(cw.id, formatPath(path));
  }
}

function checkAdmission(c: ConfigSections, ctx: Ctx): void {
  const t = c.admission.thresholds;
  if (t.sheddable > t.standard) {
    issue(ctx, ['admission', 'thresholds', 'sheddable'], 'must not be above admission.thresholds.standard');
  }
  const v = c.admission.vllmPriority.values;
  if (!(v.critical < v.standard && v.standard < v.sheddable)) {
    issue(ctx, ['admission', 'vllmPriority', 'values'], 'expected critical < standard < sheddable (vLLM serves lower values first)');
  }
}

/** The models each pool serves (pools and flat workers together). */
function modelsByPool(c: ConfigSections): Map<string, Set<string>> {
  const poolModels = new Map<string, Set<string>>();
  const add = (pool: string, model: string) => (poolModels.get(pool) ?? poolModels.set(pool, new Set()).get(pool)!).add(model);
  for (const p of c.pools) add(p.name, p.model);
  for (const w of c.workers) add(w.pool, w.model);
  if (c.discovery.kubernetes) add(discoveredPoolName(c.discovery.kubernetes), c.discovery.kubernetes.model);
  return poolModels;
}

/** Discovered workers form a pool of their own (its settings are discovery's). */
function checkDiscovery(c: ConfigSections, ctx: Ctx): void {
  const k = c.discovery.kubernetes;
  if (!k) return;
  const name = discoveredPoolName(k);
  if (c.pools.some((p) => p.name === name) || c.workers.some((w) => w.pool === name)) {
    issue(ctx, ['discovery', 'kubernetes', k.pool !== undefined ? 'pool' : 'inferencePool'], `pool '${name}' is also configured: discovered workers form a pool of their own (set discovery.kubernetes.pool)`);
  }
  c.speculative.cascades.forEach((sc, i) => {
    // A cascade keeps the workers it starts with; discovered ones come and go.
    if (sc.targetPool === name || sc.draftPool === name) issue(ctx, ['speculative', 'cascades', i, sc.targetPool === name ? 'targetPool' : 'draftPool'], `pool '${name}' is discovered: a speculative cascade needs configured workers`);
  });
}

/** A cascade's pools exist, serve different models, and its target pool serves its model. Returns the cascades' models. */
function checkCascades(c: ConfigSections, poolModels: ReadonlyMap<string, Set<string>>, ctx: Ctx): Set<string> {
  const cascadeModels = new Set<string>();
  c.speculative.cascades.forEach((sc, i) => {
    const at = (f: string) => ['speculative', 'cascades', i, f];
    const target = poolModels.get(sc.targetPool);
    const draft = poolModels.get(sc.draftPool);
    if (!target) issue(ctx, at('targetPool'), `no pool named '${sc.targetPool}'`);
    else if (!target.has(sc.model) || target.size > 1) {
      issue(ctx, at('targetPool'), `pool '${sc.targetPool}' must serve model '${sc.model}' only (it serves ${[...target].join(', ')})`);
    }
    if (!draft) issue(ctx, at('draftPool'), `no pool named '${sc.draftPool}'`);
    else if (draft.size > 1) issue(ctx, at('draftPool'), `pool '${sc.draftPool}' must serve one model (it serves ${[...draft].join(', ')})`);
    if (sc.draftPool === sc.targetPool) issue(ctx, at('draftPool'), 'must differ from targetPool');
    if (cascadeModels.has(sc.model)) issue(ctx, at('model'), `model '${sc.model}' has two cascades`);
    cascadeModels.add(sc.model);
  });
  return cascadeModels;
}

/**
 * An adapter is a model name of its own, always on the same base model, and never on a
 * cascade's pools. Returns the adapters' names.
 */
function checkAdapters(c: ConfigSections, baseModels: ReadonlySet<string>, ctx: Ctx): Set<string> {
  const adapterBase = new Map<string, string>();
  const checkList = (adapters: readonly string[], base: string, at: Path): void =>
    adapters.forEach((a, j) => {
      const prev = adapterBase.get(a);
      if (baseModels.has(a)) issue(ctx, [...at, j], `'${a}' is a served model's own name`);
      else if (prev !== undefined && prev !== base) {
        issue(ctx, [...at, j], `adapter '${a}' is also served on model '${prev}': an adapter belongs to one base model`);
      } else adapterBase.set(a, base);
    });
  c.pools.forEach((p, i) => checkList(p.adapters, p.model, ['pools', i, 'adapters']));
  c.workers.forEach((w, i) => checkList(w.adapters, w.model, ['workers', i, 'adapters']));
  if (c.discovery.kubernetes) checkList(c.discovery.kubernetes.adapters, c.discovery.kubernetes.model, ['discovery', 'kubernetes', 'adapters']);
  for (const sc of c.speculative.cascades) {
    for (const [i, p] of c.pools.entries()) {
      if ((p.name === sc.targetPool || p.name === sc.draftPool) && p.resolveAdapters !== undefined) {
        issue(ctx, ['pools', i, 'resolveAdapters'], `pool '${p.name}' is in a speculative cascade, which does not serve adapters`);
      }
      if ((p.name === sc.targetPool || p.name === sc.draftPool) && p.adapters.length > 0) {
        issue(ctx, ['pools', i, 'adapters'], `pool '${p.name}' is in a speculative cascade, which does not serve adapters`);
      }
    }
  }
  return new Set(adapterBase.keys());
}

function checkPerRequest(c: ConfigSections, baseModels: ReadonlySet<string>, cascadeModels: ReadonlySet<string>, ctx: Ctx): void {
  const perRequestModels = new Set<string>();
  c.speculative.perRequest.forEach((pr, i) => {
    const at = ['speculative', 'perRequest', i, 'model'];
    if (!baseModels.has(pr.model)) issue(ctx, at, `no pool serves model '${pr.model}'`);
    if (cascadeModels.has(pr.model)) issue(ctx, at, `model '${pr.model}' is served by a cascade`);
    if (perRequestModels.has(pr.model)) issue(ctx, at, `model '${pr.model}' is listed twice`);
    perRequestModels.add(pr.model);
  });
}

function checkAliases(c: ConfigSections, servedModels: ReadonlySet<string>, ctx: Ctx): void {
  for (const [alias, model] of Object.entries(c.aliases)) {
    if (servedModels.has(alias)) issue(ctx, ['aliases', alias], `'${alias}' is a served model's own name`);
    else if (!servedModels.has(model)) issue(ctx, ['aliases', alias], `no pool serves model '${model}'`);
  }
}

function checkTenants(c: ConfigSections, servedModels: ReadonlySet<string>, ctx: Ctx): void {
  const tenantIds = new Map<string, number>();
  c.tenants.forEach((t, i) => {
    const prev = tenantIds.get(t.id);
    if (prev !== undefined) issue(ctx, ['tenants', i, 'id'], `duplicate tenant id '${t.id}' (also tenants[${prev}])`);
    else tenantIds.set(t.id, i);
    t.models?.forEach((m, j) => {
      if (!servedModels.has(m)) issue(ctx, ['tenants', i, 'models', j], `no pool serves model '${m}'`);
    });
  });
}
