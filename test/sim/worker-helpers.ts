/** Small HTTP helpers shared by the simulated-worker tests. */
import type { SimWorker } from '../../src/sim/worker-server.js';

export async function postJson(w: SimWorker, path: string, body: unknown): Promise<{ status: number; json: any }> {
  const r = await fetch(w.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, json: text === '' ? null : JSON.parse(text) };
}

/** Parse an SSE body into its `data:` payloads (JSON objects, or the string '[DONE]'). */
export function parseSse(text: string): any[] {
  const out: any[] = [];
  for (const block of text.split('\n\n')) {
    if (block.trim() === '') continue;
    if (!block.startsWith('data: ')) throw new Error(`not an SSE data event: ${JSON.stringify(block)}`);
    const data = block.slice(6);
    out.push(data === '[DONE]' ? data : JSON.parse(data));
  }
  return out;
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

/** The value of one sample of a Prometheus text exposition, or undefined if absent. */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have: Record<string, string> = {};
    for (const kv of (m[3] ?? '').matchAll(/([a-zA-Z_]+)="([^"]*)"/g)) have[kv[1]!] = kv[2]!;
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(m[4]);
  }
  return undefined;
}

export async function scrape(w: SimWorker): Promise<string> {
  const r = await fetch(w.url + '/metrics');
  return r.text();
}

/** Poll `cond` every 10 ms until it holds or `timeoutMs` passes. */
export async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs = 2000): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A prompt of `n` words from the common vocabulary (about n tokens). */
export function longPrompt(n: number, salt = ''): string {
  const words = ['model', 'data', 'cache', 'memory', 'token', 'request', 'worker', 'system', 'value', 'state'];
  let s = salt;
  for (let i = 0; i < n; i++) s += (s === '' ? '' : ' ') + words[(i * 7 + i * i) % words.length];
  return s;
}
