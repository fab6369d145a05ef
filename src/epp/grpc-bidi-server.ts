/**
 * A gRPC server for one bidirectional-streaming method, on node:http2 directly: the ext_proc
 * listener, where every HTTP request behind the proxy is a stream of about eight messages each way
 * and a general-purpose gRPC server's per-call and per-message machinery (interceptors, object-mode
 * streams, metadata objects) costs more CPU than the EPP's decision itself.
 *
 * What it implements of gRPC over HTTP/2 (grpc/grpc doc/PROTOCOL-HTTP2.md):
 *   - a request is POST to `path` with content-type application/grpc[+proto|;…]; any other path or
 *     method is answered Trailers-Only with UNIMPLEMENTED;
 *   - messages are length-prefixed (1 byte compressed flag, 4 bytes big-endian length); a compressed
 *     message is refused (no grpc-accept-encoding is advertised, so a client sends none), as is one
 *     larger than `maxMessageBytes` (RESOURCE_EXHAUSTED, as grpc-js's default 4 MiB limit does);
 *   - the response is headers (lazily, with the first message), messages, then trailers with
 *     grpc-status and grpc-message (percent-encoded); an error before any message is Trailers-Only;
 *   - the client's end of stream is a half-close (INTERNAL if it ends inside a message); RST_STREAM
 *     (or the connection lost) a cancellation.
 * The health service stays on @grpc/grpc-js (server.ts): it is not on the request path.
 */
import http2 from 'node:http2';

/** The status codes this file sends itself (grpc/doc/statuscodes.md). */
const UNIMPLEMENTED = 12;
const RESOURCE_EXHAUSTED = 8;
const INTERNAL = 13;

/** One call, as the handler writes to it. */
export interface BidiCall {
  /** One message: its serialized bytes, or its parts in order (written without being joined). */
  write(message: Buffer | readonly Buffer[]): void;
  /** Close with status OK. */
  end(): void;
  /** Close with an error status. */
  fail(code: number, details: string): void;
  /** The client cancelled the call (or its connection went away). */
  readonly cancelled: boolean;
}

/** What a call's handler is told. */
export interface BidiHandlers {
  onMessage(message: Buffer): void;
  /** The client half-closed: it sends no more messages. */
  onHalfClose(): void;
  /** The client cancelled, or the connection failed (at most once; not after the call was ended). */
  onCancel(): void;
}

/** grpc-message: percent-encoded outside printable ASCII, and '%' itself (PROTOCOL-HTTP2.md). */
function percentEncode(s: string): string {
  let out = '';
  for (const b of Buffer.from(s, 'utf8')) out += b >= 0x20 && b <= 0x7e && b !== 0x25 ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  return out;
}

/**
 * Receive windows, bytes. HTTP/2's default of 64 KiB per stream and per connection (which
 * node:http2 keeps) makes a proxy that multiplexes every request's stream over one connection, as
 * Envoy does, stop mid-body for a WINDOW_UPDATE whenever a few bodies are in flight together: a
 * round trip through both event loops on the decision's path. Bodies are read as they arrive
 * (limits.maxBodyBytes bounds what a request may send), so wider windows hold nothing back that
 * would not be read anyway; grpc-go's servers grow theirs to 16 MiB on the same reasoning (BDP
 * estimation).
 */
const STREAM_WINDOW = 4 * 1024 * 1024;
const CONNECTION_WINDOW = 16 * 1024 * 1024;

const RESPONSE_HEADERS = { ':status': 200, 'content-type': 'application/grpc+proto' };

class Call implements BidiCall {
  private headersSent = false;
  private corked = false;
  private closed = false;
  cancelled = false;
  private handlers: BidiHandlers | null = null;
  /** Bytes received and not yet made into a message. */
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  constructor(
    private readonly stream: http2.ServerHttp2Stream,
    private readonly maxMessageBytes: number,
  ) {}

  attach(h: BidiHandlers): void {
    this.handlers = h;
    const s = this.stream;
    s.on('data', (chunk: Buffer) => this.onData(chunk));
    // A RST_STREAM ends the reading side before 'aborted' says why: the half-close is told a turn
    // later, so that a reset arriving with it is taken as the cancellation it is. (grpc-js's client
    // cancels with END_STREAM first and RST_STREAM later: that reads as a half-close.)
    s.on('end', () =>
      setImmediate(() => {
        if (this.cancelled || this.closed) return;
        // Ended inside a message: what came of it can never be read (grpc-go answers INTERNAL,
        // unexpected EOF).
        if (this.pendingBytes > 0) this.refuse(INTERNAL, `the stream ended inside a message (${this.pendingBytes} bytes of it received)`);
        else this.handlers!.onHalfClose();
      }),
    );
    s.on('aborted', () => this.onCancelled());
    s.on('error', () => this.onCancelled());
    s.on('close', () => {
      if (!this.closed) this.onCancelled();
    });
  }

