/**
 * Validating a config object (already read from YAML or JSON): the schema, then what cannot be
 * checked by it (keys and secrets read from the environment and files, Redis URLs that fall back
 * to REDIS_URL), then the GatewayConfig the gateway runs on. A bad config is reported as one line
 * per problem naming the field path (`pools[0].workers[1].url: Invalid URL`); an unknown field
 * names the nearest field the object does have.
 */
import type { z } from 'zod';
import type { WorkerIdentity } from '../fleet/worker-state.js';
import { formatPath } from '../util/field-path.js';
import { nearestName } from '../util/nearest-name.js';
import { resolveDiscovery, type DiscoveryConfig } from './discovery.js';
import { resolveKeys, type AdminKeys } from './keys.js';
import { DEFAULT_SCRAPE_INTERVAL_MS } from './schema/fleet.js';
import { configSchema, type ParsedConfig } from './schema/index.js';
import { readSecret } from './secrets.js';
import type { PoolSettings, TenantConfig, WorkerKvEvents } from './types.js';
import { resolveWorkers } from './workers.js';

export type CacheConfig = ParsedConfig['cache'] & { redis: ParsedConfig['cache']['redis'] & { url?: string } };

export interface GatewayConfig extends Omit<ParsedConfig, 'pools' | 'workers' | 'scrape' | 'health' | 'tenants' | 'admin' | 'cache' | 'cacheSalt' | 'discovery'> {
  tenants: TenantConfig[];
  admin: AdminKeys;
  /** `cache.redis.url` falls back to REDIS_URL. */
  cache: CacheConfig;
  /** Every worker, pools flattened, ids resolved. */
  workers: WorkerIdentity[];
  /** Per pool name: cache isolation and request caps. */
  pools: ReadonlyMap<string, PoolSettings>;
  /** The secret tenant cache salts are derived from (null: a random one per process). */
  cacheSaltSecret: string | null;
  /** Workers that publish KV-cache events, and where. */
  kvEvents: WorkerKvEvents[];
  /** Where more workers are found (an InferencePool); they join `workers` in routing, not in this list. */
  discovery: DiscoveryConfig;
  scrape: ParsedConfig['scrape'] & {
    intervalMs: number;
    timeoutMs: number;
    /** False when the interval is the default (a policy may then bring its own). */
    intervalExplicit: boolean;
  };
  health: ParsedConfig['health'] & { timeoutMs: number };
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  ${p}`).join('\n')}`);
  }
}

/** Validate a config object (already parsed from YAML/JSON). Throws ConfigError. */
export function parseConfig(input: unknown, env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  const r = configSchema.safeParse(input ?? {});
  if (!r.success) throw new ConfigError(r.error.issues.flatMap((i) => issueLines(i, input)));
  const c = r.data;
  const problems: string[] = [];
  const { workers, kvEvents, pools } = resolveWorkers(c, env, problems);
  const discovery = resolveDiscovery(c.discovery, pools, env, problems);
  let cacheSaltSecret: string | null = null;
  if (c.cacheSalt.secret !== undefined) {
    const r = readSecret(c.cacheSalt.secret, env);
    if (r.ok) cacheSaltSecret = r.value;
    else problems.push(`${formatPath(['cacheSalt', 'secret', r.field])}: ${r.message}`);
  }
  const { tenants, admin } = resolveKeys(c, env, problems);
  const redisUrl = c.cache.redis.url ?? (env.REDIS_URL !== undefined && env.REDIS_URL !== '' ? env.REDIS_URL : undefined);
  if (c.cache.enabled && c.cache.store === 'redis') {
    if (redisUrl === undefined) problems.push('cache.redis.url: required when cache.store is redis (or set REDIS_URL)');
    else if (!/^rediss?:\/\/\S*$/.test(redisUrl)) problems.push('cache.redis.url: REDIS_URL is not a redis:// or rediss:// URL');
  }
  const sharedUrl = c.shared.redis.url ?? (env.REDIS_URL !== undefined && env.REDIS_URL !== '' ? env.REDIS_URL : undefined);
  if (sharedUrl !== undefined && !/^rediss?:\/\/\S*$/.test(sharedUrl)) problems.push('shared.redis.url: REDIS_URL is not a redis:// or rediss:// URL');
  if (problems.length > 0) throw new ConfigError(problems);
  const { pools: _p, workers: _w, tenants: _t, admin: _a, cacheSalt: _s, discovery: _d, ...rest } = c;
  return {
    ...rest,
    tenants,
    admin,
    cache: { ...c.cache, redis: { ...c.cache.redis, url: redisUrl } },
    /** `shared.redis.url` falls back to REDIS_URL: set, replicas share state through it. */
    shared: { ...c.shared, redis: { ...c.shared.redis, url: sharedUrl } },
    workers,
    pools,
    cacheSaltSecret,
    kvEvents,
    discovery,
    // A timeout shorter than the interval keeps one worker's checks from ever overlapping.
    scrape: {
      ...c.scrape,
      intervalMs: c.scrape.intervalMs ?? DEFAULT_SCRAPE_INTERVAL_MS,
      timeoutMs: c.scrape.timeoutMs ?? Math.floor((c.scrape.intervalMs ?? DEFAULT_SCRAPE_INTERVAL_MS) * 0.8),
      intervalExplicit: c.scrape.intervalMs !== undefined,
    },
    health: { ...c.health, timeoutMs: c.health.timeoutMs ?? Math.floor(c.health.intervalMs * 0.8) },
  };
}

