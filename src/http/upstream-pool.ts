/**
 * Keep-alive HTTP/1.1 connections to one worker, for the relay's hot path: a request is written
 * with one corked write, the response is parsed by ResponseParser and handed to an undici-style
 * dispatch handler (onRequestStart, onResponseStart, onResponseData, onResponseEnd,
 * onResponseError, and a controller with pause, resume and abort), so the relay works the same on
 * this pool and on undici's.
 *
 * Why not undici here: in the same peers-bench run, a raw-socket front end relaying through an
 * undici Pool spent 71 µs of CPU per request, and through a pool like this one 30 µs (docs/
 * performance.md). undici stays for everything else (metric scrapes, probes, cascade calls), and
 * `upstream.client: undici` puts it back on the relay.
 *
 * One request per connection at a time (no pipelining). A connection is reused only after its
 * response was read to the end and neither side asked to close; idle ones close after the keep-
 * alive timeout (or a second before the worker's own `Keep-Alive: timeout`, when it sends one).
 * Requests beyond `connections` wait in order for a free one. Nothing here times out a request:
 * the relay owns deadlines and aborts through the controller.
 */
import { connect as netConnect, isIP, type Socket } from 'node:net';
import { connect as tlsConnect, type ConnectionOptions } from 'node:tls';
import type { IncomingHttpHeaders } from 'node:http';
import { HttpParseError, ResponseParser, type ResponseHead, type ResponseSink } from './response-parser.js';
import { holdWrites } from './write-batch.js';

export interface UpstreamPoolOptions {
  /** Connections at most; 0 = no limit. */
  connections: number;
  keepAliveTimeoutMs: number;
  connectTimeoutMs: number;
  /** Extra TLS options for https workers (a private CA, say); the system's CAs verify by default. */
  tls?: ConnectionOptions;
  /** Send requests with the event loop turn's other writes (write-batch.ts), not one by one. Default true. */
  batchWrites?: boolean;
}

export interface UpstreamRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: Buffer | string | null;
}

/** The controller a handler gets (the subset of undici's DispatchController the relay uses). */
export interface ExchangeController {
  readonly aborted: boolean;
  readonly paused: boolean;
  readonly reason: Error | null;
  abort(reason: Error): void;
  pause(): void;
  resume(): void;
}

export interface ResponseHandler {
  onRequestStart?(controller: ExchangeController, context: unknown): void;
  onResponseStart?(controller: ExchangeController, statusCode: number, headers: IncomingHttpHeaders, statusMessage?: string): void;
  onResponseData?(controller: ExchangeController, chunk: Buffer): void;
  onResponseEnd?(controller: ExchangeController, trailers: IncomingHttpHeaders): void;
  onResponseError?(controller: ExchangeController, error: Error): void;
}

/** What the relay needs of a pool: undici's Pool and UpstreamPool both have it. */
export interface RelayDispatcher {
  dispatch(req: UpstreamRequest, handler: ResponseHandler): boolean;
  close(): Promise<void>;
  destroy(): Promise<void>;
}

/** An error with a code, like the ones Node and undici raise (the relay logs `code message`). */
class UpstreamError extends Error {
  constructor(message: string, readonly code: string) {
    super(message);
  }
}

/** One request and its response, from dispatch to the end. */
class Exchange implements ExchangeController, ResponseSink {
  conn: Connection | null = null;
  settled = false;
  aborted = false;
  paused = false;
  reason: Error | null = null;
  /** Sent again once already, after a reused connection closed without answering. */
  retried = false;
  private headSeen = false;
  /**
   * Body slices parsed from the current socket read, handed on together by flush(): a read that
   * holds several chunked frames (stream events the worker wrote back to back) becomes one
   * onResponseData, so the relay writes it to the client in one system call, not one per frame.
   */
  private first: Buffer | null = null;
  private more: Buffer[] | null = null;

  constructor(readonly pool: UpstreamPool, readonly req: UpstreamRequest, readonly handler: ResponseHandler) {}

