/**
 * Gateway configuration: a YAML or JSON file validated with zod. Every field has a default except
 * the workers; examples/kvgate.yaml documents each one. A bad file is reported as one line per
 * problem naming the field path (`pools[0].workers[1].url: Invalid URL`).
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { formatPath } from './util/field-path.js';
import type { WorkerIdentity } from './fleet/worker-state.js';
import { adapterNameProblem } from './fleet/adapter-name.js';
import { BUILTIN_POLICIES, unknownPolicyMessage, type PolicyDefinition } from './scheduler/registry.js';
import { DEFAULT_KEPT_IDS } from './tokenizer/chat-tokens.js';
import { parseTokenizerSpec } from './tokenizer/registry.js';
import { keyDigests, TENANT_ID_PATTERN, type TenantCacheOverrides } from './admission/tenants.js';
import { PRIORITY_CLASSES, type PriorityClass } from './admission/classes.js';
import type { TenantLimits } from './admission/rate-limit.js';
import { ADMISSION_DEFAULTS } from './admission/controller.js';

/** The routing policy used when the config names none. */
export const DEFAULT_POLICY_NAME = 'kvgate';
export const DEFAULT_SCRAPE_INTERVAL_MS = 1000;

/** Where a worker publishes its KV-cache events (vLLM's --kv-events-config, ZeroMQ). */
const kvEvents = z.strictObject({
  endpoint: z.string().regex(/^(tcp|ipc|inproc):\/\/.+/, 'expected a ZeroMQ endpoint such as tcp://10.0.0.5:5557'),
  replayEndpoint: z
    .string()
    .regex(/^(tcp|ipc|inproc):\/\/.+/, 'expected a ZeroMQ endpoint such as tcp://10.0.0.5:5558')
    .optional(),
  topic: z.string().optional(),
  /**
   * vLLM's --data-parallel-size behind this worker's URL: rank r publishes on the endpoint's port
   * + r (and its replay socket likewise), as vLLM offsets them; kvgate subscribes to every rank.
   */
  dataParallelSize: z.number().int().min(1).max(256).optional(),
}).refine((k) => (k.dataParallelSize ?? 1) === 1 || /^(tcp|inproc):\/\//.test(k.endpoint), {
  message: 'dataParallelSize above 1 needs a tcp:// or inproc:// endpoint (ranks publish on the port plus their rank)',
  path: ['dataParallelSize'],
});

/** A secret kvgate itself sends or uses (not a client key): where to read it. */
const secretSource = z
  .strictObject({
    env: z.string().min(1).optional(),
    file: z.string().min(1).optional(),
    value: z.string().min(1).optional(),
  })
  .refine((k) => [k.env, k.file, k.value].filter((x) => x !== undefined).length === 1, {
    message: 'give exactly one of env, file or value',
  });

/** What kvgate sends to a worker started with vLLM's --api-key (or behind a proxy that wants headers). */
const upstreamAuth = {
  apiKey: secretSource.optional(),
  headers: z.record(z.string().regex(/^[A-Za-z0-9-]+$/, 'not a header name'), z.string()).optional(),
};

/** Request caps (item: oversized asks). Unset fields inherit from the wider scope. */
const capsFields = {
  /** Most choices per request (`n`). */
  maxN: z.int().positive().optional(),
  /** Most output tokens per choice (`max_tokens` / `max_completion_tokens`). */
  maxTokens: z.int().positive().optional(),
  /** Most output tokens per request: n × prompts × max_tokens. */
  maxTotalTokens: z.int().positive().optional(),
  /** Longest request deadline (the derived deadline is clamped to it). */
  maxRequestMs: z.number().positive().optional(),
  /** Most inputs in one embeddings request (`input` as an array of texts or of token-id arrays). */
  maxEmbeddingInputs: z.int().positive().optional(),
  /** Most prompt tokens in one embeddings request, every input's together. */
  maxEmbeddingTokens: z.int().positive().optional(),
};
const capsOverride = z.strictObject(capsFields);

const workerInPool = z.strictObject({
  url: z.url(),
  id: z.string().min(1).optional(),
  numGpuBlocks: z.int().positive().optional(),
  blockSize: z.int().positive().optional(),
  /**
   * The worker's kind of hardware, in a pool that mixes kinds (e.g. `h100`, `a100`): the kvgate
   * policy learns prefill and decode speed per kind. Any label; workers without one share the
   * pool's.
   */
  hardware: z.string().min(1).max(64).optional(),
  kvEvents: kvEvents.optional(),
  ...upstreamAuth,
});

/**
 * LoRA adapters the workers serve on top of their model (vLLM `--enable-lora --lora-modules
 * NAME=PATH`): names clients may put in `model`, routed to these workers and relayed unchanged.
 * Each name has the safe form of fleet/adapter-name.ts (the same check as /admin/adapters).
 */
const adapterList = z
  .array(z.string().superRefine((name, ctx) => {
    const problem = adapterNameProblem(name);
    if (problem !== null) ctx.addIssue({ code: 'custom', message: problem });
  }))
  .refine((a) => new Set(a).size === a.length, { message: 'an adapter is listed twice' })
  .default([]);

/**
 * Also serve the LoRA adapters a worker lists in its /v1/models under the pool's model (vLLM
 * `--lora-modules`, or loaded at run time: /v1/load_lora_adapter, or kvgate's /admin/adapters).
 */
const discoverAdapters = z.boolean().default(true);

/**
 * LoRA adapters the workers load on demand (vLLM's LoRA resolver plugins, with
 * VLLM_ALLOW_RUNTIME_LORA_UPDATING): a request naming a model no pool serves whose whole name this
 * regular expression matches is routed to these workers, which load the adapter or answer 404.
 */
