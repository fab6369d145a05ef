/**
 * ioredis options for a Redis that must never hold up a request: no offline queue (a command
 * while disconnected fails at once), no retries of a command, a per-command timeout, no
 * reconnect loops on READONLY / LOADING errors; reconnection runs in the background at the
 * caller's pace (`retryDelayMs`, null to stop). Shared by the response cache's Redis store and the
 * replicas' shared state.
 */
import type { RedisOptions } from 'ioredis';

export function failFastRedisOptions(
  o: { connectTimeoutMs: number; timeoutMs: number },
  retryDelayMs: (times: number) => number | null,
): RedisOptions {
  return {
    connectTimeout: o.connectTimeoutMs,
    commandTimeout: o.timeoutMs,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    lazyConnect: true,
    retryStrategy: retryDelayMs,
    reconnectOnError: () => false,
  };
}
