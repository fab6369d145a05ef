/**
 * What a web page on another site can make a browser send to the admin routes, refused whatever
 * the keys: a gateway without keys (a laptop, a cluster-internal service) is reached by the
 * browsers of people who can reach it, and any page they open could drive them.
 *
 * - `Sec-Fetch-Site` (every current browser sends it) other than `same-origin` or `none` (typed
 *   in, a bookmark): 403. A page on a sibling subdomain (`same-site`) is another origin too.
 * - `Origin` (sent on every cross-origin request, and on POST and DELETE) naming another host
 *   than the request's `Host`, or `null` (a sandboxed frame, a file): 403.
 * - A body whose content type is not `application/json` on POST, PUT, PATCH or DELETE: 415. An
 *   HTML form can send `text/plain`, form-encoded or multipart bodies without a preflight, and
 *   older browsers send no `Sec-Fetch-Site`; a body-less request (`curl -X POST`) carries none.
 *
 * Tools (curl, Prometheus, kubectl) send none of these headers and are not affected.
 */
import type { IncomingMessage } from 'node:http';
import { ApiError, echo, errors } from '../../api/errors.js';

const JSON_TYPE = /^application\/json\s*(;|$)/i;
const WRITES = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

const refused = (why: string): ApiError =>
  new ApiError(403, 'invalid_request_error', 'cross_site_request', `the admin routes take no cross-site request from a browser: ${why}`);

/** null if `req` may reach an admin route, else the error to answer. */
export function crossSiteProblem(req: IncomingMessage): ApiError | null {
  const site = req.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin' && site !== 'none') return refused(`Sec-Fetch-Site is '${echo(site, 40)}'`);
  const origin = req.headers.origin;
  if (origin !== undefined && !sameHost(origin, req.headers.host)) return refused(`Origin '${echo(origin, 200)}' is not this gateway`);
  const ct = req.headers['content-type'];
  if (WRITES.has(req.method ?? '') && ct !== undefined && !JSON_TYPE.test(ct)) {
    return errors.unsupportedMediaType(`Content-Type must be application/json on the admin routes, got '${echo(ct)}'`);
  }
  return null;
}

function sameHost(origin: string, host: string | undefined): boolean {
  if (host === undefined) return false;
  try {
    return new URL(origin).host === host.toLowerCase();
  } catch {
    return false; // `null`, or not a URL
  }
}
