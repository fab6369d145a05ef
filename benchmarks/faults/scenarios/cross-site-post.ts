/**
 * What a web page can make a browser send without a preflight: POSTs with text/plain,
 * form-encoded and multipart bodies (here carrying a valid JSON generation request). Every one is
 * refused with 415 before the body is read; no worker starts a generation; no CORS header invites
 * the page to read an answer.
 *
 * Then the admin routes, on a gateway with no keys (nothing else in the way) and on one with an
 * admin key (the request carrying it, as a browser would replay one it holds): every admin route
 * and method, sent a simple form POST or marked cross-site by Origin / Sec-Fetch-Site, is refused
 * (415 or 403); no worker is drained, no adapter loaded, the cache not cleared.
 */
import type { RawConfig } from '../../../src/config/index.js';
import { ask, MODEL, spawnSims, startGateway, Tally, type FaultScenario, type Outcome } from '../harness.js';

const ATTACKER = 'https://attacker.example';
const FORM_TYPES = ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=----x'];
/** Every admin route and method that changes something or shows the fleet. */
const ADMIN: ReadonlyArray<readonly [string, string, string | undefined]> = [
  ['POST', '/admin/workers/w0/drain', '{}'],
  ['DELETE', '/admin/workers/w0/drain', undefined],
  ['POST', '/admin/adapters', JSON.stringify({ name: 'evil-lora', path: '/adapters/evil', pool: 'main' })],
  ['DELETE', '/admin/adapters?name=evil-lora', undefined],
  ['DELETE', '/admin/cache', undefined],
  ['GET', '/admin/workers', undefined],
  ['GET', '/admin/adapters', undefined],
  ['GET', '/admin/cache', undefined],
  ['GET', '/admin/config', undefined],
  ['GET', '/dashboard/state', undefined],
];
const CROSS_SITE: ReadonlyArray<Record<string, string>> = [{ origin: ATTACKER }, { 'sec-fetch-site': 'cross-site' }, { 'sec-fetch-site': 'same-site' }, { origin: 'null' }];

async function send(url: string, method: string, headers: Record<string, string>, body: string | undefined): Promise<Outcome> {
  const t0 = performance.now();
  const done = (kind: Outcome['kind'], detail: string, status: number): Outcome => ({ kind, detail, status, ms: performance.now() - t0, end: performance.now(), text: '' });
  try {
    const r = await fetch(url, { method, headers, body, signal: AbortSignal.timeout(10_000) });
    const text = await r.text();
    if (r.status < 400) return done('ok', `${method} ${new URL(url).pathname} served ${r.status}`, r.status);
    const code = (JSON.parse(text) as { error?: { code?: string } }).error?.code ?? '?';
    return done('error', `${r.status} ${code}`, r.status);
  } catch (e) {
    return done('unanswered', `${method} ${url}: ${(e as Error).message}`, 0);
  }
}

export const crossSitePost: FaultScenario = {
  name: 'cross-site-post',
  description: 'browser "simple" cross-site POSTs to inference and every admin route, with no keys and with an admin key',
  async run() {
    const sims = await spawnSims(1);
    const tally = new Tally();
    const figures: Record<string, number | string | boolean> = {};
    const checks: Record<string, boolean> = {};
    try {
      {
        const { gw, url } = await startGateway(sims.map((s) => s.url));
        try {
          const inference = new Tally();
          const body = JSON.stringify({ model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'exfiltrate' }] });
          let cors = 0;
          for (let i = 0; i < 60; i++) {
            const ct = FORM_TYPES[i % 3]!;
            inference.add(await ask(url, { raw: body, headers: { 'content-type': ct, origin: ATTACKER } }));
          }
          const pre = await fetch(url + '/v1/chat/completions', { method: 'OPTIONS', headers: { origin: ATTACKER, 'access-control-request-method': 'POST' } });
          if (pre.headers.get('access-control-allow-origin') !== null) cors++;
          const m = await (await fetch(sims[0]!.url + '/metrics')).text();
          let generations = 0;
          for (const x of m.matchAll(/vllm:request_success_total\{[^}]*\} (\d+)/g)) generations += Number(x[1]);
          tally.merge(inference);
          figures['inference posts: generations the worker ran'] = generations;
          figures['inference posts: CORS headers granted'] = cors;
          checks['every inference post refused with 415'] = inference.byError.get('415 unsupported_media_type') === inference.sent;
          checks['no generation ran'] = generations === 0;
          checks['no CORS grant'] = cors === 0;
        } finally {
          await gw.close();
        }
      }
      for (const mode of ['no keys', 'admin key'] as const) {
        const keyed = mode === 'admin key';
        const extra: Partial<RawConfig> = { cache: { enabled: true }, ...(keyed ? { admin: { keys: [{ value: 'sk-admin-fault-matrix' }] } } : {}) } as Partial<RawConfig>;
        const { gw, url } = await startGateway(sims.map((s) => s.url), extra);
        try {
          const admin = new Tally();
          const auth: Record<string, string> = keyed ? { authorization: 'Bearer sk-admin-fault-matrix' } : {};
          // Fill the cache with one answer, so a clearing would show.
          await ask(url, { headers: auth, body: { model: MODEL, max_tokens: 4, temperature: 0, messages: [{ role: 'user', content: 'cache me' }] } });
          const entries = async (): Promise<number> => ((await (await fetch(url + '/admin/cache', { headers: auth })).json()) as { entries: number }).entries;
          const cachedBefore = await entries();
          for (const [method, path, body] of ADMIN) {
            if (body !== undefined) for (const ct of FORM_TYPES) admin.add(await send(url + path, method, { ...auth, 'content-type': ct }, body));
            for (const h of CROSS_SITE) admin.add(await send(url + path, method, { ...auth, ...h, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) }, body));
          }
          const cachedAfter = await entries();
          const refused = (admin.byError.get('415 unsupported_media_type') ?? 0) + (admin.byError.get('403 cross_site_request') ?? 0);
          tally.merge(admin);
          figures[`admin (${mode}): requests / refused 415 / refused 403`] = `${admin.sent} / ${admin.byError.get('415 unsupported_media_type') ?? 0} / ${admin.byError.get('403 cross_site_request') ?? 0}`;
          figures[`admin (${mode}): cache entries before / after`] = `${cachedBefore} / ${cachedAfter}`;
          checks[`admin (${mode}): every cross-site request refused`] = refused === admin.sent;
          checks[`admin (${mode}): no worker drained`] = gw.registry.workers.every((w) => !w.draining);
          checks[`admin (${mode}): no adapter loaded`] = gw.registry.forModel('evil-lora') === undefined;
          checks[`admin (${mode}): cache not cleared`] = cachedBefore > 0 && cachedBefore === cachedAfter;
        } finally {
          await gw.close();
        }
      }
      return { tally, figures, checks };
    } finally {
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
