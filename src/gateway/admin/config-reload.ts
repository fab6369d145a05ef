/**
 * Configuration hot reload: a new, already validated GatewayConfig is compared with the active one
 * and the difference applied to the running gateway, without a restart and without touching the
 * requests in flight.
 *
 * The mechanism: the gateway's GatewayConfig object is the live holder. The parts that read it per
 * request (deadlines, caps, body limits, pool settings, shutdown times) see a reloaded section
 * from the next request on; the parts that copied a value at start are told explicitly (the
 * relay's timeouts and retries, the breakers' thresholds, the scrape and probe loops, the
 * admission controller, the rate limiters, the tenant directory, the policy's weights). A request
 * keeps what it started with: its deadline, its tenant, its worker (and that worker's upstream
 * pool and breaker), its admission ticket.
 *
 * Workers are matched by id. A removed worker is retired at once (no new request is routed there;
 * its scrapes, probes and KV-event subscription stop) and its upstream pool is closed once the
 * requests it is serving are done. A worker whose URL, pool, model, capacity or credentials
 * changed is retired and added again under the same id. An added worker is scraped, probed and
 * (with kvEvents) subscribed at once, and routable like any worker.
 *
 * Settings that cannot change in a running process (keepRestartOnly() below: the listen address, the
 * HTTP server's limits, the upstream pools' sizing, tokenizers, the response cache, speculative
 * cascades, shared state, outlier detection, the cache-salt secret, a policy's name or index
 * size...) keep their old values and are named in a "needs a restart" log line and in
 * /admin/config.
 */
import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { GatewayConfig, WorkerKvEvents } from '../../config/index.js';
import type { HealthProber } from '../../fleet/health.js';
import type { WorkerRegistry } from '../../fleet/registry.js';
import type { MetricsScraper } from '../../fleet/scraper.js';
import type { Upstreams } from '../../fleet/upstreams.js';
import type { WorkerIdentity, WorkerState } from '../../fleet/worker-state.js';
import type { PrefixIndex } from '../../scheduler/index/prefix-index.js';
import type { Policy } from '../../scheduler/types.js';
import type { TenantDirectory } from '../../admission/tenants.js';
import type { Logger } from '../../telemetry/logger.js';
import type { AdmissionSetup } from '../pipeline/admission-stage.js';
import { scrapeTiming } from '../fleet-watch/fleet-watch.js';
import type { KvEventsService } from '../fleet-watch/kv-events-service.js';
import { json, type LocalRoute } from './local-routes.js';
import type { Relay } from '../pipeline/relay.js';

/** What a reload changes: the running parts of the gateway. */
export interface ReloadTargets {
  /** The live config holder (its sections are replaced). */
  config: GatewayConfig;
  registry: WorkerRegistry;
  scraper: MetricsScraper;
  health: HealthProber;
  upstreams: Upstreams;
  relay: Relay;
  policy: Policy;
  index: PrefixIndex | undefined;
  admission: AdmissionSetup;
  tenants: TenantDirectory;
  /** The KV-event subscribers (created on first use when none were configured at start). */
  kvEvents: () => KvEventsService | null;
  logger: Logger;
  metricsRegistry: Registry;
  /** A removed worker has drained: drop its metric series and what the policy learned about it. */
  forgetWorker?: (w: WorkerState) => void;
  /** Where the config came from, for /admin/config. */
  source?: { path: string; hash: string };
  /** The response cache was set up at start (a tenant turning it on later needs a restart). */
  cacheActive: boolean;
}

export type ReloadOutcome =
  | { result: 'applied'; version: number; changes: string[]; needsRestart: string[] }
  | { result: 'unchanged'; version: number; needsRestart: string[] }
  | { result: 'rejected'; version: number; errors: string[] };

/** How often a retired worker's in-flight count is looked at while it drains. */
const DRAIN_POLL_MS = 100;

