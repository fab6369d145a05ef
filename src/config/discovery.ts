/**
 * The `discovery` section resolved for the gateway: where to watch, and what each discovered
 * worker inherits (its pool's model, adapters, credentials read now from the environment or
 * files, as configured workers' are in workers.ts).
 */
import type { z } from 'zod';
import type { KubernetesDiscoveryConfig } from '../fleet/kubernetes/discovery.js';
import { discoveredPoolName, type discoverySection } from './schema/discovery.js';
import type { PoolSettings } from './types.js';
import { upstreamHeaders } from './workers.js';

export interface DiscoveryConfig {
  kubernetes: KubernetesDiscoveryConfig | null;
}

/** Resolve the section; the discovered pool's settings go into `pools`, secrets' problems into `problems`. */
export function resolveDiscovery(d: z.output<typeof discoverySection>, pools: Map<string, PoolSettings>, env: NodeJS.ProcessEnv, problems: string[]): DiscoveryConfig {
  const k = d.kubernetes;
  if (!k) return { kubernetes: null };
  const path = ['discovery', 'kubernetes'];
  const name = discoveredPoolName(k);
  pools.set(name, { cacheIsolation: k.cacheIsolation, caps: k.caps ?? {} });
  const headers = upstreamHeaders({}, k, path, path, env, problems);
  return {
    kubernetes: {
      ...(k.namespace !== undefined ? { namespace: k.namespace } : {}),
      inferencePool: k.inferencePool,
      ...(k.kubeconfig !== undefined ? { kubeconfig: k.kubeconfig } : {}),
      ...(k.kvEvents !== undefined ? { kvEvents: k.kvEvents } : {}),
      template: {
        pool: name,
        model: k.model,
        ...(k.adapters.length > 0 ? { adapters: k.adapters } : {}),
        discoverAdapters: k.discoverAdapters,
        ...(k.resolveAdapters !== undefined ? { resolveAdapters: k.resolveAdapters } : {}),
        numGpuBlocks: k.numGpuBlocks,
        blockSize: k.blockSize,
        upstreamHeaders: headers,
      },
    },
  };
}