const resolveAdapters = z
  .string()
  .min(1)
  .max(1000)
  .refine(
    (s) => {
      try {
        new RegExp(s);
        return true;
      } catch {
        return false;
      }
    },
    { message: 'not a valid regular expression' },
  )
  .optional();

const flatWorker = workerInPool.extend({
  pool: z.string().min(1).default('default'),
  model: z.string().min(1),
  adapters: adapterList,
  discoverAdapters,
  resolveAdapters,
  /** As a pool's `cacheIsolation` (below): `none` lets tenants learn of each other's prompts. */
  cacheIsolation: z.enum(['none', 'tenant']).default('none'),
});

const pool = z.strictObject({
  name: z.string().min(1),
  model: z.string().min(1),
  adapters: adapterList,
  discoverAdapters,
  resolveAdapters,
  workers: z.array(workerInPool).min(1),
  /**
   * `tenant`: each tenant's prompts get their own vLLM cache_salt and gateway block hashes.
   * `none` (the default): tenants share cached prefixes, so one tenant can learn whether another
   * sent a prompt: `usage.prompt_tokens_details.cached_tokens` (and a faster first token) shows a
   * prefix already in the cache. Use `tenant` wherever tenants must not learn of each other's
   * prompts; the gateway warns at start when `none` is used with more than one tenant.
   */
  cacheIsolation: z.enum(['none', 'tenant']).default('none'),
  caps: capsOverride.optional(),
  ...upstreamAuth,
});

const ms = z.number().positive();

/**
 * `policy`: one alternative per registered policy, told apart by `name`, whose `options` are
 * checked against that policy's own schema (defaults filled in), so a bad or unknown option fails
 * here like any other field.
 */
function policyAlternative(d: PolicyDefinition) {
  return z.strictObject({
    name: d.name === DEFAULT_POLICY_NAME ? z.literal(d.name).default(d.name) : z.literal(d.name),
    options: d.options.prefault({}),
    seed: z.int().optional(),
  });
}
type PolicyAlternative = ReturnType<typeof policyAlternative>;

const policySchema = z.discriminatedUnion(
  'name',
  BUILTIN_POLICIES.map(policyAlternative) as [PolicyAlternative, ...PolicyAlternative[]],
  {
    error: (iss) => (iss.code === 'invalid_union' ? unknownPolicyMessage((iss.input as { name?: unknown } | null | undefined)?.name) : undefined),
  },
);

const tokenizerSpec = z.string().superRefine((spec, ctx) => {
  try {
    parseTokenizerSpec(spec);
  } catch (e) {
    ctx.addIssue({ code: 'custom', message: (e as Error).message });
  }
});

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

const bytes = z.int().positive();

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

const unitInterval = z.number().gt(0).max(1);

const admissionSchema = z
  .strictObject({
    /** KV-pressure admission (thresholds, queue); rate limits and classes apply either way. */
    enabled: z.boolean().default(true),
    thresholds: z
      .strictObject({
        sheddable: unitInterval.default(ADMISSION_DEFAULTS.thresholds.sheddable),
        standard: unitInterval.default(ADMISSION_DEFAULTS.thresholds.standard),
        prefillBacklogTokens: z.int().min(0).default(ADMISSION_DEFAULTS.thresholds.prefillBacklogTokens),
      })
      .prefault({}),
    queue: z
      .strictObject({
        maxSize: z.int().min(0).default(ADMISSION_DEFAULTS.queue.maxSize),
        maxWaitMs: ms.default(ADMISSION_DEFAULTS.queue.maxWaitMs),
      })
      .prefault({}),
    /**
     * What a tenant's tokensPerMinute and tokensPerDay count. `used`: a request reserves its prompt
     * tokens plus max_tokens per answer when it starts, and the reservation is settled to the
     * tokens its answer used when it ends. `reserved`: the reservation stands (as OpenAI counts).
     */
    tokensCounted: z.enum(['used', 'reserved']).default('used'),
    vllmPriority: z
      .strictObject({
        /** Pools whose workers run vLLM with --scheduling-policy priority ('*': every pool). */
        pools: z.array(z.string().min(1)).default([]),
        values: z
          .strictObject({
            critical: z.int().default(0),
            standard: z.int().default(1),
            sheddable: z.int().default(2),
          })
          .prefault({}),
      })
      .prefault({}),
  })
  .prefault({});

/**
 * State shared by gateway replicas through Redis (src/shared/): on when `shared.redis.url` or
 * REDIS_URL is set; without it every replica keeps its own (the single-process behaviour).
 */
const sharedSchema = z
  .strictObject({
    redis: z
      .strictObject({
        url: z.string().regex(/^(rediss?):\/\/\S*$/, 'expected redis://[user:password@]host[:port][/db] or rediss://...').optional(),
        keyPrefix: z.string().regex(/^[^*?\[\]\s]*$/, 'must not contain spaces or glob characters (* ? [ ])').default('kvgate:shared:'),
        /** Per-command timeout: a slower Redis counts as down for that request (local state used). */
        timeoutMs: ms.default(100),
        connectTimeoutMs: ms.default(2_000),
      })
      .prefault({}),
    /** Tenants' rate limits counted in Redis, across replicas. */
    rateLimits: z.boolean().default(true),
    /** Publish this replica's routing predictions and learn the other replicas'. */
    routing: z.boolean().default(true),
    /** Publish this replica's circuit-breaker openings and closings and apply the other replicas'. */
    breakers: z.boolean().default(true),
    /** Publish this replica's in-flight requests per worker and mirror the other replicas'. */
    load: z.boolean().default(true),
    /** Share which worker holds each Responses API response (continuations by previous_response_id). */
    responses: z.boolean().default(true),
    /** Share the workers drained for maintenance (/admin/workers/{id}/drain) with every replica. */
    drains: z.boolean().default(true),
    /** How often queued routing knowledge and load are published, one message per batch. */
    publishIntervalMs: ms.default(25),
    /**
     * A shared concurrency slot's lease: renewed every leaseMs / 3 while its request is in flight,
     * so a replica killed (or cut off from Redis) mid-request frees its tenants' slots within this.
     */
    leaseMs: ms.min(1_000, 'must be at least 1000 ms: the lease is renewed every leaseMs / 3, and a shorter one lapses on one slow heartbeat').default(15_000),
  })
  .prefault({});

