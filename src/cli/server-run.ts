/**
 * What `kvgate serve` and `kvgate epp` share: their common flags checked, the config file read,
 * the server built and started, then served and reloaded until a signal.
 */
import { readFileSync } from 'node:fs';
import { ConfigError, type GatewayConfig } from '../config/index.js';
import { ConfigWatcher, hashConfigText, type ConfigWatchOptions } from '../gateway/admin/config-watch.js';
import type { Logger } from '../telemetry/logger.js';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/**
 * `--FLAG`'s port: undefined when not given, null (after writing why to stderr) when not an
 * integer 0..65535.
 */
export function portFlag(command: string, flag: string, v: string | boolean | undefined): number | undefined | null {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (typeof v === 'string' && Number.isInteger(n) && n >= 0 && n <= 65535) return n;
  process.stderr.write(`kvgate ${command}: --${flag} must be an integer 0..65535, got '${String(v)}'\n`);
  return null;
}

/** --log-level: undefined when not given, null (after writing why to stderr) when not a level. */
export function logLevelFlag(command: string, v: string | boolean | undefined): LogLevel | undefined | null {
  if (v === undefined) return undefined;
  if (typeof v === 'string' && (LOG_LEVELS as readonly string[]).includes(v)) return v as LogLevel;
  process.stderr.write(`kvgate ${command}: --log-level must be one of ${LOG_LEVELS.join(', ')}\n`);
  return null;
}

/** Reads and validates a config file; on failure writes `kvgate CMD: FILE: problems` to stderr and returns null (exit 2). */
export function readConfigFile(command: string, file: string, parse: (text: string) => GatewayConfig): { config: GatewayConfig; text: string } | null {
  try {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (e) {
      throw new ConfigError([`cannot read ${file}: ${(e as Error).message}`]);
    }
    return { config: parse(text), text };
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`kvgate ${command}: ${file}: ${e.message}\n`);
      return null;
    }
    throw e;
  }
}

/** A server `kvgate serve` or `kvgate epp` runs: the gateway, or the EPP. */
export type RunnableServer = ConfigWatchOptions['gateway'] & {
  logger: Logger;
  start(): Promise<unknown>;
  shutdown(): Promise<void>;
  close(): Promise<void>;
};

/**
 * Build the server from the config read from `file` (by `parse`, which the reloads use too),
 * start it, then serve until a signal (reloadUntilSignal). A config the build or the start
 * refuses exits 2; a start that fails otherwise (a port taken) exits 1, its message prefixed by
 * `where` (the addresses it listens on).
 */
export async function startAndServe<S extends RunnableServer>(o: {
  command: string;
  file: string;
  parse: (text: string) => GatewayConfig;
  config: GatewayConfig;
  text: string;
  create: (config: GatewayConfig, configSource: { path: string; hash: string }) => S;
  where: string;
}): Promise<number> {
  const { command, file, config } = o;
  const initialHash = hashConfigText(o.text);
  // SIGHUP's default action ends the process: from here on it means "reload" (ignored until the
  // server listens).
  let onHup = (): void => undefined;
  const hup = (): void => onHup();
  process.on('SIGHUP', hup);
  let server: S;
  try {
    server = o.create(config, { path: file, hash: initialHash });
  } catch (e) {
    process.off('SIGHUP', hup);
    if (e instanceof ConfigError) {
      process.stderr.write(`kvgate ${command}: ${file}: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  try {
    await server.start();
  } catch (e) {
    process.off('SIGHUP', hup);
    process.stderr.write(
      e instanceof ConfigError ? `kvgate ${command}: ${file}: ${e.message}\n` : `kvgate ${command}: cannot listen on ${o.where}: ${(e as Error).message}\n`,
    );
    await server.close();
    return e instanceof ConfigError ? 2 : 1;
  }
  return reloadUntilSignal(server, { file, parse: o.parse, config, initialHash, onHup: (f) => (onHup = f), hup });
}

/**
 * A started server (the gateway, or the EPP) until SIGINT or SIGTERM: the file watched and
 * reloaded (and on SIGHUP), then shut down. SIGTERM (an orchestrator): readiness fails for the
 * drain delay while requests are still served, so load balancers stop sending before the listener
 * closes. SIGINT (a terminal): at once. Returns the exit code.
 */
async function reloadUntilSignal(
  target: RunnableServer,
  o: { file: string; parse: (text: string) => GatewayConfig; config: GatewayConfig; initialHash: string; onHup: (f: () => void) => void; hup: () => void },
): Promise<number> {
  const { config } = o;
  const watcher = new ConfigWatcher({
    path: o.file,
    parse: o.parse,
    gateway: target,
    logger: target.logger,
    watch: config.reload.watch,
    debounceMs: config.reload.debounceMs,
    initialHash: o.initialHash,
  });
  watcher.start();
  o.onHup(() => void watcher.reload('signal'));
  const sig = await waitForSignal();
  process.off('SIGHUP', o.hup);
  watcher.close();
  target.logger.info({ signal: sig, graceMs: config.shutdown.graceMs, drainDelayMs: sig === 'SIGTERM' ? config.shutdown.drainDelayMs : 0 }, 'shutting down');
  if (sig === 'SIGTERM') await target.shutdown();
  else await target.close();
  return 0;
}

/** Resolves on the first SIGINT or SIGTERM; a second one exits at once. */
export function waitForSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const on = (sig: NodeJS.Signals): void => {
      process.off('SIGINT', on);
      process.off('SIGTERM', on);
      const force = (): never => process.exit(130);
      process.once('SIGINT', force);
      process.once('SIGTERM', force);
      resolve(sig);
    };
    process.on('SIGINT', on);
    process.on('SIGTERM', on);
  });
}
