/**
 * SSE framing kvgate writes itself. Upstream events are relayed byte for byte; kvgate only writes
 * an event of its own when a stream cannot finish normally.
 *
 * A stream that fails after bytes reached the client (worker died, deadline passed, gateway
 * shutting down) ends with one error event in OpenAI's error shape —
 *   data: {"error":{"message":...,"type":...,"param":null,"code":...}}
 * — and then the response ends WITHOUT `data: [DONE]`, so no client mistakes a truncated answer
 * for a complete one (the OpenAI SDKs raise on an event carrying `error`).
 */
import type { ApiError } from './errors.js';

export function sseErrorEvent(err: ApiError): string {
  return `data: ${JSON.stringify(err.body())}\n\n`;
}

/**
 * The last two bytes relayed so far, packed in a number, so the relay can tell whether it stopped
 * on an event boundary: upstream chunks may split an event, and an error event appended after a
 * partial one must first terminate it.
 */
export function updateTail(tail: number, chunk: Uint8Array): number {
  const n = chunk.length;
  if (n === 0) return tail;
  if (n === 1) return ((tail & 0xff) << 8) | chunk[0]!;
  return (chunk[n - 2]! << 8) | chunk[n - 1]!;
}

/** Initial tail: as if the stream started on a boundary. */
export const TAIL_AT_BOUNDARY = 0x0a0a;

export function atEventBoundary(tail: number): boolean {
  return tail === TAIL_AT_BOUNDARY || (tail & 0xffff) === 0x0a0a;
}