const cacheSchema = z
  .strictObject({
    /** Answer repeated deterministic requests from the cache. */
    enabled: z.boolean().default(false),
    store: z.enum(['memory', 'redis']).default('memory'),
    /** Lifetime of an entry. */
    ttlMs: ms.default(300_000),
    /** Larger answers are served but not stored. */
    maxEntryBytes: bytes.default(1024 * 1024),
    /** Also cache sampled requests (temperature > 0 and no seed): the same answer every time. */
    sampled: z.boolean().default(false),
    /** Concurrent identical misses share one upstream request. */
    singleFlight: z.boolean().default(true),
    memory: z.strictObject({ maxBytes: bytes.default(256 * 1024 * 1024) }).prefault({}),
    redis: z
      .strictObject({
        url: z.string().regex(/^(rediss?):\/\/\S*$/, 'expected redis://[user:password@]host[:port][/db] or rediss://...').optional(),
        keyPrefix: z.string().regex(/^[^*?\[\]\s]*$/, 'must not contain spaces or glob characters (* ? [ ])').default('kvgate:cache:'),
        /** Per-operation timeout: a slower Redis is treated as down for that request. */
        timeoutMs: ms.default(50),
        connectTimeoutMs: ms.default(2_000),
        /** Values at least this large are stored brotli-compressed. */
        compressAboveBytes: z.int().min(0).default(2048),
        /** Consecutive failures after which Redis is skipped for coolDownMs (then one probe). */
        failuresToOpen: z.int().positive().default(3),
        coolDownMs: ms.default(1_000),
      })
      .prefault({}),
  })
  .prefault({});

/**
 * One model served by a speculative cascade (src/speculative/): a draft pool proposes tokens, the
 * target pool verifies them. Clients ask for `model`, which the target pool serves.
 */
const cascade = z.strictObject({
  model: z.string().min(1),
  targetPool: z.string().min(1),
  draftPool: z.string().min(1),
  /** Draft tokens proposed per round. */
  k: z.int().min(1).max(16).default(4),
  /** Alternatives asked per position (logprobs / prompt_logprobs); vLLM allows 20 by default. */
  topLogprobs: z.int().min(1).max(20).default(20),
  /** Token ids that end a sequence (vLLM's API does not report them); default: the tokenizer's. */
  eosTokenIds: z.array(z.int().nonnegative()).min(1).optional(),
});

/** How each round's k is chosen (src/speculative/controller.ts). */
const specController = z
  .strictObject({
    mode: z.enum(['fixed', 'adaptive']).default('fixed'),
    /** Prompt classes acceptance is tracked by: the tenant, or code vs prose by a cheap feature. */
    classBy: z.enum(['tenant', 'content']).default('tenant'),
    kMax: z.int().min(1).max(16).default(8),
    priorAcceptance: z.number().gt(0).lt(1).default(0.6),
    minEvidence: z.number().positive().default(50),
    /** Tested draft tokens after which an old acceptance observation counts half. */
    halfLifeTokens: z.number().positive().default(500),
    minGain: z.number().positive().default(1.1),
    probeRate: z.number().min(0).max(1).default(0.05),
    probeK: z.int().min(1).max(16).default(2),
    busyRunning: z.int().positive().default(64),
    busyWaiting: z.int().positive().default(2),
    draftPrice: z.number().positive().default(1),
    targetPrice: z.number().positive().default(1),
    targetTokenMs: ms.optional(),
    tpotBudgetMs: ms.optional(),
  })
  .prefault({});

const speculativeSchema = z
  .strictObject({
    cascades: z.array(cascade).default([]),
    controller: specController,
    /** Between workers that speculate inside the engine and plain ones of the same model. */
    routing: z
      .strictObject({
        enabled: z.boolean().default(false),
        /** Mean running sequences per worker at which every request goes to the plain workers. */
        busyRunning: z.number().positive().default(32),
        /** Speculating workers get requests while their mean acceptance length is at least this. */
        minAcceptanceLength: z.number().min(1).default(1.8),
      })
      .prefault({}),
    /**
     * Models whose workers take speculation settings per request (llama.cpp server:
     * `speculative.n_max`): the controller sets n_max per request (src/speculative/per-request.ts).
     */
    perRequest: z
      .array(
        z.strictObject({
          model: z.string().min(1),
          /** Largest n_max sent. */
          kMax: z.int().min(1).max(64).default(16),
          /** Cost of one draft token relative to one target decode step (draft ÷ target step time). */
          draftCost: z.number().min(0).max(1).default(0.1),
        }),
      )
      .default([]),
    /** Timeout of one verification or tokenize call, and the longest a draft call may take. */
    callTimeoutMs: ms.default(10_000),
    /**
     * Deadline of one draft call (src/speculative/draft-deadline.ts): factor × k × the draft pool's
     * measured time per token, at least floorMs, at most k × controller.tpotBudgetMs and
     * callTimeoutMs. A draft that misses it is dropped for the request (the target finishes it
     * alone at once) and its worker is suspected hung (routed around until it answers again).
     */
    draftDeadline: z
      .strictObject({
        floorMs: ms.default(250),
        factor: z.number().min(1).default(4),
      })
      .prefault({}),
    /** Timeout of each start-up capability probe. */
    probeTimeoutMs: ms.default(5_000),
  })
  .prefault({});

