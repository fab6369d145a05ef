/**
 * The client side: `listen` (address, TLS), `limits` (body sizes), `server` (slow clients,
 * connection caps, what responses reveal).
 */
import { z } from 'zod';
import { ms } from './fields.js';

export const listenSection = z
  .strictObject({
    host: z.string().min(1).default('127.0.0.1'),
    port: z.int().min(0).max(65535).default(8080),
    /**
     * Serve HTTPS with this certificate and key (PEM files; read again at every reload, so a
     * renewed certificate needs no restart). `clientCaFile`: clients must present a
     * certificate this CA signed (mutual TLS). Unset: plain HTTP.
     */
    tls: z
      .strictObject({
        certFile: z.string().min(1),
        keyFile: z.string().min(1),
        clientCaFile: z.string().min(1).optional(),
      })
      .optional(),
  })
  .prefault({});

export const limitsSection = z
  .strictObject({
    maxBodyBytes: z.int().positive().default(4 * 1024 * 1024),
    /** The bound for a multipart upload (the audio routes): OpenAI's own limit for an audio file. */
    maxUploadBytes: z.int().positive().default(25 * 1024 * 1024),
    retryAfterSeconds: z.int().positive().default(1),
  })
  .prefault({});

/** The client side of the HTTP server: slow clients, connection caps, what responses reveal. */
export const serverSection = z
  .strictObject({
    /** The request line and headers must arrive within this (408 otherwise). */
    headersTimeoutMs: ms.default(10_000),
    /** The whole body must arrive within this after the headers (408 otherwise). */
    bodyTimeoutMs: ms.default(30_000),
    /** An idle keep-alive connection is closed after this. */
    keepAliveTimeoutMs: ms.default(5_000),
    /** Open client connections at most; past it, idle ones are closed to make room. */
    maxConnections: z.int().positive().default(8_192),
    /** Open connections per client address at most (same rule). */
    maxConnectionsPerAddress: z.int().positive().default(1_024),
    /** Connections beyond maxConnections kept for /health and /ready when nothing idle can be closed. */
    probeReserve: z.int().min(0).default(32),
    /**
     * The share of maxConnections one tenant's requests may hold while their bodies are still
     * arriving (counted from the key read); past it, its next request is refused with 429 and
     * the connection closed, so a tenant stalling its bodies leaves room for the others.
     */
    tenantPendingBodyShare: z.number().gt(0).max(1).default(0.25),
    /**
     * /ready answers 503 also while no worker is routable. Off by default: several replicas
     * behind one Service would all leave it together, and clients would meet refused
     * connections instead of a 503 with Retry-After from the gateway.
     */
    readyRequiresWorker: z.boolean().default(false),
    /** Send x-kvgate-worker and x-kvgate-prefix-hit to every caller (admin callers always get them). */
    routingHeaders: z.boolean().default(false),
    /**
     * Relayed responses and requests to workers are written together at the end of each turn
     * of the event loop (src/http/write-batch.ts), not one by one: fewer wake-ups of the
     * processes at either end. Off: each is written as soon as it is ready.
     */
    batchWrites: z.boolean().default(true),
    /** Origins allowed to call the API from a browser (CORS); empty: no CORS headers at all. */
    corsOrigins: z.array(z.string().regex(/^https?:\/\/[^/\s]+$|^\*$/, 'expected an origin such as https://app.example.com, or *')).default([]),
  })
  .prefault({});
