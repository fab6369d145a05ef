/**
 * The live dashboard's routes, added to the gateway's local routes:
 *   GET /dashboard        the page (one self-contained HTML document: inline CSS and JS, no
 *                         external assets, no build step; see page.ts)
 *   GET /dashboard/state  what the page shows, as JSON (summary.ts), polled once a second
 *
 * Guarded like /admin/*: once any API key is configured, both need an admin key. A browser cannot
 * add `Authorization: Bearer` to a page load, so the admin key is also accepted as the password of
 * HTTP Basic authentication (any user name); a 401 on the page carries `WWW-Authenticate: Basic`,
 * so the browser asks for it once and sends it with the page's polls too.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import type { TenantDirectory } from '../../admission/tenants.js';
import { errors, sendError } from '../../api/errors.js';
import type { LocalRoute } from '../admin/local-routes.js';
import { DASHBOARD_CSP, dashboardPage } from './page.js';
import { DashboardSampler } from './summary.js';

export interface DashboardRoutesDeps {
  tenants: TenantDirectory;
  registry: Registry;
  describeWorkers: () => Record<string, unknown>[];
  now?: () => number;
}

/** `Basic base64(user:key)` → `Bearer key`; anything else unchanged. */
export function basicAsBearer(header: string | string[] | undefined): string | string[] | undefined {
  if (typeof header !== 'string') return header;
  const m = /^\s*basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header);
  if (!m) return header;
  const decoded = Buffer.from(m[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return colon < 0 ? header : `Bearer ${decoded.slice(colon + 1)}`;
}

export function dashboardRoutes(deps: DashboardRoutesDeps): Map<string, LocalRoute> {
  const sampler = new DashboardSampler({ registry: deps.registry, describeWorkers: deps.describeWorkers, now: deps.now });
  const page = Buffer.from(dashboardPage());
  const allowed = (req: IncomingMessage, res: ServerResponse, challenge: boolean): boolean => {
    const err = deps.tenants.checkAdmin(basicAsBearer(req.headers.authorization));
    if (err === null) return true;
    sendError(res, err, challenge && err.status === 401 ? { 'www-authenticate': 'Basic realm="kvgate dashboard", charset="UTF-8"' } : undefined);
    return false;
  };
  const common = { 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' };
  return new Map<string, LocalRoute>([
    [
      '/dashboard',
      {
        methods: ['GET', 'HEAD'],
        handle(req, res) {
          if (!allowed(req, res, true)) return;
          res.writeHead(200, {
            ...common,
            'content-type': 'text/html; charset=utf-8',
            'content-length': page.length,
            'content-security-policy': DASHBOARD_CSP,
            'x-frame-options': 'DENY',
          });
          res.end(req.method === 'HEAD' ? undefined : page);
        },
      },
    ],
    [
      '/dashboard/state',
      {
        methods: ['GET', 'HEAD'],
        handle(req, res) {
          if (!allowed(req, res, false)) return;
          sampler.state().then(
            (s) => {
              const body = JSON.stringify(s);
              res.writeHead(200, { ...common, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
              res.end(req.method === 'HEAD' ? undefined : body);
            },
            (e: Error) => sendError(res, errors.internal(`dashboard state failed: ${e.message}`)),
          );
        },
      },
    ],
  ]);
}
