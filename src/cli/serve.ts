/**
 * `kvgate serve --config FILE`: the gateway in front of the workers named in a config file.
 */
import { parseArgs } from 'node:util';
import { ConfigError, DEFAULT_POLICY_NAME, loadConfigFile, type GatewayConfig } from '../config.js';
import { policyNames } from '../scheduler/registry.js';
import { createGateway } from '../gateway/gateway.js';
import { installSpeculative } from '../speculative/install.js';

export const help = `Usage: kvgate serve --config FILE [options]

Runs the gateway in front of the workers named in FILE (YAML or JSON; every field and its
default is documented in examples/kvgate.yaml).

Options:
  -c, --config FILE   configuration file (required)
  -p, --port P        listen port (overrides listen.port; default 8080)
      --host H        listen address (overrides listen.host; default 127.0.0.1)
      --cache MODE    off | memory | redis: the response cache (overrides cache.enabled and
                      cache.store; default: as configured, off unless the file turns it on)
      --redis URL     Redis for the response cache (overrides cache.redis.url and REDIS_URL;
                      implies --cache redis)
      --log-level L   fatal|error|warn|info|debug|trace|silent (overrides log.level; default info)
      --pretty        human-readable logs instead of JSON lines
  -h, --help          this text

Routing policies (policy.name): ${policyNames().join(', ')}; default ${DEFAULT_POLICY_NAME}.

Shutdown: on SIGTERM /ready answers 503 for shutdown.drainDelayMs (default 5 s) while requests
are still served, then new connections stop and in-flight requests get shutdown.graceMs to
finish. SIGINT skips the drain delay; a second signal exits at once.

A warning is logged when the gateway listens on a non-loopback address with no client API keys.

Speculative cascades (speculative.cascades: a draft pool verified by a target pool) are checked
against their workers before the gateway listens: a pool whose workers cannot return what
verification needs (prompt_logprobs, token-id logprobs, a shared tokenizer) stops the start with
a message naming the missing capability (exit code 2).

Exit codes: 0 after a clean shutdown (SIGINT/SIGTERM), 2 for bad flags or an invalid config,
1 if the gateway cannot start (e.g. the port is taken).
`;

export async function run(argv: string[]): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        config: { type: 'string', short: 'c' },
        port: { type: 'string', short: 'p' },
        host: { type: 'string' },
        'log-level': { type: 'string' },
        pretty: { type: 'boolean' },
        cache: { type: 'string' },
        redis: { type: 'string' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (e) {
    process.stderr.write(`kvgate serve: ${(e as Error).message}\n\n${help}`);
    return 2;
  }
  if (typeof values.config !== 'string') {
    process.stderr.write(`kvgate serve: --config FILE is required\n\n${help}`);
    return 2;
  }
  const cacheMode = values.cache as string | undefined;
  if (cacheMode !== undefined && !['off', 'memory', 'redis'].includes(cacheMode)) {
    process.stderr.write(`kvgate serve: --cache must be off, memory or redis, got '${cacheMode}'\n`);
    return 2;
  }
  const redisUrl = values.redis as string | undefined;
  if (redisUrl !== undefined && cacheMode !== undefined && cacheMode !== 'redis') {
    process.stderr.write(`kvgate serve: --redis needs --cache redis (or no --cache), got --cache ${cacheMode}\n`);
    return 2;
  }
  let config: GatewayConfig;
  try {
    config = loadConfigFile(values.config, (raw) => {
      // Flags override the file before validation, so a bad URL is reported like a bad field.
      if (cacheMode === undefined && redisUrl === undefined) return raw;
      const r = (raw ?? {}) as Record<string, any>;
      const cache = { ...(r.cache ?? {}) };
      if (cacheMode === 'off') cache.enabled = false;
      else if (cacheMode !== undefined || redisUrl !== undefined) {
        cache.enabled = true;
        cache.store = redisUrl !== undefined ? 'redis' : cacheMode;
      }
      if (redisUrl !== undefined) cache.redis = { ...(cache.redis ?? {}), url: redisUrl };
      return { ...r, cache };
    });
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`kvgate serve: ${values.config}: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  if (values.port !== undefined) {
    const p = Number(values.port);
    if (!Number.isInteger(p) || p < 0 || p > 65535) {
      process.stderr.write(`kvgate serve: --port must be an integer 0..65535, got '${values.port}'\n`);
      return 2;
    }
    config.listen.port = p;
  }
  if (typeof values.host === 'string') config.listen.host = values.host;
  if (typeof values['log-level'] === 'string') {
    const levels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
    const l = values['log-level'] as (typeof levels)[number];
    if (!levels.includes(l)) {
      process.stderr.write(`kvgate serve: --log-level must be one of ${levels.join(', ')}\n`);
      return 2;
    }
    config.log.level = l;
  }
  if (values.pretty === true) config.log.pretty = true;

  let gateway;
  try {
    gateway = createGateway(config);
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`kvgate serve: ${values.config}: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  try {
    // Speculative cascades (speculative.cascades) are checked against their workers first.
    await installSpeculative(gateway);
  } catch (e) {
    await gateway.close();
    if (e instanceof ConfigError) {
      process.stderr.write(`kvgate serve: ${values.config}: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  try {
    await gateway.start();
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`kvgate serve: ${values.config}: ${e.message}\n`);
      await gateway.close();
      return 2;
    }
    process.stderr.write(`kvgate serve: cannot listen on ${config.listen.host}:${config.listen.port}: ${(e as Error).message}\n`);
    await gateway.close();
    return 1;
  }
  const sig = await waitForSignal();
  gateway.logger.info({ signal: sig, graceMs: config.shutdown.graceMs, drainDelayMs: sig === 'SIGTERM' ? config.shutdown.drainDelayMs : 0 }, 'shutting down');
  // SIGTERM (an orchestrator): /ready answers 503 for the drain delay while requests are still
  // served, so load balancers stop sending before the listener closes. SIGINT (a terminal): at once.
  if (sig === 'SIGTERM') await gateway.shutdown();
  else await gateway.close();
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
