/**
 * Zero-delay stand-in for a vLLM worker, so the overhead benchmark measures the proxy and not the
 * model: answers completions at once (JSON, or a 64-chunk SSE stream written back to back) and
 * serves the metrics and health endpoints a gateway polls. Run as a child process; it reports its
 * port to the parent over IPC.
 */
import { createServer } from 'node:http';
import { chunks, completion, metrics, MODEL } from './responses.js';

const server = createServer((req, res) => {
  if (req.method === 'GET') {
    if (req.url === '/metrics') {
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
      res.end(metrics);
    } else if (req.url === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: MODEL, object: 'model', owned_by: 'bench' }] }));
    } else {
      res.writeHead(200);
      res.end();
    }
    return;
  }
  let body = '';
  req.setEncoding('utf8');
  req.on('data', (d: string) => (body += d));
  req.on('end', () => {
    if (body.includes('"stream":true')) {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      for (const c of chunks) res.write(c);
      res.end('data: [DONE]\n\n');
    } else {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(completion) });
      res.end(completion);
    }
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  const addr = server.address();
  process.send?.({ port: typeof addr === 'object' && addr ? addr.port : 0 });
});
process.on('disconnect', () => process.exit(0));
