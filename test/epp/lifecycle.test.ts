/**
 * The EPP as a process the proxy and Kubernetes see: its gRPC health services, its metrics port,
 * draining, and a restart under load (bounded: three loops of small requests on loopback).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ServingStatus } from '../../src/epp/descriptor.js';
import { checkHealth, proxyExchange, type ExtProcClient } from '../../src/epp/ext-proc-client.js';
import { createEpp } from '../../src/epp/epp.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { configFor } from '../gateway/helpers.js';
import { MODEL, startEpp, startSims, waitFor } from './helpers.js';

test('health services: liveness, readiness and the ext_proc service answer SERVING; readiness drops while draining', async () => {
  const sims = await startSims(1);
  const e = await startEpp(sims.map((s) => s.url), { shutdown: { drainDelayMs: 600, graceMs: 1000 } });
  try {
    for (const service of ['liveness', 'readiness', 'envoy.service.ext_proc.v3.ExternalProcessor', '']) {
      assert.equal(await checkHealth(e.health, service), ServingStatus.SERVING, service);
    }
    await assert.rejects(checkHealth(e.health, 'no.such.Service'), (err: { code?: number }) => err.code === 5);
    // The gateway's local routes on the metrics port, and nothing of its data path.
    const m = await fetch(`${e.metrics}/metrics`);
    assert.equal(m.status, 200);
    assert.match(await m.text(), /kvgate_epp_decision_seconds/);
    assert.equal((await fetch(`${e.metrics}/ready`)).status, 200);
    const data = await fetch(`${e.metrics}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    assert.equal(data.status, 404);
    const down = e.epp.shutdown();
    await waitFor(async () => (await checkHealth(e.health, 'readiness')) === ServingStatus.NOT_SERVING, 500);
    assert.equal(await checkHealth(e.health, 'envoy.service.ext_proc.v3.ExternalProcessor'), ServingStatus.NOT_SERVING);
    assert.equal(await checkHealth(e.health, 'liveness'), ServingStatus.SERVING, 'draining is not dying');
    await down;
    await assert.rejects(checkHealth(e.health, 'liveness', 1000));
  } finally {
    e.client.close();
    await e.epp.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});

test('the EPP restarted under load: requests during the gap fail fast, none hangs, the new process serves and holds nothing', async () => {
  const sims = await startSims(2);
  const first = await startEpp(sims.map((s) => s.url), { shutdown: { drainDelayMs: 0, graceMs: 2000 } });
  const port = first.epp.ports.extProc;
  const client: ExtProcClient = first.client;
  let stop = false;
  const results = { ok: 0, failed: 0, slowest: 0 };
  const body = (i: number) => Buffer.from(JSON.stringify({ model: MODEL, max_tokens: 3, messages: [{ role: 'user', content: `restart ${i}` }] }));
  const loop = async (k: number) => {
    for (let i = 0; !stop; i++) {
      const t = Date.now();
      try {
        const x = await proxyExchange(client, { path: '/v1/chat/completions', body: body(k * 1000 + i) });
        if (x.status === 200 && x.grpc.code === 0 && x.echoed.equals(x.upstream)) results.ok++;
        else results.failed++;
      } catch {
        results.failed++;
        await new Promise((r) => setTimeout(r, 50));
      }
      results.slowest = Math.max(results.slowest, Date.now() - t);
    }
  };
  let second: Awaited<ReturnType<typeof restart>> | null = null;
  const restart = async () => {
    const epp = createEpp(configFor(sims.map((s) => s.url), { epp: { listen: { host: '127.0.0.1', port }, healthPort: 0, metricsPort: 0 } }), { logger: createLogger({ level: 'silent' }) });
    await epp.start();
    return epp;
  };
  try {
    await waitFor(() => first.epp.registry.workers.every((w) => w.snapshot !== null));
    const loops = [0, 1, 2].map(loop);
    await waitFor(() => results.ok >= 15, 15_000);
    await first.epp.close();
    const okBefore = results.ok;
    second = await restart();
    await waitFor(() => results.ok >= okBefore + 15, 15_000);
    stop = true;
    await Promise.all(loops);
    assert.ok(results.slowest < 12_000, `a request took ${results.slowest} ms: none may hang`);
    assert.ok(results.ok >= okBefore + 15);
    await waitFor(() => second!.router.openCount === 0 && second!.registry.workers.every((w) => w.inflightCount === 0), 5_000);
    assert.equal(first.epp.router.openCount, 0, 'the old process released what it had picked');
  } finally {
    stop = true;
    client.close();
    await first.epp.close();
    await second?.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});
