/**
 * Tenants and API keys: who is sending a request. Runs before anything else reads the request.
 *
 * - Keys live in the config mapped to tenants (`tenants[].keys`), each given as its SHA-256 digest,
 *   read from an environment variable or a file, or (discouraged) in plain text. Only digests are
 *   kept in memory; a presented key is hashed once and compared against every configured digest
 *   in constant time (no early exit, so timing does not tell how many keys were tried or which
 *   one matched). Keys are never logged and never appear in an error message.
 * - With no tenant keys configured the gateway is open and every request belongs to the tenant
 *   `default`.
 * - A missing or wrong key when keys are configured is a 401 in OpenAI's error shape, code
 *   `invalid_api_key`. Clients send `Authorization: Bearer <key>`, as the OpenAI SDKs do.
 * - Admin keys (`admin.keys`) guard `/admin/*` once the gateway has any keys at all.
 *
 * A tenant carries what later stages need to know about it: its response-cache settings, its
 * default priority class (classes.ts; `standard` unless configured) and its rate limits
 * (rate-limit.ts; none unless configured).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { ApiError } from '../api/errors.js';
import type { PriorityClass } from './classes.js';
import type { TenantLimits } from './rate-limit.js';

/** The tenant of every request when no keys are configured. */
export const DEFAULT_TENANT_ID = 'default';

/** Tenant ids appear in cache keys and metric labels: a conservative alphabet. */
export const TENANT_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** One configured key: exactly one of the fields. */
export interface KeySource {
  /** Hex SHA-256 digest of the key (`printf %s "$KEY" | sha256sum`). */
  sha256?: string;
  /** Name of an environment variable holding the key. */
  env?: string;
  /** A file holding one key per line (blank lines and lines starting with # ignored). */
  file?: string;
  /** The key itself (keeps a secret in the config file: prefer the other forms). */
  value?: string;
}

/** Per-tenant overrides of the response cache settings (`cache.*` applies where unset). */
export interface TenantCacheOverrides {
  enabled?: boolean;
  ttlMs?: number;
  maxEntryBytes?: number;
  /** In-memory store only: the most bytes this tenant's entries may hold. */
  maxBytes?: number;
  /** Cache sampled requests too (temperature > 0 without a seed). */
  sampled?: boolean;
}

/** Per-tenant request caps (config `tenants[].caps`); they can only lower the pool's and global ones. */
export type RequestCapsOverride = TenantCaps;
export interface TenantCaps {
  maxN?: number;
  maxTokens?: number;
  maxTotalTokens?: number;
  maxRequestMs?: number;
  maxEmbeddingInputs?: number;
  maxEmbeddingTokens?: number;
}

export interface TenantSpec {
  id: string;
  keys: KeySource[];
  cache?: TenantCacheOverrides;
  priority?: PriorityClass;
  limits?: TenantLimits;
  caps?: TenantCaps;
  models?: readonly string[];
}

export interface Tenant {
  readonly id: string;
  readonly cache: Readonly<TenantCacheOverrides>;
  /** Default priority class of its requests (a request may lower it). */
  readonly priority: PriorityClass;
  /** Rate limits (absent fields: unlimited). */
  readonly limits: Readonly<TenantLimits>;
  readonly caps: Readonly<TenantCaps>;
  /** The models it may use; null: every model. */
  readonly models: ReadonlySet<string> | null;
}

/** True if `tenant` may use `model` (any other is answered as a model that does not exist). */
export function mayUse(tenant: Tenant, model: string): boolean {
  return tenant.models === null || tenant.models.has(model);
}

/** A key source that could not be read: `path` names the field, `message` never holds the key. */
export interface KeyProblem {
  path: Array<string | number>;
  message: string;
}

