/**
 * `discovery`: workers found rather than listed. `kubernetes`: the endpoints of a Gateway API
 * Inference Extension InferencePool (its selector's ready pods × its target ports), watched
 * (src/fleet/kubernetes/). They form a pool of their own, with a pool's fields (model, adapters,
 * caps, credentials) given here, and join the configured workers in routing.
 */
import { z } from 'zod';
import { pool } from './pools-workers.js';

/** A Kubernetes object name (DNS-1123 subdomain) or namespace (DNS-1123 label). */
const dnsSubdomain = z
  .string()
  .max(253)
  .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/, 'expected a Kubernetes object name (lower-case letters, digits, - and .)');
const dnsLabel = z
  .string()
  .max(63)
  .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, 'expected a Kubernetes namespace (lower-case letters, digits and -)');

export const kubernetesDiscovery = pool
  .omit({ name: true, workers: true })
  .extend({
    /** The InferencePool's namespace (its pods are in it too). Default: the namespace kvgate runs in (in a cluster), else the kubeconfig context's, else `default`. */
    namespace: dnsLabel.optional(),
    /** The InferencePool's name (inference.networking.k8s.io/v1). */
    inferencePool: dnsSubdomain,
    /** A kubeconfig file. Default: the service account kvgate runs under (in a cluster), else KUBECONFIG or ~/.kube/config. */
    kubeconfig: z.string().min(1).optional(),
    /** The kvgate pool the endpoints form (names metric series, caps, cascades). Default: the InferencePool's name. */
    pool: z.string().min(1).optional(),
    /**
     * The pods publish KV-cache events (vLLM --kv-events-config with endpoint tcp://*:PORT): each
     * endpoint's at tcp://podIP:port (and its replay socket at replayPort). With several target
     * ports, the n-th (from 0, in the pool's order) publishes at port + n, replayPort + n.
     */
    kvEvents: z
      .strictObject({
        port: z.int().min(1).max(65535),
        replayPort: z.int().min(1).max(65535).optional(),
        topic: z.string().optional(),
      })
      .optional(),
    /** As a configured worker's: when the workers do not publish vllm:cache_config_info. */
    numGpuBlocks: z.int().positive().optional(),
    blockSize: z.int().positive().optional(),
  });

export const discoverySection = z
  .strictObject({
    kubernetes: kubernetesDiscovery.optional(),
  })
  .prefault({});

/** The kvgate pool name discovered workers form. */
export function discoveredPoolName(k: z.output<typeof kubernetesDiscovery>): string {
  return k.pool ?? k.inferencePool;
}
