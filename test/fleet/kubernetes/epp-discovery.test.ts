/**
 * `kvgate epp` picking among the endpoints of an InferencePool it watches: a real EPP on loopback
 * ports, driven by the proxy-side ext_proc client, the pool and its pod served by the Kubernetes
 * API stand-in (api-stand-in.ts; no API server runs here), simulated workers behind the pod's ports.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { createEpp } from '../../../src/epp/epp.js';
import { ExtProcClient, proxyExchange } from '../../../src/epp/ext-proc-client.js';
import { createLogger } from '../../../src/telemetry/logger.js';
import { configFor, MODEL, startSims, waitFor } from '../../gateway/helpers.js';
import { ApiStandIn, inferencePool, pod } from './api-stand-in.js';

test('kvgate epp picks among the ready endpoints of its InferencePool, and follows them', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-k8s-epp-'));
  const sims = await startSims(2);
  const api = new ApiStandIn();
  await api.start();
  const kubeconfig = join(dir, 'kubeconfig');
  api.writeKubeconfig(kubeconfig, 'llm');
  const ports = sims.map((s) => Number(new URL(s.url).port));
  api.put('inferencepools', inferencePool('llama', { ports }));
  api.put('pods', pod('vllm-0', { ip: '127.0.0.1' }));
  const epp = createEpp(
    configFor([], {
      policy: { name: 'round-robin' },
      epp: { listen: { host: '127.0.0.1', port: 0 }, healthPort: 0, metricsPort: 0 },
      discovery: { kubernetes: { inferencePool: 'llama', kubeconfig, model: MODEL } },
    }),
    { logger: createLogger({ level: 'silent' }) },
  );
  await epp.start();
  const client = new ExtProcClient(`127.0.0.1:${epp.ports.extProc}`);
  const ask = () => proxyExchange(client, { path: '/v1/completions', body: Buffer.from(JSON.stringify({ model: MODEL, prompt: 'hello', max_tokens: 2 })) });
  try {
    await waitFor(() => epp.registry.workers.length === 2);
    const picked = new Set<string>();
    for (let i = 0; i < 4; i++) {
      const x = await ask();
      assert.equal(x.status, 200);
      picked.add(x.answer.endpoint!);
    }
    assert.deepEqual([...picked].sort(), ports.map((p) => `127.0.0.1:${p}`).sort());
    // Narrowed to one port: only it is picked.
    api.put('pods', pod('vllm-0', { ip: '127.0.0.1', annotations: { 'inference.networking.k8s.io/active-ports': String(ports[1]) } }));
    await waitFor(() => epp.registry.workers.length === 1);
    for (let i = 0; i < 2; i++) assert.equal((await ask()).answer.endpoint, `127.0.0.1:${ports[1]}`);
    // Not ready: no endpoint, the proxy is told so (an ImmediateResponse, no pick).
    api.put('pods', pod('vllm-0', { ip: '127.0.0.1', ready: false }));
    await waitFor(() => epp.registry.workers.length === 0);
    const none = await ask();
    assert.equal(none.answer.endpoint, null);
    assert.ok(none.answer.immediate !== null && none.answer.immediate.status >= 400, JSON.stringify(none.answer.immediate));
  } finally {
    client.close();
    await epp.close();
    await api.stop();
    await Promise.all(sims.map((s) => s.close()));
    rmSync(dir, { recursive: true, force: true });
  }
});
