/**
 * The routes the gateway answers itself, never from a worker: liveness (/health), readiness
 * (/ready), the model list (/v1/models, from the configured pools), Prometheus metrics (/metrics)
 * and the per-worker admin view (/admin/workers). GET or HEAD only; they are not accounted as
 * requests (no kvgate_requests_total sample, no log line).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { errors, sendError } from '../api/errors.js';
import type { WorkerRegistry } from '../fleet/registry.js';
import type { GatewayMetrics } from '../telemetry/metrics.js';

export interface LocalRoutesDeps {
  fleet: WorkerRegistry;
  metrics: GatewayMetrics;
  isClosing: () => boolean;
}

const LOCAL_ROUTES = new Set(['/v1/models', '/health', '/ready', '/metrics', '/admin/workers']);

/** Answers `path` if it is a local route and returns true; returns false for any other path. */
export function createLocalRoutes(deps: LocalRoutesDeps): (path: string, req: IncomingMessage, res: ServerResponse) => boolean {
  const { fleet, metrics } = deps;
  const modelsBody = (): string =>
    JSON.stringify({
      object: 'list',
      data: fleet.models().map((id) => ({
        id,
        object: 'model',
        created: 0,
        owned_by: 'kvgate',
        pools: [...new Set(fleet.forModel(id)!.map((w) => w.pool))],
      })),
    });

  return (path, req, res) => {
    if (!LOCAL_ROUTES.has(path)) return false;
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      sendError(res, errors.methodNotAllowed(req.method ?? '?', path, 'GET, HEAD'));
      return true;
    }
    switch (path) {
      case '/health':
        json(res, 200, '{"status":"ok"}');
        break;
      case '/ready': {
        const ok = !deps.isClosing() && fleet.anyRoutable();
        json(res, ok ? 200 : 503, JSON.stringify({ status: ok ? 'ready' : 'not_ready' }));
        break;
      }
      case '/v1/models':
        json(res, 200, modelsBody());
        break;
      case '/admin/workers':
        json(res, 200, JSON.stringify(fleet.describeAll()));
        break;
      case '/metrics':
        metrics.registry.metrics().then(
          (text) => {
            res.writeHead(200, { 'content-type': metrics.registry.contentType });
            res.end(text);
          },
          (e: Error) => sendError(res, errors.internal(e.message)),
        );
        break;
    }
    return true;
  };
}

function json(res: ServerResponse, status: number, payload: string): void {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
  res.end(payload);
}