export const configSchema = z
  .strictObject({
    listen: z
      .strictObject({
        host: z.string().min(1).default('127.0.0.1'),
        port: z.int().min(0).max(65535).default(8080),
        /**
         * Serve HTTPS with this certificate and key (PEM files; read again at every reload, so a
         * renewed certificate needs no restart). `clientCaFile`: clients must present a
         * certificate this CA signed (mutual TLS). Unset: plain HTTP.
         */
        tls: z
          .strictObject({
            certFile: z.string().min(1),
            keyFile: z.string().min(1),
            clientCaFile: z.string().min(1).optional(),
          })
          .optional(),
      })
      .prefault({}),
    pools: z.array(pool).default([]),
    workers: z.array(flatWorker).default([]),
    timeouts: z
      .strictObject({
        /** Wait for the first streamed body byte; a worker that says nothing by then is given up on. */
        firstByteMs: ms.default(30_000),
        /** Slowest generation rate still considered healthy; sets the default request deadline. */
        minTokensPerSecond: z.number().positive().default(5),
        /** A fixed request deadline instead of the derived one. */
        requestMs: ms.optional(),
        /** TCP connect timeout to a worker. */
        connectMs: ms.default(5_000),
        /** Output length assumed for the deadline when a request sets no max_tokens. */
        assumedMaxTokens: z.int().positive().default(8192),
      })
      .prefault({}),
    scrape: z
      .strictObject({
        /** Default 1000 ms, or the policy's own published interval when it has one (llm-d: 50 ms). */
        intervalMs: ms.optional(),
        timeoutMs: ms.optional(),
        staleAfterMs: ms.default(5_000),
      })
      .prefault({}),
    health: z
      .strictObject({
        intervalMs: ms.default(2_000),
        timeoutMs: ms.optional(),
        failuresToMarkDown: z.int().positive().default(3),
        /**
         * Read each worker's /v1/models again this often: its max_model_len and the LoRA adapters
         * it serves, which may be loaded and unloaded at run time.
         */
        modelsIntervalMs: ms.default(10_000),
      })
      .prefault({}),
    circuitBreaker: z
      .strictObject({
        failuresToOpen: z.int().positive().default(5),
        coolDownMs: ms.default(10_000),
        /** Also open when this share of the window's outcomes failed (with at least minRequests). */
        failureRate: z
          .strictObject({
            threshold: unitInterval.default(0.5),
            windowMs: ms.default(30_000),
            minRequests: z.int().positive().default(20),
          })
          .prefault({}),
        /** A worker answering 503/429 leaves routing this long (or its Retry-After), doubling while it repeats. */
        overloadBackoffMs: ms.default(1_000),
        maxBackoffMs: ms.default(30_000),
      })
      .prefault({}),
    policy: policySchema.prefault({ name: DEFAULT_POLICY_NAME }),
    limits: z
      .strictObject({
        maxBodyBytes: z.int().positive().default(4 * 1024 * 1024),
        /** The bound for a multipart upload (the audio routes): OpenAI's own limit for an audio file. */
        maxUploadBytes: z.int().positive().default(25 * 1024 * 1024),
        retryAfterSeconds: z.int().positive().default(1),
      })
      .prefault({}),
    caps: z
      .strictObject({
        maxN: capsFields.maxN.default(16),
        maxTokens: capsFields.maxTokens.default(32_768),
        maxTotalTokens: capsFields.maxTotalTokens.default(65_536),
        maxRequestMs: capsFields.maxRequestMs.default(1_800_000),
        // OpenAI's own limits for /v1/embeddings: at most 2,048 inputs, 300,000 tokens summed
        // over them (platform.openai.com/docs/api-reference/embeddings/create).
        maxEmbeddingInputs: capsFields.maxEmbeddingInputs.default(2_048),
        maxEmbeddingTokens: capsFields.maxEmbeddingTokens.default(300_000),
      })
      .prefault({}),
    /** The client side of the HTTP server: slow clients, connection caps, what responses reveal. */
    server: z
      .strictObject({
        /** The request line and headers must arrive within this (408 otherwise). */
        headersTimeoutMs: ms.default(10_000),
        /** The whole body must arrive within this after the headers (408 otherwise). */
        bodyTimeoutMs: ms.default(30_000),
        /** An idle keep-alive connection is closed after this. */
        keepAliveTimeoutMs: ms.default(5_000),
        /** Open client connections at most; past it, idle ones are closed to make room. */
        maxConnections: z.int().positive().default(8_192),
        /** Open connections per client address at most (same rule). */
        maxConnectionsPerAddress: z.int().positive().default(1_024),
        /** Connections beyond maxConnections kept for /health and /ready when nothing idle can be closed. */
        probeReserve: z.int().min(0).default(32),
        /**
         * The share of maxConnections one tenant's requests may hold while their bodies are still
         * arriving (counted from the key read); past it, its next request is refused with 429 and
         * the connection closed, so a tenant stalling its bodies leaves room for the others.
         */
        tenantPendingBodyShare: z.number().gt(0).max(1).default(0.25),
        /**
         * /ready answers 503 also while no worker is routable. Off by default: several replicas
         * behind one Service would all leave it together, and clients would meet refused
         * connections instead of a 503 with Retry-After from the gateway.
         */
        readyRequiresWorker: z.boolean().default(false),
        /** Send x-kvgate-worker and x-kvgate-prefix-hit to every caller (admin callers always get them). */
        routingHeaders: z.boolean().default(false),
        /**
         * Relayed responses and requests to workers are written together at the end of each turn
         * of the event loop (src/http/write-batch.ts), not one by one: fewer wake-ups of the
         * processes at either end. Off: each is written as soon as it is ready.
         */
        batchWrites: z.boolean().default(true),
        /** Origins allowed to call the API from a browser (CORS); empty: no CORS headers at all. */
        corsOrigins: z.array(z.string().regex(/^https?:\/\/[^/\s]+$|^\*$/, 'expected an origin such as https://app.example.com, or *')).default([]),
      })
      .prefault({}),
    /**
     * Passive outlier detection: a worker that owes bytes (streams in flight) and has sent none for
     * longer than its expected time to first token allows is suspected: routed around at once,
     * its not-yet-answered attempts retried elsewhere.
     */
    outlier: z
      .strictObject({
        enabled: z.boolean().default(true),
        /** Never suspect a worker silent for less than this. */
        minSilenceMs: ms.default(750),
        /** Allowed silence = max(minSilenceMs, factor × the larger of its own and its peers' recent TTFT). */
        ttftFactor: z.number().min(1).default(4),
        checkIntervalMs: ms.default(100),
      })
      .prefault({}),
    /** Salting of cached prompts per tenant (pools with cacheIsolation: tenant). */
    cacheSalt: z.strictObject({ secret: secretSource.optional() }).prefault({}),
    retry: z.strictObject({ attempts: z.int().min(0).max(5).default(1) }).prefault({}),
    upstream: z
      .strictObject({
        /** Connections per worker; 0 = no limit (every in-flight stream holds one). */
        connections: z.int().min(0).default(0),
        keepAliveTimeoutMs: ms.default(4_000),
        /**
         * The HTTP client relayed requests go through: kvgate's own keep-alive pool (somewhat less
         * CPU per request than undici, stream events relayed a socket read at a time, stale
         * keep-alive connections retried; docs/performance.md), or undici's Pool. Scrapes and
         * probes always use undici.
         */
        client: z.enum(['kvgate', 'undici']).default('kvgate'),
      })
      .prefault({}),
    /** Configuration hot reload (src/gateway/config-reload.ts): on SIGHUP, and on a change of the file unless watch is off. */
    reload: z
      .strictObject({
        /** Reload when the config file changes (also when an editor or a ConfigMap replaces it). */
        watch: z.boolean().default(true),
        /** Changes closer together than this are read once, after the last. */
        debounceMs: z.number().min(0).default(300),
      })
      .prefault({}),
    shutdown: z
      .strictObject({
        /** On SIGTERM, /ready answers 503 this long while requests are still served (load balancers drain). */
        drainDelayMs: z.number().min(0).default(5_000),
        graceMs: z.number().min(0).default(10_000),
      })
      .prefault({}),
    tokenizers: z
      .strictObject({
        /** Spec for models not listed: 'estimate', 'hf:<path to tokenizer.json>' or 'remote'. */
        default: tokenizerSpec.default('estimate'),
        models: z.record(z.string(), tokenizerSpec).default({}),
        /** Timeout of a worker's /tokenize for 'remote' (then the estimate is used). */
        remoteTimeoutMs: ms.default(250),
        /**
         * Worker threads per `hf:` tokenizer: prompts of 1,024 characters or more are tokenized
         * there, off the event loop, so a long prompt does not hold up every other request.
         * 0 tokenizes everything on the event loop. Each thread holds its own copy of the
         * tokenizer (~60 MB of memory for a Llama tokenizer).
         */
        threads: z.int().min(0).max(64).default(1),
        /**
         * Token ids of long chat messages (256 characters or more) kept for the next request that
         * sends them again (the `estimate` tokenizer; 8 bytes each, plus the text). 0 keeps none.
         */
        keptIds: z.int().min(0).default(DEFAULT_KEPT_IDS),
      })
      .prefault({}),
    log: z
      .strictObject({
        level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
        pretty: z.boolean().default(false),
        /**
         * The share of successful requests that get a request line (a 2xx answered at the first
         * attempt): 0.1 logs one in ten, in turn. Errors, refusals, client aborts and retried
         * requests are always logged. A sampled line carries `sampleRate`, the number of requests
         * it stands for. Metrics count every request whatever this is.
         */
        requestSampleRate: z.number().min(0).max(1).default(1),
      })
      .prefault({}),
    /**
     * Other names for served models, `alias: served model` (e.g. the OpenAI model name an
     * application is configured with). A request naming an alias is served by that model's pools,
     * its body's `model` rewritten to the served name (the one the workers know); /v1/models lists
     * each alias with `root`, the model it names. Not for audio uploads, which are relayed byte for
     * byte.
     */
    aliases: z.record(z.string().min(1).max(256), z.string().min(1)).default({}),
    /** API keys mapped to tenants; none: the gateway is open and every request is tenant `default`. */
    tenants: z.array(tenant).default([]),
    /** Keys for /admin/* (required there once any key is configured). */
    admin: z
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
      .prefault({}),
    cache: cacheSchema,
    admission: admissionSchema,
    speculative: speculativeSchema,
    shared: sharedSchema,
  })
  .superRefine((c, ctx) => {
    if (c.pools.length === 0 && c.workers.length === 0) {
      ctx.addIssue({ code: 'custom', path: ['pools'], message: 'at least one worker is required (in pools or workers)' });
    }
    if (c.scrape.timeoutMs !== undefined && c.scrape.timeoutMs >= (c.scrape.intervalMs ?? DEFAULT_SCRAPE_INTERVAL_MS)) {
      ctx.addIssue({ code: 'custom', path: ['scrape', 'timeoutMs'], message: 'must be shorter than scrape.intervalMs' });
    }
    if (c.health.timeoutMs !== undefined && c.health.timeoutMs >= c.health.intervalMs) {
      ctx.addIssue({ code: 'custom', path: ['health', 'timeoutMs'], message: 'must be shorter than health.intervalMs' });
    }
    const seen = new Map<string, string>();
    const check = (id: string, path: PropertyKey[]): void => {
      const prev = seen.get(id);
      if (prev) ctx.addIssue({ code: 'custom', path, message: `duplicate worker id '${id}' (also ${prev})` });
      else seen.set(id, formatPath(path));
    };
    c.pools.forEach((p, i) =>
      p.workers.forEach((w, j) => check(w.id ?? `${p.name}-${j}`, ['pools', i, 'workers', j, 'id'])),
    );
    c.workers.forEach((w, i) => check(w.id ?? `${w.pool}-w${i}`, ['workers', i, 'id']));
    const t = c.admission.thresholds;
    if (t.sheddable > t.standard) {
      ctx.addIssue({ code: 'custom', path: ['admission', 'thresholds', 'sheddable'], message: 'must not be above admission.thresholds.standard' });
    }
    const v = c.admission.vllmPriority.values;
    if (!(v.critical < v.standard && v.standard < v.sheddable)) {
      ctx.addIssue({ code: 'custom', path: ['admission', 'vllmPriority', 'values'], message: 'expected critical < standard < sheddable (vLLM serves lower values first)' });
    }
    // A cascade's pools exist, serve different models, and its target pool serves its model.
    const poolModels = new Map<string, Set<string>>();
    for (const p of c.pools) (poolModels.get(p.name) ?? poolModels.set(p.name, new Set()).get(p.name)!).add(p.model);
    for (const w of c.workers) (poolModels.get(w.pool) ?? poolModels.set(w.pool, new Set()).get(w.pool)!).add(w.model);
    const cascadeModels = new Set<string>();
    c.speculative.cascades.forEach((sc, i) => {
      const at = (f: string) => ['speculative', 'cascades', i, f];
      const target = poolModels.get(sc.targetPool);
      const draft = poolModels.get(sc.draftPool);
      if (!target) ctx.addIssue({ code: 'custom', path: at('targetPool'), message: `no pool named '${sc.targetPool}'` });
      else if (!target.has(sc.model) || target.size > 1) {
        ctx.addIssue({ code: 'custom', path: at('targetPool'), message: `pool '${sc.targetPool}' must serve model '${sc.model}' only (it serves ${[...target].join(', ')})` });
      }
      if (!draft) ctx.addIssue({ code: 'custom', path: at('draftPool'), message: `no pool named '${sc.draftPool}'` });
      else if (draft.size > 1) ctx.addIssue({ code: 'custom', path: at('draftPool'), message: `pool '${sc.draftPool}' must serve one model (it serves ${[...draft].join(', ')})` });
      if (sc.draftPool === sc.targetPool) ctx.addIssue({ code: 'custom', path: at('draftPool'), message: 'must differ from targetPool' });
      if (cascadeModels.has(sc.model)) ctx.addIssue({ code: 'custom', path: at('model'), message: `model '${sc.model}' has two cascades` });
      cascadeModels.add(sc.model);
    });
    const baseModels = new Set([...poolModels.values()].flatMap((m) => [...m]));
    // An adapter is a model name of its own, always on the same base model.
    const adapterBase = new Map<string, string>();
    const checkAdapters = (adapters: readonly string[], base: string, at: Array<string | number>): void =>
      adapters.forEach((a, j) => {
        const prev = adapterBase.get(a);
        if (baseModels.has(a)) ctx.addIssue({ code: 'custom', path: [...at, j], message: `'${a}' is a served model's own name` });
        else if (prev !== undefined && prev !== base) {
          ctx.addIssue({ code: 'custom', path: [...at, j], message: `adapter '${a}' is also served on model '${prev}': an adapter belongs to one base model` });
        } else adapterBase.set(a, base);
      });
    c.pools.forEach((p, i) => checkAdapters(p.adapters, p.model, ['pools', i, 'adapters']));
    c.workers.forEach((w, i) => checkAdapters(w.adapters, w.model, ['workers', i, 'adapters']));
    for (const sc of c.speculative.cascades) {
      for (const [i, p] of c.pools.entries()) {
        if ((p.name === sc.targetPool || p.name === sc.draftPool) && p.resolveAdapters !== undefined) {
          ctx.addIssue({ code: 'custom', path: ['pools', i, 'resolveAdapters'], message: `pool '${p.name}' is in a speculative cascade, which does not serve adapters` });
        }
        if ((p.name === sc.targetPool || p.name === sc.draftPool) && p.adapters.length > 0) {
          ctx.addIssue({ code: 'custom', path: ['pools', i, 'adapters'], message: `pool '${p.name}' is in a speculative cascade, which does not serve adapters` });
        }
      }
    }
    const servedModels = new Set([...baseModels, ...adapterBase.keys()]);
    const perRequestModels = new Set<string>();
    c.speculative.perRequest.forEach((pr, i) => {
      const at = ['speculative', 'perRequest', i, 'model'];
      if (!baseModels.has(pr.model)) ctx.addIssue({ code: 'custom', path: at, message: `no pool serves model '${pr.model}'` });
      if (cascadeModels.has(pr.model)) ctx.addIssue({ code: 'custom', path: at, message: `model '${pr.model}' is served by a cascade` });
      if (perRequestModels.has(pr.model)) ctx.addIssue({ code: 'custom', path: at, message: `model '${pr.model}' is listed twice` });
      perRequestModels.add(pr.model);
    });
    for (const [alias, model] of Object.entries(c.aliases)) {
      if (servedModels.has(alias)) ctx.addIssue({ code: 'custom', path: ['aliases', alias], message: `'${alias}' is a served model's own name` });
      else if (!servedModels.has(model)) ctx.addIssue({ code: 'custom', path: ['aliases', alias], message: `no pool serves model '${model}'` });
    }
    const tenantIds = new Map<string, number>();
    c.tenants.forEach((t, i) => {
      const prev = tenantIds.get(t.id);
      if (prev !== undefined) ctx.addIssue({ code: 'custom', path: ['tenants', i, 'id'], message: `duplicate tenant id '${t.id}' (also tenants[${prev}])` });
      else tenantIds.set(t.id, i);
      t.models?.forEach((m, j) => {
        if (!servedModels.has(m)) ctx.addIssue({ code: 'custom', path: ['tenants', i, 'models', j], message: `no pool serves model '${m}'` });
      });
    });
  });