  write(message: Buffer | readonly Buffer[]): void {
    if (this.closed || this.cancelled) return;
    const s = this.stream;
    if (!this.headersSent) {
      this.headersSent = true;
      s.respond(RESPONSE_HEADERS, { waitForTrailers: true });
    }
    const parts = Buffer.isBuffer(message) ? null : message;
    let length = 0;
    if (parts === null) length = message.length;
    else for (const p of parts) length += p.length;
    const prefix = Buffer.allocUnsafe(5);
    prefix[0] = 0;
    prefix.writeUInt32BE(length, 1);
    // Corked until the end of this turn: the prefix and the message go out together, without
    // copying the message into one buffer, and so do the messages written in the same turn (a
    // pick, the body echoed after it): one writev instead of one per message. end() uncorks.
    if (!this.corked) {
      this.corked = true;
      s.cork();
      process.nextTick(() => {
        this.corked = false;
        s.uncork();
      });
    }
    s.write(prefix);
    if (parts === null) s.write(message);
    else for (const p of parts) s.write(p);
  }

  end(): void {
    this.close(0, '');
  }

  fail(code: number, details: string): void {
    this.close(code, details);
  }

  private close(code: number, details: string): void {
    if (this.closed) return;
    this.closed = true;
    if (this.cancelled || this.stream.destroyed) return;
    const trailers: http2.OutgoingHttpHeaders = { 'grpc-status': String(code) };
    if (details !== '') trailers['grpc-message'] = percentEncode(details);
    if (!this.headersSent) {
      // Trailers-Only: one HEADERS frame with the status, ending the stream.
      this.headersSent = true;
      this.stream.respond({ ...RESPONSE_HEADERS, ...trailers }, { endStream: true });
      return;
    }
    this.stream.once('wantTrailers', () => this.stream.sendTrailers(trailers));
    this.stream.end();
  }

  private onCancelled(): void {
    if (this.cancelled || this.closed) return;
    this.cancelled = true;
    this.handlers!.onCancel();
  }

  private onData(chunk: Buffer): void {
    if (this.closed || this.cancelled) return;
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    while (this.pendingBytes >= 5) {
      const head = this.pending[0]!.length >= 5 ? this.pending[0]! : this.gather(5);
      const compressed = head[0]!;
      const length = head.readUInt32BE(1);
      if (compressed !== 0) {
        this.refuse(INTERNAL, 'compressed messages are not accepted (no grpc-accept-encoding was advertised)');
        return;
      }
      if (length > this.maxMessageBytes) {
        this.refuse(RESOURCE_EXHAUSTED, `received message larger than max (${length} vs. ${this.maxMessageBytes})`);
        return;
      }
      if (this.pendingBytes < 5 + length) return;
      const frame = this.gather(5 + length);
      this.take(5 + length);
      this.handlers!.onMessage(frame.subarray(5));
      if (this.closed || this.cancelled) return;
    }
  }

  /** The first `n` pending bytes as one buffer (a view when the first chunk holds them). */
  private gather(n: number): Buffer {
    const first = this.pending[0]!;
    if (first.length >= n) return first.subarray(0, n);
    const joined = Buffer.concat(this.pending, this.pendingBytes);
    this.pending = [joined];
    return joined.subarray(0, n);
  }

  /** Drop the first `n` pending bytes (a message taken). */
  private take(n: number): void {
    this.pendingBytes -= n;
    while (n > 0) {
      const first = this.pending[0]!;
      if (first.length <= n) {
        this.pending.shift();
        n -= first.length;
      } else {
        this.pending[0] = first.subarray(n);
        n = 0;
      }
    }
  }

  private refuse(code: number, details: string): void {
    // The handler learns of it as a cancellation: its call is over.
    this.fail(code, details);
    this.handlers!.onCancel();
  }
}

export class GrpcBidiServer {
  private readonly server: http2.Http2Server;
  private readonly sessions = new Set<http2.ServerHttp2Session>();

  constructor(
    /** `/package.Service/Method`. */
    private readonly path: string,
    open: (call: BidiCall) => BidiHandlers,
    maxMessageBytes = 4 * 1024 * 1024,
  ) {
    this.server = http2.createServer({ maxSendHeaderBlockLength: Number.MAX_SAFE_INTEGER, settings: { initialWindowSize: STREAM_WINDOW } });
    this.server.on('session', (s) => {
      this.sessions.add(s);
      s.setLocalWindowSize(CONNECTION_WINDOW);
      s.on('close', () => this.sessions.delete(s));
      // A session's failure is its streams' (each sees its own close); the process carries on.
      s.on('error', () => undefined);
    });
    this.server.on('stream', (stream, headers) => {
      stream.on('error', () => undefined);
      const contentType = String(headers['content-type'] ?? '');
      if (headers[':method'] !== 'POST' || headers[':path'] !== this.path || !contentType.startsWith('application/grpc')) {
        stream.respond({ ...RESPONSE_HEADERS, 'grpc-status': String(UNIMPLEMENTED), 'grpc-message': percentEncode(`unknown method ${String(headers[':path'])}`) }, { endStream: true });
        return;
      }
      const call = new Call(stream, maxMessageBytes);
      call.attach(open(call));
    });
  }

  /** Bind `host:port` (0: an ephemeral port); resolves with the bound port. */
  listen(host: string, port: number): Promise<number> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        this.server.off('error', reject);
        const a = this.server.address();
        resolve(typeof a === 'object' && a !== null ? a.port : port);
      });
    });
  }

  /** Stop accepting; each connection is told GOAWAY and closes once its streams have ended. */
  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server.close(() => resolve());
      for (const s of this.sessions) s.close();
    });
  }

  /** Every connection closed now, its streams cancelled. */
  destroy(): void {
    for (const s of this.sessions) s.destroy();
    this.server.close();
  }
}
