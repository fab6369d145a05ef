/**
 * LoRA adapters loaded and unloaded at run time. vLLM started with
 * VLLM_ALLOW_RUNTIME_LORA_UPDATING=True serves POST /v1/load_lora_adapter {lora_name, lora_path}
 * and /v1/unload_lora_adapter {lora_name}, and lists every adapter it holds in /v1/models with its
 * base model as `parent` (vllm/entrypoints/openai/serving_models.py). Two ways keep the gateway in
 * step:
 *
 * - discovery: each worker's /v1/models is read every `health.modelsIntervalMs` (fleet/health.ts);
 *   with `discoverAdapters` (the default) the adapters it lists become model names routed to it,
 *   and those it no longer lists stop being routed there (onModelList);
 * - /admin/adapters: GET lists the adapters served and where; POST {name, path, pool | workers}
 *   loads one on a pool's workers (or the ones named) and routes to each worker from the moment it
 *   answers; DELETE ?name=X (&pool=P, &worker=ID) unloads it. Adapters from the configuration are
 *   not unloaded here (the configuration would list them again): 409.
 *
 * An adapter's name must not be a served base model's or an alias's, it belongs to one base model
 * (WorkerRegistry.adapterConflict), and a speculative cascade's pools serve none, as for configured
 * adapters.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { readBody } from '../../api/body.js';
import { ApiError, echo, errors, sendError } from '../../api/errors.js';
import { adapterNameProblem } from '../../fleet/adapter-name.js';
import type { WorkerRegistry } from '../../fleet/registry.js';
import type { Upstreams } from '../../fleet/upstreams.js';
import type { WorkerState } from '../../fleet/worker-state.js';
import type { Logger } from '../../telemetry/logger.js';
import { json, type LocalRoute } from './local-routes.js';

/** An adapter name in the safe form of fleet/adapter-name.ts. */
const adapterName = z.string().superRefine((name, ctx) => {
  const problem = adapterNameProblem(name);
  if (problem !== null) ctx.addIssue({ code: 'custom', message: problem });
});

/**
 * A load names an adapter and where the workers find it; an unload only the name. The path is
 * the admin's, passed to the workers as given (vLLM resolves it: a local directory or a Hugging
 * Face repository), but never with control characters, which would end up in logs.
 */
const loadSchema = z.strictObject({
  name: adapterName,
  path: z.string().min(1).max(4096).regex(/^[^\p{Cc}\p{Cf}]+$/u, 'a path has no control or invisible formatting characters'),
  pool: z.string().min(1).max(256).optional(),
  workers: z.array(z.string().min(1).max(256)).min(1).max(1024).optional(),
});

const BODY_LIMIT = 64 * 1024;
/** Longest worker answer kept for a failure's message. */
const ANSWER_MAX_BYTES = 16 * 1024;

export interface AdapterAdminDeps {
  registry: WorkerRegistry;
  upstreams: Upstreams;
  logger: Logger;
  /** Config `aliases`, read per request (an adapter may not take an alias's name). */
  aliases: () => Readonly<Record<string, string>>;
  /** Pools in a speculative cascade (config `speculative.cascades`), which serve no adapters. */
  cascadePools: () => ReadonlySet<string>;
  /** How long a worker may take to load or unload an adapter (fetching it may take a while). */
  timeoutMs: number;
}

/** One worker's answer to a load or unload. */
interface WorkerOutcome {
  worker: string;
  ok: boolean;
  /** The worker's HTTP status, or null when it could not be reached. */
  status: number | null;
  message: string;
}

export interface AdapterAdmin {
  /** fleet/health.ts's onModelList: a worker's /v1/models listed these adapters. */
  onModelList(w: WorkerState, adapters: string[], epoch: number): void;
  route: LocalRoute;
}

