/** Per-tenant cache salts for pools with `cacheIsolation: tenant`. */
import { createHmac, randomBytes } from 'node:crypto';
import type { GatewayConfig } from '../../config/index.js';
import type { Logger } from '../../telemetry/logger.js';

/**
 * HMAC-SHA256(secret, tenant id), never anything a client sent. Without `cacheSalt.secret` a
 * random secret is drawn per process, which isolates as well but means gateway replicas (and
 * restarts) do not share salts, so their tenants miss each other's cached prefixes on the workers.
 */
export function createCacheSalter(config: GatewayConfig, logger: Logger): (pool: string | undefined, tenant: string) => string | null {
  // Read per request: a reload may add pools or change their isolation.
  const isolated = (pool: string): boolean => config.pools.get(pool)?.cacheIsolation === 'tenant';
  let secret: string | null = null;
  const salts = new Map<string, string>();
  return (pool, tenant) => {
    if (pool === undefined || !isolated(pool)) return null;
    if (secret === null) {
      secret = config.cacheSaltSecret;
      if (secret === null) {
        secret = randomBytes(32).toString('hex');
        const pools = [...config.pools].filter(([, p]) => p.cacheIsolation === 'tenant').map(([name]) => name);
        logger.warn({ pools }, 'cacheIsolation without cacheSalt.secret: a random secret per process (replicas will not share salts)');
      }
    }
    let s = salts.get(tenant);
    if (s === undefined) salts.set(tenant, (s = createHmac('sha256', secret).update(`kvgate-cache-salt:${tenant}`).digest('base64url').slice(0, 32)));
    return s;
  };
}
