/**
 * Structured JSON logs with pino: one line per request at info, fleet events at info/warn.
 * Output goes through an asynchronous, batching destination so logging stays off the hot path;
 * `pretty` renders human-readable lines in-process (for `kvgate demo`).
 */
import pino, { type DestinationStream, type Logger } from 'pino';
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
/** Loggers made here, whose lines have pino's default shape (no bindings, formatters or hooks). */
const plain = new WeakSet<Logger>();

/** Log bytes a logger dropped because its output did not keep up or failed; null: not counted. */
export function droppedLogBytes(logger: Logger): number | null {
  return writers.get(logger)?.dropped ?? null;
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const level = opts.level ?? 'info';
  if (opts.pretty) {
    return markPlain(pino(
      { level, base: undefined },
      pretty({ colorize: true, singleLine: true, translateTime: 'HH:MM:ss.l', ignore: 'pid,hostname', destination: opts.destination ?? 1, sync: true }),
    ));
  }
  if (opts.destination) return markPlain(pino({ level, base: undefined }, opts.destination));
  // Lines are batched into writes of ≥ 8 KiB, or every 100 ms, whichever comes first: one write
  // syscall per request line would cost a noticeable share of the gateway's throughput. The
  // batching is LogBatcher's (log-batcher.ts says why not sonic-boom's own); FdWriter writes
  // asynchronously, all that is pending at a time (fd-writer.ts says why not sonic-boom).
  const out = new FdWriter(opts.fd ?? 1, {
    onFirstDrop: (reason) => process.stderr.write(`kvgate: log lines dropped (kvgate_log_dropped_bytes_total counts them): ${reason}\n`),
  });
  const logger = pino({ level, base: undefined }, new LogBatcher(out, { minBytes: 8192, flushMs: 100 }));
  writers.set(logger, out);
  return markPlain(logger);
}

function markPlain(logger: Logger): Logger {
  plain.add(logger);
  return logger;
}

/** A flat log record: what a line of known fields carries (undefined fields are left out). */
export type FlatFields = Record<string, string | number | boolean | undefined>;

/**
 * A writer of info lines of flat fields, for the line every request logs. For a logger made by
 * createLogger it writes the line pino would (`{"level":30,"time":…,<fields>,"msg":…}`) straight to
 * the logger's destination; for any other logger it calls `logger.info`. pino's generic
 * serializer (lib/tools.js `_asJson`: a for-in over the record with a serializer and a stringifier
 * looked up per key) took 4.6 µs of a request's ≈105 µs of CPU in `npm run bench -- profile`; a flat
 * record needs none of that. The logger's level is read per line, so a config reload applies.
 */
export function flatLineWriter(logger: Logger): (fields: FlatFields, msg: string) => void {
  if (!plain.has(logger)) return (fields, msg) => logger.info(fields, msg);
  const stream = (logger as unknown as Record<symbol, DestinationStream>)[pino.symbols.streamSym]!;
  const head = `{"level":${logger.levels.values.info},"time":`;
  const keys = new Map<string, string>();
  const keyOf = (k: string): string => {
    let s = keys.get(k);
    if (s === undefined) keys.set(k, (s = `,${JSON.stringify(k)}:`));
    return s;
  };
  return (fields, msg) => {
    if (!logger.isLevelEnabled('info')) return;
    let line = head + Date.now();
    for (const k in fields) {
      const v = fields[k];
      if (v === undefined) continue;
      // As JSON.stringify writes them (pino's default stringifier): a number that is not finite is null.
      line += keyOf(k) + (typeof v === 'string' ? JSON.stringify(v) : typeof v === 'number' && !Number.isFinite(v) ? 'null' : String(v));
    }
    stream.write(line + ',"msg":' + JSON.stringify(msg) + '}\n');
  };
}

/** Flush buffered log lines (call before exit). */
export function flushLogger(logger: Logger): void {
  try {
    logger.flush();
  } catch {
    // A destination that cannot flush synchronously has nothing buffered.
  }
}
