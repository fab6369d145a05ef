/**
 * `kvgate epp --config FILE`: kvgate as the Endpoint Picker of an Envoy-family gateway (src/epp/).
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { ConfigError, parseConfigText, type GatewayConfig } from '../config/index.js';
import { ConfigWatcher, hashConfigText } from '../gateway/admin/config-watch.js';
import { createEpp } from '../epp/epp.js';
import { waitForSignal } from './serve.js';

export const help = `Usage: kvgate epp --config FILE [options]

Serves Envoy's external processing protocol (gRPC envoy.service.ext_proc.v3.ExternalProcessor)
as an Endpoint Picker of the Gateway API Inference Extension: the proxy (Envoy, Istio,
agentgateway, kgateway, NGINX Gateway Fabric, Envoy AI Gateway, GKE) carries the bytes and asks
kvgate, once per request, which worker serves it. FILE is the same config as \`kvgate serve\`'s
(workers, policy, admission, tenants, rate limits, cache, shared state), with the section

  epp:
    listen: { host: 127.0.0.1, port: 9002 }   # ext_proc (gRPC, plaintext)
    healthPort: 9003                           # grpc.health.v1: liveness, readiness,
                                               # envoy.service.ext_proc.v3.ExternalProcessor
    metricsPort: 9090                          # HTTP /metrics, /health, /ready, /admin/*
    fallbacks: 0                               # endpoints named after the pick (ip:port,ip:port)

The listen section (kvgate's own HTTP data path) is not used. The ext_proc filter must send the
request body in FULL_DUPLEX_STREAMED (or BUFFERED) mode and the response headers and body (SEND,
FULL_DUPLEX_STREAMED), so kvgate sees each answer's first token, usage and end.

Options:
  -c, --config FILE      configuration file (required)
  -p, --port P           ext_proc port (overrides epp.listen.port)
      --host H           address of all three listeners (overrides epp.listen.host)
      --health-port P    gRPC health port (overrides epp.healthPort)
      --metrics-port P   HTTP metrics port (overrides epp.metricsPort)
      --log-level L      fatal|error|warn|info|debug|trace|silent (overrides log.level)
      --pretty           human-readable logs instead of JSON lines
  -h, --help             this text

What the proxy is told, per request (after its whole body):
  - the pick: header x-gateway-destination-endpoint and dynamic metadata
    envoy.lb/x-gateway-destination-endpoint (ip:port), with clear_route_cache, then the body
    echoed in chunks of at most 62,000 bytes; with a subset hint
    (envoy.lb.subset_hint/x-gateway-destination-endpoint-subset) only those endpoints are picked;
  - or an ImmediateResponse: the response-cache's answer (JSON or SSE), or an error in OpenAI's
    shape with x-kvgate-request-dropped-reason: 400 bad body, 401/403 keys, 404 unknown model,
    413 body too large, 429 rate-limited or shed, 503 no endpoint (or none in the subset).
  Malformed messages and messages out of order end the stream with a gRPC error.

Reload and shutdown are as for \`kvgate serve\` (SIGHUP or a file change reloads; SIGTERM
drains: readiness answers NOT_SERVING for shutdown.drainDelayMs, then open streams get
shutdown.graceMs). The epp section needs a restart.

Exit codes: 0 after a clean shutdown, 2 for bad flags or an invalid config, 1 if a port is taken.
`;

const LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

export async function run(argv: string[]): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        config: { type: 'string', short: 'c' },
        port: { type: 'string', short: 'p' },
        host: { type: 'string' },
        'health-port': { type: 'string' },
        'metrics-port': { type: 'string' },
        'log-level': { type: 'string' },
        pretty: { type: 'boolean' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (e) {
    process.stderr.write(`kvgate epp: ${(e as Error).message}\n\n${help}`);
    return 2;
  }
  if (typeof values.config !== 'string') {
    process.stderr.write(`kvgate epp: --config FILE is required\n\n${help}`);
    return 2;
  }
  const ports: Record<string, number | undefined> = {};
  for (const flag of ['port', 'health-port', 'metrics-port']) {
    const v = values[flag];
    if (v === undefined) continue;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0 || n > 65535) {
      process.stderr.write(`kvgate epp: --${flag} must be an integer 0..65535, got '${String(v)}'\n`);
      return 2;
    }
    ports[flag] = n;
  }
  const level = values['log-level'] as (typeof LEVELS)[number] | undefined;
  if (level !== undefined && !LEVELS.includes(level)) {
    process.stderr.write(`kvgate epp: --log-level must be one of ${LEVELS.join(', ')}\n`);
    return 2;
  }
  const file = values.config;
  const parse = (text: string): GatewayConfig => {
    const c = parseConfigText(text, file);
    if (ports.port !== undefined) c.epp.listen.port = ports.port;
    if (ports['health-port'] !== undefined) c.epp.healthPort = ports['health-port'];
    if (ports['metrics-port'] !== undefined) c.epp.metricsPort = ports['metrics-port'];
    if (typeof values.host === 'string') c.epp.listen.host = values.host;
    if (level !== undefined) c.log.level = level;
    if (values.pretty === true) c.log.pretty = true;
    return c;
  };
  let config: GatewayConfig;
  let text: string;
  try {
    try {
      text = readFileSync(file, 'utf8');
    } catch (e) {
      throw new ConfigError([`cannot read ${file}: ${(e as Error).message}`]);
    }
    config = parse(text);
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`kvgate epp: ${file}: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  const initialHash = hashConfigText(text);
  let onHup = (): void => undefined;
  const hup = (): void => onHup();
  process.on('SIGHUP', hup);
  let epp;
  try {
    epp = createEpp(config, { configSource: { path: file, hash: initialHash } });
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`kvgate epp: ${file}: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  try {
    await epp.start();
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`kvgate epp: ${file}: ${e.message}\n`);
      await epp.close();
      return 2;
    }
    const { listen, healthPort, metricsPort } = config.epp;
    process.stderr.write(`kvgate epp: cannot listen on ${listen.host} (ports ${listen.port}, ${healthPort}, ${metricsPort}): ${(e as Error).message}\n`);
    await epp.close();
    return 1;
  }
  const watcher = new ConfigWatcher({ path: file, parse, gateway: epp, logger: epp.logger, watch: config.reload.watch, debounceMs: config.reload.debounceMs, initialHash });
  watcher.start();
  onHup = () => void watcher.reload('signal');
  const sig = await waitForSignal();
  process.off('SIGHUP', hup);
  watcher.close();
  epp.logger.info({ signal: sig, graceMs: config.shutdown.graceMs }, 'shutting down');
  if (sig === 'SIGTERM') await epp.shutdown();
  else await epp.close();
  return 0;
}
