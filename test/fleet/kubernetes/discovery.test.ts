/**
 * Workers from an InferencePool, watched through @kubernetes/client-node against a stand-in for
 * the Kubernetes API server (api-stand-in.ts: a loopback HTTP server speaking list+watch, since no
 * API server runs here): pods that come, become ready, go; the pool's selector and ports
 * changing; watches dropped, expired (410) and the server gone.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import { KubernetesDiscovery, loadKubeConfig, type DiscoveredKvEvents, type KubernetesDiscoveryConfig } from '../../../src/fleet/kubernetes/discovery.js';
import type { WorkerIdentity } from '../../../src/fleet/worker-state.js';
import { createLogger } from '../../../src/telemetry/logger.js';
import { waitFor } from '../../support.js';
import { ApiStandIn, inferencePool, pod } from './api-stand-in.js';

let dir: string;
before(() => {
  dir = mkdtempSync(join(tmpdir(), 'kvgate-k8s-'));
});
after(() => rmSync(dir, { recursive: true, force: true }));

const TEMPLATE = { pool: 'llama', model: 'llama-3.1-8b' };

interface Running {
  api: ApiStandIn;
  disc: KubernetesDiscovery;
  /** Every worker set applied, in order. */
  applied: WorkerIdentity[][];
  /** The KV-event sockets given with each. */
  kv: DiscoveredKvEvents[][];
  lines: any[];
  ids(): string[];
}

let running: Running | null = null;
let n = 0;

async function start(setup: (api: ApiStandIn) => void, opts: { namespace?: string; kvEvents?: KubernetesDiscoveryConfig['kvEvents'] } = {}): Promise<Running> {
  const api = new ApiStandIn();
  await api.start();
  setup(api);
  const file = join(dir, `kubeconfig-${n++}`);
  api.writeKubeconfig(file, 'llm');
  const lines: any[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l));
      cb();
    },
  });
  const applied: WorkerIdentity[][] = [];
  const kv: DiscoveredKvEvents[][] = [];
  const disc = new KubernetesDiscovery({
    config: { ...(opts.namespace ? { namespace: opts.namespace } : {}), ...(opts.kvEvents ? { kvEvents: opts.kvEvents } : {}), inferencePool: 'llama', kubeconfig: file, template: TEMPLATE },
    kubeConfig: loadKubeConfig(file),
    logger: createLogger({ level: 'info', destination: sink }),
    apply: (ws, k) => {
      applied.push(ws);
      kv.push(k);
    },
    timings: { minBackoffMs: 50, maxBackoffMs: 200, watchTimeoutSeconds: 60 },
  });
  disc.start();
  running = {
    api,
    disc,
    applied,
    kv,
    lines,
    ids: () => (applied.at(-1) ?? []).map((w) => `${w.id} ${w.url}`).sort(),
  };
  return running;
}

beforeEach(() => {
  running = null;
});
afterEach(async () => {
  running?.disc.close();
  await running?.api.stop();
});

const same = (r: Running, want: string[]) => () => JSON.stringify(r.ids()) === JSON.stringify([...want].sort());

