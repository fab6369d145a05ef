/**
 * What a naive Node gateway does: node:http in front, global fetch to the upstream, the body
 * buffered and re-sent. The benchmark's reference for "a dozen lines of Node".
 */
import { createServer } from 'node:http';

const upstream = process.env.UPSTREAM_URL!;
const server = createServer(async (req, res) => {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const r = await fetch(upstream + req.url, {
    method: req.method,
    headers: { 'content-type': 'application/json' },
    body: req.method === 'POST' ? Buffer.concat(chunks) : undefined,
  });
  res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' });
  for await (const c of r.body!) res.write(c);
  res.end();
});
server.listen(0, '127.0.0.1', () => {
  const addr = server.address();
  process.send?.({ port: typeof addr === 'object' && addr ? addr.port : 0 });
});
process.on('disconnect', () => process.exit(0));
