/** Running the process: `reload` (hot reload), `shutdown` (draining), `log`. */
import { z } from 'zod';

/** Configuration hot reload (src/gateway/admin/config-reload.ts): on SIGHUP, and on a change of the file unless watch is off. */
export const reloadSection = z
  .strictObject({
    /** Reload when the config file changes (also when an editor or a ConfigMap replaces it). */
    watch: z.boolean().default(true),
    /** Changes closer together than this are read once, after the last. */
    debounceMs: z.number().min(0).default(300),
  })
  .prefault({});

export const shutdownSection = z
  .strictObject({
    /** On SIGTERM, /ready answers 503 this long while requests are still served (load balancers drain). */
    drainDelayMs: z.number().min(0).default(5_000),
    graceMs: z.number().min(0).default(10_000),
  })
  .prefault({});

export const logSection = z
  .strictObject({
    level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    pretty: z.boolean().default(false),
    /**
     * The share of successful requests that get a request line (a 2xx answered at the first
     * attempt): 0.1 logs one in ten, in turn. Errors, refusals, client aborts and retried
     * requests are always logged. A sampled line carries `sampleRate`, the number of requests
     * it stands for. Metrics count every request whatever this is.
     */
    requestSampleRate: z.number().min(0).max(1).default(1),
  })
  .prefault({});