  abort(reason: Error): void {
    if (this.settled) return;
    this.aborted = true;
    this.reason = reason;
    const conn = this.conn;
    // Settled first, so the connection's close does not report a second error.
    this.fail(reason);
    if (conn) conn.destroy();
    else this.pool.dequeue(this);
  }

  pause(): void {
    this.paused = true;
    this.conn?.socket.pause();
  }

  resume(): void {
    this.paused = false;
    this.conn?.socket.resume();
  }

  // ---- the parser's events ----

  onHead(head: ResponseHead): void {
    this.headSeen = true;
    if (this.conn) this.conn.reusable = head.keepAlive;
    if (head.keepAliveHintMs !== null && this.conn) this.conn.hintMs = head.keepAliveHintMs;
    this.handler.onResponseStart?.(this, head.status, head.headers, head.statusText);
  }

  onBody(chunk: Buffer): void {
    if (this.settled) return;
    if (this.first === null) this.first = chunk;
    else (this.more ??= [this.first]).push(chunk);
  }

  /** The end of a socket read (or of the response): what it held goes to the handler. */
  flush(): void {
    const first = this.first;
    if (first === null) return;
    const more = this.more;
    this.first = this.more = null;
    if (!this.settled) this.handler.onResponseData?.(this, more === null ? first : Buffer.concat(more));
  }

  onEnd(): void {
    if (this.settled) return;
    this.flush();
    this.settled = true;
    const conn = this.conn;
    this.conn = null;
    // Hand the connection back before the handler runs: it may dispatch again at once.
    if (conn) conn.release();
    this.pool.settled();
    this.handler.onResponseEnd?.(this, {});
  }

  fail(err: Error): void {
    if (this.settled) return;
    this.settled = true;
    this.conn = null;
    this.pool.settled();
    // Sent again after its connection closed unanswered, and the worker now refuses connections:
    // it went away with the request. What the caller learns is the first failure, the drop.
    const code = (err as { code?: string }).code;
    if (this.retried && (code === 'ECONNREFUSED' || code === 'UND_ERR_CONNECT_TIMEOUT')) {
      err = new UpstreamError(`the worker closed the connection before answering, then refused it sent again (${code})`, 'UND_ERR_SOCKET');
    }
    this.handler.onResponseError?.(this, err);
  }

  get started(): boolean {
    return this.headSeen;
  }
}

class Connection {
  exchange: Exchange | null = null;
  parser: ResponseParser | null = null;
  /** False once either side asked to close, or a response was not read to its end. */
  reusable = true;
  hintMs: number | null = null;
  /** Responses this connection carried to their end. */
  private served = 0;
  /** Bytes received for the current request. */
  private bytesIn = 0;
  private idleTimer: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(readonly pool: UpstreamPool, readonly socket: Socket) {
    socket.on('data', (b: Buffer) => this.onData(b));
    socket.on('end', () => this.onEnd());
    socket.on('error', (e: Error) => this.onClose(e));
    socket.on('close', () => this.onClose(null));
  }

  /** Write the request; its response goes to the exchange. */
  send(x: Exchange): void {
    if (this.idleTimer) {
      clearTimeout(this.idleTimer);
      this.idleTimer = null;
    }
    this.exchange = x;
    x.conn = this;
    this.bytesIn = 0;
    this.parser = new ResponseParser(x, x.req.method === 'HEAD');
    const { req } = x;
    const body = req.body ?? '';
    const length = typeof body === 'string' ? Buffer.byteLength(body) : body.length;
    let head = `${req.method} ${req.path} HTTP/1.1\r\nhost: ${this.pool.host}\r\n`;
    for (const name in req.headers) {
      const value = req.headers[name]!;
      if (!SAFE_VALUE.test(value) || !SAFE_NAME.test(name)) {
        x.fail(new UpstreamError(`invalid header ${JSON.stringify(name)}`, 'KVGATE_INVALID_HEADER'));
        this.exchange = null;
        this.release();
        return;
      }
      head += `${name}: ${value}\r\n`;
    }
    head += `content-length: ${length}\r\n\r\n`;
    const s = this.socket;
    if (x.paused) s.pause();
    else if (s.isPaused()) s.resume();
    // Head and body in one write; sent with the rest of this turn's writes while the event loop
    // is saturated (write-batch.ts), at once otherwise.
    const held = this.pool.batchWrites && holdWrites(s);
    if (!held) s.cork();
    s.write(head, 'latin1');
    if (length > 0) s.write(body);
    if (!held) s.uncork();
  }

