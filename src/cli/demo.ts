/**
 * `kvgate demo`: a simulated vLLM fleet on loopback with the gateway in front of it — the whole
 * request path, no GPU. Runs until Ctrl-C, then shuts down cleanly.
 */
import { parseArgs } from 'node:util';
import { listGpus, listModels } from '../engine/profiles.js';
import type { Gateway } from '../gateway/gateway.js';
import type { SimWorker } from '../sim/worker/server.js';
import { gpuMixLabel, parseGpuMix, workerGpus, type GpuShare } from '../bench/gpu-mix.js';

export const help = `Usage: kvgate demo [options]

Starts simulated vLLM workers on ephemeral loopback ports and the kvgate gateway in front of them,
prints the gateway's URL and ready-to-paste curl commands, and runs until Ctrl-C.

Options:
  -p, --port P        gateway port on 127.0.0.1; 0 picks a free one (default 8080)
  -w, --workers N     simulated workers, 1..64 (default 4; with a GPU mix, its total)
      --speed X       time compression of the simulation; 10 = ten times faster than modelled
                      (default 1: real-time latencies of the modelled GPU)
      --model NAME    model the workers serve (default llama-3.1-8b; profiles: ${listModels().map((m) => m.name).join(', ')})
      --gpu NAME      GPU profile: ${listGpus().map((g) => g.name).join(', ')} (default h100)
      --gpu NAME:N,…  a mixed pool, e.g. h100:2,a10g:2: each worker declares its GPU as its
                      \`hardware\`, so the kvgate policy learns each kind's speed
      --gpu-labels on|off
                      with a mixed pool: off leaves the workers unlabelled, and the gateway
                      tells the kinds apart by the KV capacity each reports (default on)
      --adapters A,B  LoRA adapters every worker serves on top of --model (as vLLM's
                      --lora-modules): clients name them in "model"; an adapter's prompts are
                      cached and routed apart from the base model's. The workers also load
                      adapters at run time: POST /admin/adapters {"name","path","pool":"demo"}
      --policy NAME   routing policy (default: the gateway's default)
      --redis URL     keep the response cache in Redis at URL (redis://host:port) instead of memory
      --no-cache      turn the response cache off (default: on, in memory: a repeated
                      temperature-0 request is answered from it, x-kvgate-cache: hit)
      --draft-acceptance A
                      also start a simulated draft worker (llama-3.1-8b int4 on an A10G) whose
                      tokens speculative sampling accepts at rate A (0.12..0.93, at temperature 1),
                      and serve --model through a speculative cascade (docs/speculative.md)
      --json-logs     JSON log lines instead of readable ones
  -h, --help          this text
`;

export interface DemoRunOptions {
  /** Stops the demo when aborted (embedding, tests); SIGINT/SIGTERM do the same otherwise. */
  signal?: AbortSignal;
  out?: NodeJS.WritableStream;
}

