/**
 * The EPP's listeners, started and stopped together by the gateway's lifecycle (gateway/lifecycle.ts):
 *   epp.listen      gRPC `envoy.service.ext_proc.v3.ExternalProcessor/Process`, one stream per request (stream.ts),
 *                   served by grpc-bidi-server.ts on node:http2
 *   epp.healthPort  gRPC `grpc.health.v1.Health` (Check, Watch) for the services `liveness`,
 *                   `readiness` and `envoy.service.ext_proc.v3.ExternalProcessor` (and "" for the server),
 *                   as GIE's and llm-d's EPPs register them
 *   epp.metricsPort HTTP: /metrics, /health, /ready, /admin/*, /dashboard as the gateway answers
 *                   them (same keys); the inference routes are not served there (404)
 * Messages are (de)serialized by descriptor.ts: a body that is not a ProcessingRequest reaches the
 * stream, which answers it with INVALID_ARGUMENT.
 */
import { createServer, type Server as HttpServer } from 'node:http';
import * as grpc from '@grpc/grpc-js';
import { errors, sendError } from '../api/errors.js';
import type { GatewayMembers } from '../gateway/composition/compose.js';
import { inferenceRoute } from '../gateway/pipeline/handler.js';
import type { ListeningServer } from '../gateway/lifecycle.js';
import { GrpcBidiServer, type BidiCall } from './grpc-bidi-server.js';
import { decodeHealthCheckRequest, encodeHealthCheckResponse, EXT_PROC_SERVICE, HEALTH_SERVICE, ServingStatus } from './descriptor.js';
import { EppStream, type StreamEnv, type StreamSink } from './stream.js';

const raw = (b: Buffer): Buffer => b;

const HEALTH: grpc.ServiceDefinition = {
  Check: { path: `/${HEALTH_SERVICE}/Check`, requestStream: false, responseStream: false, requestSerialize: raw, requestDeserialize: raw, responseSerialize: raw, responseDeserialize: raw },
  Watch: { path: `/${HEALTH_SERVICE}/Watch`, requestStream: false, responseStream: true, requestSerialize: raw, requestDeserialize: raw, responseSerialize: raw, responseDeserialize: raw },
};

/** How often a Watch call looks for a change of status, ms. */
const WATCH_INTERVAL_MS = 1000;

export interface EppListeners extends ListeningServer {
  /** The bound ports (after listen; 0 requested gives an ephemeral one). */
  readonly ports: { extProc: number; health: number; metrics: number };
}

/** The status of a health service name, or SERVICE_UNKNOWN. */
function servingStatus(g: GatewayMembers, service: string): number {
  const ready = g.life.started && !g.life.draining && !g.life.closing && (g.config.server.readyRequiresWorker !== true || g.registry.anyRoutable());
  switch (service) {
    case 'liveness':
      return g.life.closing ? ServingStatus.NOT_SERVING : ServingStatus.SERVING;
    case '':
    case 'readiness':
    case EXT_PROC_SERVICE:
      return ready ? ServingStatus.SERVING : ServingStatus.NOT_SERVING;
    default:
      return ServingStatus.SERVICE_UNKNOWN;
  }
}

export function createEppListeners(g: GatewayMembers, env: StreamEnv): EppListeners {
  const { config, logger } = g;
  const host = config.epp.listen.host;
  const ports = { extProc: 0, health: 0, metrics: 0 };
  const extProc = new GrpcBidiServer(`/${EXT_PROC_SERVICE}/Process`, (call) => {
    const stream = new EppStream(env, callSink(call));
    return {
      onMessage: (b) => stream.onMessage(b),
      onHalfClose: () => stream.onClosed(false),
      onCancel: () => stream.onClosed(true),
    };
  });
  const health = new grpc.Server();
  const watchers = new Set<NodeJS.Timeout>();

  health.addService(HEALTH, {
    Check: (call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) => {
      let service: string;
      try {
        service = decodeHealthCheckRequest(call.request).service;
      } catch (e) {
        callback({ code: grpc.status.INVALID_ARGUMENT, details: `malformed HealthCheckRequest: ${(e as Error).message}` });
        return;
      }
      const status = servingStatus(g, service);
      if (status === ServingStatus.SERVICE_UNKNOWN) callback({ code: grpc.status.NOT_FOUND, details: `unknown service '${service}'` });
      else callback(null, encodeHealthCheckResponse(status));
    },
    Watch: (call: grpc.ServerWritableStream<Buffer, Buffer>) => {
      let service: string;
      try {
        service = decodeHealthCheckRequest(call.request).service;
      } catch (e) {
        call.emit('error', { code: grpc.status.INVALID_ARGUMENT, details: `malformed HealthCheckRequest: ${(e as Error).message}` });
        return;
      }
      let last = -1;
      const send = (): void => {
        const s = servingStatus(g, service);
        if (s !== last) call.write(encodeHealthCheckResponse((last = s)));
      };
      send();
      const timer = setInterval(send, WATCH_INTERVAL_MS);
      watchers.add(timer);
      const stop = (): void => {
        clearInterval(timer);
        watchers.delete(timer);
      };
      call.on('cancelled', stop);
      call.on('close', stop);
    },
  });

  // The gateway's local routes (metrics, probes, admin), without its inference routes.
  const http: HttpServer = createServer((req, res) => {
    const path = (req.url ?? '/').split('?', 1)[0]!;
    if (inferenceRoute(path) !== null) {
      sendError(res, errors.routeNotFound(path));
      return;
    }
    g.handler(req, res);
  });

  const bind = (server: grpc.Server, port: number): Promise<number> =>
    new Promise((resolve, reject) => {
      const at = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
      server.bindAsync(at, grpc.ServerCredentials.createInsecure(), (err, bound) => (err ? reject(err) : resolve(bound)));
    });

  return {
    ports,
    async listen() {
      ports.extProc = await extProc.listen(host, config.epp.listen.port);
      ports.health = await bind(health, config.epp.healthPort);
      ports.metrics = await new Promise<number>((resolve, reject) => {
        http.once('error', reject);
        http.listen(config.epp.metricsPort, host, () => {
          http.off('error', reject);
          const a = http.address();
          resolve(typeof a === 'object' && a !== null ? a.port : config.epp.metricsPort);
        });
      });
      logger.info({ extProc: ports.extProc, health: ports.health, metrics: ports.metrics, host }, 'kvgate epp: ext_proc, gRPC health and HTTP metrics listening');
      const h = host.includes(':') ? `[${host}]` : host;
      return { url: `grpc://${h}:${ports.extProc}`, port: ports.extProc, address: host };
    },
    close() {
      for (const t of watchers) clearInterval(t);
      watchers.clear();
      const grpcClosed = (s: grpc.Server): Promise<void> => new Promise((resolve) => s.tryShutdown(() => resolve()));
      // Health answers NOT_SERVING while streams finish; it closes with them.
      return Promise.all([extProc.close(), grpcClosed(health), new Promise<void>((resolve) => http.close(() => resolve()))]).then(() => undefined);
    },
    closeIdle() {
      http.closeIdleConnections();
    },
    closeAll() {
      extProc.destroy();
      health.forceShutdown();
      http.closeAllConnections();
    },
  };
}

/** A gRPC call as a stream's sink (the call itself ignores anything after its end or a cancellation). */
function callSink(call: BidiCall): StreamSink {
  return {
    write: (bytes) => call.write(bytes),
    end: () => call.end(),
    fail: (code, details) => call.fail(code, details),
  };
}
