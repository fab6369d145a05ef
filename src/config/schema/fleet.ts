/**
 * Watching the workers: `scrape` (load metrics), `health`, `circuitBreaker`, `outlier` (passive
 * detection of a silent worker).
 */
import { z } from 'zod';
import { ms, unitInterval } from './fields.js';

export const DEFAULT_SCRAPE_INTERVAL_MS = 1000;

export const scrapeSection = z
  .strictObject({
    /** Default 1000 ms, or the policy's own published interval when it has one (llm-d: 50 ms). */
    intervalMs: ms.optional(),
    timeoutMs: ms.optional(),
    staleAfterMs: ms.default(5_000),
  })
  .prefault({});

export const healthSection = z
  .strictObject({
    intervalMs: ms.default(2_000),
    timeoutMs: ms.optional(),
    failuresToMarkDown: z.int().positive().default(3),
    /**
     * Read each worker's /v1/models again this often: its max_model_len and the LoRA adapters
     * it serves, which may be loaded and unloaded at run time.
     */
    modelsIntervalMs: ms.default(10_000),
  })
  .prefault({});

export const circuitBreakerSection = z
  .strictObject({
    failuresToOpen: z.int().positive().default(5),
    coolDownMs: ms.default(10_000),
    /** Also open when this share of the window's outcomes failed (with at least minRequests). */
    failureRate: z
      .strictObject({
        threshold: unitInterval.default(0.5),
        windowMs: ms.default(30_000),
        minRequests: z.int().positive().default(20),
      })
      .prefault({}),
    /** A worker answering 503/429 leaves routing this long (or its Retry-After), doubling while it repeats. */
    overloadBackoffMs: ms.default(1_000),
    maxBackoffMs: ms.default(30_000),
  })
  .prefault({});

/**
 * Passive outlier detection: a worker that owes bytes (streams in flight) and has sent none for
 * longer than its expected time to first token allows is suspected: routed around at once,
 * its not-yet-answered attempts retried elsewhere.
 */
export const outlierSection = z
  .strictObject({
    enabled: z.boolean().default(true),
    /** Never suspect a worker silent for less than this. */
    minSilenceMs: ms.default(750),
    /** Allowed silence = max(minSilenceMs, factor × the larger of its own and its peers' recent TTFT). */
    ttftFactor: z.number().min(1).default(4),
    checkIntervalMs: ms.default(100),
  })
  .prefault({});
