/**
 * ImmediateResponse messages: the proxy answers the client itself and sends nothing upstream.
 * Errors carry OpenAI's error body (as the gateway's HTTP answers do, api/errors.ts) and a header
 * naming why the request was dropped, in the spirit of llm-d-router's
 * `x-llm-d-request-dropped-reason` (llm-d/llm-d-router pkg/common/error/error.go; its values
 * rejected-saturated, rejected-no-endpoints, rejected-shutting-down and rejected-internal are used
 * as llm-d uses them).
 */
import type { ApiError } from '../api/errors.js';
import { setHeader, type HeaderValueOption, type ProcessingResponse } from './descriptor.js';

export const DROPPED_REASON_HEADER = 'x-kvgate-request-dropped-reason';

/** Why a request was refused, from the error kvgate answers it with. */
export function droppedReason(e: ApiError): string {
  switch (e.status) {
    case 400:
    case 413:
    case 415:
      return 'rejected-bad-request';
    case 401:
      return 'rejected-unauthorized';
    case 403:
      return 'rejected-forbidden';
    case 404:
      return 'rejected-model-not-found';
    case 429:
      return e.code === 'rate_limit_exceeded' ? 'rejected-rate-limited' : 'rejected-saturated';
    case 503:
      if (e.code === 'shutting_down') return 'rejected-shutting-down';
      if (e.code === 'no_worker_available' || e.code === 'no_endpoint_in_subset') return 'rejected-no-endpoints';
      return 'rejected-saturated';
    case 504:
      return 'rejected-ttl-expired';
    default:
      return e.status >= 500 ? 'rejected-internal' : 'rejected-bad-request';
  }
}

/** An ImmediateResponse of `status` with these headers and body. */
export function immediate(status: number, headers: Record<string, string>, body: Buffer, details: string): ProcessingResponse {
  const set: HeaderValueOption[] = [];
  for (const [k, v] of Object.entries(headers)) set.push(setHeader(k, v));
  return { immediate_response: { status: { code: status }, headers: { set_headers: set }, body, details } };
}

/** The error as the client gets it: its status, OpenAI's body, its headers (Retry-After...), the dropped reason. */
export function immediateError(e: ApiError, requestHeaders: Record<string, string> = {}): ProcessingResponse {
  const headers: Record<string, string> = { ...requestHeaders, 'content-type': 'application/json' };
  // The proxy owns the connection: a hint to close it is not kvgate's to give.
  for (const [k, v] of Object.entries(e.headers)) if (k !== 'connection') headers[k] = v;
  const reason = droppedReason(e);
  headers[DROPPED_REASON_HEADER] = reason;
  return immediate(e.status, headers, Buffer.from(JSON.stringify(e.body())), `kvgate_${reason}`);
}
