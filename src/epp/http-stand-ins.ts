/**
 * What the gateway's stages read of a client's HTTP request and write to its response, for a
 * request that arrives over ext_proc instead: the proxy holds the connection, kvgate sees the
 * request's headers and body and answers with protocol messages. A stage that answers a request
 * itself (a response-cache hit, a single-flight follower) writes into a CollectedResponse, which
 * the stream sends as one ImmediateResponse once it has ended.
 */
import { EventEmitter } from 'node:events';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';

/** The request as the stages read it: its headers (lower-case names, as Envoy sends them). */
export function requestHead(headers: IncomingHttpHeaders, method: string, url: string): IncomingMessage {
  return { headers, method, url } as IncomingMessage;
}

/** A ServerResponse that keeps the head and the body it is given; `finished` resolves at end() or destroy(). */
export class CollectedResponse extends EventEmitter {
  statusCode = 200;
  headersSent = false;
  writableEnded = false;
  writableFinished = false;
  destroyed = false;
  readonly head: Record<string, string> = {};
  private readonly parts: Buffer[] = [];
  readonly finished: Promise<void>;
  private done!: () => void;

  constructor() {
    super();
    this.finished = new Promise((r) => (this.done = r));
  }

  setHeader(name: string, value: string | number | readonly string[]): this {
    this.head[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : String(value);
    return this;
  }

  writeHead(status: number, headers?: Record<string, string | number>): this {
    this.statusCode = status;
    this.headersSent = true;
    for (const [k, v] of Object.entries(headers ?? {})) this.head[k.toLowerCase()] = String(v);
    return this;
  }

  write(chunk: string | Uint8Array): boolean {
    this.headersSent = true;
    this.parts.push(typeof chunk === 'string' ? Buffer.from(chunk) : Buffer.from(chunk));
    return true;
  }

  end(chunk?: string | Uint8Array): this {
    if (this.writableEnded) return this;
    if (chunk !== undefined) this.write(chunk);
    this.headersSent = true;
    this.writableEnded = this.writableFinished = true;
    this.emit('finish');
    this.done();
    return this;
  }

  destroy(): this {
    if (this.destroyed) return this;
    this.destroyed = true;
    this.emit('close');
    this.done();
    return this;
  }

  /** Everything written so far. */
  body(): Buffer {
    return Buffer.concat(this.parts);
  }

  asServerResponse(): ServerResponse {
    return this as unknown as ServerResponse;
  }
}
