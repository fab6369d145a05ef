/** Shared set-up for the gateway's end-to-end tests: real simulated workers, a real gateway, loopback only. */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseConfig, type RawConfig } from '../../src/config/index.js';
import { createGateway, type Gateway, type GatewayOptions } from '../../src/gateway/gateway.js';
import { startSimWorker, type SimWorker } from '../../src/sim/worker/server.js';
import { createLogger } from '../../src/telemetry/logger.js';
export { metricValue, parseSse, waitFor } from '../support.js';

export const MODEL = 'llama-3.1-8b';

export async function startSims(n: number, opts: { speed?: number; numGpuBlocks?: number; legacyMetricNames?: boolean } = {}): Promise<SimWorker[]> {
  return Promise.all(
    Array.from({ length: n }, () => startSimWorker({ port: 0, model: MODEL, speed: opts.speed ?? 100, numGpuBlocks: opts.numGpuBlocks, legacyMetricNames: opts.legacyMetricNames })),
  );
}

/**
 * A gateway config for these worker URLs, fast scrapes, quiet logs; `extra` overrides. The simulated
 * workers share the test's process (and its event loop) with the gateway, so on a loaded machine a
 * probe or scrape can time out only because the loop was busy: what the gateway then measures is
 * the test process, not the worker. Health probes therefore allow 400 ms and six misses in a row
 * (3 s of unanswered probes) before a worker is taken out, and passive outlier detection suspects a
 * worker only after 5 s of silence (tests of outlier detection set their own). A worker that is
 * really gone refuses connections at once and is still taken out within about 3 s. Routing headers
 * are on (the tests read x-kvgate-worker).
 */
export function configFor(urls: string[], extra: Partial<RawConfig> = {}) {
  return parseConfig({
    listen: { host: '127.0.0.1', port: 0 },
    pools: urls.length > 0 ? [{ name: 'main', model: MODEL, workers: urls.map((url, i) => ({ url, id: `w${i}` })) }] : [],
    scrape: { intervalMs: 200 },
    health: { intervalMs: 500, failuresToMarkDown: 6 },
    outlier: { minSilenceMs: 5_000 },
    log: { level: 'silent' },
    // The tests check routing through these headers; off by default (see hardening.test.ts).
    server: { routingHeaders: true },
    ...extra,
    // The tests read /metrics without a key; those about its protection set openMetrics: false.
    admin: { openMetrics: true, ...(extra.admin ?? {}) },
  });
}

export async function startGateway(
  urls: string[],
  extra: Partial<RawConfig> = {},
  opts: GatewayOptions = {},
): Promise<{ gw: Gateway; url: string }> {
  const gw = createGateway(configFor(urls, extra), { logger: createLogger({ level: 'silent' }), ...opts });
  const { url } = await gw.start();
  return { gw, url };
}

export async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; headers: Headers; text: string; json: any }> {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json: any = null;
  try {
    json = JSON.parse(text);
  } catch {
    // SSE or empty bodies.
  }
  return { status: r.status, headers: r.headers, text, json };
}

/** Text of a chat or completion stream, concatenated from its deltas. */
export function streamText(events: any[]): string {
  let s = '';
  for (const e of events) {
    if (e === '[DONE]' || !e.choices) continue;
    for (const c of e.choices) s += c.delta?.content ?? c.text ?? '';
  }
  return s;
}

/**
 * A handler for a worker stand-in: answers the gateway's health probes and scrapes (GET: 200, an
 * empty metrics page) and hands each POST to `onPost` with its body read.
 */
export function workerStandIn(onPost: (req: IncomingMessage, body: string, res: ServerResponse) => void): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end(req.url === '/metrics' ? '' : 'ok');
      return;
    }
    let raw = '';
    req.on('data', (c: Buffer) => (raw += c));
    req.on('end', () => onPost(req, raw, res));
  };
}

/** A tiny real HTTP server standing in for a broken worker. */
export async function startStub(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ url: string; server: Server; close(): Promise<void> }> {
  const server = createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    server,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

