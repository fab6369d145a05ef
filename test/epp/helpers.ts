/** Set-up for the EPP's tests: real simulated workers, a real `kvgate epp` on loopback ports, a real gRPC client. */
import type { RawConfig } from '../../src/config/index.js';
import { createEpp, type Epp } from '../../src/epp/epp.js';
import { ExtProcClient } from '../../src/epp/ext-proc-client.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { configFor } from '../gateway/helpers.js';
export { MODEL, startSims, metricValue, waitFor } from '../gateway/helpers.js';

export async function startEpp(urls: string[], extra: Partial<RawConfig> = {}): Promise<{ epp: Epp; client: ExtProcClient; health: string; metrics: string; close(): Promise<void> }> {
  const epp = createEpp(configFor(urls, { epp: { listen: { host: '127.0.0.1', port: 0 }, healthPort: 0, metricsPort: 0, ...(extra.epp ?? {}) }, ...extra }), { logger: createLogger({ level: 'silent' }) });
  await epp.start();
  const client = new ExtProcClient(`127.0.0.1:${epp.ports.extProc}`);
  return {
    epp,
    client,
    health: `127.0.0.1:${epp.ports.health}`,
    metrics: `http://127.0.0.1:${epp.ports.metrics}`,
    async close() {
      client.close();
      await epp.close();
    },
  };
}

/** A worker's endpoint as the proxy names it (ip:port). */
export const endpointOfUrl = (url: string): string => new URL(url).host;
