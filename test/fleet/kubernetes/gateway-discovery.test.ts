/**
 * A real gateway routing to workers it found in an InferencePool: simulated workers on loopback
 * ports, named by the pool's target ports on a pod whose IP is 127.0.0.1, served by the
 * Kubernetes API stand-in (api-stand-in.ts; no API server runs here), beside a configured worker.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ConfigError, parseConfig } from '../../../src/config/index.js';
import { createGateway } from '../../../src/gateway/gateway.js';
import { startSimWorker, type SimWorker } from '../../../src/sim/worker/server.js';
import { createLogger } from '../../../src/telemetry/logger.js';
import { MODEL, configFor, post, startGateway, startSims, waitFor } from '../../gateway/helpers.js';
import { ApiStandIn, inferencePool, pod } from './api-stand-in.js';

let dir: string;
let sims: SimWorker[];
let api: ApiStandIn;
let kubeconfig: string;
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'kvgate-k8s-gw-'));
  sims = await startSims(3);
  api = new ApiStandIn();
  await api.start();
  kubeconfig = join(dir, 'kubeconfig');
  api.writeKubeconfig(kubeconfig, 'llm');
});
after(async () => {
  await api.stop();
  await Promise.all(sims.map((s) => s.close()));
  rmSync(dir, { recursive: true, force: true });
});

const portOf = (s: SimWorker) => Number(new URL(s.url).port);

async function workersSeen(url: string, n: number): Promise<Set<string>> {
  const seen = new Set<string>();
  for (let i = 0; i < n; i++) {
    const r = await post(`${url}/v1/completions`, { model: MODEL, prompt: `hello ${i}`, max_tokens: 2 });
    assert.equal(r.status, 200, r.text);
    seen.add(r.headers.get('x-kvgate-worker')!);
  }
  return seen;
}

describe('a gateway with kubernetes discovery', () => {
  it('routes to the pool endpoints beside its configured workers, and follows them as pods change', async () => {
    api.put('inferencepools', inferencePool('llama', { ports: [portOf(sims[0]!), portOf(sims[1]!)] }));
    api.put('pods', pod('vllm-0', { ip: '127.0.0.1' }));
    const { gw, url } = await startGateway([sims[2]!.url], {
      policy: { name: 'round-robin' },
      discovery: { kubernetes: { inferencePool: 'llama', kubeconfig, model: MODEL, pool: 'discovered' } },
    });
    try {
      const a = `vllm-0.llm:${portOf(sims[0]!)}`;
      const b = `vllm-0.llm:${portOf(sims[1]!)}`;
      await waitFor(() => gw.registry.workers.length === 3);
      assert.deepEqual([...(await workersSeen(url, 6))].sort(), [a, b, 'w0'].sort());
      assert.equal(gw.registry.get(a)!.pool, 'discovered');
      // The pod not ready: its endpoints leave routing; the configured worker serves alone.
      api.put('pods', pod('vllm-0', { ip: '127.0.0.1', ready: false }));
      await waitFor(() => gw.registry.workers.length === 1);
      assert.deepEqual([...(await workersSeen(url, 3))], ['w0']);
      // Ready again, narrowed to one port by its annotation.
      api.put('pods', pod('vllm-0', { ip: '127.0.0.1', annotations: { 'inference.networking.k8s.io/active-ports': String(portOf(sims[1]!)) } }));
      await waitFor(() => gw.registry.workers.length === 2);
      assert.deepEqual([...(await workersSeen(url, 4))].sort(), [b, 'w0'].sort());
      const status = (await fetch(`${url}/admin/discovery`).then((r) => r.json())) as { workers: string[] };
      assert.deepEqual(status.workers, [b]);
    } finally {
      await gw.close();
    }
  });

  it('starts with no configured worker at all, and stops watching when closed', async () => {
    api.put('inferencepools', inferencePool('llama', { ports: [portOf(sims[0]!)] }));
    api.put('pods', pod('vllm-0', { ip: '127.0.0.1' }));
    const watchesBefore = api.requests.watches.pods;
    const { gw, url } = await startGateway([], { discovery: { kubernetes: { inferencePool: 'llama', kubeconfig, model: MODEL } } });
    await waitFor(() => gw.registry.workers.length === 1);
    assert.deepEqual([...(await workersSeen(url, 2))], [`vllm-0.llm:${portOf(sims[0]!)}`]);
    // Its pool takes the InferencePool's name.
    assert.equal(gw.registry.workers[0]!.pool, 'llama');
    await gw.close();
    api.put('pods', pod('vllm-1', { ip: '127.0.0.1' }));
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(api.requests.watches.pods, watchesBefore + 1, 'no watch after close');
  });

  it('subscribes to the KV events of the pods it finds, and the prefix index learns from them', async () => {
    const sim = await startSimWorker({ port: 0, model: MODEL, speed: 100, kvEvents: { endpoint: 'tcp://127.0.0.1:0' } });
    const kvPort = Number(sim.kvEventsEndpoint!.split(':').at(-1));
    api.put('inferencepools', inferencePool('llama', { ports: [portOf(sim)] }));
    api.put('pods', pod('vllm-0', { ip: '127.0.0.1' }));
    api.delete('pods', 'llm', 'vllm-1');
    const { gw, url } = await startGateway([], { policy: { name: 'kvgate' }, discovery: { kubernetes: { inferencePool: 'llama', kubeconfig, model: MODEL, kvEvents: { port: kvPort } } } });
    try {
      const id = `vllm-0.llm:${portOf(sim)}`;
      await waitFor(() => gw.registry.workers.length === 1);
      const describe = async () => ((await (await fetch(`${url}/admin/workers`)).json()) as any[]).find((w) => w.id === id);
      // A ZeroMQ subscriber misses what is published before it has joined: ask again until it hears.
      let i = 0;
      await waitFor(async () => {
        const r = await post(`${url}/v1/completions`, { model: MODEL, prompt: `A long shared prefix for the cache ${i++}. `.repeat(40), max_tokens: 2 });
        assert.equal(r.status, 200, r.text);
        const d = await describe();
        return d?.kvEvents?.source === 'events' && d.kvEvents.batches > 0 && d.prefixIndex?.blocks > 0;
      });
    } finally {
      await gw.close();
      await sim.close();
    }
  });

  it('refuses a kubeconfig it cannot read, and a discovered pool named like a configured one', async () => {
    const config = configFor([], { discovery: { kubernetes: { inferencePool: 'llama', kubeconfig: join(dir, 'nope'), model: MODEL } } });
    // The client is loaded when the gateway starts, so that is when the kubeconfig is read.
    const gw = createGateway(config, { logger: createLogger({ level: 'silent' }) });
    await assert.rejects(gw.start(), (e: unknown) => e instanceof ConfigError && /discovery\.kubernetes\.kubeconfig: .*ENOENT/.test(e.message));
    await gw.close();
    assert.throws(
      () => configFor([sims[0]!.url], { discovery: { kubernetes: { inferencePool: 'main', model: MODEL } } }),
      /discovery\.kubernetes\.inferencePool: pool 'main' is also configured/,
    );
    assert.throws(() => parseConfig({ discovery: { kubernetes: { inferencePool: 'Bad_Name', model: MODEL } } }), /discovery\.kubernetes\.inferencePool: expected a Kubernetes object name/);
    assert.throws(() => parseConfig({}), /at least one worker is required \(in pools or workers, or discovery\)/);
  });
});