export class ConfigReloader {
  private version = 1;
  private appliedAt = new Date();
  private hash: string | null;
  private readonly path: string | null;
  private lastRejected: { at: string; fileHash: string | null; errors: string[] } | null = null;
  private needsRestart: string[] = [];
  private readonly reloads: Counter<'result'>;
  /** Retired workers whose requests are still running. */
  private readonly draining = new Set<WorkerState>();
  /** Per discovery source, the workers it gave last. */
  private readonly discovered = new Map<string, { workers: readonly WorkerIdentity[]; kvEvents: readonly WorkerKvEvents[] }>();
  private closed = false;

  constructor(private readonly t: ReloadTargets) {
    this.hash = t.source?.hash ?? null;
    this.path = t.source?.path ?? null;
    this.reloads = new Counter({
      name: 'kvgate_config_reloads_total',
      help: 'Configuration reloads, by result (applied: the new config is active; rejected: invalid, the old one stays; unchanged: nothing to apply)',
      labelNames: ['result'],
      registers: [t.metricsRegistry],
    });
    for (const r of ['applied', 'rejected', 'unchanged']) this.reloads.labels(r).inc(0);
    const self = this;
    new Gauge({
      name: 'kvgate_config_version',
      help: 'Version of the active configuration: 1 at start, +1 per applied reload',
      registers: [t.metricsRegistry],
      collect() {
        this.set(self.version);
      },
    });
    new Gauge({
      name: 'kvgate_config_applied_timestamp_seconds',
      help: 'When the active configuration was applied (Unix time)',
      registers: [t.metricsRegistry],
      collect() {
        this.set(self.appliedAt.getTime() / 1000);
      },
    });
  }

  /** A new config was read but is invalid: keep the old one, remember why. */
  reject(errors: string[], fileHash: string | null): ReloadOutcome {
    this.lastRejected = { at: new Date().toISOString(), fileHash, errors };
    this.reloads.labels('rejected').inc();
    // One line naming the field path(s) and the reason.
    this.t.logger.error({ version: this.version, fileHash, errors }, `config reload rejected, keeping version ${this.version}: ${errors.join('; ')}`);
    return { result: 'rejected', version: this.version, errors };
  }

  /** Apply a valid new config (see the file comment). */
  apply(next: GatewayConfig, fileHash: string | null): ReloadOutcome {
    const { config: old, logger } = this.t;
    const policyRetuned = this.retunePolicy(next);
    const applied = keepRestartOnly(old, next, policyRetuned);
    const needsRestart = diffPaths(configView(next, false), configView(applied, false));
    // The response cache is built at start when some tenant (or everyone) uses it.
    if (!this.t.cacheActive) next.tenants.forEach((t, i) => t.cache.enabled === true && needsRestart.push(`tenants[${i}].cache.enabled`));
    const changes = diffPaths(configView(old, false), configView(applied, false));
    this.needsRestart = needsRestart;
    if (needsRestart.length > 0) {
      logger.warn({ fields: needsRestart }, `config reload: ${needsRestart.join(', ')} changed but needs a restart; the old value stays until then`);
    }
    if (changes.length === 0 && fileHash === this.hash) {
      this.reloads.labels('unchanged').inc();
      return { result: 'unchanged', version: this.version, needsRestart };
    }
    // Worker changes are named one by one rather than as a changed `workers` list.
    const fleetChanges = this.applyWorkers(old.workers, applied.workers, old.kvEvents, applied.kvEvents, applied);
    changes.splice(0, changes.length, ...changes.filter((c) => c !== 'workers' && c !== 'kvEvents'), ...fleetChanges);
    const cb = applied.circuitBreaker;
    this.t.registry.retuneBreakers({ ...cb, failureRate: cb.failureRate });
    this.t.relay.retune({ firstByteMs: applied.timeouts.firstByteMs, retries: applied.retry.attempts, retryAfterSeconds: applied.limits.retryAfterSeconds });
    const timing = scrapeTiming(applied.scrape, this.t.policy.scrapeIntervalMs);
    this.t.scraper.retune(timing.intervalMs, timing.timeoutMs);
    this.t.health.retune(applied.health);
    this.t.admission.retune(applied);
    this.t.tenants.replace(applied.tenants, applied.admin.digests);
    if (applied.log.level !== old.log.level) logger.level = applied.log.level;
    // The live holder: everything that reads the config per request sees the new sections now.
    Object.assign(old, applied);
    this.version++;
    this.appliedAt = new Date();
    this.hash = fileHash;
    this.reloads.labels('applied').inc();
    logger.info({ version: this.version, fileHash, changes }, `config reload applied: version ${this.version}`);
    return { result: 'applied', version: this.version, changes, needsRestart };
  }