describe('kubernetes discovery', () => {
  it('reads the namespace from the kubeconfig context and gives one worker per ready pod and target port', async () => {
    const r = await start((api) => {
      api.put('inferencepools', inferencePool('llama', { ports: [8000, 8001] }));
      api.put('pods', pod('vllm-0', { ip: '10.0.0.1' }));
      api.put('pods', pod('vllm-1', { ip: '10.0.0.2', ready: false }));
      api.put('pods', pod('other-0', { ip: '10.0.0.3', labels: { app: 'other' } }));
      api.put('pods', pod('vllm-9', { ip: '10.0.0.9', namespace: 'elsewhere' }));
    });
    await waitFor(same(r, ['vllm-0.llm:8000 http://10.0.0.1:8000', 'vllm-0.llm:8001 http://10.0.0.1:8001']));
    assert.equal(r.disc.namespace, 'llm');
    const w = r.applied.at(-1)![0]!;
    assert.equal(w.pool, 'llama');
    assert.equal(w.model, 'llama-3.1-8b');
    // One list of each, then watches: nothing applied before both were listed.
    assert.equal(r.applied.length, 1);
  });

  it('follows pods as they are added, become ready, are being deleted and are deleted', async () => {
    const r = await start((api) => {
      api.put('inferencepools', inferencePool('llama', { ports: [8000] }));
      api.put('pods', pod('vllm-0', { ip: '10.0.0.1' }));
    });
    await waitFor(same(r, ['vllm-0.llm:8000 http://10.0.0.1:8000']));
    // Added but not ready, then scheduled without an IP yet: left out.
    r.api.put('pods', pod('vllm-1', { ready: false }));
    r.api.put('pods', pod('vllm-1', { ip: '10.0.0.2', ready: false }));
    r.api.put('pods', pod('vllm-1', { ip: '10.0.0.2', ready: true }));
    await waitFor(same(r, ['vllm-0.llm:8000 http://10.0.0.1:8000', 'vllm-1.llm:8000 http://10.0.0.2:8000']));
    // Ready no more: out; ready again: back under the same id.
    r.api.put('pods', pod('vllm-1', { ip: '10.0.0.2', ready: false }));
    await waitFor(same(r, ['vllm-0.llm:8000 http://10.0.0.1:8000']));
    r.api.put('pods', pod('vllm-1', { ip: '10.0.0.2' }));
    await waitFor(same(r, ['vllm-0.llm:8000 http://10.0.0.1:8000', 'vllm-1.llm:8000 http://10.0.0.2:8000']));
    // Terminating (deletionTimestamp set, still Ready): out at once, as GIE's IsPodReady says.
    r.api.put('pods', pod('vllm-0', { ip: '10.0.0.1', deleting: true }));
    await waitFor(same(r, ['vllm-1.llm:8000 http://10.0.0.2:8000']));
    r.api.delete('pods', 'llm', 'vllm-0');
    r.api.delete('pods', 'llm', 'vllm-1');
    await waitFor(same(r, []));
    // Restarted with a new IP (a StatefulSet pod): same id, new URL.
    r.api.put('pods', pod('vllm-1', { ip: '10.0.0.7' }));
    await waitFor(same(r, ['vllm-1.llm:8000 http://10.0.0.7:8000']));
  });

  it('follows a change of the pool: its selector, its target ports, a pod narrowed by active-ports, the pool deleted', async () => {
    const r = await start((api) => {
      api.put('inferencepools', inferencePool('llama', { ports: [8000] }));
      api.put('pods', pod('a-0', { ip: '10.0.0.1', labels: { app: 'vllm', tier: 'a' } }));
      api.put('pods', pod('b-0', { ip: '10.0.0.2', labels: { app: 'vllm', tier: 'b' } }));
    });
    await waitFor(same(r, ['a-0.llm:8000 http://10.0.0.1:8000', 'b-0.llm:8000 http://10.0.0.2:8000']));
    r.api.put('inferencepools', inferencePool('llama', { ports: [8000], matchLabels: { app: 'vllm', tier: 'b' } }));
    await waitFor(same(r, ['b-0.llm:8000 http://10.0.0.2:8000']));
    r.api.put('inferencepools', inferencePool('llama', { ports: [9000, 9001], matchLabels: { tier: 'a' } }));
    await waitFor(same(r, ['a-0.llm:9000 http://10.0.0.1:9000', 'a-0.llm:9001 http://10.0.0.1:9001']));
    r.api.put('pods', pod('a-0', { ip: '10.0.0.1', labels: { app: 'vllm', tier: 'a' }, annotations: { 'inference.networking.k8s.io/active-ports': '9001' } }));
    await waitFor(same(r, ['a-0.llm:9001 http://10.0.0.1:9001']));
    // Another pool of the namespace is not watched.
    r.api.put('inferencepools', inferencePool('mistral', { ports: [7000], matchLabels: { tier: 'b' } }));
    r.api.delete('inferencepools', 'llm', 'llama');
    await waitFor(same(r, []));
    await waitFor(() => r.lines.some((l) => /InferencePool llm\/llama not found/.test(l.msg)));
    r.api.put('inferencepools', inferencePool('llama', { ports: [8000], matchLabels: { tier: 'b' } }));
    await waitFor(same(r, ['b-0.llm:8000 http://10.0.0.2:8000']));
  });

  it('resumes a dropped watch from the last version seen, without listing again', async () => {
    const r = await start((api) => {
      api.put('inferencepools', inferencePool('llama', { ports: [8000] }));
      api.put('pods', pod('vllm-0', { ip: '10.0.0.1' }));
    });
    await waitFor(same(r, ['vllm-0.llm:8000 http://10.0.0.1:8000']));
    await waitFor(() => r.api.requests.watches.pods === 1 && r.api.requests.watches.inferencepools === 1);
    r.api.bookmark();
    r.api.dropWatches();
    r.api.put('pods', pod('vllm-1', { ip: '10.0.0.2' }));
    await waitFor(same(r, ['vllm-0.llm:8000 http://10.0.0.1:8000', 'vllm-1.llm:8000 http://10.0.0.2:8000']));
    assert.equal(r.api.requests.watches.pods, 2);
    assert.deepEqual(r.api.requests.lists, { pods: 1, inferencepools: 1 });
    // The second watch started from the version the first had reached (not 0, not the list's).
    const [first, second] = r.api.requests.watchFrom.filter((w) => w.startsWith('pods@'));
    assert.ok(Number(second!.slice(5)) >= Number(first!.slice(5)));
    assert.notEqual(second, 'pods@0');
  });

  it('lists again when its version has expired (410 Gone), and sees what changed meanwhile', async () => {
    const r = await start((api) => {
      api.put('inferencepools', inferencePool('llama', { ports: [8000] }));
      api.put('pods', pod('vllm-0', { ip: '10.0.0.1' }));
      api.put('pods', pod('vllm-1', { ip: '10.0.0.2' }));
    });
    await waitFor(same(r, ['vllm-0.llm:8000 http://10.0.0.1:8000', 'vllm-1.llm:8000 http://10.0.0.2:8000']));
    const port = r.api.port;
    await r.api.stop();
    // While it is away: changes, then the history compacted.
    r.api.delete('pods', 'llm', 'vllm-0');
    r.api.put('pods', pod('vllm-2', { ip: '10.0.0.3' }));
    r.api.compact();
    await r.api.start(port);
    await waitFor(same(r, ['vllm-1.llm:8000 http://10.0.0.2:8000', 'vllm-2.llm:8000 http://10.0.0.3:8000']));
    assert.equal(r.api.requests.lists.pods, 2);
  });

  it('keeps the workers last known while the API server is out of reach, logs it, and catches up when it is back', async () => {
    const r = await start((api) => {
      api.put('inferencepools', inferencePool('llama', { ports: [8000] }));
      api.put('pods', pod('vllm-0', { ip: '10.0.0.1' }));
    });
    await waitFor(same(r, ['vllm-0.llm:8000 http://10.0.0.1:8000']));
    const port = r.api.port;
    const appliedBefore = r.applied.length;
    await r.api.stop();
    await waitFor(() => r.lines.filter((l) => l.level === 40 && /cannot list or watch pods; the 1 workers last known stay/.test(l.msg)).length >= 2);
    assert.equal(r.applied.length, appliedBefore, 'nothing applied while the server is away');
    assert.ok(r.disc.status().watches !== undefined);
    r.api.put('pods', pod('vllm-1', { ip: '10.0.0.2' }));
    await r.api.start(port);
    await waitFor(same(r, ['vllm-0.llm:8000 http://10.0.0.1:8000', 'vllm-1.llm:8000 http://10.0.0.2:8000']));
  });

  it('gives no workers, and says why, for a pool that does not exist, and starts when it is created', async () => {
    const r = await start((api) => {
      api.put('pods', pod('vllm-0', { ip: '10.0.0.1' }));
    });
    await waitFor(() => r.lines.some((l) => l.level === 40 && /InferencePool llm\/llama not found; no workers from it/.test(l.msg)));
    r.api.put('inferencepools', inferencePool('llama', { ports: [8000] }));
    await waitFor(same(r, ['vllm-0.llm:8000 http://10.0.0.1:8000']));
  });

  it('gives each endpoint its KV-event sockets on its pod, offset by its target port\'s place', async () => {
    const r = await start(
      (api) => {
        api.put('inferencepools', inferencePool('llama', { ports: [8000, 8001] }));
        api.put('pods', pod('vllm-0', { ip: '10.0.0.1' }));
      },
      { kvEvents: { port: 5557, replayPort: 5558 } },
    );
    await waitFor(() => r.applied.length === 1);
    assert.deepEqual(r.kv[0], [
      { workerId: 'vllm-0.llm:8000', endpoint: 'tcp://10.0.0.1:5557', replayEndpoint: 'tcp://10.0.0.1:5558' },
      { workerId: 'vllm-0.llm:8001', endpoint: 'tcp://10.0.0.1:5558', replayEndpoint: 'tcp://10.0.0.1:5559' },
    ]);
    // A new IP for the pod (restarted): new sockets too.
    r.api.put('pods', pod('vllm-0', { ip: '10.0.0.9' }));
    await waitFor(() => r.applied.length === 2);
    assert.equal(r.kv[1]![0]!.endpoint, 'tcp://10.0.0.9:5557');
  });

  it('watches the namespace the config names over the context one', async () => {
    const r = await start(
      (api) => {
        api.put('inferencepools', inferencePool('llama', { namespace: 'prod', ports: [8000] }));
        api.put('pods', pod('vllm-0', { ip: '10.0.0.1', namespace: 'prod' }));
        api.put('pods', pod('vllm-0', { ip: '10.0.0.5' }));
      },
      { namespace: 'prod' },
    );
    await waitFor(same(r, ['vllm-0.prod:8000 http://10.0.0.1:8000']));
  });
});

describe('loadKubeConfig', () => {
  it('refuses a kubeconfig file that is not there', () => {
    assert.throws(() => loadKubeConfig(join(dir, 'missing')), /ENOENT/);
  });
});
