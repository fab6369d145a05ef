/**
 * Reads a request body once, bounded in size and in time: a declared Content-Length over the
 * limit is refused before any byte is read, a chunked body stops being read the moment it passes
 * the limit, and a body that has not fully arrived within `timeoutMs` (a client sending nothing,
 * or one byte every few seconds) is given up on, so a slow client cannot hold a socket forever.
 */
import type { IncomingMessage } from 'node:http';

export type BodyResult = { ok: true; body: Buffer } | { ok: false; reason: 'too_large' | 'aborted' | 'timeout' };

export function readBody(req: IncomingMessage, limit: number, timeoutMs = 0): Promise<BodyResult> {
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) {
    return Promise.resolve({ ok: false, reason: 'too_large' });
  }
  return new Promise((resolve) => {
    let first: Buffer | null = null;
    let chunks: Buffer[] | null = null;
    let size = 0;
    let timer: NodeJS.Timeout | null = null;
    const done = (r: BodyResult): void => {
      if (timer) clearTimeout(timer);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onAbort);
      req.off('aborted', onAbort);
      resolve(r);
    };
    const onData = (c: Buffer): void => {
      size += c.length;
      if (size > limit) {
        req.pause();
        done({ ok: false, reason: 'too_large' });
        return;
      }
      // Most bodies arrive in one chunk: avoid the array and the concat for them.
      if (first === null) first = c;
      else (chunks ??= [first]).push(c);
    };
    const onEnd = (): void => {
      done({ ok: true, body: chunks ? Buffer.concat(chunks, size) : (first ?? Buffer.alloc(0)) });
    };
    const onAbort = (): void => done({ ok: false, reason: 'aborted' });
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onAbort);
    req.on('aborted', onAbort);
    // Only armed when the body has not already arrived with the headers (the common case ends first).
    if (timeoutMs > 0 && !req.complete) {
      timer = setTimeout(() => {
        req.pause();
        done({ ok: false, reason: 'timeout' });
      }, timeoutMs);
    }
  });
}
