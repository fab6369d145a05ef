/**
 * Admission through the EPP: priorities from the tenant's key, and a sheddable request refused
 * where its worker already has too much prefill waiting — while a request of a higher class is
 * still picked there.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODEL, startEpp, startSims, waitFor } from './helpers.js';

test('a sheddable request meets a worker with prefill waiting: refused with the saturated reason; a standard one is picked', async () => {
  const sims = await startSims(1);
  const e = await startEpp(sims.map((s) => s.url), {
    tenants: [
      { id: 'app', keys: [{ value: 'sk-app-key-1' }], priority: 'standard' },
      { id: 'batch', keys: [{ value: 'sk-batch-key-1' }], priority: 'sheddable' },
    ],
    admission: { thresholds: { prefillBacklogTokens: 500 } },
  });
  try {
    await waitFor(() => e.epp.registry.workers.every((w) => w.snapshot !== null));
    const open = (key: string, content: string) => {
      const s = e.client.open();
      s.requestHeaders({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json', authorization: `Bearer ${key}` });
      s.requestBody(Buffer.from(JSON.stringify({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content }] })));
      return s;
    };
    // A long prompt picked and not yet answered: its prefill waits at the only worker.
    const long = open('sk-app-key-1', 'Summarise the maintenance log of pump station seven. '.repeat(120));
    const held = await long.readAnswer();
    assert.ok(held.endpoint);
    const shed = open('sk-batch-key-1', 'A short question.');
    const refused = await shed.readAnswer();
    assert.equal(refused.immediate?.status, 503);
    assert.equal(refused.immediate.headers['x-kvgate-request-dropped-reason'], 'rejected-saturated');
    assert.equal(JSON.parse(refused.immediate.body.toString()).error.code, 'overloaded');
    assert.ok(Number(refused.immediate.headers['retry-after']) >= 1);
    const standard = open('sk-app-key-1', 'A short question.');
    assert.equal((await standard.readAnswer()).endpoint, held.endpoint, 'a standard request is not shed');
    standard.cancel();
    long.cancel();
    await waitFor(() => e.epp.router.openCount === 0, 5_000);
    const again = open('sk-batch-key-1', 'A short question.');
    assert.equal((await again.readAnswer()).endpoint, held.endpoint, 'with the backlog gone the sheddable request is picked');
    again.cancel();
    await waitFor(() => e.epp.router.openCount === 0, 5_000);
  } finally {
    await e.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});
