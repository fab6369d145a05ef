/**
 * The API keys of tenants and admins, read (environment variables, files) and hashed now, so a
 * missing one fails the start; a key may belong to one holder only.
 */
import { keyDigests } from '../admission/tenants.js';
import { formatPath } from '../util/field-path.js';
import type { ParsedConfig } from './schema/index.js';
import type { TenantConfig } from './types.js';

/** Who may call /admin and /metrics. */
export interface AdminKeys {
  digests: Buffer[];
  metricsDigests: Buffer[];
  openMetrics: boolean;
}

/** Tenants and admin keys with their digests; unreadable keys and keys held twice are added to `problems`. */
export function resolveKeys(
  c: Pick<ParsedConfig, 'tenants' | 'admin'>,
  env: NodeJS.ProcessEnv,
  problems: string[],
): { tenants: TenantConfig[]; admin: AdminKeys } {
  const digestsOf = (keys: ParsedConfig['admin']['keys'], path: Array<string | number>): Buffer[] =>
    keys.flatMap((k, i) => {
      const r = keyDigests(k, env);
      if (r.ok) return r.digests;
      problems.push(`${formatPath([...path, i, r.field])}: ${r.message}`);
      return [];
    });
  const tenants: TenantConfig[] = c.tenants.map((t, i) => ({
    id: t.id,
    digests: digestsOf(t.keys, ['tenants', i, 'keys']),
    cache: t.cache ?? {},
    priority: t.priority,
    limits: t.limits ?? {},
    caps: t.caps ?? {},
    ...(t.models ? { models: t.models } : {}),
  }));
  const admin = {
    digests: digestsOf(c.admin.keys, ['admin', 'keys']),
    metricsDigests: digestsOf(c.admin.metricsKeys, ['admin', 'metricsKeys']),
    openMetrics: c.admin.openMetrics,
  };
  const owners = new Map<string, string>();
  const claim = (d: Buffer, who: string) => {
    const hex = d.toString('hex');
    const prev = owners.get(hex);
    if (prev !== undefined && prev !== who) problems.push(`${who}: a key of ${who} is also a key of ${prev}`);
    owners.set(hex, who);
  };
  tenants.forEach((t, i) => t.digests.forEach((d) => claim(d, `tenants[${i}]`)));
  admin.digests.forEach((d) => claim(d, 'admin.keys'));
  admin.metricsDigests.forEach((d) => claim(d, 'admin.metricsKeys'));
  return { tenants, admin };
}
