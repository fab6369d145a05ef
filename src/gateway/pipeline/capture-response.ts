/**
 * A stand-in for a client's ServerResponse that keeps nothing: what a RelayAttempt writes to it is
 * dropped (the request's taps see the body bytes on their way), only the outcome is recorded. It
 * lets a stage run a request at a worker on a client's behalf and decide itself what the client
 * gets — the cache stage does this when a single-flight follower must finish an answer its leader
 * could not. It implements the part of ServerResponse the relay uses.
 */
import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';

export class CaptureResponse extends EventEmitter {
  statusCode = 0;
  headersSent = false;
  writableEnded = false;
  destroyed = false;
  /** What the relay wrote with end() (e.g. its SSE error event), for the record. */
  trailer = '';

  writeHead(status: number): this {
    this.statusCode = status;
    this.headersSent = true;
    return this;
  }

  write(_chunk: unknown): boolean {
    this.headersSent = true;
    return true;
  }

  end(chunk?: unknown): this {
    if (typeof chunk === 'string') this.trailer += chunk;
    this.writableEnded = true;
    this.emit('finish');
    return this;
  }

  destroy(): this {
    this.destroyed = true;
    this.emit('close');
    return this;
  }

  asServerResponse(): ServerResponse {
    return this as unknown as ServerResponse;
  }
}