  /** What /admin/config shows. */
  status(): Record<string, unknown> {
    return {
      version: this.version,
      appliedAt: this.appliedAt.toISOString(),
      file: this.path,
      fileHash: this.hash,
      needsRestart: this.needsRestart,
      lastRejected: this.lastRejected,
      drainingWorkers: [...this.draining].map((w) => ({ id: w.id, url: w.url, inflight: w.inflightCount })),
      config: configView(this.t.config, true),
    };
  }

  route(): LocalRoute {
    return {
      methods: ['GET', 'HEAD'],
      handle: (_req: IncomingMessage, res: ServerResponse) => json(res, 200, JSON.stringify(this.status())),
    };
  }

  /** The gateway is closing: stop waiting on draining workers (close() releases everything). */
  close(): void {
    this.closed = true;
  }

  /** Policy options changed under the same name: retune in place if the policy can. */
  private retunePolicy(next: GatewayConfig): boolean {
    const old = this.t.config.policy;
    if (next.policy.name !== old.name) return false;
    if (JSON.stringify(next.policy.options) === JSON.stringify(old.options)) return true;
    return this.t.policy.retune?.(next.policy.options) ?? false;
  }

  /**
   * The workers a discovery source (src/fleet/kubernetes/) finds now: applied as a reload applies
   * configured workers (retired ones drain, changed ones are replaced, new ones are routable at
   * once). An id that a configured worker has is left out. Returns what changed.
   */
  applyDiscovered(source: string, workers: readonly WorkerIdentity[], kvEvents: readonly WorkerKvEvents[] = []): string[] {
    const configured = new Set(this.t.config.workers.map((w) => w.id));
    const kept = workers.filter((w) => {
      if (!configured.has(w.id)) return true;
      this.t.logger.warn({ worker: w.id, source }, 'a discovered worker has the id of a configured one: left out');
      return false;
    });
    const keptIds = new Set(kept.map((w) => w.id));
    const keptKv = kvEvents.filter((e) => keptIds.has(e.workerId));
    const before = this.discovered.get(source) ?? { workers: [], kvEvents: [] };
    this.discovered.set(source, { workers: kept, kvEvents: keptKv });
    const changes = this.applyWorkers(before.workers, kept, before.kvEvents, keptKv, this.t.config);
    if (changes.length > 0) this.t.logger.info({ source, changes }, `workers from ${source}: ${changes.join(', ')}`);
    return changes;
  }

