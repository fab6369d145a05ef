/**
 * An incremental HTTP/1.1 response parser for one upstream connection: the status line and
 * headers, then the body framed by Content-Length, by chunked transfer coding, or by the end of
 * the connection. Body bytes are handed on as slices of the buffers read from the socket (no
 * copies). Strict where a lenient parser would let a confused or hostile worker smuggle a second
 * response into the first: conflicting Content-Lengths, folded header lines, malformed chunk sizes
 * and oversized heads are errors.
 */

export class HttpParseError extends Error {
  readonly code = 'KVGATE_HTTP_PARSE';
}

export interface ResponseHead {
  status: number;
  statusText: string;
  /** Lower-case names; a repeated header's values joined with ", ". */
  headers: Record<string, string>;
  /** The connection may carry another request after this response. */
  keepAlive: boolean;
  /** The worker's `Keep-Alive: timeout=N`, ms (null when absent). */
  keepAliveHintMs: number | null;
}

export interface ResponseSink {
  /** A final (≥ 200) head; 1xx heads are skipped. */
  onHead(head: ResponseHead): void;
  onBody(chunk: Buffer): void;
  onEnd(): void;
}

/** The largest response head accepted (status line and headers). */
const MAX_HEAD_BYTES = 64 * 1024;
const MAX_CHUNK_LINE = 1024;

const enum State {
  Head,
  Length,
  ChunkSize,
  ChunkData,
  ChunkDataEnd,
  Trailers,
  UntilClose,
  Done,
}

const CRLF = 0x0a;

export class ResponseParser {
  private state = State.Head;
  /** Bytes of an incomplete head, chunk-size line or trailer section. */
  private pending: Buffer | null = null;
  /** Body bytes still expected (Content-Length body or current chunk). */
  private remaining = 0;
  private noBody = false;

  /** @param sink receives the response; `expectNoBody` for the answer to a HEAD request. */
  constructor(private readonly sink: ResponseSink, private readonly expectNoBody = false) {}

  get done(): boolean {
    return this.state === State.Done;
  }

  /** True while the body runs until the connection closes. */
  get readsUntilClose(): boolean {
    return this.state === State.UntilClose;
  }

  /** Bytes arrived; throws HttpParseError on a malformed response. Bytes after the end are an error. */
  feed(buf: Buffer): void {
    let at = 0;
    while (at < buf.length) {
      switch (this.state) {
        case State.Head:
          at = this.readHead(buf, at);
          break;
        case State.Length: {
          const n = Math.min(this.remaining, buf.length - at);
          this.remaining -= n;
          this.sink.onBody(at === 0 && n === buf.length ? buf : buf.subarray(at, at + n));
          at += n;
          if (this.remaining === 0) this.finish();
          break;
        }
        case State.ChunkSize:
          at = this.readLine(buf, at, (line) => this.chunkSize(line));
          break;
        case State.ChunkData: {
          const n = Math.min(this.remaining, buf.length - at);
          this.remaining -= n;
          this.sink.onBody(buf.subarray(at, at + n));
          at += n;
          if (this.remaining === 0) this.state = State.ChunkDataEnd;
          break;
        }
        case State.ChunkDataEnd:
          at = this.readLine(buf, at, (line) => {
            if (line.length !== 0) throw new HttpParseError('chunk data not followed by CRLF');
            this.state = State.ChunkSize;
          });
          break;
        case State.Trailers:
          at = this.readLine(buf, at, (line) => {
            if (line.length === 0) this.finish();
          });
          break;
        case State.UntilClose:
          this.sink.onBody(at === 0 ? buf : buf.subarray(at));
          at = buf.length;
          break;
        case State.Done:
          throw new HttpParseError('bytes after the end of the response');
      }
    }
  }

  /** The connection ended: true if that completes the response (a body read until close). */
  end(): boolean {
    if (this.state === State.UntilClose) {
      this.finish();
      return true;
    }
    return this.state === State.Done;
  }

  private finish(): void {
    this.state = State.Done;
    this.pending = null;
    this.sink.onEnd();
  }

  private readHead(buf: Buffer, at: number): number {
    let data = buf;
    let from = at;
    if (this.pending !== null) {
      data = Buffer.concat([this.pending, buf.subarray(at)]);
      from = 0;
    }
    // Search from a little before the new bytes: the blank line may straddle two reads.
    const end = data.indexOf('\r\n\r\n', from, 'latin1');
    if (end === -1) {
      if (data.length - from > MAX_HEAD_BYTES) throw new HttpParseError('response head too large');
      this.pending = from === 0 ? data : data.subarray(from);
      return buf.length;
    }
    if (end - from > MAX_HEAD_BYTES) throw new HttpParseError('response head too large');
    const consumedOfData = end + 4;
    // How far into `buf` the head reached.
    const next = this.pending === null ? consumedOfData : consumedOfData - this.pending.length + at;
    const head = data.toString('latin1', from, end);
    this.pending = null;
    this.onHeadText(head);
    return next;
  }

