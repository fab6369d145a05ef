/**
 * A tenant probing whether another tenant's prompt is cached, through every channel the issue
 * found: x-kvgate-prefix-hit, routing towards the victim's worker, usage cached_tokens and time to
 * first token. With cacheIsolation: tenant and routing headers off (the defaults for headers), the
 * probe learns nothing: no header, no cached token, the same TTFT as an unseen prompt.
 */
import { ask, MODEL, quantile, spawnSims, startGateway, Tally, type FaultScenario } from '../harness.js';

/** The victim's i-th confidential system prompt; `variant` changes its first characters (a prompt nobody sent). */
const secret = (i: number, variant = '') => `${variant}${i}. You are the assistant of Victim Inc. Confidential pricing: plan A costs ${41 + i} dollars. `.repeat(30);

export const crossTenantProbe: FaultScenario = {
  name: 'cross-tenant-probe',
  description: 'tenant B probes tenant A’s cached system prompt (headers, cached_tokens, TTFT)',
  async run() {
    const sims = await spawnSims(3);
    const { url } = await startGateway([], {
      pools: [{ name: 'main', model: MODEL, cacheIsolation: 'tenant', workers: sims.map((s, i) => ({ url: s.url, id: `w${i}` })) }],
      tenants: [
        { id: 'victim', keys: [{ value: 'sk-victim-0001' }] },
        { id: 'prober', keys: [{ value: 'sk-prober-0001' }] },
      ],
      cacheSalt: { secret: { value: 'fault-matrix-secret' } },
    });
    try {
      const tally = new Tally();
      const req = (system: string, key: string) => ({
        body: { model: MODEL, stream: true, max_tokens: 1, stream_options: { include_usage: true }, messages: [{ role: 'system', content: system }, { role: 'user', content: 'hello' }] },
        headers: { authorization: `Bearer ${key}` },
      });
      // The victim warms ten confidential prompts on the workers.
      for (let i = 0; i < 10; i++) for (let k = 0; k < 2; k++) tally.add(await ask(url, req(secret(i), 'sk-victim-0001')));
      const probe: number[] = [];
      const control: number[] = [];
      let headers = 0;
      let cached = 0;
      // The prober sends each once (its first time: its own cache cannot answer), and as many
      // prompts nobody sent, and compares.
      for (let i = 0; i < 10; i++) {
        for (const [system, out] of [[secret(i), probe], [secret(i, 'Unseen '), control]] as const) {
          const r0 = req(system, 'sk-prober-0001');
          const t0 = performance.now();
          const r = await fetch(url + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json', ...r0.headers }, body: JSON.stringify(r0.body) });
          const reader = r.body!.getReader();
          let text = new TextDecoder().decode((await reader.read()).value);
          out.push(performance.now() - t0);
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            text += new TextDecoder().decode(value);
          }
          if (r.headers.get('x-kvgate-prefix-hit') !== null || r.headers.get('x-kvgate-worker') !== null) headers++;
          const m = /"cached_tokens":(\d+)/.exec(text);
          if (out === probe && m) cached += Number(m[1]);
          tally.add({ kind: text.includes('[DONE]') ? 'ok' : 'unanswered', detail: 'probe', status: r.status, ms: 0, end: performance.now(), text: '' });
        }
      }
      return {
        tally,
        figures: {
          'routing headers the prober saw': headers,
          'cached tokens reported to the prober for the victim’s prompt': cached,
          'prober time to first chunk p50, victim’s prompts vs unseen ones (ms)': `${quantile(probe, 0.5).toFixed(1)} vs ${quantile(control, 0.5).toFixed(1)}`,
        },
        checks: { 'no routing header': headers === 0, 'no cached token of the victim’s': cached === 0 },
      };
    } finally {
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
