/**
 * Workers found in Kubernetes (config `discovery.kubernetes`): an InferencePool's endpoints,
 * watched while the gateway runs, put in the registry through the reloader as a config reload
 * puts configured workers (retired ones drain).
 */
import { ConfigError, type GatewayConfig } from '../../config/index.js';
import { KubernetesDiscovery, loadKubeConfig } from '../../fleet/kubernetes/discovery.js';
import type { Logger } from '../../telemetry/logger.js';
import type { ConfigReloader } from '../admin/config-reload.js';

/** The discovery service for the config's InferencePool, or null when none is configured. A kubeconfig that cannot be read is a configuration error. */
export function kubernetesDiscovery(config: GatewayConfig, reloader: ConfigReloader, logger: Logger): KubernetesDiscovery | null {
  const k = config.discovery.kubernetes;
  if (!k) return null;
  let kubeConfig;
  try {
    kubeConfig = loadKubeConfig(k.kubeconfig);
  } catch (e) {
    throw new ConfigError([`discovery.kubernetes${k.kubeconfig !== undefined ? '.kubeconfig' : ''}: ${(e as Error).message}`]);
  }
  return new KubernetesDiscovery({ config: k, kubeConfig, logger, apply: (workers, kvEvents) => reloader.applyDiscovered('kubernetes', workers, kvEvents) });
}
