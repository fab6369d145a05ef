/**
 * A burst five times over what the fleet's KV cache holds, with admission control on: four
 * workers of 256 KV blocks each, 220 streamed requests (about 60 blocks each) sent within 200 ms,
 * a fifth of them from a `critical` tenant and the rest from a `sheddable` one. Admission must shed
 * sheddable work at once (503 `overloaded` + Retry-After, answered by the gateway within 50 ms of
 * arrival by its own request log) and serve every critical request, with no worker preempting.
 */
import { Writable } from 'node:stream';
import { createLogger } from '../../../src/telemetry/logger.js';
import { MODEL, metric, quantile, sleep, spawnSims, startGateway, Tally, ask, type FaultScenario } from '../harness.js';

const KEYS = { critical: 'sk-front-burst-01', sheddable: 'sk-batch-burst-01' } as const;

function prompt(i: number): string {
  const words = ['cache', 'block', 'route', 'token', 'worker', 'prefix', 'answer', 'burst'];
  return Array.from({ length: 450 }, (_, k) => (k % 9 === 0 ? `r${i}w${k}` : words[(i + k) % words.length])).join(' ');
}

export const admissionBurst: FaultScenario = {
  name: 'admission-burst',
  description: 'a burst 5× over the fleet’s KV capacity, 20% critical, admission on',
  async run() {
    const sims = await spawnSims(4, ['--num-gpu-blocks', '256', '--speed', '4']);
    const lines: Array<{ msg?: string; status?: number; durationMs?: number; tenant?: string }> = [];
    const sink = new Writable({
      write(chunk, _enc, cb) {
        for (const l of String(chunk).split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l));
        cb();
      },
    });
    const { gw, url } = await startGateway(
      sims.map((s) => s.url),
      {
        tenants: [
          { id: 'front', keys: [{ value: KEYS.critical }], priority: 'critical' },
          { id: 'batch', keys: [{ value: KEYS.sheddable }], priority: 'sheddable' },
        ],
        scrape: { intervalMs: 200 },
      },
      createLogger({ level: 'info', destination: sink }),
    );
    const tally = new Tally();
    try {
      const preempted0 = await preemptions(sims.map((s) => s.url));
      const sends: Promise<{ cls: keyof typeof KEYS; ok: boolean; status: number; retryAfter: boolean; code: string }>[] = [];
      for (let i = 0; i < 220; i++) {
        const cls = i % 5 === 0 ? 'critical' : 'sheddable';
        sends.push(
          (async () => {
            const o = await ask(url, {
              body: { model: MODEL, stream: true, max_tokens: 300, messages: [{ role: 'user', content: prompt(i) }] },
              headers: { authorization: `Bearer ${KEYS[cls]}` },
              timeoutMs: 60_000,
            });
            tally.add(o);
            let code = '';
            try {
              code = (JSON.parse(o.text) as { error?: { code?: string } }).error?.code ?? '';
            } catch {
              // a stream
            }
            return { cls, ok: o.kind === 'ok', status: o.status, retryAfter: o.status === 503 || o.status === 429, code };
          })(),
        );
        if (i % 11 === 10) await sleep(10); // 220 requests over about 200 ms
      }
      const results = await Promise.all(sends);
      await sleep(300); // the last log lines
      const critical = results.filter((r) => r.cls === 'critical');
      const sheddable = results.filter((r) => r.cls === 'sheddable');
      const shedLog = lines.filter((l) => l.msg === 'request' && l.status === 503).map((l) => l.durationMs ?? Infinity);
      const preempted = (await preemptions(sims.map((s) => s.url))) - preempted0;
      const shedP99 = quantile(shedLog, 0.99);
      const sheddableCodes = new Set(sheddable.filter((r) => !r.ok).map((r) => `${r.status} ${r.code}`));
      return {
        tally,
        figures: {
          'critical answered 200': `${critical.filter((r) => r.ok).length}/${critical.length}`,
          'sheddable served / refused': `${sheddable.filter((r) => r.ok).length} / ${sheddable.filter((r) => !r.ok).length}`,
          'refusals (status code)': [...sheddableCodes].join(', ') || 'none',
          'shed answered, gateway p50 / p99 / max ms': `${quantile(shedLog, 0.5).toFixed(1)} / ${shedP99.toFixed(1)} / ${Math.max(0, ...shedLog).toFixed(1)}`,
          'preemptions at the workers': preempted,
          'gateway in flight after': gw.inflight,
        },
        checks: {
          'every critical request served': critical.every((r) => r.ok),
          'sheddable work shed with 503 overloaded': sheddable.some((r) => r.status === 503 && r.code === 'overloaded'),
          'every refusal is 503/429 with Retry-After': results.every((r) => r.ok || r.retryAfter),
          'shed answered within 50 ms (p99, gateway log)': shedLog.length > 0 && shedP99 < 50,
          'no preemption': preempted === 0,
          'gateway in-flight back to 0': gw.inflight === 0,
        },
      };
    } finally {
      await gw.close();
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};

async function preemptions(urls: string[]): Promise<number> {
  let n = 0;
  for (const u of urls) n += metric(await (await fetch(u + '/metrics')).text(), 'vllm:num_preemptions_total') ?? 0;
  return n;
}
