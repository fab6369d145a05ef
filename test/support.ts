/** Helpers shared by the end-to-end tests: SSE parsing, Prometheus samples, polling. */

/** The `data:` events of an SSE body, JSON-decoded (`[DONE]` kept as the string). */
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

/** Poll `cond` every 10 ms until it holds or `timeoutMs` passes (a bound, not a wait: generous). */
export async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}
