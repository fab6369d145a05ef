/**
 * The "undici hop" baseline: kvgate's own HTTP stack with nothing on top — a node:http server that
 * reads the body and hands it to an undici Pool through a dispatch handler (as kvgate's relay
 * does, src/gateway/relay-attempt.ts), relaying the worker's status, content type and body bytes
 * as they arrive. What it costs is the floor of any gateway built on these two parts; what kvgate
 * costs above it is its own pipeline (validation, tokenization, routing, admission, logs,
 * metrics). Run as a child process; it reports its port to the parent over IPC. Env: UPSTREAM_URL,
 * and HOP_CLIENT=kvgate for the target `poolhop`: the same hop with kvgate's own relay client
 * (src/http/upstream-pool.ts, the gateway's default) in place of undici's Pool, and the client's
 * answers written the way the gateway writes them (src/http/write-batch.ts: with the turn's
 * other writes while the event loop is saturated).
 */
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import { Pool, type Dispatcher } from 'undici';
import { UpstreamPool, type RelayDispatcher } from '../../src/http/upstream-pool.js';
import { endSoon, holdWrites } from '../../src/http/write-batch.js';

const origin = new URL(process.env.UPSTREAM_URL!).origin;
const kvgateStack = process.env.HOP_CLIENT === 'kvgate';
const pool: RelayDispatcher =
  kvgateStack
    ? new UpstreamPool(origin, { connections: 0, keepAliveTimeoutMs: 4_000, connectTimeoutMs: 5_000 })
    : new Pool(origin, { connections: null, pipelining: 1, headersTimeout: 0, bodyTimeout: 0 });

class Relay implements Dispatcher.DispatchHandler {
  private status = 0;
  private headers: Record<string, string> = {};
  private started = false;
  constructor(private readonly res: ServerResponse) {}
  onRequestStart(): void {}
  onResponseStart(_c: Dispatcher.DispatchController, status: number, h: IncomingHttpHeaders): void {
    this.status = status;
    const ct = h['content-type'];
    const cl = h['content-length'];
    if (ct !== undefined) this.headers['content-type'] = String(ct);
    if (cl !== undefined) this.headers['content-length'] = String(cl);
  }
  onResponseData(c: Dispatcher.DispatchController, chunk: Buffer): void {
    if (!this.started) {
      this.res.writeHead(this.status, this.headers);
      this.started = true;
    }
    if (kvgateStack) holdWrites(this.res.socket);
    if (!this.res.write(chunk)) {
      c.pause();
      this.res.once('drain', () => c.resume());
    }
  }
  onResponseEnd(): void {
    if (!this.started) this.res.writeHead(this.status, this.headers);
    if (kvgateStack) endSoon(this.res);
    else this.res.end();
  }
  onResponseError(): void {
    if (this.res.headersSent) {
      this.res.destroy();
      return;
    }
    this.res.writeHead(502, { 'content-type': 'application/json' });
    this.res.end('{"error":{"message":"upstream error","type":"server_error","param":null,"code":null}}');
  }
}

const server = createServer({ keepAliveTimeout: 75_000 }, (req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    const ct = req.headers['content-type'];
    pool.dispatch({ method: 'POST', path: req.url ?? '/', headers: ct ? { 'content-type': ct } : {}, body }, new Relay(res));
  });
});
server.listen(0, '127.0.0.1', () => {
  const a = server.address();
  process.send?.({ port: typeof a === 'object' && a ? a.port : 0 });
});
process.on('disconnect', () => process.exit(0));
