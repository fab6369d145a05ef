/**
 * The configured workers, walked once (configuredWorkers): each one's id, named or from its URL,
 * and what it inherits from its pool. The schema's checks read the ids from it; parseConfig
 * builds from it the list the gateway routes over, with the headers kvgate sends each worker.
 */
import type { z } from 'zod';
import type { EngineKind, WorkerIdentity } from '../fleet/worker-state.js';
import { formatPath } from '../util/field-path.js';
import type { flatWorker, pool, workerInPool } from './schema/pools-workers.js';
import { readSecret, type SecretSource } from './secrets.js';
import type { PoolSettings, WorkerKvEvents } from './types.js';

/**
 * A worker's id when the config names none: its URL's host and port (`http://10.0.0.2:8000/v1`
 * → `10.0.0.2:8000-v1`, the path only when there is one), so adding or removing a worker never
 * renames another (the id names its metric series, its KV-event subscription, its breaker).
 * Characters other than letters, digits, `.`, `_`, `:` and `-` become `-`.
 */
function workerIdFromUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    // Not a URL (its own error is reported): any id will do for the other checks.
    return url;
  }
  const port = u.port || (u.protocol === 'https:' ? '443' : '80');
  const path = u.pathname.replace(/\/+$/, '');
  return `${u.hostname.replace(/^\[|\]$/g, '')}:${port}${path}`.replace(/[^A-Za-z0-9._:-]+/g, '-');
}

/** One configured worker, from a pool or from the flat list, with where it sits in the config. */
interface ConfiguredWorker {
  w: z.output<typeof workerInPool>;
  id: string;
  path: Array<string | number>;
  /** The pool's fields a worker inherits, and the pool's own path (flat workers: undefined). */
  pool: { name: string; model: string; role: 'prefill' | 'decode' | 'both'; adapters: string[]; discoverAdapters: boolean; resolveAdapters?: string; apiKey?: SecretSource; headers?: Record<string, string>; engine?: EngineKind };
  poolPath: Array<string | number> | undefined;
}

/** Every worker of the config, pools first, each with its id (named, or from its URL). */
export function configuredWorkers(c: { pools: z.output<typeof pool>[]; workers: z.output<typeof flatWorker>[] }): ConfiguredWorker[] {
  const out: ConfiguredWorker[] = [];
  c.pools.forEach((p, i) =>
    p.workers.forEach((w, j) => out.push({ w, id: w.id ?? workerIdFromUrl(w.url), path: ['pools', i, 'workers', j], pool: p, poolPath: ['pools', i] })),
  );
  c.workers.forEach((w, i) =>
    out.push({ w, id: w.id ?? workerIdFromUrl(w.url), path: ['workers', i], pool: { ...w, name: w.pool, apiKey: undefined, headers: undefined }, poolPath: undefined }),
  );
  return out;
}


/** The workers the gateway routes over, and what it needs of each pool beside them. */
export interface ResolvedWorkers {
  /** Every worker, pools flattened, ids resolved. */
  workers: WorkerIdentity[];
  /** Workers that publish KV-cache events, and where. */
  kvEvents: WorkerKvEvents[];
  /** Per pool name: cache isolation and request caps. */
  pools: Map<string, PoolSettings>;
}

/**
 * Build the worker list from the validated pools and flat workers. Upstream API keys from
 * environment variables and files are read now: a missing one is added to `problems` (the start
 * fails).
 */
export function resolveWorkers(
  c: { pools: z.output<typeof pool>[]; workers: z.output<typeof flatWorker>[]; speculative: { cascades: ReadonlyArray<{ targetPool: string; draftPool: string }> } },
  env: NodeJS.ProcessEnv,
  problems: string[],
): ResolvedWorkers {
  const workers: WorkerIdentity[] = [];
  const kvEvents: WorkerKvEvents[] = [];
  const cascadePools = new Set(c.speculative.cascades.flatMap((sc) => [sc.targetPool, sc.draftPool]));
  for (const { w, id, path, pool: p, poolPath } of configuredWorkers(c)) {
    if (w.kvEvents) kvEvents.push({ workerId: id, ...w.kvEvents });
    workers.push({
      id,
      url: stripSlash(w.url),
      pool: p.name,
      model: p.model,
      ...(p.adapters.length > 0 ? { adapters: p.adapters } : {}),
      // A speculative cascade's pools serve no adapters (checked by the schema for configured ones).
      discoverAdapters: p.discoverAdapters && !cascadePools.has(p.name),
      ...(p.resolveAdapters !== undefined ? { resolveAdapters: p.resolveAdapters } : {}),
      numGpuBlocks: w.numGpuBlocks,
      blockSize: w.blockSize,
      ...(w.hardware !== undefined ? { hardware: w.hardware } : {}),
      ...(p.role !== 'both' ? { role: p.role } : {}),
      // vLLM is the default (WorkerState.engine): only another engine is named.
      ...((w.engine ?? p.engine) === 'sglang' ? { engine: 'sglang' as const } : {}),
      upstreamHeaders: upstreamHeaders(w, poolPath ? p : undefined, path, poolPath, env, problems),
    });
  }
  return { workers, kvEvents, pools: poolSettings(c) };
}

type UpstreamAuth = { apiKey?: SecretSource; headers?: Record<string, string> };

/** The headers kvgate sends a worker: its pool's, then its own, and the API key (its own, else its pool's) as a bearer token. */
export function upstreamHeaders(
  own: UpstreamAuth,
  pool: UpstreamAuth | undefined,
  path: Array<string | number>,
  poolPath: Array<string | number> | undefined,
  env: NodeJS.ProcessEnv,
  problems: string[],
): Record<string, string> | undefined {
  const h: Record<string, string> = { ...(pool?.headers ?? {}), ...(own.headers ?? {}) };
  const src = own.apiKey ?? pool?.apiKey;
  if (src !== undefined) {
    const r = readSecret(src, env);
    if (r.ok) h.authorization = `Bearer ${r.value}`;
    else problems.push(`${formatPath([...(own.apiKey ? path : poolPath!), 'apiKey', r.field])}: ${r.message}`);
  }
  return Object.keys(h).length > 0 ? Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), v])) : undefined;
}

/** Per pool name: cache isolation and request caps (a flat worker's pool is isolated if any of its workers asks). */
function poolSettings(c: { pools: z.output<typeof pool>[]; workers: z.output<typeof flatWorker>[] }): Map<string, PoolSettings> {
  const settings = new Map<string, PoolSettings>();
  for (const p of c.pools) settings.set(p.name, { cacheIsolation: p.cacheIsolation, caps: p.caps ?? {} });
  for (const w of c.workers) {
    if (!settings.has(w.pool) || w.cacheIsolation === 'tenant') settings.set(w.pool, { cacheIsolation: w.cacheIsolation, caps: settings.get(w.pool)?.caps ?? {} });
  }
  return settings;
}

function stripSlash(u: string): string {
  return u.endsWith('/') ? u.slice(0, -1) : u;
}
