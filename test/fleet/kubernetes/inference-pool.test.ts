/** An InferencePool's endpoints read from its pods, as the Gateway API Inference Extension reads them. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { hostPort, poolEndpoints, poolSelection, podReady, type PoolSelection } from '../../../src/fleet/kubernetes/inference-pool.js';
import { inferencePool, pod } from './api-stand-in.js';

const sel = (o: Parameters<typeof inferencePool>[1]): PoolSelection => {
  const s = poolSelection(inferencePool('p', o));
  assert.ok(!('problem' in s));
  return s;
};

describe('InferencePool endpoints', () => {
  it('are every matching ready pod with an IP, times every target port, in a stable order', () => {
    const s = sel({ ports: [8001, 8000], matchLabels: { app: 'vllm', model: 'llama' } });
    const pods = [
      pod('b', { ip: '10.0.0.2', labels: { app: 'vllm', model: 'llama', extra: 'x' } }),
      pod('a', { ip: '10.0.0.1', labels: { app: 'vllm', model: 'llama' } }),
      pod('c', { ip: '10.0.0.3', labels: { app: 'vllm' } }),
      pod('d', { labels: { app: 'vllm', model: 'llama' } }),
    ];
    assert.deepEqual(
      poolEndpoints(s, pods as never).map((e) => `${e.pod} ${hostPort(e.ip, e.port)}`),
      ['a 10.0.0.1:8000', 'a 10.0.0.1:8001', 'b 10.0.0.2:8000', 'b 10.0.0.2:8001'],
    );
  });

  it('writes an IPv6 pod address in brackets', () => {
    const [e] = poolEndpoints(sel({ ports: [8000] }), [pod('a', { ip: 'fd00::1' })] as never);
    assert.equal(hostPort(e!.ip, e!.port), '[fd00::1]:8000');
  });

  it('takes a pod for ready only with condition Ready=True and no deletion under way', () => {
    assert.equal(podReady(pod('a', { ip: '10.0.0.1' }) as never), true);
    assert.equal(podReady(pod('a', { ip: '10.0.0.1', ready: false }) as never), false);
    assert.equal(podReady(pod('a', { ip: '10.0.0.1', deleting: true }) as never), false);
    assert.equal(podReady({ metadata: { name: 'a' }, status: { conditions: [] } }), false);
  });

  it('keeps only the target ports a pod names in its active-ports annotation', () => {
    const p = pod('a', { ip: '10.0.0.1', annotations: { 'inference.networking.k8s.io/active-ports': ' 8001 ,9999,x' } });
    assert.deepEqual(poolEndpoints(sel({ ports: [8000, 8001] }), [p] as never).map((e) => e.port), [8001]);
  });

  it('selects nothing, with a reason, for an empty selector or no port', () => {
    assert.deepEqual(poolSelection({ spec: { selector: { matchLabels: {} }, targetPorts: [{ number: 8000 }] } }), { problem: 'spec.selector.matchLabels is empty' });
    assert.deepEqual(poolSelection({ spec: { selector: { matchLabels: { a: 'b' } }, targetPorts: [] } }), { problem: 'spec.targetPorts names no port' });
  });
});