  /** Retire, replace and add workers; returns what changed, one entry per worker. */
  private applyWorkers(
    oldWorkers: readonly WorkerIdentity[],
    nextWorkers: readonly WorkerIdentity[],
    oldKv: readonly WorkerKvEvents[],
    nextKv: readonly WorkerKvEvents[],
    next: GatewayConfig,
  ): string[] {
    const { registry, scraper, health, logger } = this.t;
    const old = this.t.config;
    const before = new Map(oldWorkers.map((w) => [w.id, w]));
    const after = new Map(nextWorkers.map((w) => [w.id, w]));
    const kvBefore = new Map(oldKv.map((e) => [e.workerId, e]));
    const kvAfter = new Map(nextKv.map((e) => [e.workerId, e]));
    const cascadePools = new Set(old.speculative.cascades.flatMap((c) => [c.targetPool, c.draftPool]));
    const retire: string[] = [];
    const add: WorkerIdentity[] = [];
    const summary: string[] = [];
    for (const [id, w] of before) {
      const n = after.get(id);
      if (!n) retire.push(id);
      else if (identityKey(n) !== identityKey(w)) {
        retire.push(id);
        add.push(n);
      } else if (JSON.stringify(kvAfter.get(id)) !== JSON.stringify(kvBefore.get(id))) {
        this.resubscribe(id, kvAfter.get(id));
        summary.push(`workers.${id}.kvEvents`);
      }
    }
    for (const [id, w] of after) if (!before.has(id)) add.push(w);
    for (const id of retire) {
      const w = registry.retire(id);
      if (!w) continue;
      scraper.remove(id);
      health.remove(id);
      if (kvBefore.has(id)) void this.t.kvEvents()?.removeWorker(id);
      const closePool = this.t.upstreams.detach(id);
      if (cascadePools.has(w.pool)) logger.warn({ worker: id, pool: w.pool }, 'a speculative cascade keeps the workers it started with until a restart');
      logger.info({ worker: id, url: w.url, inflight: w.inflightCount }, after.has(id) ? 'worker changed: the old entry drains' : 'worker removed: draining');
      summary.push(after.has(id) ? `workers.${id} (changed)` : `workers.${id} (removed)`);
      void this.drain(w, closePool, next);
    }
    for (const ident of add) {
      if (registry.get(ident.id)) {
        logger.warn({ worker: ident.id }, 'a worker of this id is already in the fleet (discovered): not added');
        continue;
      }
      const w = registry.add(ident);
      // A worker replaced under the same id may be another server: what the index predicted for the old one no longer holds.
      if (before.has(ident.id) && this.t.index?.hasWorker(ident.id)) this.t.index.clearWorker(ident.id);
      scraper.add(w);
      health.add(w);
      const kv = kvAfter.get(ident.id);
      if (kv) this.resubscribe(ident.id, kv);
      if (cascadePools.has(w.pool)) logger.warn({ worker: w.id, pool: w.pool }, 'a speculative cascade keeps the workers it started with until a restart');
      logger.info({ worker: w.id, url: w.url, pool: w.pool, model: w.model }, before.has(ident.id) ? 'worker changed: the new entry is routable' : 'worker added');
      if (!before.has(ident.id)) summary.push(`workers.${w.id} (added)`);
    }
    return summary;
  }

  private resubscribe(id: string, e: WorkerKvEvents | undefined): void {
    const svc = this.t.kvEvents();
    if (!svc) return;
    if (e) void svc.addWorker(e).catch((err: Error) => this.t.logger.warn({ worker: id, err: err.message }, 'kv events: cannot subscribe'));
    else void svc.removeWorker(id);
  }

  /** Wait for a retired worker's requests to finish, then release what was its own. */
  private async drain(w: WorkerState, closePool: () => Promise<void>, next: GatewayConfig): Promise<void> {
    this.draining.add(w);
    const limit = Date.now() + next.caps.maxRequestMs + 5_000;
    while (w.inflightCount > 0 && !this.closed && Date.now() < limit) await new Promise((r) => setTimeout(r, DRAIN_POLL_MS).unref());
    this.draining.delete(w);
    await closePool();
    this.t.registry.dropRetired(w);
    // Its slot in the prefix index, unless a worker of the same id has come back meanwhile.
    if (!this.t.registry.get(w.id) && this.t.index?.hasWorker(w.id)) this.t.index.removeWorker(w.id);
    if (!this.t.registry.get(w.id)) this.t.forgetWorker?.(w);
    if (!this.closed) this.t.logger.info({ worker: w.id, url: w.url }, 'retired worker drained: its connections are closed');
  }
}

/** What makes a worker the same worker (a change of any of it replaces the entry). */
function identityKey(w: WorkerIdentity): string {
  return JSON.stringify([w.url, w.pool, w.model, w.adapters ?? [], w.discoverAdapters ?? false, w.resolveAdapters ?? null, w.numGpuBlocks ?? null, w.blockSize ?? null, w.upstreamHeaders ?? null, w.hardware ?? null, w.role ?? 'both', w.engine ?? 'vllm']);
}

