/**
 * Writes log batches to a file descriptor (stdout) asynchronously, everything that is pending in
 * one write.
 *
 * Why not sonic-boom, pino's own destination: it writes at most `maxWrite` (16 KiB) per write
 * and starts the next only when the previous one's completion has come back through the event
 * loop, which a saturated gateway visits once per turn. At ~8,000 requests/s (2 MB/s of request
 * lines) its backlog grew by 0.7 MB a second, to 22 MB after 30 s, without bound; the backlog's
 * strings outlived young-generation collections, which then took 4–6 ms instead of 1 and moved
 * megabytes a time into the old generation (docs/performance.md, "Logs under saturation"). Here
 * each write takes all that has accumulated while the previous one was in flight, so the backlog
 * stays as large as one write's worth of lines.
 *
 * A destination that cannot keep up at all (a stalled pipe) is not allowed to exhaust memory:
 * past `maxPendingBytes` batches are dropped and counted, and one line on stderr says so. A
 * destination that fails (closed pipe, full disk) drops the batch it failed on and goes on with
 * the next: the gateway never stops serving for its logs.
 */
import { write as fsWrite, writeSync } from 'node:fs';
import type { LineSink } from './log-batcher.js';

/** How long to wait before trying a non-blocking descriptor that said EAGAIN again. */
const RETRY_MS = 10;

export interface FdWriterOptions {
  /** Bytes waiting to be written at most; later batches are dropped (default 64 MiB). */
  maxPendingBytes?: number;
  /** Told once, at the first drop. */
  onFirstDrop?: (reason: string) => void;
}

export class FdWriter implements LineSink {
  private pending: string[] = [];
  private pendingBytes = 0;
  /** A write is in flight (its callback has not come back yet). */
  private writing = false;
  private waiters: Array<(err?: Error | null) => void> = [];
  private readonly maxPendingBytes: number;
  /** Bytes dropped: over the pending limit, or lost to a failing descriptor. */
  dropped = 0;
  /** Writes made (each takes everything pending). */
  writes = 0;

  constructor(
    private readonly fd: number,
    private readonly o: FdWriterOptions = {},
  ) {
    this.maxPendingBytes = o.maxPendingBytes ?? 64 << 20;
  }

  /** Queue a batch; false if it was dropped. */
  write(data: string): boolean {
    const n = Buffer.byteLength(data);
    if (this.pendingBytes + n > this.maxPendingBytes) {
      this.drop(n, `more than ${this.maxPendingBytes} bytes of log output waiting to be written`);
      return false;
    }
    this.pending.push(data);
    this.pendingBytes += n;
    if (!this.writing) this.next();
    return true;
  }

  /** Calls `cb` once everything queued so far has been written (or dropped). */
  flush(cb?: (err?: Error | null) => void): void {
    if (!cb) return;
    if (!this.writing && this.pending.length === 0) cb(null);
    else this.waiters.push(cb);
  }

  /**
   * Writes what is queued synchronously (before the process exits). A write already in flight
   * completes on its own; what is queued behind it is written now, so it can land first.
   */
  flushSync(): void {
    if (this.pending.length === 0) return;
    const buf = this.take();
    let off = 0;
    const until = Date.now() + 1000;
    while (off < buf.length) {
      try {
        off += writeSync(this.fd, buf, off);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EAGAIN' || Date.now() > until) {
          this.drop(buf.length - off, `log output failed: ${(e as Error).message}`);
          return;
        }
      }
    }
  }

  private take(): Buffer {
    const buf = Buffer.from(this.pending.length === 1 ? this.pending[0]! : this.pending.join(''));
    this.pending = [];
    this.pendingBytes = 0;
    return buf;
  }

  private next(): void {
    if (this.pending.length === 0) {
      this.writing = false;
      const w = this.waiters;
      this.waiters = [];
      for (const cb of w) cb(null);
      return;
    }
    this.writing = true;
    this.send(this.take(), 0);
  }

  private send(buf: Buffer, off: number): void {
    this.writes++;
    fsWrite(this.fd, buf, off, buf.length - off, null, (err, n) => {
      if (err) {
        if (err.code === 'EAGAIN') {
          setTimeout(() => this.send(buf, off), RETRY_MS).unref();
          return;
        }
        this.drop(buf.length - off, `log output failed: ${err.message}`);
        this.next();
        return;
      }
      if (off + n < buf.length) this.send(buf, off + n);
      else this.next();
    });
  }

  private drop(bytes: number, reason: string): void {
    if (this.dropped === 0) this.o.onFirstDrop?.(reason);
    this.dropped += bytes;
  }
}
