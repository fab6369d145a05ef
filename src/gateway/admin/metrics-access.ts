/**
 * Who may read /metrics. Its series name every tenant and what each sent (token counts per
 * tenant), so once any key is configured it needs an admin key (`admin.keys`) or a metrics key
 * (`admin.metricsKeys`: a scrape token that opens /metrics and nothing else), sent as
 * `Authorization: Bearer <key>`. `admin.openMetrics: true` leaves it open. With no key configured
 * at all, the gateway is open and so is /metrics.
 */
import { timingSafeEqual } from 'node:crypto';
import { bearerKey, invalidApiKey, sha256, type TenantDirectory } from '../../admission/tenants.js';
import type { ApiError } from '../../api/errors.js';

export interface MetricsAccess {
  /** SHA-256 digests of the keys that may read /metrics only. */
  metricsDigests: readonly Buffer[];
  openMetrics: boolean;
}

/** null if the request may read /metrics, else the error to answer (401, or 403 for a tenant's key). */
export function metricsAccessError(tenants: TenantDirectory, access: MetricsAccess, authorization: string | string[] | undefined): ApiError | null {
  if (access.openMetrics) return null;
  const byMetricsKey = access.metricsDigests.length > 0;
  if (!tenants.adminGuarded && !byMetricsKey) return null;
  const key = bearerKey(authorization);
  if (key !== null && byMetricsKey && matchesAny(sha256(key), access.metricsDigests)) return null;
  if (tenants.adminGuarded) return tenants.checkAdmin(authorization);
  return invalidApiKey(key === null ? "Missing API key: send a metrics key as 'Authorization: Bearer <key>'." : 'Incorrect API key provided.');
}

/** Compared against every digest, whatever matches (as the tenant directory does). */
function matchesAny(d: Buffer, digests: readonly Buffer[]): boolean {
  let hit = false;
  for (const e of digests) hit = timingSafeEqual(d, e) || hit;
  return hit;
}
