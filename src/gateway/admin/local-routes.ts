/**
 * The routes the gateway answers itself, never from a worker: liveness (/health), readiness
 * (/ready: up and not draining, and with `server.readyRequiresWorker` some worker routable; the
 * body says whether one is), the model list (/v1/models, from the configured pools and their
 * aliases; with a tenant's key, the models it may use), Prometheus metrics (/metrics) and the
 * per-worker admin view (/admin/workers), GET or HEAD; draining a worker for maintenance (POST
 * /admin/workers/{id}/drain: no new requests, those in flight finish; DELETE: back in routing;
 * `draining` and `inflight` in /admin/workers say when it is idle); plus routes that parts of the
 * gateway add (`extra`: /admin/cache). They are not accounted as requests (no
 * kvgate_requests_total sample, no log line).
 *
 * Once any API key is configured, /admin/* needs an admin key (`admin.keys`), sent as
 * `Authorization: Bearer <key>`, and /metrics an admin or a metrics key unless
 * `admin.openMetrics` (metrics-access.ts); the other routes stay open (probes). Whatever the keys, /admin/* and /dashboard refuse what a page on
 * another site can make a browser send (cross-site.ts).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { mayUse, type TenantDirectory } from '../../admission/tenants.js';
import { ApiError, echo, errors, sendError } from '../../api/errors.js';
import { aliasTarget } from '../../config/index.js';
import type { WorkerRegistry } from '../../fleet/registry.js';
import type { WorkerState } from '../../fleet/worker-state.js';
import type { GatewayMetrics } from '../../telemetry/metrics.js';
import { decodeSegment } from '../../util/path-segment.js';
import { crossSiteProblem } from './cross-site.js';
import { metricsAccessError, type MetricsAccess } from './metrics-access.js';

/** A route added by a part of the gateway: its methods and handler. */
export interface LocalRoute {
  methods: readonly string[];
  handle(req: IncomingMessage, res: ServerResponse, url: URL): void;
}

export interface LocalRoutesDeps {
  fleet: WorkerRegistry;
  metrics: GatewayMetrics;
  isClosing: () => boolean;
  /** True while shutting down (drain delay included): /ready answers 503. */
  isDraining?: () => boolean;
  tenants: TenantDirectory;
  /** Who may read /metrics (metrics-access.ts; read per request: reloads apply). Absent: open. */
  metricsAccess?: () => MetricsAccess;
  /** /ready answers 503 while no worker is routable (`server.readyRequiresWorker`). */
  readyRequiresWorker?: boolean;
  /** Other names for served models (config `aliases`, read per request: reloads apply). */
  aliases: () => Readonly<Record<string, string>>;
  /** A worker drained or put back by an operator (POST / DELETE /admin/workers/{id}/drain). */
  onDrain?: (w: WorkerState, draining: boolean) => void;
  /** More routes by path (read at request time, so they may be added after start). */
  extraRoutes?: ReadonlyMap<string, LocalRoute>;
}

/** POST: take the worker out of routing, its requests in flight finishing; DELETE: back in. */
const DRAIN = /^\/admin\/workers\/([^/]{1,256})\/drain$/;

const LOCAL_ROUTES = new Set(['/v1/models', '/health', '/ready', '/metrics', '/admin/workers']);

