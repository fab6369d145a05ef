/**
 * Priority inversion at a full admission queue: one standard tenant floods a saturated model
 * (one worker of 64 KV blocks) with 320 requests, filling the 256-entry queue; then a critical
 * tenant sends 10. Every critical request must get in (a full queue evicts its newest standard
 * request to make room: that one is answered 429 queue_full with Retry-After), and every request
 * is answered: served, 429 queue_full, or 503 queue_timeout when its wait runs out.
 */
import { metric, MODEL, sleep, spawnSims, startGateway, Tally, type FaultScenario, type Outcome, fetchMetrics } from '../harness.js';

const KEYS = { standard: 'sk-bulk-queue-01', critical: 'sk-front-queue-01' } as const;
const FLOOD = 320;
const CRITICAL = 10;

interface Answer extends Outcome {
  code?: string;
  message?: string;
  retryAfter?: string | null;
}

function prompt(cls: string, i: number): string {
  const words = ['queue', 'tenant', 'flood', 'token', 'worker', 'priority', 'answer', 'room'];
  return Array.from({ length: 120 }, (_, k) => (k % 7 === 0 ? `${cls}${i}w${k}` : words[(i + k) % words.length])).join(' ');
}

async function chat(base: string, cls: keyof typeof KEYS, i: number): Promise<Answer> {
  const t0 = performance.now();
  const out = (kind: Outcome['kind'], detail: string, status: number, extra: Partial<Answer> = {}): Answer => ({ kind, detail, status, ms: performance.now() - t0, end: performance.now(), text: '', ...extra });
  try {
    const r = await fetch(base + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEYS[cls]}` },
      body: JSON.stringify({ model: MODEL, max_tokens: 48, messages: [{ role: 'user', content: prompt(cls, i) }] }),
      signal: AbortSignal.timeout(60_000),
    });
    const j = (await r.json().catch(() => null)) as { choices?: unknown; error?: { message?: unknown; type?: unknown; code?: string } } | null;
    if (r.ok && j?.choices !== undefined) return out('ok', 'ok', r.status);
    if (r.status >= 400 && typeof j?.error?.message === 'string' && typeof j.error.type === 'string') {
      return out('error', `${r.status} ${j.error.code}`, r.status, { code: j.error.code, message: j.error.message, retryAfter: r.headers.get('retry-after') });
    }
    return out('unanswered', `${r.status} not in OpenAI's shape`, r.status);
  } catch (e) {
    return out('unanswered', (e as Error).message, 0);
  }
}

export const queuePriority: FaultScenario = {
  name: 'queue-priority',
  description: 'a standard tenant fills the 256-entry admission queue; 10 critical requests arrive',
  async run() {
    const sims = await spawnSims(1, ['--num-gpu-blocks', '64']);
    const { gw, url } = await startGateway(sims.map((s) => s.url), {
      tenants: [
        { id: 'bulk', keys: [{ value: KEYS.standard }], priority: 'standard' },
        { id: 'front', keys: [{ value: KEYS.critical }], priority: 'critical' },
      ],
      scrape: { intervalMs: 200 },
      admission: { queue: { maxSize: 256, maxWaitMs: 8_000 } },
    });
    const tally = new Tally();
    try {
      const depth = async () => metric(await fetchMetrics(url), 'kvgate_queue_depth', { model: MODEL, priority: 'standard' }) ?? 0;
      const flood = Array.from({ length: FLOOD }, (_, i) => chat(url, 'standard', i));
      let full = 0;
      for (let i = 0; i < 100 && (full = await depth()) < 256; i++) await sleep(50);
      const critical = await Promise.all(Array.from({ length: CRITICAL }, (_, i) => chat(url, 'critical', i)));
      const standard = await Promise.all(flood);
      for (const a of [...standard, ...critical]) tally.add(a);
      const evicted = standard.filter((a) => a.status === 429 && /evicted/.test(a.message ?? ''));
      const refusals = [...standard, ...critical].filter((a) => a.status === 429 || a.status === 503);
      return {
        tally,
        figures: {
          'standard requests waiting when the critical ones arrived': full,
          'critical answered 200': `${critical.filter((a) => a.kind === 'ok').length}/${CRITICAL}`,
          'critical refused': critical.filter((a) => a.kind !== 'ok').map((a) => a.detail).join(', ') || 'none',
          'standard served / 429 queue_full at arrival / evicted (429) / 503 queue_timeout': [
            standard.filter((a) => a.kind === 'ok').length,
            standard.filter((a) => a.status === 429).length - evicted.length,
            evicted.length,
            standard.filter((a) => a.code === 'queue_timeout').length,
          ].join(' / '),
        },
        checks: {
          'the queue was full when the critical requests arrived': full >= 256,
          'every critical request served': critical.every((a) => a.kind === 'ok'),
          // A critical request that fits a worker at once is admitted without evicting anyone.
          'at most one standard request evicted per critical one, each told 429 queue_full': evicted.length <= CRITICAL && evicted.every((a) => a.code === 'queue_full'),
          'every refusal carries Retry-After': refusals.every((a) => a.retryAfter !== null && a.retryAfter !== undefined),
        },
      };
    } finally {
      await gw.close();
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
