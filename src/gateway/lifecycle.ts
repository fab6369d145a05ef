/**
 * A gateway's start and stop, in order:
 *   start:    speculative stages (probing their workers) → tokenizers → listen → fleet watch →
 *             services → warnings about an open or shared-cache setup
 *   shutdown: /ready answers 503 for shutdown.drainDelayMs, then close
 *   close:    refuse new requests → stop reloads → let in-flight requests finish within
 *             shutdown.graceMs, then end them → stop watching the fleet → close services →
 *             drop connections → close upstream pools and tokenizer threads → flush the log
 */
import { flushLogger } from '../telemetry/logger.js';
import { installSpeculative, type SpeculativeInstall, type SpeculativeOptions } from '../speculative/install.js';
import type { GatewayMembers } from './composition/compose.js';
import type { GatewayServer } from './server/http-server.js';
import type { GatewayService } from './types.js';

export interface Lifecycle {
  start(): Promise<{ url: string; port: number }>;
  shutdown(): Promise<void>;
  close(): Promise<void>;
  addService(svc: GatewayService): void;
  /** What the speculative cascades installed at start (null before, or with none configured). */
  readonly speculative: SpeculativeInstall | null;
}

export interface LifecycleOptions {
  /** Start the scraper, health prober and outlier detection (default true). */
  watchFleet?: boolean;
  speculative?: SpeculativeOptions;
}

/** What the lifecycle starts and stops of a server (the gateway's HTTP server, or the EPP's gRPC and HTTP servers). */
export type ListeningServer = Pick<GatewayServer, 'listen' | 'close' | 'closeIdle' | 'closeAll'>;

export function createLifecycle(g: GatewayMembers, http: ListeningServer, opts: LifecycleOptions): Lifecycle {
  const { config, logger, life, services } = g;
  let started: { url: string; port: number } | null = null;
  let closed: Promise<void> | null = null;
  let speculative: SpeculativeInstall | null = null;

  const start = async (): Promise<{ url: string; port: number }> => {
    // Speculative cascades are checked against their workers before the gateway listens: a
    // pool that cannot verify refuses the configuration (ConfigError).
    speculative = await installSpeculative(
      {
        config,
        registry: g.registry,
        router: g.router,
        logger,
        outliers: g.outliers,
        metricsRegistry: g.metrics.registry,
        place: (stage) => g.pipeline.place(stage),
        onClose: (close) => void services.push({ name: 'speculative', close }),
      },
      { clock: g.clock, ...opts.speculative },
    );
    await g.tokenizers.load();
    // One scrape of every worker before the first request is taken: until a worker has answered,
    // admission and routing know neither its KV capacity nor its queue (the wait is bounded:
    // MetricsScraper.firstScrape).
    if (opts.watchFleet !== false) await g.scraper.firstScrape();
    const at = await http.listen();
    if (opts.watchFleet !== false) {
      g.scraper.start();
      g.health.start();
      g.outliers?.start();
    }
    for (const svc of services) await svc.start?.();
    life.started = true;
    started = { url: at.url, port: at.port };
    logger.info({ url: started.url, workers: g.registry.workers.length, policy: g.policy.name }, 'kvgate listening');
    warnAboutExposure(g, at.url, at.address);
    return started;
  };

  const close = (): Promise<void> =>
    (closed ??= (async () => {
      life.closing = true;
      g.reloader.close();
      const serverClosed = http.close();
      http.closeIdle();
      const graceEnd = Date.now() + config.shutdown.graceMs;
      while (g.active.size > 0 && Date.now() < graceEnd) await sleep(20);
      for (const ctx of g.active) {
        ctx.aborted = true;
        ctx.abortReason = 'shutdown';
        ctx.abortUpstream?.('shutdown');
      }
      while (g.active.size > 0 && Date.now() < graceEnd + 2_000) await sleep(10);
      g.scraper.stop();
      g.health.stop();
      g.outliers?.stop();
      for (const svc of services) {
        try {
          await svc.close?.();
        } catch (e) {
          logger.warn({ err: e, service: svc.name }, 'service failed to close');
        }
      }
      g.registry.close();
      http.closeAll();
      if (started) await serverClosed;
      await g.upstreams.close();
      await g.tokenizers.close();
      flushLogger(logger);
    })());

  return {
    get speculative() {
      return speculative;
    },
    start: () => (started ? Promise.resolve(started) : start()),
    shutdown() {
      if (!life.draining) {
        life.draining = true;
        logger.info({ drainDelayMs: config.shutdown.drainDelayMs }, 'draining: /ready answers 503');
      }
      return (async () => {
        if (!closed) await sleep(config.shutdown.drainDelayMs);
        await close();
      })();
    },
    close,
    addService(svc) {
      services.push(svc);
      if (started) void Promise.resolve(svc.start?.()).catch((e: Error) => logger.error({ err: e, service: svc.name }, 'service failed to start'));
    },
  };
}

/** Warnings at start about a setup that exposes the workers or tenants' prompts. */
function warnAboutExposure(g: GatewayMembers, url: string, address: string): void {
  const { config, logger } = g;
  if (g.tenants.open && !isLoopback(address)) {
    logger.warn(
      { listen: url },
      'kvgate listens on a non-loopback address with no client API keys configured: anyone who can reach it can use the workers (configure tenants[].keys)',
    );
  }
  const sharedCache = [...config.pools].filter(([, p]) => p.cacheIsolation === 'none').map(([name]) => name);
  if (sharedCache.length > 0 && config.tenants.length > 1) {
    logger.warn(
      { pools: sharedCache, tenants: config.tenants.length },
      "cacheIsolation: none on pools several tenants use: a tenant can tell from usage.prompt_tokens_details.cached_tokens (and from timing) whether another tenant sent the same prompt (set cacheIsolation: tenant)",
    );
  }
}

function isLoopback(address: string): boolean {
  return address === '::1' || address.startsWith('127.') || address === '::ffff:127.0.0.1';
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
