/**
 * Errors at the HTTP edge, in OpenAI's shape: {"error":{"message","type","param","code"}}.
 * Anything that ends a request with a status kvgate chose (not one relayed from a worker) is an
 * ApiError, so every failure path produces the same body.
 */
import type { ServerResponse } from 'node:http';

export type ErrorType =
  | 'invalid_request_error'
  | 'not_found_error'
  | 'server_error'
  | 'upstream_error'
  | 'timeout_error'
  | 'overloaded_error'
  // OpenAI's 429 rate_limit_exceeded errors carry which limit was hit as their type.
  | 'requests'
  | 'tokens';

export interface ErrorBody {
  error: { message: string; type: ErrorType; param: string | null; code: string | null };
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly type: ErrorType,
    readonly code: string | null,
    message: string,
    readonly param: string | null = null,
    /** Extra response headers (Retry-After, Allow). */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }

  body(): ErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** Longest client-supplied value echoed back in an error message. */
const ECHO_MAX_CHARS = 64;

/** A client-supplied value as it may appear in a message: truncated, control characters escaped. */
export function echo(value: string, max = ECHO_MAX_CHARS): string {
  const s = value.length > max ? `${value.slice(0, max)}…(${value.length} chars)` : value;
  return s.replace(/[\u0000-\u001f\u007f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

export const errors = {
  invalidJson: (detail: string) =>
    new ApiError(400, 'invalid_request_error', 'invalid_json', `request body is not valid JSON: ${echo(detail, 200)}`),
  /** A body nested deeper than api/json-depth.ts allows: refused before it is parsed. */
  nestedTooDeep: (max: number) =>
    new ApiError(400, 'invalid_request_error', 'nesting_too_deep', `request body nests arrays and objects more than ${max} levels deep`),
  invalidField: (param: string, message: string) =>
    new ApiError(400, 'invalid_request_error', 'invalid_value', echo(message, 300), param ? echo(param, 100) : null),
  /** Also a model the caller's tenant may not use: the two are answered alike, as OpenAI does. */
  modelNotFound: (model: string) =>
    new ApiError(404, 'invalid_request_error', 'model_not_found', `The model '${echo(model)}' does not exist or you do not have access to it`, 'model'),
  /** A request cap (caps.*): the parameter named, the limit stated. */
  capExceeded: (param: string, message: string) => new ApiError(400, 'invalid_request_error', 'limit_exceeded', message, param),
  /** The body is never read: the connection is closed after answering. */
  unsupportedMediaType: (message: string) =>
    new ApiError(415, 'invalid_request_error', 'unsupported_media_type', message, null, { connection: 'close' }),
  requestTimeout: (message: string) =>
    new ApiError(408, 'invalid_request_error', 'request_timeout', message, null, { connection: 'close' }),
  bodyTooLarge: (limit: number) =>
    new ApiError(413, 'invalid_request_error', 'request_too_large', `request body exceeds the limit of ${limit} bytes`),
  routeNotFound: (path: string) =>
    new ApiError(404, 'not_found_error', 'not_found', `no route for ${path}`),
  methodNotAllowed: (method: string, path: string, allow: string) =>
    new ApiError(405, 'invalid_request_error', 'method_not_allowed', `${method} is not allowed on ${path}`, null, {
      allow,
    }),
  noWorker: (message: string, retryAfterS: number) =>
    new ApiError(503, 'overloaded_error', 'no_worker_available', message, null, {
      'retry-after': String(retryAfterS),
    }),
  upstream: (message: string, code = 'upstream_error') => new ApiError(502, 'upstream_error', code, message),
  deadline: (message: string) => new ApiError(504, 'timeout_error', 'deadline_exceeded', message),
  shuttingDown: () =>
    new ApiError(503, 'overloaded_error', 'shutting_down', 'the gateway is shutting down', null, { 'retry-after': '1' }),
  internal: (message: string) => new ApiError(500, 'server_error', 'internal_error', message),
};

/** Write an ApiError as a complete JSON response. Only call before any header was sent. */
export function sendError(res: ServerResponse, err: ApiError, extraHeaders?: Record<string, string>): void {
  const payload = JSON.stringify(err.body());
  res.writeHead(err.status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(payload),
    ...err.headers,
    ...extraHeaders,
  });
  res.end(payload);
}
