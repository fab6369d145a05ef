/**
 * Who may call: `tenants` (keys, limits, priority, cache overrides, models), `admin` (keys for
 * /admin and /metrics), `cacheSalt` (the secret tenants' cache salts derive from). Keys are read
 * and hashed by config/keys.ts.
 */
import { z } from 'zod';
import { PRIORITY_CLASSES } from '../../admission/classes.js';
import { TENANT_ID_PATTERN } from '../../admission/tenants.js';
import { capsOverride } from './caps.js';
import { bytes, ms, secretSource } from './fields.js';

/** One API key: exactly one of its forms (admission/tenants.ts reads them at load). */
const keySource = z
  .strictObject({
    sha256: z.string().regex(/^[0-9a-fA-F]{64}$/, 'expected 64 hex digits: the SHA-256 digest of the key').optional(),
    env: z.string().min(1).optional(),
    file: z.string().min(1).optional(),
    value: z.string().min(8, 'a key shorter than 8 characters is too easy to guess').optional(),
  })
  .refine((k) => [k.sha256, k.env, k.file, k.value].filter((x) => x !== undefined).length === 1, {
    message: 'give exactly one of sha256, env, file or value',
  });

/** Response-cache settings a tenant may override. */
const tenantCache = z.strictObject({
  enabled: z.boolean().optional(),
  ttlMs: ms.optional(),
  maxEntryBytes: bytes.optional(),
  maxBytes: bytes.optional(),
  sampled: z.boolean().optional(),
});

const priorityClass = z.enum(PRIORITY_CLASSES);

const tenantLimits = z.strictObject({
  requestsPerMinute: z.int().positive().optional(),
  /** Prompt tokens + max_tokens of the requests started in a minute. */
  tokensPerMinute: z.int().positive().optional(),
  /** Requests started in a day (OpenAI's RPD). */
  requestsPerDay: z.int().positive().optional(),
  /** Prompt tokens + max_tokens of the requests started in a day (TPD), settled as tokensPerMinute. */
  tokensPerDay: z.int().positive().optional(),
  concurrentRequests: z.int().positive().optional(),
});

const tenant = z.strictObject({
  id: z.string().regex(TENANT_ID_PATTERN, 'letters, digits, ".", "_" and "-" (at most 64), starting with a letter or digit'),
  keys: z.array(keySource).min(1, 'a tenant needs at least one key'),
  cache: tenantCache.optional(),
  /** Default priority class of the tenant's requests (a request may lower it, never raise it). */
  priority: priorityClass.default('standard'),
  limits: tenantLimits.optional(),
  caps: capsOverride.optional(),
  /**
   * The models the tenant may use (unset: every model). Any other is answered as a model that does
   * not exist (404 model_not_found), and /v1/models, asked with the tenant's key, lists these only.
   */
  models: z.array(z.string().min(1)).min(1).optional(),
});

/** API keys mapped to tenants; none: the gateway is open and every request is tenant `default`. */
export const tenantsSection = z.array(tenant).default([]);

/** Keys for /admin/* (required there once any key is configured). */
export const adminSection = z
  .strictObject({
    keys: z.array(keySource).default([]),
    /**
     * Keys that may read /metrics and nothing else (a Prometheus scrape token). Once any key
     * is configured (tenant, admin or metrics), /metrics needs an admin or a metrics key: its
     * series name the tenants and count their tokens.
     */
    metricsKeys: z.array(keySource).default([]),
    /** true: /metrics needs no key even when keys are configured. */
    openMetrics: z.boolean().default(false),
  })
  .prefault({});

/** Salting of cached prompts per tenant (pools with cacheIsolation: tenant). */
export const cacheSaltSection = z.strictObject({ secret: secretSource.optional() }).prefault({});
