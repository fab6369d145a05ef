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
    let settled = false;
    // The listeners stay on the request once it is settled (they do nothing then): removing four
    // listeners from a stream per request cost more than the request's own handler did in a
    // profile under load, and the request object is dropped with them when the response ends.
    // What they share must not hold the chunks that long: a long prompt's bytes would be kept
    // twice (its chunks and the body made of them) for as long as its answer streams.
    const done = (r: BodyResult): void => {
      if (settled) return;
      settled = true;
      first = null;
      chunks = null;
      if (timer) clearTimeout(timer);
      resolve(r);
    };
    const onData = (c: Buffer): void => {
      if (settled) return;
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
      if (settled) return;
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
