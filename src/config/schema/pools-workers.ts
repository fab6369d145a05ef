/**
 * `pools`, `workers` (the flat list) and `aliases`: the workers, the models they serve, their
 * LoRA adapters, and how kvgate reaches them. Ids and the worker list: config/workers.ts.
 */
import { z } from 'zod';
import { adapterNameProblem } from '../../fleet/adapter-name.js';
import { capsOverride } from './caps.js';
import { workerRole } from './disaggregation.js';
import { secretSource } from './fields.js';

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

/** What kvgate sends to a worker started with vLLM's --api-key (or behind a proxy that wants headers). */
/**
 * The inference server behind a worker's URL: `vllm` (the default) or `sglang` (SGLang's
 * `python -m sglang.launch_server --enable-metrics`): which metric names kvgate scrapes and which
 * native routes the speculative cascade calls (docs/vllm.md, "SGLang workers").
 */
const engineKind = z.enum(['vllm', 'sglang']);

const upstreamAuth = {
  apiKey: secretSource.optional(),
  headers: z.record(z.string().regex(/^[A-Za-z0-9-]+$/, 'not a header name'), z.string()).optional(),
};

export const workerInPool = z.strictObject({
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
  /** Overrides the pool's `engine` for this worker. */
  engine: engineKind.optional(),
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

export const flatWorker = workerInPool.extend({
  pool: z.string().min(1).default('default'),
  model: z.string().min(1),
  adapters: adapterList,
  discoverAdapters,
  resolveAdapters,
  /** As a pool's `cacheIsolation` (below): `none` lets tenants learn of each other's prompts. */
  cacheIsolation: z.enum(['none', 'tenant']).default('none'),
  /** As a pool's `role` (below). */
  role: workerRole,
});

export const pool = z.strictObject({
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
  /** The inference server of the pool's workers (each may override it): `vllm` or `sglang`. */
  engine: engineKind.default('vllm'),
  caps: capsOverride.optional(),
  /**
   * Prefill/decode disaggregation: `prefill` workers only prefill prompts whose KV a decode worker
   * then pulls (vLLM with a KV connector, e.g. NixlConnector); `decode` workers decode them and
   * serve every request not disaggregated; `both` (the default) serve whole requests and may
   * prefill or decode for others. See the `disaggregation` section.
   */
  role: workerRole,
  ...upstreamAuth,
});

export const poolsSection = z.array(pool).default([]);
export const workersSection = z.array(flatWorker).default([]);

/**
 * Other names for served models, `alias: served model` (e.g. the OpenAI model name an
 * application is configured with). A request naming an alias is served by that model's pools,
 * its body's `model` rewritten to the served name (the one the workers know); /v1/models lists
 * each alias with `root`, the model it names. Not for audio uploads, which are relayed byte for
 * byte.
 */
export const aliasesSection = z.record(z.string().min(1).max(256), z.string().min(1)).default({});
