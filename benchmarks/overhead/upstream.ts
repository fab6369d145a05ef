/**
 * Zero-delay stand-in for a vLLM worker, so the overhead benchmark measures the proxy and not the
 * model: answers completions at once (JSON, or a 64-chunk SSE stream written back to back) and
 * serves the metrics and health endpoints a gateway polls. Run as a child process; it reports its
 * port to the parent over IPC.
 */
import { createServer } from 'node:http';

const MODEL = process.env.OVERHEAD_MODEL ?? 'bench-model';
const SSE_CHUNKS = 64;

const completion = JSON.stringify({
  id: 'cmpl-bench',
  object: 'chat.completion',
  created: 1_700_000_000,
  model: MODEL,
  choices: [{ index: 0, message: { role: 'assistant', content: 'the quick brown fox jumps over the lazy dog' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 12, completion_tokens: 9, total_tokens: 21 },
});

const chunks: string[] = [];
for (let i = 0; i < SSE_CHUNKS; i++) {
  const c = {
    id: 'chatcmpl-bench',
    object: 'chat.completion.chunk',
    created: 1_700_000_000,
    model: MODEL,
    choices: [{ index: 0, delta: i === 0 ? { role: 'assistant', content: 'tok' } : { content: ' tok' }, finish_reason: i === SSE_CHUNKS - 1 ? 'length' : null }],
  };
  chunks.push(`data: ${JSON.stringify(c)}\n\n`);
}

const metrics = [
  '# TYPE vllm:num_requests_running gauge',
  `vllm:num_requests_running{engine="0",model_name="${MODEL}"} 0`,
  '# TYPE vllm:num_requests_waiting gauge',
  `vllm:num_requests_waiting{engine="0",model_name="${MODEL}"} 0`,
  '# TYPE vllm:kv_cache_usage_perc gauge',
  `vllm:kv_cache_usage_perc{engine="0",model_name="${MODEL}"} 0.1`,
  '',
].join('\n');

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
