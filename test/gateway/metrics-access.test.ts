/**
 * /metrics names every tenant and counts its tokens: once any key is configured it needs an admin
 * key or a metrics key (admin.metricsKeys, which opens nothing else), unless admin.openMetrics.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODEL, post, startGateway, startSims } from './helpers.js';

const TENANT = { id: 'acme', keys: [{ value: 'sk-tenant-acme' }] };
const get = async (url: string, key?: string) => {
  const r = await fetch(url, { headers: key === undefined ? {} : { authorization: `Bearer ${key}` } });
  const text = await r.text();
  return { status: r.status, text };
};

test('/metrics needs an admin or a metrics key once keys are configured; a metrics key opens nothing else', async () => {
  const sims = await startSims(1);
  const { gw, url } = await startGateway([sims[0]!.url], {
    tenants: [TENANT],
    admin: { keys: [{ value: 'sk-admin-metrics' }], metricsKeys: [{ value: 'sk-scrape-token' }], openMetrics: false },
  } as never);
  try {
    const r = await post(url + '/v1/chat/completions', { model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }, { authorization: 'Bearer sk-tenant-acme' });
    assert.equal(r.status, 200, r.text);
    const open = await get(url + '/metrics');
    assert.equal(open.status, 401);
    assert.equal(JSON.parse(open.text).error.code, 'invalid_api_key');
    assert.doesNotMatch(open.text, /acme/);
    assert.equal((await get(url + '/metrics', 'sk-wrong')).status, 401);
    assert.equal((await get(url + '/metrics', 'sk-tenant-acme')).status, 403);
    for (const key of ['sk-admin-metrics', 'sk-scrape-token']) {
      const ok = await get(url + '/metrics', key);
      assert.equal(ok.status, 200, key);
      assert.match(ok.text, /kvgate_prompt_tokens_total\{[^}]*tenant="acme"/);
    }
    assert.equal((await get(url + '/admin/workers', 'sk-scrape-token')).status, 401, 'the metrics key is not an admin key');
    assert.equal((await get(url + '/admin/workers', 'sk-admin-metrics')).status, 200);
    assert.equal((await get(url + '/health')).status, 200);
  } finally {
    await gw.close();
    for (const s of sims) await s.close();
  }
});

test('/metrics: open with no keys at all or with admin.openMetrics; a metrics key alone closes it', async () => {
  const sims = await startSims(1);
  try {
    for (const [extra, anon, withToken] of [
      [{ admin: { openMetrics: false } }, 200, 200],
      [{ tenants: [TENANT], admin: { openMetrics: true } }, 200, 200],
      [{ admin: { metricsKeys: [{ value: 'sk-scrape-token' }], openMetrics: false } }, 401, 200],
    ] as const) {
      const { gw, url } = await startGateway([sims[0]!.url], extra as never);
      try {
        assert.equal((await get(url + '/metrics')).status, anon, JSON.stringify(extra));
        assert.equal((await get(url + '/metrics', 'sk-scrape-token')).status, withToken, JSON.stringify(extra));
      } finally {
        await gw.close();
      }
    }
  } finally {
    for (const s of sims) await s.close();
  }
});
