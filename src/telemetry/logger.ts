/**
 * Structured JSON logs with pino: one line per request at info, fleet events at info/warn.
 * Output goes through an asynchronous, batching destination so logging stays off the hot path;
 * `pretty` renders human-readable lines in-process (for `kvgate demo`).
 */
import pino, { type Logger } from 'pino';
import pretty from 'pino-pretty';

export type { Logger };

export interface LoggerOptions {
  level?: string;
  pretty?: boolean;
  /** Defaults to stdout. */
  destination?: NodeJS.WritableStream;
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
  // syscall per request line would cost a noticeable share of the gateway's throughput.
  return pino({ level, base: undefined }, pino.destination({ dest: 1, sync: false, minLength: 8192, periodicFlush: 100 }));
}

/** Flush buffered log lines (call before exit). */
export function flushLogger(logger: Logger): void {
  try {
    logger.flush();
  } catch {
    // A destination that cannot flush synchronously has nothing buffered.
  }
}