/** A schema issue as error lines: one per unknown key, with the nearest field the object does have. */
function issueLines(i: z.core.$ZodIssue, input: unknown): string[] {
  const path = formatPath(i.path);
  const messages = i.code === 'unrecognized_keys' ? i.keys.map((k) => unknownFieldMessage(configSchema, i.path, k, input)) : [i.message];
  return messages.map((m) => (path ? `${path}: ${m}` : m));
}

// The fields a strict object of the schema accepts, found by walking the schema along an
// error's path: what "unknown field" errors suggest the nearest of (util/nearest-name.ts).

/** The parts of zod 4's schema definitions the walk reads. */
interface Def {
  type: string;
  shape?: Record<string, z.ZodType>;
  innerType?: z.ZodType;
  element?: z.ZodType;
  in?: z.ZodType;
  options?: z.ZodType[];
  valueType?: z.ZodType;
  values?: unknown[];
  getter?: () => z.ZodType;
}

const defOf = (s: z.ZodType): Def => (s as unknown as { _zod: { def: Def } })._zod.def;

/** Wrappers that hold one schema inside (optional, defaults, refinements' pipes…). */
function unwrap(s: z.ZodType): z.ZodType {
  for (;;) {
    const d = defOf(s);
    if (d.innerType && d.type !== 'object') s = d.innerType;
    else if (d.type === 'pipe' && d.in) s = d.in;
    else if (d.type === 'lazy' && d.getter) s = d.getter();
    else return s;
  }
}

/** A union's alternatives that fit `value`: those whose literal fields (a policy's `name`) match it. */
function alternatives(options: z.ZodType[], value: unknown): z.ZodType[] {
  const fitting = options.filter((o) => {
    const shape = defOf(unwrap(o)).shape;
    if (!shape || value === null || typeof value !== 'object') return true;
    return Object.entries(shape).every(([k, f]) => {
      const lit = defOf(unwrap(f));
      if (lit.type !== 'literal') return true;
      const v = (value as Record<string, unknown>)[k];
      // A literal with a default (the default policy's name) fits a value that leaves it out.
      return (v === undefined && defOf(f).type === 'default') || (lit.values ?? []).includes(v);
    });
  });
  return fitting.length > 0 ? fitting : options;
}

/** The keys of the object schemas at `path` inside `schema`, given the input `value` at the root. */
function knownKeysAt(schema: z.ZodType, path: readonly PropertyKey[], value: unknown): string[] {
  let here: z.ZodType[] = [schema];
  let v = value;
  for (const seg of path) {
    const next: z.ZodType[] = [];
    for (const s of here) {
      const d = defOf(unwrap(s));
      if (d.type === 'union' && d.options) next.push(...alternatives(d.options, v).map((o) => childOf(o, seg)).filter((c) => c !== undefined));
      else {
        const c = childOf(s, seg);
        if (c) next.push(c);
      }
    }
    here = next;
    v = v !== null && typeof v === 'object' ? (v as Record<PropertyKey, unknown>)[seg] : undefined;
  }
  const keys = new Set<string>();
  for (const s of here) {
    const d = defOf(unwrap(s));
    const objects = d.type === 'union' && d.options ? alternatives(d.options, v).map((o) => defOf(unwrap(o))) : [d];
    for (const o of objects) for (const k of Object.keys(o.shape ?? {})) keys.add(k);
  }
  return [...keys];
}

function childOf(s: z.ZodType, seg: PropertyKey): z.ZodType | undefined {
  const d = defOf(unwrap(s));
  if (d.type === 'object' && typeof seg === 'string') return d.shape?.[seg];
  if (d.type === 'array' && typeof seg === 'number') return d.element;
  if (d.type === 'record') return d.valueType;
  return undefined;
}

/** The message for a key the strict object at `path` does not know, with the nearest known key if one is close. */
function unknownFieldMessage(schema: z.ZodType, path: readonly PropertyKey[], key: string, input: unknown): string {
  const near = nearestName(key, knownKeysAt(schema, path, input));
  return `unknown field '${key}'` + (near !== undefined ? `; did you mean '${near}'?` : '');
}