export function sha256(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

/**
 * The SHA-256 digests of the keys one source gives, or a problem. `env` and `file` are read now
 * (at config load), so a missing variable or unreadable file fails the start, not a request.
 */
export function keyDigests(
  src: KeySource,
  env: NodeJS.ProcessEnv = process.env,
  readFile: (path: string) => string = (p) => readFileSync(p, 'utf8'),
): { ok: true; digests: Buffer[] } | { ok: false; field: keyof KeySource; message: string } {
  if (src.sha256 !== undefined) return { ok: true, digests: [Buffer.from(src.sha256, 'hex')] };
  if (src.value !== undefined) return { ok: true, digests: [sha256(src.value)] };
  if (src.env !== undefined) {
    const v = env[src.env];
    if (v === undefined || v.trim() === '') return { ok: false, field: 'env', message: `environment variable ${src.env} is not set or empty` };
    return { ok: true, digests: [sha256(v.trim())] };
  }
  if (src.file !== undefined) {
    let text: string;
    try {
      text = readFile(src.file);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      return { ok: false, field: 'file', message: `cannot read ${src.file}${code ? ` (${code})` : ''}` };
    }
    const keys = text
      .split(/\r?\n/)
      .map((l) => l.trim())
      .filter((l) => l !== '' && !l.startsWith('#'));
    if (keys.length === 0) return { ok: false, field: 'file', message: `${src.file} holds no key` };
    return { ok: true, digests: keys.map(sha256) };
  }
  return { ok: false, field: 'value', message: 'give one of sha256, env, file or value' };
}

/** The key of an `Authorization: Bearer <key>` header, or null. */
export function bearerKey(header: string | string[] | undefined): string | null {
  if (typeof header !== 'string') return null;
  const m = /^\s*bearer\s+(\S+)\s*$/i.exec(header);
  return m ? m[1]! : null;
}

interface KeyEntry {
  digest: Buffer;
  /** Index into `tenants`, or -1 for an admin key. */
  owner: number;
}

export const invalidApiKey = (message: string): ApiError =>
  new ApiError(401, 'invalid_request_error', 'invalid_api_key', message, null, { 'www-authenticate': 'Bearer realm="kvgate"' });

const MISSING = "Missing API key: send it as 'Authorization: Bearer <key>'.";
const INCORRECT = 'Incorrect API key provided.';

/** Resolves a request's key to its tenant. Built once from the config; read-only afterwards. */
/** A tenant as the directory is given it (config/types.ts's TenantConfig). */
type TenantInput = {
  id: string;
  digests: Buffer[];
  cache?: TenantCacheOverrides;
  priority?: PriorityClass;
  limits?: TenantLimits;
  caps?: TenantCaps;
  models?: readonly string[];
};

export class TenantDirectory {
  private tenants: Tenant[] = [];
  private byIdMap = new Map<string, Tenant>();
  private keys: KeyEntry[] = [];
  private isOpen = true;
  private guarded = false;
  private defaultTenant!: Tenant;

  /**
   * @param tenants id, key digests and cache overrides of each tenant
   * @param adminDigests digests of the admin keys
   */
  constructor(tenants: ReadonlyArray<TenantInput>, adminDigests: Buffer[] = []) {
    this.replace(tenants, adminDigests);
  }

  /**
   * New tenants and keys (config reload), in effect for the next request; a request already
   * authenticated keeps the Tenant it was given.
   */
  replace(tenants: ReadonlyArray<TenantInput>, adminDigests: Buffer[] = []): void {
    const list = tenants.map((t) =>
      Object.freeze({
        id: t.id,
        cache: Object.freeze({ ...(t.cache ?? {}) }),
        priority: t.priority ?? 'standard',
        limits: Object.freeze({ ...(t.limits ?? {}) }),
        caps: Object.freeze({ ...(t.caps ?? {}) }),
        models: t.models ? new Set(t.models) : null,
      }),
    );
    const byId = new Map(list.map((t) => [t.id, t]));
    const keys: KeyEntry[] = [];
    tenants.forEach((t, i) => t.digests.forEach((d) => keys.push({ digest: d, owner: i })));
    const tenantKeys = keys.length;
    for (const d of adminDigests) keys.push({ digest: d, owner: -1 });
    this.tenants = list;
    this.byIdMap = byId;
    this.keys = keys;
    this.isOpen = tenantKeys === 0;
    this.guarded = keys.length > 0;
    this.defaultTenant =
      byId.get(DEFAULT_TENANT_ID) ??
      Object.freeze({ id: DEFAULT_TENANT_ID, cache: Object.freeze({}), priority: 'standard' as const, limits: Object.freeze({}), caps: Object.freeze({}), models: null });
  }

  /** True when no tenant key is configured: every request is tenant `default`. */
  get open(): boolean {
    return this.isOpen;
  }

  /** True when /admin/* needs an admin key (some key, tenant or admin, is configured). */
  get adminGuarded(): boolean {
    return this.guarded;
  }

  /** Every tenant a request can belong to (`default` alone when open). */
  list(): readonly Tenant[] {
    return this.open ? [this.defaultTenant] : this.tenants;
  }

  byId(id: string): Tenant | undefined {
    if (this.open) return id === DEFAULT_TENANT_ID ? this.defaultTenant : undefined;
    return this.byIdMap.get(id);
  }

  /** The tenant of a request's Authorization header; throws a 401 ApiError. */
  authenticate(authorization: string | string[] | undefined): Tenant {
    if (this.open) return this.defaultTenant;
    const key = bearerKey(authorization);
    if (key === null) throw invalidApiKey(MISSING);
    const owner = this.match(key);
    if (owner === null || owner < 0) throw invalidApiKey(INCORRECT);
    return this.tenants[owner]!;
  }

  /** The tenant of an Authorization header, or null (no key, an unknown one, an admin's); never throws. */
  identify(authorization: string | string[] | undefined): Tenant | null {
    if (this.open) return this.defaultTenant;
    const key = bearerKey(authorization);
    const owner = key === null ? null : this.match(key);
    return owner === null || owner < 0 ? null : this.tenants[owner]!;
  }

  /** True if the Authorization header carries an admin key (routing headers are shown to admins). */
  isAdmin(authorization: string | string[] | undefined): boolean {
    if (!this.adminGuarded) return false;
    const key = bearerKey(authorization);
    return key !== null && this.match(key) === -1;
  }

  /** null if the request may use /admin/*, else the error to answer (401 no/unknown key, 403 a tenant's key). */
  checkAdmin(authorization: string | string[] | undefined): ApiError | null {
    if (!this.adminGuarded) return null;
    const key = bearerKey(authorization);
    if (key === null) return invalidApiKey(MISSING);
    const owner = this.match(key);
    if (owner === null) return invalidApiKey(INCORRECT);
    if (owner >= 0) return new ApiError(403, 'invalid_request_error', 'permission_denied', 'this API key may not use the admin routes (configure admin.keys)');
    return null;
  }

  /** Owner of the key (-1 admin), or null. Compares against every digest, whatever matches. */
  private match(key: string): number | null {
    const d = sha256(key);
    let owner = -2;
    for (let i = 0; i < this.keys.length; i++) {
      const e = this.keys[i]!;
      // Digests are 32 bytes each, so timingSafeEqual never throws; no branch on the result
      // other than remembering the first match.
      const eq = timingSafeEqual(d, e.digest);
      owner = eq && owner === -2 ? e.owner : owner;
    }
    return owner === -2 ? null : owner;
  }
}
