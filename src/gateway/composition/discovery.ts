/**
 * Workers found in Kubernetes (config `discovery.kubernetes`): an InferencePool's endpoints,
 * watched while the gateway runs, put in the registry through the reloader as a config reload
 * puts configured workers (retired ones drain).
 *
 * The watch and its client (`@kubernetes/client-node`) are imported when the service starts, not
 * with the gateway: that client takes about 0.6 s and 40 MB of heap to load, which a gateway or
 * EPP without discovery (a static config) should not pay at every start.
 */
import { ConfigError, type GatewayConfig } from '../../config/index.js';
import type { KubernetesDiscovery } from '../../fleet/kubernetes/discovery.js';
import type { Logger } from '../../telemetry/logger.js';
import type { ConfigReloader } from '../admin/config-reload.js';
import type { GatewayService } from '../types.js';

/** The discovery service for the config's InferencePool, or null when none is configured. */
export function kubernetesDiscovery(config: GatewayConfig, reloader: ConfigReloader, logger: Logger): KubernetesDiscoveryService | null {
  const k = config.discovery.kubernetes;
  return k ? new KubernetesDiscoveryService(k, reloader, logger) : null;
}

class KubernetesDiscoveryService implements GatewayService {
  readonly name = 'kubernetes-discovery';
  private discovery: KubernetesDiscovery | null = null;
  private closed = false;

  constructor(
    private readonly k: NonNullable<GatewayConfig['discovery']['kubernetes']>,
    private readonly reloader: ConfigReloader,
    private readonly logger: Logger,
  ) {}

  /** Load the client and start watching. A kubeconfig that cannot be read is a configuration error. */
  async start(): Promise<void> {
    const { KubernetesDiscovery, loadKubeConfig } = await import('../../fleet/kubernetes/discovery.js');
    if (this.closed || this.discovery !== null) return;
    const k = this.k;
    let kubeConfig;
    try {
      kubeConfig = loadKubeConfig(k.kubeconfig);
    } catch (e) {
      throw new ConfigError([`discovery.kubernetes${k.kubeconfig !== undefined ? '.kubeconfig' : ''}: ${(e as Error).message}`]);
    }
    this.discovery = new KubernetesDiscovery({
      config: k,
      kubeConfig,
      logger: this.logger,
      apply: (workers, kvEvents) => this.reloader.applyDiscovered('kubernetes', workers, kvEvents),
    });
    this.discovery.start();
  }

  close(): void {
    this.closed = true;
    this.discovery?.close();
  }

  /** What the watches have done (/admin/discovery); before the service has started, only what it will watch. */
  status(): Record<string, unknown> {
    return this.discovery?.status() ?? { inferencePool: this.k.inferencePool, started: false };
  }
}