  private onHeadText(text: string): void {
    // Hand-scanned rather than split and matched by regular expressions: this runs once per
    // relayed response and was the parser's largest cost in a CPU profile.
    let eol = text.indexOf('\r\n');
    if (eol === -1) eol = text.length;
    if (!text.startsWith('HTTP/1.') || eol < 12 || text.charCodeAt(8) !== 32 || (eol > 12 && text.charCodeAt(12) !== 32)) {
      throw new HttpParseError('malformed status line');
    }
    const minor = text.charCodeAt(7) - 48;
    const status = digit(text, 9) * 100 + digit(text, 10) * 10 + digit(text, 11);
    if ((minor !== 0 && minor !== 1) || status < 100 || status > 999) throw new HttpParseError('malformed status line');
    const statusText = eol > 13 ? text.slice(13, eol) : '';
    const headers: Record<string, string> = {};
    let at = eol + 2;
    while (at < text.length) {
      let end = text.indexOf('\r\n', at);
      if (end === -1) end = text.length;
      const colon = text.indexOf(':', at);
      if (colon <= at || colon > end) throw new HttpParseError('malformed header line');
      for (let i = at; i < colon; i++) {
        const c = text.charCodeAt(i);
        if (c > 127 || TCHAR[c] === 0) throw new HttpParseError('malformed header name');
      }
      const name = text.slice(at, colon).toLowerCase();
      const value = text.slice(colon + 1, end).trim();
      const prev = headers[name];
      if (prev === undefined) headers[name] = value;
      else if (name === 'content-length') {
        if (prev !== value) throw new HttpParseError('conflicting Content-Length headers');
      } else headers[name] = `${prev}, ${value}`;
      at = end + 2;
    }
    if (status < 200) {
      // 100 Continue, 103 Early Hints: the real head follows.
      return;
    }
    const conn = headers.connection?.toLowerCase();
    const keepAlive = minor === 1 ? !hasToken(conn, 'close') : hasToken(conn, 'keep-alive');
    const ka = headers['keep-alive'];
    const hint = ka === undefined ? null : /(?:^|[,\s])timeout=(\d+)/i.exec(ka);
    const head: ResponseHead = {
      status,
      statusText,
      headers,
      keepAlive,
      keepAliveHintMs: hint ? Number(hint[1]) * 1000 : null,
    };
    const te = headers['transfer-encoding'];
    const cl = headers['content-length'];
    this.noBody = this.expectNoBody || status === 204 || status === 304;
    if (this.noBody) {
      this.sink.onHead(head);
      this.finish();
      return;
    }
    if (te !== undefined) {
      if (cl !== undefined) throw new HttpParseError('both Transfer-Encoding and Content-Length');
      const codings = te.toLowerCase().split(',').map((s) => s.trim());
      if (codings[codings.length - 1] === 'chunked') this.state = State.ChunkSize;
      else {
        // Not chunked last: the body runs until the connection closes (RFC 9112 §6.3).
        this.state = State.UntilClose;
        head.keepAlive = false;
      }
    } else if (cl !== undefined) {
      if (!/^\d{1,15}$/.test(cl)) throw new HttpParseError('malformed Content-Length');
      this.remaining = Number(cl);
      this.state = State.Length;
    } else {
      this.state = State.UntilClose;
      head.keepAlive = false;
    }
    this.sink.onHead(head);
    if (this.state === State.Length && this.remaining === 0) this.finish();
  }

  private chunkSize(line: string): void {
    const semi = line.indexOf(';');
    const hex = (semi === -1 ? line : line.slice(0, semi)).trim();
    if (!/^[0-9a-fA-F]{1,12}$/.test(hex)) throw new HttpParseError('malformed chunk size');
    const size = parseInt(hex, 16);
    if (size === 0) this.state = State.Trailers;
    else {
      this.remaining = size;
      this.state = State.ChunkData;
    }
  }

  /** Reads one CRLF-terminated line (buffering a partial one); returns the new offset. */
  private readLine(buf: Buffer, at: number, onLine: (line: string) => void): number {
    const nl = buf.indexOf(CRLF, at);
    if (nl === -1) {
      const part = buf.subarray(at);
      this.pending = this.pending === null ? Buffer.from(part) : Buffer.concat([this.pending, part]);
      if (this.pending.length > MAX_CHUNK_LINE) throw new HttpParseError('chunk line too long');
      return buf.length;
    }
    let lineBuf = buf.subarray(at, nl);
    if (this.pending !== null) {
      lineBuf = Buffer.concat([this.pending, lineBuf]);
      this.pending = null;
    }
    if (lineBuf.length > MAX_CHUNK_LINE) throw new HttpParseError('chunk line too long');
    if (lineBuf.length === 0 || lineBuf[lineBuf.length - 1] !== 0x0d) throw new HttpParseError('line not ended by CRLF');
    onLine(lineBuf.toString('latin1', 0, lineBuf.length - 1));
    return nl + 1;
  }
}

/** 1 for the characters allowed in a header name (RFC 9110 tchar). */
const TCHAR = new Uint8Array(128);
for (const c of "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") TCHAR[c.charCodeAt(0)] = 1;

function digit(s: string, i: number): number {
  const d = s.charCodeAt(i) - 48;
  if (d < 0 || d > 9) throw new HttpParseError('malformed status line');
  return d;
}

function hasToken(list: string | undefined, token: string): boolean {
  if (list === undefined) return false;
  for (const t of list.split(',')) if (t.trim() === token) return true;
  return false;
}