export function createAdapterAdmin(d: AdapterAdminDeps): AdapterAdmin {
  const { registry, logger } = d;
  /** Per worker, the listed names last refused (logged once, not at every read). */
  const refusedBefore = new Map<string, string>();

  const apply = (w: WorkerState, names: Iterable<string>, why: string): void => {
    const r = registry.setLoadedAdapters(w, names);
    if (r.added.length > 0 || r.removed.length > 0) logger.info({ worker: w.id, added: r.added, removed: r.removed, why }, 'LoRA adapters served there changed');
    const refused = r.refused.map((x) => `${x.name}: ${x.reason}`).join('; ');
    if (refused !== (refusedBefore.get(w.id) ?? '')) {
      if (refused !== '') logger.warn({ worker: w.id, refused: r.refused }, 'worker lists LoRA adapters that are not routed there');
      refusedBefore.set(w.id, refused);
    }
  };

  const onModelList = (w: WorkerState, adapters: string[], epoch: number): void => {
    // An operator loaded or unloaded an adapter while the list was read: the list may predate it.
    if (!w.discoverAdapters || w.retired || epoch !== w.adapterEpoch) return;
    apply(w, adapters, 'listed in its /v1/models');
  };

  /** POST a JSON body to a worker; its status and message (vLLM answers text on success, JSON errors). */
  const call = async (w: WorkerState, path: string, body: unknown): Promise<{ status: number; message: string }> => {
    const base = new URL(w.url).pathname.replace(/\/$/, '');
    const payload = JSON.stringify(body);
    const r = await d.upstreams.for(w.id, w.url).request({
      method: 'POST',
      path: base + path,
      headers: { ...w.upstreamHeaders, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(payload)) },
      body: payload,
      signal: AbortSignal.timeout(d.timeoutMs),
    });
    const parts: Buffer[] = [];
    let size = 0;
    for await (const c of r.body) {
      size += (c as Buffer).length;
      if (size > ANSWER_MAX_BYTES) {
        r.body.destroy();
        break;
      }
      parts.push(c as Buffer);
    }
    const text = Buffer.concat(parts).toString('utf8');
    return { status: r.statusCode, message: answerMessage(text) };
  };

  /** Ask each worker, all at once; `done` says which answers count as done. */
  const each = (workers: readonly WorkerState[], path: string, body: unknown, done: (status: number, message: string) => boolean): Promise<WorkerOutcome[]> =>
    Promise.all(
      workers.map(async (w): Promise<WorkerOutcome> => {
        try {
          const r = await call(w, path, body);
          return { worker: w.id, ok: done(r.status, r.message), status: r.status, message: r.message };
        } catch (e) {
          const msg = (e as Error).name === 'TimeoutError' || (e as Error).name === 'AbortError' ? `no answer within ${d.timeoutMs} ms` : (e as Error).message || String(e);
          return { worker: w.id, ok: false, status: null, message: msg };
        }
      }),
    );

  const summary = (failed: WorkerOutcome[]): string => failed.map((f) => `${f.worker}: ${f.status ?? 'unreachable'} ${echo(f.message, 200)}`).join('; ');

  const list = () => {
    const data = [];
    for (const id of registry.models()) {
      const parent = registry.adapterOf(id);
      if (parent === undefined) continue;
      const workers = registry.serving(id) ?? [];
      data.push({
        id,
        parent,
        workers: workers.map((w) => ({ id: w.id, pool: w.pool, configured: w.configuredAdapters.includes(id) })),
      });
    }
    return { object: 'list', data };
  };

  /** The workers a load goes to: those named, or the pool's, or the only pool's. */
  const targets = (body: z.infer<typeof loadSchema>): WorkerState[] => {
    const pools = new Set(registry.workers.map((w) => w.pool));
    if (body.pool !== undefined && !pools.has(body.pool)) throw new ApiError(404, 'invalid_request_error', 'pool_not_found', `no pool '${echo(body.pool)}' is configured`, 'pool');
    if (body.workers !== undefined) {
      const out: WorkerState[] = [];
      for (const id of new Set(body.workers)) {
        const w = registry.get(id);
        if (w === undefined) throw new ApiError(404, 'invalid_request_error', 'worker_not_found', `no worker '${echo(id)}' is configured`, 'workers');
        if (body.pool !== undefined && w.pool !== body.pool) throw errors.invalidField('workers', `worker '${id}' is not in pool '${body.pool}'`);
        out.push(w);
      }
      return out;
    }
    const pool = body.pool ?? (pools.size === 1 ? [...pools][0] : undefined);
    if (pool === undefined) throw errors.invalidField('pool', `name the pool (${[...pools].join(', ')}) or the workers to load the adapter on`);
    return registry.workers.filter((w) => w.pool === pool);
  };

  const load = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const raw = await readBody(req, BODY_LIMIT, 10_000);
    if (!raw.ok) throw raw.reason === 'too_large' ? errors.bodyTooLarge(BODY_LIMIT) : errors.requestTimeout('the request body did not arrive in time');
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw.body.toString('utf8'));
    } catch (e) {
      throw errors.invalidJson((e as Error).message);
    }
    const r = loadSchema.safeParse(parsed);
    if (!r.success) {
      const issue = r.error.issues[0]!;
      throw errors.invalidField(issue.path.join('.') || 'body', `${issue.path.join('.') || 'body'}: ${issue.message}`);
    }
    const body = r.data;
    const workers = targets(body);
    const bases = new Set(workers.map((w) => w.model));
    if (bases.size > 1) throw errors.invalidField('workers', `the workers serve different models (${[...bases].join(', ')}): an adapter belongs to one`);
    const base = [...bases][0]!;
    const cascade = workers.find((w) => d.cascadePools().has(w.pool));
    if (cascade !== undefined) throw new ApiError(409, 'invalid_request_error', 'adapter_conflict', `pool '${cascade.pool}' is in a speculative cascade, which does not serve adapters`, 'pool');
    if (Object.hasOwn(d.aliases(), body.name)) throw new ApiError(409, 'invalid_request_error', 'adapter_conflict', `'${echo(body.name)}' is an alias`, 'name');
    const conflict = registry.adapterConflict(body.name, base);
    if (conflict !== null) throw new ApiError(409, 'invalid_request_error', 'adapter_conflict', echo(conflict, 300), 'name');
    // vLLM answers a second load of a name with a 400 that says so: it is loaded there.
    const outcomes = await each(workers, '/v1/load_lora_adapter', { lora_name: body.name, lora_path: body.path }, (status, message) =>
      status === 200 || (status === 400 && message.includes('has already been loaded')),
    );
    const loaded: string[] = [];
    for (const o of outcomes) {
      const w = registry.get(o.worker);
      if (!o.ok || w === undefined) continue;
      w.adapterEpoch++;
      apply(w, [...w.loadedAdapters, body.name], 'loaded through /admin/adapters');
      if (w.adapters.includes(body.name)) loaded.push(w.id);
      else Object.assign(o, { ok: false, message: 'loaded, but not routed: its name conflicts with a model served meanwhile' });
    }
    const failed = outcomes.filter((o) => !o.ok);
    logger.info({ adapter: body.name, path: body.path, loaded, failed: failed.map((f) => f.worker) }, 'LoRA adapter load');
    if (loaded.length === 0) throw errors.upstream(`no worker loaded adapter '${echo(body.name)}': ${summary(failed)}`, 'adapter_load_failed');
    json(res, 200, JSON.stringify({ id: body.name, parent: base, loaded, failed }));
  };

  const unload = async (req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> => {
    req.resume(); // a body, if any, is not read
    const name = url.searchParams.get('name');
    if (name === null || name === '') throw errors.invalidField('name', 'give the adapter to unload: DELETE /admin/adapters?name=NAME');
    const problem = adapterNameProblem(name);
    if (problem !== null) throw errors.invalidField('name', problem);
    const pool = url.searchParams.get('pool');
    const worker = url.searchParams.get('worker');
    const serving = (registry.adapterOf(name) !== undefined ? registry.serving(name) ?? [] : []).filter(
      (w) => (pool === null || w.pool === pool) && (worker === null || w.id === worker),
    );
    if (serving.length === 0) {
      throw new ApiError(404, 'invalid_request_error', 'model_not_found', `no worker${pool !== null || worker !== null ? ' there' : ''} serves adapter '${echo(name)}'`, 'name');
    }
    const configured = serving.filter((w) => w.configuredAdapters.includes(name)).map((w) => w.id);
    const workers = serving.filter((w) => !w.configuredAdapters.includes(name));
    if (workers.length === 0) {
      throw new ApiError(409, 'invalid_request_error', 'adapter_configured', `adapter '${echo(name)}' is in the configuration of ${configured.join(', ')}: remove it there`, 'name');
    }
    // Not found there: already gone, which is what was asked.
    const outcomes = await each(workers, '/v1/unload_lora_adapter', { lora_name: name }, (status) => status === 200 || status === 404);
    const unloaded: string[] = [];
    for (const o of outcomes) {
      const w = registry.get(o.worker);
      if (!o.ok || w === undefined) continue;
      w.adapterEpoch++;
      apply(w, [...w.loadedAdapters].filter((a) => a !== name), 'unloaded through /admin/adapters');
      unloaded.push(w.id);
    }
    const failed = outcomes.filter((o) => !o.ok);
    logger.info({ adapter: name, unloaded, failed: failed.map((f) => f.worker) }, 'LoRA adapter unload');
    if (unloaded.length === 0) throw errors.upstream(`no worker unloaded adapter '${echo(name)}': ${summary(failed)}`, 'adapter_unload_failed');
    json(res, 200, JSON.stringify({ id: name, unloaded, failed, configured }));
  };

  const route: LocalRoute = {
    methods: ['GET', 'HEAD', 'POST', 'DELETE'],
    handle(req, res, url) {
      const run = req.method === 'POST' ? load(req, res) : req.method === 'DELETE' ? unload(req, res, url) : Promise.resolve(json(res, 200, JSON.stringify(list())));
      run.catch((e: unknown) => {
        if (res.headersSent) return;
        sendError(res, e instanceof ApiError ? e : errors.internal((e as Error).message || String(e)));
      });
    },
  };
  return { onModelList, route };
}

/** The message of a worker's answer: vLLM's JSON error's (either shape), or the text itself. */
function answerMessage(text: string): string {
  try {
    const j = JSON.parse(text) as { message?: unknown; error?: { message?: unknown }; detail?: unknown };
    const m = j?.error?.message ?? j?.message ?? j?.detail;
    if (typeof m === 'string') return m;
  } catch {
    // not JSON: vLLM's success answers are plain text
  }
  return text.trim().slice(0, 500);
}