  /** The response ended: back to the pool if the connection can carry another request. */
  release(): void {
    this.exchange = null;
    this.parser = null;
    this.served++;
    if (this.closed || !this.reusable || this.socket.destroyed) {
      this.destroy();
      return;
    }
    if (this.socket.isPaused()) this.socket.resume();
    this.pool.released(this);
  }

  /**
   * Idle in the pool: closed after the keep-alive timeout, or a second before the worker's own
   * (it may close its end any moment after that). False if that leaves no time: closed now.
   */
  idle(timeoutMs: number): boolean {
    const ms = this.hintMs !== null ? Math.min(timeoutMs, this.hintMs - 1_000) : timeoutMs;
    if (ms <= 0) {
      this.destroy();
      return false;
    }
    this.idleTimer = setTimeout(() => this.destroy(), ms);
    this.idleTimer.unref();
    return true;
  }

  destroy(): void {
    this.reusable = false;
    this.socket.destroy();
    this.onClose(null);
  }

  private onData(b: Buffer): void {
    const x = this.exchange;
    const p = this.parser;
    if (x === null || p === null) {
      // Bytes with no request outstanding: the worker is confused; never reuse this connection.
      this.destroy();
      return;
    }
    this.bytesIn += b.length;
    try {
      p.feed(b);
      x.flush();
    } catch (e) {
      // Fails whichever request is on the connection now: this one, or (bytes past the end of
      // this one's response) a queued one the pool already sent on it, which is sent again.
      this.reusable = false;
      const err = e instanceof HttpParseError ? new UpstreamError(`invalid response from the worker: ${e.message}`, 'KVGATE_HTTP_PARSE') : (e as Error);
      this.socket.destroy();
      this.onClose(err);
    }
  }

  private onEnd(): void {
    this.reusable = false;
    const x = this.exchange;
    const p = this.parser;
    if (x !== null && p !== null && p.readsUntilClose) {
      this.exchange = null;
      p.end();
    }
    this.socket.end();
  }

  private onClose(err: Error | null): void {
    if (this.idleTimer) {
      clearTimeout(this.idleTimer);
      this.idleTimer = null;
    }
    const x = this.exchange;
    this.exchange = null;
    // A kept-alive connection the worker closed just as a request went out on it (its idle
    // timeout raced ours) closes without a byte of answer: the request is sent again, once, on a
    // new connection, rather than failed against a worker that did nothing wrong.
    const resend = x !== null && !x.settled && this.served > 0 && this.bytesIn === 0 && !x.retried;
    if (x !== null && !x.settled && !resend) {
      const why =
        err ?? new UpstreamError(x.started ? 'the worker closed the connection mid-response' : 'the worker closed the connection before answering', 'UND_ERR_SOCKET');
      x.fail(why);
    }
    if (this.closed) return;
    this.closed = true;
    this.socket.destroy();
    this.pool.closed(this);
    if (resend) {
      x.retried = true;
      x.conn = null;
      this.pool.resend(x);
    }
  }
}

/** Header values and names that cannot split a request. */
const SAFE_VALUE = /^[^\r\n\0]*$/;
const SAFE_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

export class UpstreamPool implements RelayDispatcher {
  readonly host: string;
  readonly batchWrites: boolean;
  private readonly port: number;
  private readonly hostname: string;
  private readonly tls: boolean;
  private readonly idleConns: Connection[] = [];
  private readonly queue: Exchange[] = [];
  private count = 0;
  private closing = false;
  private busy = 0;
  private onDrained: (() => void) | null = null;

