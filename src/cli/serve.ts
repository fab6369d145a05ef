/**
 * `kvgate serve --config FILE`: the gateway in front of the workers named in a config file.
 */
import { parseArgs } from 'node:util';
import { ConfigError, DEFAULT_POLICY_NAME, parseConfigText, type GatewayConfig } from '../config/index.js';
import { logLevelFlag, portFlag, readConfigFile, startAndServe } from './server-run.js';
import { policyNames } from '../scheduler/registry.js';
import { createGateway } from '../gateway/gateway.js';

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
      --strict-parity refuse to start (exit 2) when a worker with kvEvents tokenizes the probe
                      prompts differently from kvgate's tokenizer for its model (overrides
                      tokenizers.strictParity; without it such a worker's events are not used)
      --check         validate FILE and exit, as \`nginx -t\` does: every field, the policy's
                      options, the TLS files; nothing listens and no worker is contacted
                      (speculative cascades' workers are checked at start only). Exit 0 if it
                      would start, 2 with one line per problem if not
  -h, --help          this text

Routing policies (policy.name): ${policyNames().join(', ')}; default ${DEFAULT_POLICY_NAME}.

Shutdown: on SIGTERM /ready answers 503 for shutdown.drainDelayMs (default 5 s) while requests
are still served, then new connections stop and in-flight requests get shutdown.graceMs to
finish. SIGINT skips the drain delay; a second signal exits at once.

Hot reload: on SIGHUP, and when FILE changes (reload.watch, default on; reload.debounceMs), the
whole file is read and validated. Invalid: one error line names the field and the reason, and
the running config stays entirely. Valid: the difference is applied without a restart and
without dropping in-flight requests: workers added, removed (they finish what they serve, then
their connections close) or changed; policy weights and thresholds; admission thresholds and
queue; tenants, API keys, their models and rate limits; model aliases; breaker thresholds; timeouts, caps, retries; health
and scrape intervals; the log level. Settings that need a restart (listen, server, upstream,
tokenizers, cache, speculative, shared, outlier, cacheSalt, reload, policy.name or a policy's
index size, admission.enabled, admission.vllmPriority, log.pretty,
scrape.staleAfterMs, circuitBreaker.failureRate.windowMs; a tenant turning the response cache on
when it was off for everyone) are logged as "needs a restart" and keep their old values. The
flags above apply to every reload too. GET /admin/config shows the active version, when it was
applied, the file's SHA-256, the config (secrets redacted) and the last rejected reload's errors;
kvgate_config_version and kvgate_config_reloads_total{result} count them.

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
        check: { type: 'boolean' },
        'strict-parity': { type: 'boolean' },
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
  const file = values.config;
  // Flags override the file before validation, so a bad URL is reported like a bad field.
  const adjust = (raw: unknown): unknown => {
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
  };
  const port = portFlag('serve', 'port', values.port);
  const level = logLevelFlag('serve', values['log-level']);
  if (port === null || level === null) return 2;
  // The file's text as validated at start and at every reload, with the flags applied after.
  const parse = (text: string): GatewayConfig => {
    const c = parseConfigText(text, file, adjust);
    if (port !== undefined) c.listen.port = port;
    if (typeof values.host === 'string') c.listen.host = values.host;
    if (level !== undefined) c.log.level = level;
    if (values.pretty === true) c.log.pretty = true;
    if (values['strict-parity'] === true) c.tokenizers.strictParity = true;
    return c;
  };
  const read = readConfigFile('serve', file, parse);
  if (read === null) return 2;
  const { config, text } = read;
  if (values.check === true) return check(file, config);
  // Speculative cascades (speculative.cascades) are checked against their workers in start().
  return startAndServe({
    command: 'serve',
    file,
    parse,
    config,
    text,
    create: (c, configSource) => createGateway(c, { configSource }),
    where: `${config.listen.host}:${config.listen.port}`,
  });
}

/** --check: build the gateway from the config (what can fail before it listens), then drop it. */
async function check(file: string, config: GatewayConfig): Promise<number> {
  let gateway;
  try {
    gateway = createGateway(config, { watchFleet: false });
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`kvgate serve: ${file}: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  await gateway.close();
  const models = new Set(config.workers.map((w) => w.model));
  process.stdout.write(
    `kvgate serve: ${file}: configuration ok (${config.workers.length} workers, ${models.size} models, policy ${config.policy.name}, ${config.tenants.length} tenants)\n`,
  );
  return 0;
}