/** `next` with the restart-only settings (and a policy that could not be retuned) as in `old`. */
function keepRestartOnly(old: GatewayConfig, next: GatewayConfig, policyRetuned: boolean): GatewayConfig {
  return {
    ...next,
    listen: old.listen,
    server: old.server,
    upstream: old.upstream,
    tokenizers: old.tokenizers,
    cache: old.cache,
    speculative: old.speculative,
    disaggregation: old.disaggregation,
    shared: old.shared,
    outlier: old.outlier,
    reload: old.reload,
    cacheSaltSecret: old.cacheSaltSecret,
    discovery: old.discovery,
    log: { ...next.log, pretty: old.log.pretty },
    scrape: { ...next.scrape, staleAfterMs: old.scrape.staleAfterMs },
    admission: { ...next.admission, enabled: old.admission.enabled, vllmPriority: old.admission.vllmPriority },
    circuitBreaker: { ...next.circuitBreaker, failureRate: { ...next.circuitBreaker.failureRate, windowMs: old.circuitBreaker.failureRate.windowMs } },
    policy: policyRetuned ? next.policy : old.policy,
  };
}

const REDACTED = '[redacted]';

/**
 * The config as plain JSON. `redact`: API keys, upstream credentials, the cache-salt secret and
 * Redis passwords are not shown (a key's count is); without it, secrets are fingerprinted so a
 * change of one is still seen as a change.
 */
function configView(c: GatewayConfig, redact: boolean): Record<string, unknown> {
  const secret = (v: string): string => (redact ? REDACTED : `sha256:${createHash('sha256').update(v).digest('hex')}`);
  const headerView = (h: Record<string, string> | undefined): Record<string, string> | undefined => (h ? Object.fromEntries(Object.entries(h).map(([k, v]) => [k, secret(v)])) : undefined);
  const keys = (digests: readonly Buffer[]): unknown => (redact ? digests.length : digests.map((d) => d.toString('hex')));
  const url = (u: string | undefined): string | null => {
    if (u === undefined) return null;
    try {
      const p = new URL(u);
      if (p.password !== '') p.password = redact ? 'redacted' : secret(p.password).slice(0, 20);
      return p.toString();
    } catch {
      return redact ? REDACTED : u;
    }
  };
  return {
    ...c,
    workers: c.workers.map((w) => ({ ...w, upstreamHeaders: headerView(w.upstreamHeaders) })),
    pools: Object.fromEntries(c.pools),
    tenants: c.tenants.map((t) => ({ ...t, digests: undefined, keys: keys(t.digests) })),
    admin: { keys: keys(c.admin.digests), metricsKeys: keys(c.admin.metricsDigests), openMetrics: c.admin.openMetrics },
    cacheSaltSecret: c.cacheSaltSecret === null ? null : secret(c.cacheSaltSecret),
    discovery: { kubernetes: c.discovery.kubernetes && { ...c.discovery.kubernetes, template: { ...c.discovery.kubernetes.template, upstreamHeaders: headerView(c.discovery.kubernetes.template.upstreamHeaders) } } },
    cache: { ...c.cache, redis: { ...c.cache.redis, url: url(c.cache.redis.url) } },
    shared: { ...c.shared, redis: { ...c.shared.redis, url: url(c.shared.redis.url) } },
  };
}

/** Dotted paths where two JSON values differ (arrays compared whole, by their path). */
function diffPaths(a: unknown, b: unknown, prefix = ''): string[] {
  const plain = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
  if (plain(a) && plain(b)) {
    const out: string[] = [];
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
      out.push(...diffPaths(a[k], b[k], prefix === '' ? k : `${prefix}.${k}`));
    }
    return out;
  }
  return JSON.stringify(a) === JSON.stringify(b) ? [] : [prefix];
}