export type RawConfig = z.input<typeof configSchema>;
type Parsed = z.output<typeof configSchema>;

export interface WorkerKvEvents {
  workerId: string;
  endpoint: string;
  replayEndpoint?: string;
  topic?: string;
  /** Data-parallel ranks publishing at endpoint + rank (default 1). */
  dataParallelSize?: number;
}

/** A tenant with its keys read and hashed. */
export interface TenantConfig {
  id: string;
  /** SHA-256 digests of its keys. */
  digests: Buffer[];
  cache: TenantCacheOverrides;
  priority: PriorityClass;
  limits: TenantLimits;
  caps: RequestCapsOverride;
  /** The models it may use; absent: every model. */
  models?: string[];
}

/** Request caps; a narrower scope (pool, tenant) may only lower them. */
export interface RequestCaps {
  maxN: number;
  maxTokens: number;
  maxTotalTokens: number;
  maxRequestMs: number;
  maxEmbeddingInputs: number;
  maxEmbeddingTokens: number;
}
export type RequestCapsOverride = Partial<RequestCaps>;

/** What the gateway needs of a pool beyond its workers. */
export interface PoolSettings {
  cacheIsolation: 'none' | 'tenant';
  caps: RequestCapsOverride;
}

type SecretSource = { env?: string; file?: string; value?: string };

