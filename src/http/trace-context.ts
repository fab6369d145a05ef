/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/): a client's `traceparent` and
 * `tracestate` are passed on to the worker, so vLLM's own spans (its `--otlp-traces-endpoint`)
 * join the client's trace. kvgate records no spans of its own, so it passes the parent on
 * unchanged rather than starting a child span nobody would export; its request log carries the
 * trace id, to find a trace's request in the logs.
 */
import type { IncomingHttpHeaders } from 'node:http';

/** version-traceid-parentid-flags; a later version may append fields after a '-'. */
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-[^\s]*)?$/;
const ZERO_TRACE = '00000000000000000000000000000000';
const ZERO_PARENT = '0000000000000000';
/** The spec asks a participant to pass on at least this much of a tracestate; a longer one is dropped whole. */
const MAX_TRACESTATE = 512;

export interface TraceContext {
  /** The headers to send on: traceparent, and tracestate when the client sent one. */
  headers: Record<string, string>;
  traceId: string;
}

/**
 * The client's trace context, if it sent a valid one. An invalid `traceparent` (wrong shape,
 * upper-case hex, version ff, an all-zero id, or version 00 with extra fields) is dropped with its
 * `tracestate`, as the spec asks of a participant that cannot parse it.
 */
export function traceContextOf(h: IncomingHttpHeaders): TraceContext | null {
  const tp = h.traceparent;
  if (typeof tp !== 'string') return null;
  const m = TRACEPARENT.exec(tp.trim());
  if (m === null) return null;
  const [, version, traceId, parentId, extra] = m as unknown as [string, string, string, string, string | undefined];
  if (version === 'ff' || traceId === ZERO_TRACE || parentId === ZERO_PARENT || (version === '00' && extra !== undefined)) return null;
  const headers: Record<string, string> = { traceparent: m[0] };
  const ts = h.tracestate;
  if (typeof ts === 'string' && ts.length > 0 && ts.length <= MAX_TRACESTATE) headers.tracestate = ts;
  return { headers, traceId };
}
