/**
 * Structured JSON logs with pino: one line per request at info, fleet events at info/warn.
 * Output goes through an asynchronous, batching destination so logging stays off the hot path;
 * `pretty` renders human-readable lines in-process (for `kvgate demo`).
 */
import pino, { type Logger } from 'pino';
import pretty from 'pino-pretty';
import { FdWriter } from './fd-writer.js';
import { LogBatcher } from './log-batcher.js';

export type { Logger };

export interface LoggerOptions {
  level?: string;
  pretty?: boolean;
  /** Defaults to stdout. */
  destination?: NodeJS.WritableStream;
  /** Without `destination`: the file descriptor written to (default 1, stdout). */
  fd?: number;
}

/** The descriptor writer behind each logger that has one, for its drop count. */
const writers = new WeakMap<Logger, FdWriter>();

/** Log bytes a logger dropped because its output did not keep up or failed; null: not counted. */
export function droppedLogBytes(logger: Logger): number | null {
  return writers.get(logger)?.dropped ?? null;
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const level = opts.level ?? 'info';
  if (opts.pretty) {
    return pino(
      { level, base: undefined },
      pretty({ colorize: true, singleLine: true, translateTime: 'HH:MM:ss.l', ignore: 'pid,hostname', destination: opts.destination ?? 1, sync: true }),
    );
  }
  if (opts.destination) return pino({ level, base: undefined }, opts.destination);
  // Lines are batched into writes of ≥ 8 KiB, or every 100 ms, whichever comes first: one write
  // syscall per request line would cost a noticeable share of the gateway's throughput. The
  // batching is LogBatcher's (log-batcher.ts says why not sonic-boom's own); FdWriter writes
  // asynchronously, all that is pending at a time (fd-writer.ts says why not sonic-boom).
  const out = new FdWriter(opts.fd ?? 1, {
    onFirstDrop: (reason) => process.stderr.write(`kvgate: log lines dropped (kvgate_log_dropped_bytes_total counts them): ${reason}\n`),
  });
  const logger = pino({ level, base: undefined }, new LogBatcher(out, { minBytes: 8192, flushMs: 100 }));
  writers.set(logger, out);
  return logger;
}

/** Flush buffered log lines (call before exit). */
export function flushLogger(logger: Logger): void {
  try {
    logger.flush();
  } catch {
    // A destination that cannot flush synchronously has nothing buffered.
  }
}
