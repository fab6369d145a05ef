/**
 * /metrics lists every tenant with its token counts. With keys configured, reading it without a
 * key, with a wrong one or with a tenant's key is refused (401 / 403) and shows no tenant id; the
 * admin key and the metrics key (admin.metricsKeys, the scrape token) read it; the metrics key
 * opens no admin route.
 */
import { ask, MODEL, spawnSims, startGateway, Tally, type FaultScenario, type Outcome } from '../harness.js';

const KEYS = { tenant: 'sk-metrics-tenant-01', admin: 'sk-metrics-admin-001', scrape: 'sk-metrics-scrape-01' };

async function get(url: string, key: string | undefined): Promise<Outcome & { body: string }> {
  const t0 = performance.now();
  try {
    const r = await fetch(url, { headers: key === undefined ? {} : { authorization: `Bearer ${key}` }, signal: AbortSignal.timeout(10_000) });
    const body = await r.text();
    const code = r.status < 400 ? '' : ((JSON.parse(body) as { error?: { code?: string } }).error?.code ?? '?');
    return { kind: r.status < 400 ? 'ok' : 'error', detail: `${r.status} ${code}`.trim(), status: r.status, ms: performance.now() - t0, end: performance.now(), text: '', body };
  } catch (e) {
    return { kind: 'unanswered', detail: (e as Error).message, status: 0, ms: performance.now() - t0, end: performance.now(), text: '', body: '' };
  }
}

export const metricsAuth: FaultScenario = {
  name: 'metrics-auth',
  description: '/metrics read without a key, with a wrong key or a tenant\'s key, once keys are configured',
  async run() {
    const sims = await spawnSims(1);
    const { gw, url } = await startGateway(sims.map((s) => s.url), {
      tenants: [{ id: 'acme-secret-tenant', keys: [{ value: KEYS.tenant }] }],
      admin: { keys: [{ value: KEYS.admin }], metricsKeys: [{ value: KEYS.scrape }] },
    } as never);
    try {
      // One request, so the tenant appears in the series.
      await ask(url, { headers: { authorization: `Bearer ${KEYS.tenant}` }, body: { model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] } });
      const probes = new Tally();
      let leaked = 0;
      for (const key of [undefined, 'sk-wrong-key-000001', KEYS.tenant, 'Basic ' + Buffer.from(`x:${KEYS.admin}`).toString('base64')]) {
        for (let i = 0; i < 5; i++) {
          const r = await get(url + '/metrics', key);
          probes.add(r);
          if (r.body.includes('acme-secret-tenant')) leaked++;
        }
      }
      const admin = await get(url + '/metrics', KEYS.admin);
      const scrape = await get(url + '/metrics', KEYS.scrape);
      const scrapeAdmin = await get(url + '/admin/workers', KEYS.scrape);
      const refused = (probes.byError.get('401 invalid_api_key') ?? 0) + (probes.byError.get('403 permission_denied') ?? 0);
      return {
        tally: probes,
        figures: {
          'reads without a valid key / refused (401, 403)': `${probes.sent} / ${refused}`,
          'refusals that named a tenant': leaked,
          'admin key / metrics key': `${admin.status} / ${scrape.status}`,
          'metrics key on /admin/workers': scrapeAdmin.status,
        },
        checks: {
          'every read without an admin or metrics key refused': refused === probes.sent,
          'no refusal shows a tenant id': leaked === 0,
          'the admin and metrics keys read the tenant series': admin.body.includes('acme-secret-tenant') && scrape.body.includes('acme-secret-tenant'),
          'the metrics key opens no admin route': scrapeAdmin.status === 401,
        },
      };
    } finally {
      await gw.close();
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
