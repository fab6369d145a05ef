/**
 * `GET /v1/responses/{id}` (retrieve a stored or background response; `?stream=true` replays its
 * events) and `POST /v1/responses/{id}/cancel` (cancel a background one), sent to the worker that
 * holds the response — the one that wrote it, as ResponseAffinity learned — and relayed as it
 * answers. A response this gateway (and, with `shared.responses`, every replica) never relayed is a
 * 404: no other worker has it; so is one another tenant's request wrote. While the shared directory
 * cannot be asked, an id not known to this replica is a 503 (response_directory_unavailable).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { request } from 'undici';
import type { TenantDirectory } from '../../admission/tenants.js';
import { ApiError, echo, errors, sendError } from '../../api/errors.js';
import type { WorkerRegistry } from '../../fleet/registry.js';
import { traceContextOf } from '../../http/trace-context.js';
import type { Logger } from '../../telemetry/logger.js';
import { decodeSegment } from '../../util/path-segment.js';
import { normaliseWorkerError } from '../pipeline/relay-attempt.js';
import { ResponseDirectoryUnreachable, type ResponseHolder } from '../../shared/response-directory.js';
import { directoryUnavailable, mayAccess, type ResponseAffinity } from './response-affinity.js';

export interface ResponseLookupDeps {
  affinity: ResponseAffinity;
  fleet: WorkerRegistry;
  tenants: TenantDirectory;
  logger: Pick<Logger, 'warn'>;
  /** The worker's answer must start within this long (timeouts.firstByteMs). */
  firstByteMs: () => number;
}

const PATH = /^\/v1\/responses\/([^/]{1,256})(\/cancel)?$/;
/** Most of a worker's error body read (to put it in OpenAI's shape). */
const MAX_ERROR_TEXT = 4096;

/** What a lookup was, for its request line and metrics. */
export interface LookupOutcome {
  /** `responses_retrieve` or `responses_cancel` (`responses_lookup` for a path that is neither). */
  route: string;
  /** The model of the worker that holds the response; undefined when none was found. */
  model?: string;
  worker?: string;
}

/** Handles a `/v1/responses/...` path; resolves when the answer is over. */
export async function lookupResponse(d: ResponseLookupDeps, path: string, query: string, req: IncomingMessage, res: ServerResponse): Promise<LookupOutcome> {
  const outcome: LookupOutcome = { route: 'responses_lookup' };
  try {
    const m = PATH.exec(path);
    if (!m) throw errors.routeNotFound(path);
    const cancel = m[2] !== undefined;
    outcome.route = cancel ? 'responses_cancel' : 'responses_retrieve';
    const method = cancel ? 'POST' : 'GET';
    if (req.method !== method) throw errors.methodNotAllowed(req.method ?? '?', cancel ? '/v1/responses/{id}/cancel' : '/v1/responses/{id}', method);
    const tenant = d.tenants.authenticate(req.headers.authorization);
    req.resume(); // a body, if any, is not read
    const id = decodeSegment(m[1]!);
    let holder: ResponseHolder | undefined;
    try {
      holder = await d.affinity.locate(id);
    } catch (e) {
      // No worker can be chosen without the directory: the response may well exist.
      if (e instanceof ResponseDirectoryUnreachable) throw directoryUnavailable(id, 'response_id');
      throw e;
    }
    // Another tenant's response (or, with tenant keys, one whose tenant is not known) is answered
    // as one never relayed.
    const w = holder === undefined || !mayAccess(holder, tenant.id, !d.tenants.open) ? undefined : d.fleet.get(holder.workerId);
    if (w === undefined) {
      throw new ApiError(404, 'not_found_error', 'response_not_found', `Response '${echo(id)}' was not relayed by this gateway, or its worker is gone`, 'response_id');
    }
    outcome.model = w.model;
    outcome.worker = w.id;
    const url = new URL(w.url);
    const base = url.pathname.replace(/\/$/, '');
    let r: Awaited<ReturnType<typeof request>>;
    try {
      r = await request(`${url.origin}${base}${path}${query}`, {
        method,
        headers: { ...w.upstreamHeaders, ...traceContextOf(req.headers)?.headers },
        headersTimeout: d.firstByteMs(),
        bodyTimeout: 0,
      });
    } catch (e) {
      d.logger.warn({ worker: w.id, err: (e as Error).message }, 'response lookup: worker request failed');
      throw errors.upstream(`worker ${w.id} is unreachable`, 'upstream_unreachable');
    }
    if (r.statusCode >= 400) {
      let text = '';
      for await (const chunk of r.body) if (text.length < MAX_ERROR_TEXT) text += (chunk as Buffer).toString('utf8');
      throw normaliseWorkerError(r.statusCode, text, w.id);
    }
    const ct = r.headers['content-type'];
    res.writeHead(r.statusCode, { 'content-type': typeof ct === 'string' ? ct : 'application/json' });
    await pipeline(r.body, res);
  } catch (e) {
    if (!res.headersSent && !res.destroyed) sendError(res, e instanceof ApiError ? e : errors.upstream((e as Error).message, 'upstream_stream_error'));
    else if (!res.writableEnded) res.destroy();
  }
  return outcome;
}
