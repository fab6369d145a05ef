/**
 * Cache keys: everything that determines an answer, canonicalised and hashed.
 *
 * The key hashes (SHA-256) a canonical JSON rendering of
 *   - the key format version,
 *   - the tenant (the key is also namespaced by tenant: `<prefix><tenant>:<hash>`),
 *   - the route (chat, completions or embeddings),
 *   - the whole request body except the few fields that cannot change the answer
 *     (IGNORED_FIELDS: how it is delivered — stream, stream_options — and who or how urgently it
 *     was asked — user, priority, metadata, store, request_id).
 * So the model, every message (every role, content parts included) or the prompt, tools,
 * tool_choice, response_format and every sampling parameter — temperature, top_p, max_tokens,
 * stop, seed, n, logprobs, penalties, logit_bias and any engine-specific field such as vLLM's
 * top_k or guided decoding — are part of the key, whether kvgate knows them or not: an unknown
 * field can only make two requests miss each other, never share an answer they should not.
 *
 * Canonical form: object keys sorted at every depth, `undefined` dropped, top-level `null` treated
 * as absent (`"stop": null` is no stop), numbers and strings as JSON.stringify writes them after
 * JSON.parse (so `1.0`/`1`, escaped/unescaped characters compare equal). Array order is kept: it
 * is meaningful (messages, stop lists, content parts).
 */
import { createHash } from 'node:crypto';

/** Bump to orphan every stored entry when the key derivation changes. */
const KEY_VERSION = 1;

/** Body fields that do not change the answer and are left out of the key. */
export const IGNORED_FIELDS: ReadonlySet<string> = new Set(['stream', 'stream_options', 'user', 'priority', 'metadata', 'store', 'request_id']);

export type CacheRoute = 'chat' | 'completions' | 'embeddings';

/** Canonical JSON text of a value: sorted object keys at every depth, undefined dropped. */
export function canonicalJson(v: unknown): string {
  const out: string[] = [];
  write(v, out);
  return out.join('');
}

function write(v: unknown, out: string[]): void {
  if (v === null || typeof v !== 'object') {
    // Non-finite numbers are not JSON; JSON.parse never produces them, but be explicit.
    out.push(typeof v === 'number' && !Number.isFinite(v) ? 'null' : (JSON.stringify(v) ?? 'null'));
    return;
  }
  if (Array.isArray(v)) {
    out.push('[');
    for (let i = 0; i < v.length; i++) {
      if (i > 0) out.push(',');
      write(v[i] === undefined ? null : v[i], out);
    }
    out.push(']');
    return;
  }
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o).sort();
  out.push('{');
  let first = true;
  for (const k of keys) {
    const x = o[k];
    if (x === undefined) continue;
    if (!first) out.push(',');
    first = false;
    out.push(JSON.stringify(k), ':');
    write(x, out);
  }
  out.push('}');
}

/** The part of a request body that determines its answer, as canonical JSON. */
function answerDefiningJson(body: Readonly<Record<string, unknown>>): string {
  const kept: Record<string, unknown> = {};
  for (const k of Object.keys(body)) {
    const v = body[k];
    if (v === null || v === undefined || IGNORED_FIELDS.has(k)) continue;
    kept[k] = v;
  }
  return canonicalJson(kept);
}

/** SHA-256 (hex) over tenant, route and the answer-defining body. */
export function keyHash(tenant: string, route: CacheRoute, body: Readonly<Record<string, unknown>>): string {
  return createHash('sha256')
    .update(`kvgate-cache/v${KEY_VERSION}\n${tenant}\n${route}\n`)
    .update(answerDefiningJson(body))
    .digest('hex');
}

/** The store key: namespaced per tenant, so a tenant's entries can be listed and dropped alone. */
export function storeKey(prefix: string, tenant: string, hash: string): string {
  return `${prefix}${tenant}:${hash}`;
}

/** How a request samples: greedy (temperature 0), seeded (a fixed seed) or sampled. */
export type Sampling = 'greedy' | 'seeded' | 'sampled';

/** OpenAI's (and vLLM's) default temperature is 1: a request without one is sampled. */
export function samplingOf(body: Readonly<Record<string, unknown>>): Sampling {
  if (body.temperature === 0) return 'greedy';
  if (typeof body.seed === 'number' && Number.isInteger(body.seed)) return 'seeded';
  return 'sampled';
}

/** The request's Cache-Control directives that the cache honours. */
export interface RequestCacheControl {
  /** Neither look up nor store. */
  noStore: boolean;
  /** Skip the lookup, store the new answer (refresh). */
  noCache: boolean;
  /** Accept an entry no older than this many seconds. */
  maxAgeS: number | null;
}

export function parseCacheControl(header: string | string[] | undefined): RequestCacheControl {
  const cc: RequestCacheControl = { noStore: false, noCache: false, maxAgeS: null };
  if (header === undefined) return cc;
  const text = Array.isArray(header) ? header.join(',') : header;
  for (const raw of text.split(',')) {
    const d = raw.trim().toLowerCase();
    if (d === 'no-store') cc.noStore = true;
    else if (d === 'no-cache') cc.noCache = true;
    else if (d.startsWith('max-age=')) {
      const n = Number(d.slice(8).replace(/^"|"$/g, ''));
      if (Number.isInteger(n) && n >= 0) cc.maxAgeS = cc.maxAgeS === null ? n : Math.min(cc.maxAgeS, n);
    }
  }
  // max-age=0 asks for a fresh answer: the same as no-cache.
  if (cc.maxAgeS === 0) cc.noCache = true;
  return cc;
}
