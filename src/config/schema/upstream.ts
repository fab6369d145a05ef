/**
 * The worker side of a relayed request: `timeouts`, `retry`, `upstream` (connections, HTTP client).
 */
import { z } from 'zod';
import { ms } from './fields.js';

export const timeoutsSection = z
  .strictObject({
    /** Wait for the first streamed body byte; a worker that says nothing by then is given up on. */
    firstByteMs: ms.default(30_000),
    /** Slowest generation rate still considered healthy; sets the default request deadline. */
    minTokensPerSecond: z.number().positive().default(5),
    /** A fixed request deadline instead of the derived one. */
    requestMs: ms.optional(),
    /** TCP connect timeout to a worker. */
    connectMs: ms.default(5_000),
    /** Output length assumed for the deadline when a request sets no max_tokens. */
    assumedMaxTokens: z.int().positive().default(8192),
  })
  .prefault({});

export const retrySection = z.strictObject({ attempts: z.int().min(0).max(5).default(1) }).prefault({});

export const upstreamSection = z
  .strictObject({
    /** Connections per worker; 0 = no limit (every in-flight stream holds one). */
    connections: z.int().min(0).default(0),
    keepAliveTimeoutMs: ms.default(4_000),
    /**
     * The HTTP client relayed requests go through: kvgate's own keep-alive pool (somewhat less
     * CPU per request than undici, stream events relayed a socket read at a time, stale
     * keep-alive connections retried; docs/performance.md), or undici's Pool. Scrapes and
     * probes always use undici.
     */
    client: z.enum(['kvgate', 'undici']).default('kvgate'),
  })
  .prefault({});
