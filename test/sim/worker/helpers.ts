/** Small HTTP helpers shared by the simulated-worker tests. */
import type { SimWorker } from '../../../src/sim/worker/server.js';
export { metricValue, parseSse, waitFor } from '../../support.js';
import { parseSse } from '../../support.js';

export async function postJson(w: SimWorker, path: string, body: unknown): Promise<{ status: number; json: any }> {
  const r = await fetch(w.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, json: text === '' ? null : JSON.parse(text) };
}

export async function postStream(w: SimWorker, path: string, body: unknown): Promise<{ status: number; contentType: string | null; events: any[]; raw: string }> {
  const r = await fetch(w.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...(body as object), stream: true }),
  });
  const raw = await r.text();
  return { status: r.status, contentType: r.headers.get('content-type'), events: parseSse(raw), raw };
}

export async function scrape(w: SimWorker): Promise<string> {
  const r = await fetch(w.url + '/metrics');
  return r.text();
}

/** A prompt of `n` words from the common vocabulary (about n tokens). */
export function longPrompt(n: number, salt = ''): string {
  const words = ['model', 'data', 'cache', 'memory', 'token', 'request', 'worker', 'system', 'value', 'state'];
  let s = salt;
  for (let i = 0; i < n; i++) s += (s === '' ? '' : ' ') + words[(i * 7 + i * i) % words.length];
  return s;
}