/** Answers `path` if it is a local route and returns true; returns false for any other path. */
export function createLocalRoutes(deps: LocalRoutesDeps): (path: string, req: IncomingMessage, res: ServerResponse) => boolean {
  const { fleet, metrics } = deps;
  const guard = (path: string, req: IncomingMessage, res: ServerResponse): boolean => {
    const admin = path.startsWith('/admin/') || path === '/dashboard' || path.startsWith('/dashboard/');
    if (admin) {
      const crossSite = crossSiteProblem(req);
      if (crossSite !== null) {
        sendError(res, crossSite);
        return false;
      }
    }
    const err = path.startsWith('/admin/')
      ? deps.tenants.checkAdmin(req.headers.authorization)
      : path === '/metrics' && deps.metricsAccess !== undefined
        ? metricsAccessError(deps.tenants, deps.metricsAccess(), req.headers.authorization)
        : null;
    if (err) sendError(res, err);
    return err === null;
  };
  const modelEntry = (id: string) => {
    const workers = fleet.serving(id)!;
    // The smallest limit any worker reported: a request within it fits wherever it is routed.
    let maxModelLen = Infinity;
    for (const w of workers) if (typeof w.maxModelLen === 'number' && w.maxModelLen < maxModelLen) maxModelLen = w.maxModelLen;
    // A LoRA adapter names its base model as vLLM lists it: `parent`.
    const parent = fleet.adapterOf(id);
    return {
      id,
      object: 'model',
      created: 0,
      owned_by: 'kvgate',
      ...(parent !== undefined ? { parent } : {}),
      pools: [...new Set(workers.map((w) => w.pool))],
      ...(Number.isFinite(maxModelLen) ? { max_model_len: maxModelLen } : {}),
    };
  };
  /**
   * The models the caller may use: with a tenant's key, that tenant's (tenants[].models); without
   * one, every model (the list stays open, as the probes' routes do).
   */
  const visible = (req: IncomingMessage, id: string): boolean => {
    const t = deps.tenants.identify(req.headers.authorization);
    return t === null || mayUse(t, id);
  };
  /** A served model's entry, or an alias's (config `aliases`): its model's, named `root`. */
  const entryOf = (req: IncomingMessage, id: string) => {
    const served = aliasTarget(deps.aliases(), id);
    const model = served ?? id;
    if (!fleet.serving(model) || !visible(req, model)) return undefined;
    return served === undefined ? modelEntry(id) : { ...modelEntry(served), id, root: served };
  };
  const modelsBody = (req: IncomingMessage): string => {
    const data = [...fleet.models(), ...Object.keys(deps.aliases())].map((id) => entryOf(req, id)).filter((e) => e !== undefined);
    return JSON.stringify({ object: 'list', data });
  };

  return (path, req, res) => {
    // GET /v1/models/{id} (the OpenAI SDKs' models.retrieve); ids may contain '/' (org/name).
    if (path.startsWith('/v1/models/') && path.length > '/v1/models/'.length) {
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        sendError(res, errors.methodNotAllowed(req.method ?? '?', '/v1/models/{model}', 'GET, HEAD'));
        return true;
      }
      const id = decodeSegment(path.slice('/v1/models/'.length));
      const entry = entryOf(req, id);
      if (entry !== undefined) json(res, 200, JSON.stringify(entry));
      else sendError(res, errors.modelNotFound(id));
      return true;
    }
    const drain = path.startsWith('/admin/workers/') ? DRAIN.exec(path) : null;
    if (drain !== null) {
      if (req.method !== 'POST' && req.method !== 'DELETE') {
        sendError(res, errors.methodNotAllowed(req.method ?? '?', '/admin/workers/{id}/drain', 'POST, DELETE'));
        return true;
      }
      if (!guard(path, req, res)) return true;
      req.resume(); // a body, if any, is not read
      const id = decodeSegment(drain[1]!);
      const w = fleet.get(id);
      if (w === undefined || w.retired) {
        sendError(res, new ApiError(404, 'not_found_error', 'worker_not_found', `No worker '${echo(id)}' is configured`, null));
        return true;
      }
      w.draining = req.method === 'POST';
      deps.onDrain?.(w, w.draining);
      json(res, 200, JSON.stringify(fleet.describe(w)));
      return true;
    }
    const extra = deps.extraRoutes?.get(path);
    if (extra) {
      if (!extra.methods.includes(req.method ?? '')) {
        sendError(res, errors.methodNotAllowed(req.method ?? '?', path, extra.methods.join(', ')));
        return true;
      }
      if (guard(path, req, res)) extra.handle(req, res, new URL(req.url ?? path, 'http://kvgate'));
      return true;
    }
    if (!LOCAL_ROUTES.has(path)) return false;
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      sendError(res, errors.methodNotAllowed(req.method ?? '?', path, 'GET, HEAD'));
      return true;
    }
    if (!guard(path, req, res)) return true;
    switch (path) {
      case '/health':
        json(res, 200, '{"status":"ok"}');
        break;
      case '/ready': {
        const routable = fleet.anyRoutable();
        const ok = !deps.isClosing() && !(deps.isDraining?.() ?? false) && (routable || deps.readyRequiresWorker !== true);
        json(res, ok ? 200 : 503, JSON.stringify({ status: ok ? 'ready' : 'not_ready', workers_routable: routable }));
        break;
      }
      case '/v1/models':
        json(res, 200, modelsBody(req));
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

export function json(res: ServerResponse, status: number, payload: string): void {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
  res.end(payload);
}