/** Read a secret kvgate uses itself (an upstream API key, the cache-salt secret). */
function readSecret(src: SecretSource, env: NodeJS.ProcessEnv): { ok: true; value: string } | { ok: false; field: string; message: string } {
  if (src.value !== undefined) return { ok: true, value: src.value };
  if (src.env !== undefined) {
    const v = env[src.env]?.trim();
    return v ? { ok: true, value: v } : { ok: false, field: 'env', message: `environment variable ${src.env} is not set or empty` };
  }
  try {
    const v = readFileSync(src.file!, 'utf8').trim();
    return v ? { ok: true, value: v } : { ok: false, field: 'file', message: `${src.file} is empty` };
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return { ok: false, field: 'file', message: `cannot read ${src.file}${code ? ` (${code})` : ''}` };
  }
}

export type CacheConfig = Parsed['cache'] & { redis: Parsed['cache']['redis'] & { url?: string } };

export interface GatewayConfig extends Omit<Parsed, 'pools' | 'workers' | 'scrape' | 'health' | 'tenants' | 'admin' | 'cache' | 'cacheSalt'> {
  tenants: TenantConfig[];
  admin: { digests: Buffer[]; metricsDigests: Buffer[]; openMetrics: boolean };
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
  scrape: Parsed['scrape'] & {
    intervalMs: number;
    timeoutMs: number;
    /** False when the interval is the default (a policy may then bring its own). */
    intervalExplicit: boolean;
  };
  health: Parsed['health'] & { timeoutMs: number };
}

