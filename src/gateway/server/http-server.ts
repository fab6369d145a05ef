/**
 * The gateway's HTTP or HTTPS server: Node's timers set from `server`, each request admitted by the
 * connection guard before the handler sees it, and the TLS certificate re-read on config reload.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { ConfigError, type GatewayConfig } from '../../config/index.js';
import { readTls } from '../../http/tls-files.js';
import type { Logger } from '../../telemetry/logger.js';
import { ConnectionGuard } from './connections.js';

export interface GatewayServer {
  readonly server: Server;
  readonly connections: ConnectionGuard;
  /** True with listen.tls. */
  readonly tls: boolean;
  /** Read the certificate again (a config reload); the one in use stays if the files are bad. */
  refreshTls(): void;
  /** Listen on listen.host:listen.port; the URL the gateway is reached at. */
  listen(): Promise<{ url: string; port: number; address: string }>;
  /** Stop accepting; resolves once every connection is gone (see closeAll). */
  close(): Promise<void>;
  closeIdle(): void;
  closeAll(): void;
}

export function createGatewayServer(
  config: GatewayConfig,
  handler: (req: IncomingMessage, res: ServerResponse) => void,
  logger: Logger,
): GatewayServer {
  const sc = config.server;
  const connections = new ConnectionGuard(sc);
  const serverOptions = {
    keepAliveTimeout: sc.keepAliveTimeoutMs,
    headersTimeout: sc.headersTimeoutMs,
    // Node's own whole-request timer is off: the body has its own (server.bodyTimeoutMs, answered
    // 408 in OpenAI's shape by the handler) and responses are bounded by the request deadline.
    requestTimeout: 0,
    // How often Node checks headersTimeout (default 30 s): a stalled client is closed within
    // headersTimeoutMs plus this.
    connectionsCheckingInterval: Math.min(1_000, sc.headersTimeoutMs),
  };
  const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    if (connections.admit(req, res)) handler(req, res);
  };
  // HTTPS with listen.tls: the certificate is read again at every config reload (refreshTls).
  const tlsFiles = config.listen.tls;
  let server: Server;
  let refreshTls = (): void => undefined;
  if (tlsFiles) {
    const tls = readTls(tlsFiles);
    if (!tls.ok) throw new ConfigError([tls.problem]);
    // A TLS handshake must finish as fast as the headers must arrive.
    const https = createTlsServer({ ...serverOptions, ...tls.options, handshakeTimeout: sc.headersTimeoutMs }, onRequest);
    server = https;
    refreshTls = () => {
      const next = readTls(tlsFiles);
      if (!next.ok) {
        logger.warn({ err: next.problem }, 'TLS certificate not reloaded: the one in use stays');
        return;
      }
      https.setSecureContext(next.options);
    };
  } else {
    server = createServer(serverOptions, onRequest);
  }
  // Over TLS a connection is counted once its handshake is done (its TLS socket is the request's).
  connections.attach(server, tlsFiles ? 'secureConnection' : 'connection');

  return {
    server,
    connections,
    tls: tlsFiles !== undefined,
    refreshTls: () => refreshTls(),
    async listen() {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(config.listen.port, config.listen.host, () => {
          server.off('error', reject);
          resolve();
        });
      });
      const addr = server.address() as AddressInfo;
      const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
      return { url: `${tlsFiles ? 'https' : 'http'}://${host}:${addr.port}`, port: addr.port, address: addr.address };
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
    closeIdle: () => server.closeIdleConnections(),
    closeAll: () => server.closeAllConnections(),
  };
}