  constructor(origin: string, private readonly opts: UpstreamPoolOptions) {
    const u = new URL(origin);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`unsupported protocol ${u.protocol}`);
    this.tls = u.protocol === 'https:';
    this.hostname = u.hostname.replace(/^\[|\]$/g, '');
    this.port = u.port ? Number(u.port) : this.tls ? 443 : 80;
    this.host = u.host;
    this.batchWrites = opts.batchWrites ?? true;
  }

  /** Open connections (idle and busy). */
  get connections(): number {
    return this.count;
  }

  dispatch(req: UpstreamRequest, handler: ResponseHandler): boolean {
    const x = new Exchange(this, req, handler);
    this.busy++;
    handler.onRequestStart?.(x, {});
    if (x.settled) return true; // aborted by the handler already
    if (this.closing) {
      x.fail(new UpstreamError('the pool is closed', 'UND_ERR_CLOSED'));
      return true;
    }
    const conn = this.idleConns.pop();
    if (conn) conn.send(x);
    else if (this.opts.connections === 0 || this.count < this.opts.connections) this.open(x);
    else this.queue.push(x);
    return true;
  }

  /** Stop taking requests; resolves when those in progress are done and every connection is closed. */
  close(): Promise<void> {
    this.closing = true;
    for (const c of this.idleConns.splice(0)) c.destroy();
    if (this.busy === 0) return Promise.resolve();
    return new Promise((resolve) => {
      this.onDrained = resolve;
    });
  }

  /** Abort everything now. */
  async destroy(): Promise<void> {
    this.closing = true;
    for (const x of this.queue.splice(0)) x.fail(new UpstreamError('the pool was destroyed', 'UND_ERR_DESTROYED'));
    for (const c of this.idleConns.splice(0)) c.destroy();
    for (const c of [...this.live]) c.destroy();
  }

  // ---- for Exchange and Connection ----

  private readonly live = new Set<Connection>();

  dequeue(x: Exchange): void {
    const i = this.queue.indexOf(x);
    if (i !== -1) this.queue.splice(i, 1);
  }

  released(c: Connection): void {
    const next = this.queue.shift();
    if (next) {
      c.send(next);
      return;
    }
    if (this.closing) {
      c.destroy();
      return;
    }
    if (c.idle(this.opts.keepAliveTimeoutMs)) this.idleConns.push(c);
  }

  /** An exchange whose reused connection closed unanswered: first in line for a new connection. */
  resend(x: Exchange): void {
    if (this.closing) {
      x.fail(new UpstreamError('the pool is closed', 'UND_ERR_CLOSED'));
      return;
    }
    if (this.opts.connections === 0 || this.count < this.opts.connections) this.open(x);
    else this.queue.unshift(x);
  }

  closed(c: Connection): void {
    this.live.delete(c);
    this.count--;
    const i = this.idleConns.indexOf(c);
    if (i !== -1) this.idleConns.splice(i, 1);
    // A waiting request takes the freed slot.
    const next = this.queue.shift();
    if (next) this.open(next);
  }

  /** An exchange settled (close() waits for all of them). */
  settled(): void {
    this.busy--;
    if (this.busy === 0 && this.closing && this.onDrained) {
      const d = this.onDrained;
      this.onDrained = null;
      for (const c of this.idleConns.splice(0)) c.destroy();
      d();
    }
  }

  private open(x: Exchange): void {
    this.count++;
    const socket = this.tls
      ? tlsConnect({ ...this.opts.tls, host: this.hostname, port: this.port, servername: isIP(this.hostname) ? undefined : this.hostname, ALPNProtocols: ['http/1.1'] })
      : netConnect({ host: this.hostname, port: this.port });
    socket.setNoDelay(true);
    const conn = new Connection(this, socket);
    this.live.add(conn);
    // The exchange fails with the connection if it never connects (Connection.onClose).
    conn.exchange = x;
    x.conn = conn;
    const timer = setTimeout(() => {
      socket.destroy(new UpstreamError(`connect timeout after ${this.opts.connectTimeoutMs} ms`, 'UND_ERR_CONNECT_TIMEOUT'));
    }, this.opts.connectTimeoutMs);
    socket.once(this.tls ? 'secureConnect' : 'connect', () => {
      clearTimeout(timer);
      if (x.settled) {
        conn.exchange = null;
        conn.release();
        return;
      }
      conn.send(x);
    });
    socket.once('close', () => clearTimeout(timer));
  }
}
