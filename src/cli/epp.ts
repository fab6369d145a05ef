/**
 * `kvgate epp --config FILE`: kvgate as the Endpoint Picker of an Envoy-family gateway (src/epp/).
 */
import { parseArgs } from 'node:util';
import { parseConfigText, type GatewayConfig } from '../config/index.js';
import { createEpp } from '../epp/epp.js';
import { logLevelFlag, portFlag, readConfigFile, startAndServe } from './server-run.js';

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
  const port = portFlag('epp', 'port', values.port);
  const healthPort = portFlag('epp', 'health-port', values['health-port']);
  const metricsPort = portFlag('epp', 'metrics-port', values['metrics-port']);
  const level = logLevelFlag('epp', values['log-level']);
  if (port === null || healthPort === null || metricsPort === null || level === null) return 2;
  const file = values.config;
  const parse = (text: string): GatewayConfig => {
    const c = parseConfigText(text, file);
    if (port !== undefined) c.epp.listen.port = port;
    if (healthPort !== undefined) c.epp.healthPort = healthPort;
    if (metricsPort !== undefined) c.epp.metricsPort = metricsPort;
    if (typeof values.host === 'string') c.epp.listen.host = values.host;
    if (level !== undefined) c.log.level = level;
    if (values.pretty === true) c.log.pretty = true;
    return c;
  };
  const read = readConfigFile('epp', file, parse);
  if (read === null) return 2;
  const { config, text } = read;
  const { listen } = config.epp;
  return startAndServe({
    command: 'epp',
    file,
    parse,
    config,
    text,
    create: (c, configSource) => createEpp(c, { configSource }),
    where: `${listen.host} (ports ${listen.port}, ${config.epp.healthPort}, ${config.epp.metricsPort})`,
  });
}
