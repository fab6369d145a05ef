/**
 * Hostile LoRA adapter names sent to /admin/adapters with the admin key (vLLM itself takes any
 * non-empty name): prototype keys, path traversal, newlines, bidi and zero-width marks, spaces,
 * over-long names. Every load and unload is refused with 400 before a worker is asked; a name a
 * worker lists behind the gateway's back is not routed; a well-formed name still loads.
 */
import { sleep, spawnSims, startGateway, Tally, type FaultScenario, type Outcome } from '../harness.js';

const ADMIN_KEY = 'sk-admin-fault-names';
const HOSTILE = ['__proto__', '../../etc/passwd', 'a/../b', 'org//name', './x', 'line\nbreak', 'crlf\r\nx-injected: 1', 'bidi\u202Egnp.exe', 'zero\u200Bwidth', ' lead', 'tab\tname', 'x'.repeat(129), '-dash', '', 'ünïcode'];

async function call(url: string, method: string, body?: unknown): Promise<Outcome> {
  const t0 = performance.now();
  const done = (kind: Outcome['kind'], detail: string, status: number): Outcome => ({ kind, detail, status, ms: performance.now() - t0, end: performance.now(), text: '' });
  try {
    const r = await fetch(url, {
      method,
      headers: { authorization: `Bearer ${ADMIN_KEY}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    const text = await r.text();
    if (r.status < 400) return done('ok', `${r.status}`, r.status);
    const e = (JSON.parse(text) as { error?: { code?: string; param?: string } }).error;
    return done('error', `${r.status} ${e?.code ?? '?'} (${e?.param ?? '-'})`, r.status);
  } catch (e) {
    return done('unanswered', (e as Error).message, 0);
  }
}

export const adminNames: FaultScenario = {
  name: 'admin-names',
  description: 'hostile LoRA adapter names (prototype keys, traversal, control and bidi characters) through /admin/adapters',
  async run() {
    const sims = await spawnSims(1, ['--runtime-lora']);
    const { gw, url } = await startGateway(sims.map((s) => s.url), { admin: { keys: [{ value: ADMIN_KEY }] }, health: { intervalMs: 200, modelsIntervalMs: 200 } } as never);
    try {
      const tally = new Tally();
      for (const name of HOSTILE) {
        tally.add(await call(url + '/admin/adapters', 'POST', { name, path: '/adapters/x', pool: 'main' }));
        if (name !== '') tally.add(await call(`${url}/admin/adapters?name=${encodeURIComponent(name)}`, 'DELETE'));
      }
      const refused = tally.byError.get('400 invalid_value (name)') ?? 0;
      const workerModels = async () => ((await (await fetch(sims[0]!.url + '/v1/models')).json()) as { data: Array<{ id: string }> }).data.map((m) => m.id);
      const reachedWorker = (await workerModels()).length - 1;
      // Loaded on the worker directly: listed there, never routed by the gateway.
      for (const name of ['__proto__', '../../etc/passwd', 'bidi\u202Egnp.exe']) {
        await fetch(sims[0]!.url + '/v1/load_lora_adapter', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ lora_name: name, lora_path: '/adapters/x' }) });
      }
      const good = await call(url + '/admin/adapters', 'POST', { name: 'org/sql-lora:v2', path: '/adapters/sql', pool: 'main' });
      await sleep(800);
      const routed = ['__proto__', '../../etc/passwd', 'bidi\u202Egnp.exe'].filter((n) => gw.registry.forModel(n) !== undefined);
      const ask = await fetch(url + '/v1/chat/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: '__proto__', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }),
      });
      await ask.text();
      return {
        tally,
        figures: {
          'hostile loads and unloads sent': tally.sent,
          'refused 400 (param name)': refused,
          'hostile names that reached the worker': reachedWorker,
          'hostile names listed by the worker, routed by the gateway': routed.length,
          'a chat request for model __proto__': ask.status,
          'well-formed org/sql-lora:v2 loaded': good.status,
        },
        checks: {
          'every hostile name refused with 400': refused === tally.sent,
          'none reached the worker': reachedWorker === 0,
          'none listed by the worker is routed': routed.length === 0,
          'model __proto__ is a 404': ask.status === 404,
          'a well-formed name loads': good.status === 200,
        },
      };
    } finally {
      await gw.close();
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
