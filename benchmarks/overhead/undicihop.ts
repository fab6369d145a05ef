/**
 * The "undici hop" baseline: kvgate's own HTTP stack with nothing on top — a node:http server that
 * reads the body and hands it to an undici Pool through a dispatch handler (as kvgate's relay
 * does, src/gateway/pipeline/relay-attempt.ts), relaying the worker's status, content type and body bytes
 * as they arrive. What it costs is the floor of any gateway built on these two parts; what kvgate
 * costs above it is its own pipeline (validation, tokenization, routing, admission, logs,
 * metrics). Run as a child process; it reports its port to the parent over IPC. Env: UPSTREAM_URL,
 * and HOP_CLIENT=kvgate for the target `poolhop`: the same hop with kvgate's own relay client
 * (src/http/upstream-pool.ts, the gateway's default) in place of undici's Pool, and the client's
 * answers written the way the gateway writes them (src/http/write-batch.ts: with the turn's
 * other writes while the event loop is saturated).
 */
import { createServer } from 'node:http';
import { Pool } from 'undici';
import { UpstreamPool, type RelayDispatcher } from '../../src/http/upstream-pool.js';
import { HopRelay } from './hop-relay.js';

const origin = new URL(process.env.UPSTREAM_URL!).origin;
const kvgateStack = process.env.HOP_CLIENT === 'kvgate';
const pool: RelayDispatcher =
  kvgateStack
    ? new UpstreamPool(origin, { connections: 0, keepAliveTimeoutMs: 4_000, connectTimeoutMs: 5_000 })
    : new Pool(origin, { connections: null, pipelining: 1, headersTimeout: 0, bodyTimeout: 0 });

const server = createServer({ keepAliveTimeout: 75_000 }, (req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    const ct = req.headers['content-type'];
    pool.dispatch({ method: 'POST', path: req.url ?? '/', headers: ct ? { 'content-type': ct } : {}, body }, new HopRelay(res, kvgateStack));
  });
});
server.listen(0, '127.0.0.1', () => {
  const a = server.address();
  process.send?.({ port: typeof a === 'object' && a ? a.port : 0 });
});
process.on('disconnect', () => process.exit(0));
