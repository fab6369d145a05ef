/**
 * The "bare Node hop" baseline: a node:http pass-through with a keep-alive agent, streaming the
 * request and the response through unchanged — what any Node.js gateway costs before it does
 * anything. kvgate's request path is measured against it. Run as a child process; it reports its
 * port to the parent over IPC. Env: UPSTREAM_URL.
 */
import { Agent, createServer, request } from 'node:http';

const up = new URL(process.env.UPSTREAM_URL!);
const agent = new Agent({ keepAlive: true, maxSockets: 512, maxFreeSockets: 512 });
const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'proxy-connection', 'upgrade', 'te', 'trailer']);
const strip = (h: Record<string, unknown>): Record<string, string | string[]> =>
  Object.fromEntries(Object.entries(h).filter(([k, v]) => !HOP.has(k) && v !== undefined)) as Record<string, string | string[]>;

const server = createServer({ keepAliveTimeout: 75_000 }, (req, res) => {
  const out = request(
    { host: up.hostname, port: up.port, path: req.url, method: req.method, headers: { ...strip(req.headers), host: up.host }, agent },
    (upRes) => {
      res.writeHead(upRes.statusCode ?? 502, strip(upRes.headers));
      upRes.pipe(res);
    },
  );
  out.on('error', () => {
    if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' });
    res.end('{"error":{"message":"upstream error","type":"server_error","param":null,"code":null}}');
  });
  req.pipe(out);
});
server.listen(0, '127.0.0.1', () => {
  const a = server.address();
  process.send?.({ port: typeof a === 'object' && a ? a.port : 0 });
});
process.on('disconnect', () => process.exit(0));
