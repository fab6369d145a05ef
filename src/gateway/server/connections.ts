/**
 * Client connections: caps and what a broken or stalled one gets.
 *
 * - At most `maxConnections` open connections, and `maxConnectionsPerAddress` per client
 *   address. A new connection past a cap makes room by closing the oldest connection that has no
 *   request in progress (one still waiting for its headers, or an idle keep-alive one) — of the
 *   same address for the per-address cap. An attacker holding thousands of stalled sockets thus
 *   loses its own oldest ones, not the gateway its ability to answer.
 * - If nothing can be closed (every connection is mid-request), up to `probeReserve` more are
 *   accepted, on which only `/health` and `/ready` are answered (anything else: 503 and the
 *   connection closed), so orchestrators can still tell the process is alive; past that, new
 *   connections are closed at once.
 * - Protocol errors Node detects itself (malformed request, headers too large, headers not
 *   received within `headersTimeoutMs`) are answered in OpenAI's error shape, not with Node's
 *   empty bodies.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { ApiError } from '../../api/errors.js';

export interface ConnectionLimits {
  maxConnections: number;
  maxConnectionsPerAddress: number;
  probeReserve: number;
}

interface ConnState {
  address: string;
  /** Requests in progress on the connection (HTTP/1.1 without pipelining: 0 or 1). */
  busy: number;
  /** Accepted beyond maxConnections: only probes are answered on it. */
  probeOnly: boolean;
}

const PROBES = new Set(['/health', '/ready']);

export class ConnectionGuard {
  private readonly conns = new Map<Socket, ConnState>();
  /** Connections with no request in progress, oldest first (Set keeps insertion order). */
  private readonly idle = new Set<Socket>();
  private readonly byAddress = new Map<string, { count: number; idle: Set<Socket> }>();
  /** Connections closed to make room, refused outright, and probe-only ones (for metrics/tests). */
  evicted = 0;
  refused = 0;

  constructor(private readonly limits: ConnectionLimits) {}

  get open(): number {
    return this.conns.size;
  }

  /**
   * Wire into a server (before it listens); its request handler must call `admit` first. An HTTPS
   * server is watched at `secureConnection`: the TLS socket is the one its requests arrive on.
   */
  attach(server: Server, event: 'connection' | 'secureConnection' = 'connection'): void {
    server.on(event, (socket: Socket) => this.onConnection(socket));
    server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => onClientError(err, socket));
  }

  private onConnection(socket: Socket): void {
    const address = socket.remoteAddress ?? '?';
    const l = this.limits;
    let group = this.byAddress.get(address);
    if (group && group.count >= l.maxConnectionsPerAddress && !this.evictFrom(group.idle)) {
      this.refuse(socket);
      return;
    }
    let probeOnly = false;
    if (this.conns.size >= l.maxConnections && !this.evictFrom(this.idle)) {
      if (this.conns.size >= l.maxConnections + l.probeReserve) {
        this.refuse(socket);
        return;
      }
      probeOnly = true;
    }
    if (!group) this.byAddress.set(address, (group = { count: 0, idle: new Set() }));
    group.count++;
    this.conns.set(socket, { address, busy: 0, probeOnly });
    this.idle.add(socket);
    group.idle.add(socket);
    socket.once('close', () => this.forget(socket));
  }

  /** Mark the connection busy; false if the request was answered here (a probe-only connection). */
  admit(req: IncomingMessage, res: ServerResponse): boolean {
    const socket = req.socket;
    const st = this.conns.get(socket);
    if (!st) return true;
    st.busy++;
    this.idle.delete(socket);
    this.byAddress.get(st.address)?.idle.delete(socket);
    res.once('close', () => {
      st.busy--;
      if (st.busy === 0 && this.conns.has(socket) && !socket.destroyed) {
        this.idle.add(socket);
        this.byAddress.get(st.address)?.idle.add(socket);
      }
    });
    if (st.probeOnly) {
      const path = (req.url ?? '/').split('?', 1)[0]!;
      if (!PROBES.has(path)) {
        writeError(res, new ApiError(503, 'overloaded_error', 'too_many_connections', 'the gateway has too many open connections; try again', null, { 'retry-after': '1', connection: 'close' }));
        return false;
      }
    }
    return true;
  }

  /** Close the oldest connection of `set` (none busy by construction); false if there is none. */
  private evictFrom(set: Set<Socket>): boolean {
    for (const s of set) {
      this.evicted++;
      this.forget(s);
      s.destroy();
      return true;
    }
    return false;
  }

  private refuse(socket: Socket): void {
    this.refused++;
    socket.destroy();
  }

  private forget(socket: Socket): void {
    const st = this.conns.get(socket);
    if (!st) return;
    this.conns.delete(socket);
    this.idle.delete(socket);
    const g = this.byAddress.get(st.address);
    if (g) {
      g.idle.delete(socket);
      if (--g.count === 0) this.byAddress.delete(st.address);
    }
  }
}

/** Node's protocol-level errors, answered in OpenAI's shape (then the connection is closed). */
function onClientError(err: NodeJS.ErrnoException, socket: Socket): void {
  if (!socket.writable || (socket as Socket & { _httpMessage?: unknown })._httpMessage) {
    socket.destroy();
    return;
  }
  let e: ApiError;
  switch (err.code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      e = new ApiError(408, 'invalid_request_error', 'request_timeout', 'the request headers did not arrive in time');
      break;
    case 'HPE_HEADER_OVERFLOW':
      e = new ApiError(431, 'invalid_request_error', 'headers_too_large', 'the request headers are too large');
      break;
    case 'ECONNRESET':
    case 'EPIPE':
      socket.destroy();
      return;
    default:
      e = new ApiError(400, 'invalid_request_error', 'malformed_request', 'the request is not valid HTTP/1.1');
  }
  const payload = JSON.stringify(e.body());
  const reason = { 400: 'Bad Request', 408: 'Request Timeout', 431: 'Request Header Fields Too Large' }[e.status] ?? 'Error';
  socket.end(
    `HTTP/1.1 ${e.status} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(payload)}\r\nconnection: close\r\n\r\n${payload}`,
  );
  // A peer that never reads must not keep the socket half-open.
  setTimeout(() => socket.destroy(), 1_000).unref();
}

function writeError(res: ServerResponse, e: ApiError): void {
  const payload = JSON.stringify(e.body());
  res.writeHead(e.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), ...e.headers });
  res.end(payload);
}