/** The served model `name` is an alias of (config `aliases`), or undefined; own keys only. */
export function aliasTarget(aliases: Readonly<Record<string, string>>, name: string): string | undefined {
  return Object.hasOwn(aliases, name) ? aliases[name] : undefined;
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  ${p}`).join('\n')}`);
  }
}

/** Validate a config object (already parsed from YAML/JSON). Throws ConfigError. */
export function parseConfig(input: unknown, env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  const r = configSchema.safeParse(input ?? {});
  if (!r.success) {
    throw new ConfigError(
      r.error.issues.map((i) => {
        const path = formatPath(i.path);
        return path ? `${path}: ${i.message}` : i.message;
      }),
    );
  }
  const c = r.data;
  const workers: WorkerIdentity[] = [];
  const kv: WorkerKvEvents[] = [];
  // Keys from environment variables and files are read now: a missing one fails the start.
  const problems: string[] = [];
  const headersOf = (
    own: { apiKey?: SecretSource; headers?: Record<string, string> },
    pool: { apiKey?: SecretSource; headers?: Record<string, string> } | undefined,
    path: Array<string | number>,
    poolPath: Array<string | number> | undefined,
  ): Record<string, string> | undefined => {
    const h: Record<string, string> = { ...(pool?.headers ?? {}), ...(own.headers ?? {}) };
    const src = own.apiKey ?? pool?.apiKey;
    if (src !== undefined) {
      const r = readSecret(src, env);
      if (r.ok) h.authorization = `Bearer ${r.value}`;
      else problems.push(`${formatPath([...(own.apiKey ? path : poolPath!), 'apiKey', r.field])}: ${r.message}`);
    }
    return Object.keys(h).length > 0 ? Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), v])) : undefined;
  };
  const poolSettings = new Map<string, PoolSettings>();
  const cascadePools = new Set(c.speculative.cascades.flatMap((sc) => [sc.targetPool, sc.draftPool]));
  for (const [pi, p] of c.pools.entries()) {
    poolSettings.set(p.name, { cacheIsolation: p.cacheIsolation, caps: p.caps ?? {} });
    p.workers.forEach((w, j) => {
      if (w.kvEvents) kv.push({ workerId: w.id ?? `${p.name}-${j}`, ...w.kvEvents });
      workers.push({
        id: w.id ?? `${p.name}-${j}`,
        url: stripSlash(w.url),
        pool: p.name,
        model: p.model,
        ...(p.adapters.length > 0 ? { adapters: p.adapters } : {}),
        // A speculative cascade's pools serve no adapters (checked above for configured ones).
        discoverAdapters: p.discoverAdapters && !cascadePools.has(p.name),
        ...(p.resolveAdapters !== undefined ? { resolveAdapters: p.resolveAdapters } : {}),
        numGpuBlocks: w.numGpuBlocks,
        blockSize: w.blockSize,
        ...(w.hardware !== undefined ? { hardware: w.hardware } : {}),
        upstreamHeaders: headersOf(w, p, ['pools', pi, 'workers', j], ['pools', pi]),
      });
    });
  }
  c.workers.forEach((w, i) => {
    if (w.kvEvents) kv.push({ workerId: w.id ?? `${w.pool}-w${i}`, ...w.kvEvents });
    if (!poolSettings.has(w.pool) || w.cacheIsolation === 'tenant') poolSettings.set(w.pool, { cacheIsolation: w.cacheIsolation, caps: poolSettings.get(w.pool)?.caps ?? {} });
    workers.push({
      id: w.id ?? `${w.pool}-w${i}`,
      url: stripSlash(w.url),
      pool: w.pool,
      model: w.model,
      ...(w.adapters.length > 0 ? { adapters: w.adapters } : {}),
      discoverAdapters: w.discoverAdapters && !cascadePools.has(w.pool),
      ...(w.resolveAdapters !== undefined ? { resolveAdapters: w.resolveAdapters } : {}),
      numGpuBlocks: w.numGpuBlocks,
      blockSize: w.blockSize,
      ...(w.hardware !== undefined ? { hardware: w.hardware } : {}),
      upstreamHeaders: headersOf(w, undefined, ['workers', i], undefined),
    });
  });
  let cacheSaltSecret: string | null = null;
  if (c.cacheSalt.secret !== undefined) {
    const r = readSecret(c.cacheSalt.secret, env);
    if (r.ok) cacheSaltSecret = r.value;
    else problems.push(`${formatPath(['cacheSalt', 'secret', r.field])}: ${r.message}`);
  }
  const digestsOf = (keys: Parsed['admin']['keys'], path: Array<string | number>): Buffer[] =>
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
  const redisUrl = c.cache.redis.url ?? (env.REDIS_URL !== undefined && env.REDIS_URL !== '' ? env.REDIS_URL : undefined);
  if (c.cache.enabled && c.cache.store === 'redis') {
    if (redisUrl === undefined) problems.push('cache.redis.url: required when cache.store is redis (or set REDIS_URL)');
    else if (!/^rediss?:\/\/\S*$/.test(redisUrl)) problems.push('cache.redis.url: REDIS_URL is not a redis:// or rediss:// URL');
  }
  const sharedUrl = c.shared.redis.url ?? (env.REDIS_URL !== undefined && env.REDIS_URL !== '' ? env.REDIS_URL : undefined);
  if (sharedUrl !== undefined && !/^rediss?:\/\/\S*$/.test(sharedUrl)) problems.push('shared.redis.url: REDIS_URL is not a redis:// or rediss:// URL');
  if (problems.length > 0) throw new ConfigError(problems);
  const { pools: _p, workers: _w, tenants: _t, admin: _a, cacheSalt: _s, ...rest } = c;
  return {
    ...rest,
    tenants,
    admin,
    cache: { ...c.cache, redis: { ...c.cache.redis, url: redisUrl } },
    /** `shared.redis.url` falls back to REDIS_URL: set, replicas share state through it. */
    shared: { ...c.shared, redis: { ...c.shared.redis, url: sharedUrl } },
    workers,
    pools: poolSettings,
    cacheSaltSecret,
    kvEvents: kv,
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

/**
 * Read and validate a YAML or JSON config file. Throws ConfigError (also for unreadable files).
 * `adjust` may change the parsed document before it is validated (command-line overrides).
 */
export function loadConfigFile(path: string, adjust?: (raw: unknown) => unknown): GatewayConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new ConfigError([`cannot read ${path}: ${(e as Error).message}`]);
  }
  return parseConfigText(text, path, adjust);
}

/** Validate the text of a YAML or JSON config file (`path` only names it in errors). Throws ConfigError. */
export function parseConfigText(text: string, path: string, adjust?: (raw: unknown) => unknown): GatewayConfig {
  let data: unknown;
  try {
    data = parseYaml(text);
  } catch (e) {
    throw new ConfigError([`${path} is not valid YAML/JSON: ${(e as Error).message.split('\n')[0]}`]);
  }
  return parseConfig(adjust ? adjust(data) : data);
}

function stripSlash(u: string): string {
  return u.endsWith('/') ? u.slice(0, -1) : u;
}