export async function run(argv: string[], o: DemoRunOptions = {}): Promise<number> {
  const out = o.out ?? process.stdout;
  const usage = (msg: string): number => {
    process.stderr.write(`kvgate demo: ${msg}\n\n${help}`);
    return 2;
  };
  let v: Record<string, string | boolean | undefined>;
  try {
    ({ values: v } = parseArgs({
      args: argv,
      options: {
        port: { type: 'string', short: 'p', default: '8080' },
        workers: { type: 'string', short: 'w' },
        speed: { type: 'string', default: '1' },
        adapters: { type: 'string' },
        model: { type: 'string', default: 'llama-3.1-8b' },
        gpu: { type: 'string', default: 'h100' },
        'gpu-labels': { type: 'string' },
        policy: { type: 'string' },
        redis: { type: 'string' },
        'no-cache': { type: 'boolean', default: false },
        'json-logs': { type: 'boolean', default: false },
        'draft-acceptance': { type: 'string' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (e) {
    return usage((e as Error).message);
  }
  const port = Number(v.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) return usage(`--port must be an integer 0..65535, got '${v.port}'`);
  const workersFlag = v.workers === undefined ? undefined : Number(v.workers);
  if (workersFlag !== undefined && (!Number.isInteger(workersFlag) || workersFlag < 1 || workersFlag > 64)) {
    return usage(`--workers must be an integer 1..64, got '${v.workers}'`);
  }
  const speed = Number(v.speed);
  if (!Number.isFinite(speed) || speed <= 0) return usage(`--speed must be a positive number, got '${v.speed}'`);
  const model = v.model as string;
  if (!listModels().some((m) => m.name === model)) return usage(`unknown --model '${model}'`);
  let mix: GpuShare[];
  try {
    mix = parseGpuMix(v.gpu as string, workersFlag ?? ((v.gpu as string).includes(':') ? undefined : 4));
  } catch (e) {
    return usage(`--gpu: ${(e as Error).message}`);
  }
  const gpus = workerGpus(mix);
  const n = gpus.length;
  if (n > 64) return usage(`a demo runs at most 64 workers, the GPU mix has ${n}`);
  const mixed = mix.length > 1;
  const gpuLabels = v['gpu-labels'] as string | undefined;
  if (gpuLabels !== undefined && gpuLabels !== 'on' && gpuLabels !== 'off') return usage(`--gpu-labels must be on or off, got '${gpuLabels}'`);
  if (gpuLabels !== undefined && !mixed) return usage('--gpu-labels applies to a mixed pool (--gpu NAME:N,…) only');
  const labelled = mixed && gpuLabels !== 'off';
  const gpu = gpuMixLabel(mix);
  const redis = v.redis as string | undefined;
  if (redis !== undefined && !/^rediss?:\/\/\S+$/.test(redis)) return usage(`--redis must be a redis:// or rediss:// URL, got '${redis}'`);
  if (redis !== undefined && v['no-cache'] === true) return usage('--redis and --no-cache contradict each other');
  const cacheOn = v['no-cache'] !== true;
  const adapters = v.adapters === undefined ? [] : String(v.adapters).split(',').map((a) => a.trim());
  if (adapters.some((a) => a === '')) return usage(`--adapters must be a comma-separated list of names, got '${v.adapters}'`);
  if (adapters.includes(model)) return usage(`--adapters: '${model}' is the base model's own name`);
  if (adapters.length > 0 && v['draft-acceptance'] !== undefined) return usage('--adapters and --draft-acceptance cannot be combined (a cascade serves the base model only)');
  const draftAcceptance = v['draft-acceptance'] === undefined ? undefined : Number(v['draft-acceptance']);
  if (draftAcceptance !== undefined && !(draftAcceptance > 0 && draftAcceptance < 1)) return usage(`--draft-acceptance must be in (0, 1), got '${v['draft-acceptance']}'`);

  // The gateway, the simulator and their dependencies load only once the flags are good: a bad
  // flag is refused without compiling the whole module graph (about 1.5 s).
  const [{ ConfigError, parseConfig }, { createGateway }, { redactRedisUrl }, { startSimWorker }, { createLogger }, { waitForSignal }] = await Promise.all([
    import('../config/index.js'),
    import('../gateway/gateway.js'),
    import('../cache/redis-store.js'),
    import('../sim/worker/server.js'),
    import('../telemetry/logger.js'),
    import('./server-run.js'),
  ]);
  const logger = createLogger({ level: 'info', pretty: v['json-logs'] !== true });
  const sims: SimWorker[] = [];
  let gateway: Gateway | null = null;
  const shutdown = async (): Promise<void> => {
    await gateway?.close();
    await Promise.all(sims.map((s) => s.close()));
  };
  try {
    // The workers take LoRA adapters at run time too (POST /admin/adapters loads one on them).
    for (let i = 0; i < n; i++) sims.push(await startSimWorker({ host: '127.0.0.1', port: 0, model, adapters, gpu: gpus[i]!, speed, runtimeLoraUpdating: true }));
    const draftModel = `${model}-draft`;
    let draft: SimWorker | null = null;
    if (draftAcceptance !== undefined) {
      draft = await startSimWorker({ host: '127.0.0.1', port: 0, model: draftModel, profile: 'llama-3.1-8b', gpu: 'a10g', weightDtype: 'int4', speed, draftOf: model, draftAcceptance });
      sims.push(draft);
    }
    const config = parseConfig({
      listen: { host: '127.0.0.1', port },
      pools: [
        { name: 'demo', model, adapters, workers: sims.slice(0, n).map((s, i) => ({ url: s.url, id: `sim-${i}`, ...(labelled ? { hardware: gpus[i]! } : {}) })) },
        ...(draft ? [{ name: 'draft', model: draftModel, workers: [{ url: draft.url, id: 'draft-0' }] }] : []),
      ],
      ...(draft ? { speculative: { cascades: [{ model, targetPool: 'demo', draftPool: 'draft' }] } } : {}),
      ...(typeof v.policy === 'string' ? { policy: { name: v.policy } } : {}),
      shutdown: { graceMs: 3000, drainDelayMs: 0 },
      // A loopback demonstration of the routing: show where each request went. Off by default in
      // `kvgate serve` (the headers tell a caller what others' prompts left cached).
      server: { routingHeaders: true },
      cache: { enabled: cacheOn, store: redis === undefined ? 'memory' : 'redis', ...(redis === undefined ? {} : { redis: { url: redis } }) },
    });
    gateway = createGateway(config, { logger });
    const { url } = await gateway.start();
    const chat = JSON.stringify({ model, messages: [{ role: 'user', content: 'Tell me about KV caches.' }], max_tokens: 64, temperature: 0 });
    const streamBody = JSON.stringify({ model, messages: [{ role: 'user', content: 'Tell me about KV caches.' }], max_tokens: 64, temperature: 0, stream: true });
    const embeddings = JSON.stringify({ model, input: ['KV caches hold attention keys and values.', 'Routers send prompts where their prefix is cached.'], dimensions: 8 });
    const adapterChat = adapters.length > 0 ? JSON.stringify({ model: adapters[0], messages: [{ role: 'user', content: 'Tell me about KV caches.' }], max_tokens: 32 }) : null;
    const adapterLoad = JSON.stringify({ name: 'support-lora', path: '/adapters/support-lora', pool: 'demo' });
    const responses = JSON.stringify({ model, instructions: 'Answer briefly.', input: 'What does a KV cache hold?', max_output_tokens: 32 });
    const cacheLine = cacheOn
      ? `  response cache: ${redis === undefined ? 'in memory' : `Redis at ${redactRedisUrl(redis)}`}. Send the first request twice with -i: the second answer\n` +
        `  comes from the cache (x-kvgate-cache: hit), as JSON or as a stream. Stats: ${url}/admin/cache\n\n`
      : '  response cache: off\n\n';
    out.write(
      `\nkvgate demo: ${n} simulated ${model} worker(s) on ${gpu} (speed ×${speed}) behind ${url}\n\n` +
        `  curl -s ${url}/v1/chat/completions -H 'content-type: application/json' -d '${chat}'\n\n` +
        `  curl -sN ${url}/v1/chat/completions -H 'content-type: application/json' -d '${streamBody}'\n\n` +
        `  curl -s ${url}/v1/responses -H 'content-type: application/json' -d '${responses}'\n\n` +
        `  curl -s ${url}/v1/embeddings -H 'content-type: application/json' -d '${embeddings}'\n\n` +
        (adapterChat !== null
          ? `  LoRA adapters on ${model}: ${adapters.join(', ')} (listed at ${url}/v1/models with their parent)\n` +
            `  curl -s ${url}/v1/chat/completions -H 'content-type: application/json' -d '${adapterChat}'\n\n`
          : '') +
        (draft
          ? ''
          : `  load a LoRA adapter on the workers at run time (then name it in "model"; DELETE ${url}/admin/adapters?name=support-lora unloads it):\n` +
            `  curl -s ${url}/admin/adapters -H 'content-type: application/json' -d '${adapterLoad}'\n\n`) +
        cacheLine +
        (draft
          ? `  speculative cascade: ${draftModel} drafts (acceptance ${draftAcceptance}), ${model} verifies; answers carry\n` +
            `  x-kvgate-speculative: cascade (a repeated temperature-0 request may come from the cache first);\n` +
            `  rounds, acceptance and tokens by source: kvgate_spec_* in the metrics\n\n`
          : '') +
        `  dashboard: ${url}/dashboard   workers: ${url}/admin/workers   metrics: ${url}/metrics\n\n` +
        `Ctrl-C to stop.\n\n`,
    );
  } catch (e) {
    await shutdown();
    if (e instanceof ConfigError) return usage(e.message);
    process.stderr.write(`kvgate demo: cannot start: ${(e as Error).message}\n`);
    return 1;
  }
  await (o.signal
    ? new Promise<void>((resolve) => {
        if (o.signal!.aborted) resolve();
        else o.signal!.addEventListener('abort', () => resolve(), { once: true });
      })
    : waitForSignal());
  logger.info('shutting down');
  await shutdown();
  out.write('kvgate demo: stopped\n');
  return 0;
}
