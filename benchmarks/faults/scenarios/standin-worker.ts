/**
 * A worker stand-in for scenarios whose fault a `kvgate sim` cannot play: a real HTTP server on
 * 127.0.0.1 that answers the gateway's health probes and scrapes (GET: 200, an empty metrics page)
 * and hands each POST, its body read, to `onPost`. `exit()` plays the process dying: every open
 * connection is dropped and the port stops listening.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface StandIn {
  url: string;
  /** POSTs received. */
  posts(): number;
  exited(): boolean;
  exit(): void;
  close(): Promise<void>;
}

export async function startStandIn(onPost: (w: StandIn, req: IncomingMessage, body: string, res: ServerResponse) => void): Promise<StandIn> {
  let posts = 0;
  let exited = false;
  const server = createServer((req, res) => {
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end(req.url === '/metrics' ? '' : 'ok');
      return;
    }
    let body = '';
    req.on('data', (c: Buffer) => (body += c));
    req.on('end', () => {
      posts++;
      onPost(w, req, body, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const w: StandIn = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    posts: () => posts,
    exited: () => exited,
    exit() {
      exited = true;
      server.close();
      server.closeAllConnections();
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
        if (exited) r();
      }),
  };
  return w;
}

/** A one-choice completion answer in vLLM's shape. */
export function completionAnswer(res: ServerResponse, model: string): void {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(
    JSON.stringify({
      id: 'cmpl-standin',
      object: 'text_completion',
      created: Math.floor(Date.now() / 1000),
      model,
      choices: [{ index: 0, text: ' fine', logprobs: null, finish_reason: 'stop' }],
      usage: { prompt_tokens: 4, completion_tokens: 1, total_tokens: 5 },
    }),
  );
}
