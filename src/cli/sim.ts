/**
 * `kvgate sim`: one simulated vLLM worker on a real port, until SIGINT/SIGTERM.
 */
import { parseArgs } from 'node:util';
import { customKvLink, KV_LINKS, resolveKvLink, type KvLink } from '../engine/kv-link.js';
import { listGpus, listModels } from '../engine/profiles.js';
import { startSimWorker, type SimWorkerOptions } from '../sim/worker/server.js';

export const help = `kvgate sim — run one simulated vLLM worker (OpenAI API, /metrics, KV events)

Usage: kvgate sim [options]

Options:
  --host HOST            address to listen on (default 127.0.0.1)
  --port N               HTTP port; 0 picks a free one (default 8000)
  --model NAME           served model name and engine profile (default llama-3.1-8b;
                         profiles: ${listModels().map((m) => m.name).join(', ')})
  --profile NAME         engine profile when the served name is not one of the above
  --adapters A,B         LoRA adapters served on top of --model (vLLM --enable-lora
                         --lora-modules): listed in /v1/models with their parent, accepted as
                         "model"; an adapter's blocks are cached (and KV events published)
                         apart from the base model's and each other's
  --runtime-lora         serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM with
                         VLLM_ALLOW_RUNTIME_LORA_UPDATING=True): adapters loaded there are listed
                         in /v1/models and served like --adapters ones
  --lora-resolver REGEX  load an adapter on demand when a request names one whose whole name
                         REGEX matches (vLLM's LoRA resolver plugins; implies --runtime-lora)
  --max-loras N          with --adapters or --runtime-lora: most adapters in one batch (vLLM
                         --max-loras; default 1)
  --gpu NAME             GPU profile: ${listGpus().map((g) => g.name).join(', ')} (default h100)
  --tp N                 tensor-parallel degree (default 1)
  --speed X              time compression: 10 runs steps ten times faster than modelled (default 1)
  --num-gpu-blocks N     KV-cache blocks, instead of sizing them from GPU memory
  --block-size N         tokens per KV block (default 16)
  --max-num-seqs N       most sequences per step (default 256)
  --max-num-batched-tokens N
                         token budget per step (default 8192)
  --max-model-len N      longest prompt + output (default: the model's)
  --gpu-memory-utilization F
                         share of GPU memory for weights, activations and KV (default 0.9)
  --no-prefix-caching    disable automatic prefix caching
  --kv-events-port P     publish KV-cache events on tcp://HOST:P (ZeroMQ PUB, vLLM's format)
  --kv-replay-port P     serve KV-event replays on tcp://HOST:P (ZeroMQ ROUTER)
  --kv-topic TOPIC       topic of KV-event messages (default empty)
  --kv-events-encoding E map (current vLLM: events are maps tagged "type", the default) or
                         array (older vLLM: msgspec array_like tagged arrays)
  --kv-events-drop P     drop a share P (0..1) of event batches on the PUB socket (they stay in
                         the replay buffer), to test a subscriber's gap repair
  --cpu-offload-gib N    keep GPU-evicted prefix blocks in N GiB of host memory (LRU), loaded
                         back at PCIe speed instead of recomputed; events carry medium "CPU"
  --hash-seed N          block-hash seed (default: random per process, like vLLM)
  --legacy-metrics       emit pre-0.9 metric names (vllm:gpu_cache_usage_perc, ...)
  --api-key KEY          require 'Authorization: Bearer KEY' on /v1/* (vLLM's --api-key;
                         /health, /metrics and /tokenize stay open)
  --draft-of NAME        serve a draft model of the target model NAME (for kvgate's speculative
                         cascade): it predicts like NAME in part of its contexts
  --draft-acceptance A   with --draft-of: make speculative sampling at temperature 1 accept a share
                         A of the draft's tokens (0.12 to 0.93); A1:A2@S switches from A1 to A2
                         after S simulated seconds
  --draft-fidelity F     with --draft-of: share of contexts in which the draft agrees with its
                         target (about the greedy acceptance rate); default 0.75
  --spec-k K             speculate inside the engine (vLLM's --speculative-config): K draft
                         tokens per step; exports vllm:spec_decode_* counters
  --spec-draft-model NAME
                         with --spec-k: the draft model's profile (default llama-3.1-8b)
  --spec-acceptance A    with --spec-k: each draft token accepted with probability A (default
                         0.7); A1:A2@S switches from A1 to A2 after S simulated seconds
  --role ROLE            prefill/decode disaggregation (vLLM --kv-transfer-config with
                         NixlConnector): prefill answers a request carrying kv_transfer_params
                         {"do_remote_decode": true} with the kv_transfer_params a decode worker
                         pulls its KV with, holding the blocks until then; decode pulls a
                         prefill's KV for {"do_remote_prefill": true, ...} and decodes without
                         recomputing the prompt; both does either. Without it kv_transfer_params
                         are ignored, as by a vLLM without a KV connector
  --kv-link LINK         with --role: the link KV transfers take: ${Object.keys(KV_LINKS).join(', ')}
                         (default ib-400), or GBPS[:LATENCY_US] (e.g. 200:20)
  --kv-hold-timeout S    with --role: simulated seconds a prefill's blocks wait for a decode
                         worker's read before they are freed (vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT,
                         default 480)
  -h, --help             show this help

Prints the worker's URL, then serves until interrupted.
`;

export interface SimRunOptions {
  /** Stops the worker when aborted (tests); SIGINT/SIGTERM do the same otherwise. */
  signal?: AbortSignal;
  out?: NodeJS.WritableStream;
  err?: NodeJS.WritableStream;
}

class UsageError extends Error {}

function int(name: string, v: string | undefined, min: number): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new UsageError(`--${name} must be an integer >= ${min}, got '${v}'`);
  return n;
}

function num(name: string, v: string | undefined, ok: (n: number) => boolean, what: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || !ok(n)) throw new UsageError(`--${name} must be ${what}, got '${v}'`);
  return n;
}

/** 'A' or 'A1:A2@SECONDS' (a shift after SECONDS of simulated time). */
function parseAcceptance(v: string): number | ((nowMs: number) => number) {
  const ok = (x: number) => Number.isFinite(x) && x >= 0 && x <= 1;
  const m = /^([0-9.]+):([0-9.]+)@([0-9.]+)$/.exec(v);
  if (m) {
    const [a1, a2, s] = [Number(m[1]), Number(m[2]), Number(m[3])];
    if (!ok(a1) || !ok(a2) || !(s >= 0)) throw new UsageError(`--spec-acceptance must be A or A1:A2@SECONDS with A in [0, 1], got '${v}'`);
    return (nowMs) => (nowMs < s * 1000 ? a1 : a2);
  }
  const a = Number(v);
  if (!ok(a)) throw new UsageError(`--spec-acceptance must be A or A1:A2@SECONDS with A in [0, 1], got '${v}'`);
  return a;
}

/** A regular expression option, checked. */
function regex(name: string, v: string | undefined): string | undefined {
  if (v === undefined) return undefined;
  try {
    new RegExp(v);
  } catch (e) {
    throw new UsageError(`--${name}: not a valid regular expression (${(e as Error).message})`);
  }
  return v;
}

/** --adapters: comma-separated LoRA adapter names, none empty, none the base model's name. */
function adapterList(spec: string | undefined, model: string): string[] | undefined {
  if (spec === undefined) return undefined;
  const names = spec.split(',').map((a) => a.trim());
  if (names.some((a) => a === '')) throw new UsageError(`--adapters must be a comma-separated list of names, got '${spec}'`);
  if (names.includes(model)) throw new UsageError(`--adapters: '${model}' is the base model's own name`);
  if (new Set(names).size !== names.length) throw new UsageError(`--adapters lists a name twice: '${spec}'`);
  return names;
}

/** 'A' or 'A1:A2@SECONDS' for a draft model's acceptance. */
function parseDraftAcceptance(v: string): number | { before: number; after: number; atMs: number } {
  const ok = (x: number) => Number.isFinite(x) && x > 0 && x < 1;
  const m = /^([0-9.]+):([0-9.]+)@([0-9.]+)$/.exec(v);
  const bad = () => new UsageError(`--draft-acceptance must be A or A1:A2@SECONDS with A in (0, 1), got '${v}'`);
  if (m) {
    const [before, after, s] = [Number(m[1]), Number(m[2]), Number(m[3])];
    if (!ok(before) || !ok(after) || !(s >= 0)) throw bad();
    return { before, after, atMs: s * 1000 };
  }
  const a = Number(v);
  if (!ok(a)) throw bad();
  return a;
}

/** --role, --kv-link, --kv-hold-timeout: the worker's KV connector. */
function kvConnectorArgs(role: string | undefined, link: string | undefined, hold: string | undefined): Pick<SimWorkerOptions, 'kvRole' | 'kvLink' | 'kvHoldTimeoutMs'> {
  if (role === undefined) {
    if (link !== undefined || hold !== undefined) throw new UsageError('--kv-link and --kv-hold-timeout need --role');
    return {};
  }
  if (role !== 'prefill' && role !== 'decode' && role !== 'both') throw new UsageError(`--role must be prefill, decode or both, got '${role}'`);
  const o: Pick<SimWorkerOptions, 'kvRole' | 'kvLink' | 'kvHoldTimeoutMs'> = { kvRole: role };
  if (link !== undefined) o.kvLink = parseKvLink(link);
  const s = num('kv-hold-timeout', hold, (n) => n > 0, 'a positive number of seconds');
  if (s !== undefined) o.kvHoldTimeoutMs = s * 1000;
  return o;
}

/** A preset name, or GBPS[:LATENCY_US]. */
function parseKvLink(v: string): KvLink {
  const m = /^([0-9.]+)(?::([0-9.]+))?$/.exec(v);
  try {
    return m ? customKvLink(Number(m[1]), Number(m[2] ?? '0')) : resolveKvLink(v);
  } catch (e) {
    throw new UsageError(`--kv-link: ${(e as Error).message}`);
  }
}

/** Turn command-line arguments into worker options; throws UsageError on bad input. */
export function parseSimArgs(argv: string[]): SimWorkerOptions {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      allowPositionals: false,
      strict: true,
      options: {
        host: { type: 'string' },
        port: { type: 'string' },
        model: { type: 'string' },
        profile: { type: 'string' },
        adapters: { type: 'string' },
        'max-loras': { type: 'string' },
        'runtime-lora': { type: 'boolean' },
        'lora-resolver': { type: 'string' },
        gpu: { type: 'string' },
        tp: { type: 'string' },
        speed: { type: 'string' },
        'num-gpu-blocks': { type: 'string' },
        'block-size': { type: 'string' },
        'max-num-seqs': { type: 'string' },
        'max-num-batched-tokens': { type: 'string' },
        'max-model-len': { type: 'string' },
        'gpu-memory-utilization': { type: 'string' },
        'no-prefix-caching': { type: 'boolean' },
        'kv-events-port': { type: 'string' },
        'kv-replay-port': { type: 'string' },
        'kv-topic': { type: 'string' },
        'kv-events-encoding': { type: 'string' },
        'kv-events-drop': { type: 'string' },
        'cpu-offload-gib': { type: 'string' },
        'hash-seed': { type: 'string' },
        'legacy-metrics': { type: 'boolean' },
        'api-key': { type: 'string' },
        'draft-of': { type: 'string' },
        'draft-acceptance': { type: 'string' },
        'draft-fidelity': { type: 'string' },
        'spec-k': { type: 'string' },
        'spec-draft-model': { type: 'string' },
        'spec-acceptance': { type: 'string' },
        role: { type: 'string' },
        'kv-link': { type: 'string' },
        'kv-hold-timeout': { type: 'string' },
      },
    }));
  } catch (e) {
    throw new UsageError(e instanceof Error ? e.message : String(e));
  }
  const host = values.host ?? '127.0.0.1';
  const port = int('port', values.port, 0) ?? 8000;
  if (port > 65535) throw new UsageError(`--port must be at most 65535, got ${port}`);
  const opts: SimWorkerOptions = {
    host,
    port,
    model: values.model ?? 'llama-3.1-8b',
    adapters: adapterList(values.adapters, values.model ?? 'llama-3.1-8b'),
    maxLoras: int('max-loras', values['max-loras'], 1),
    runtimeLoraUpdating: values['runtime-lora'] === true || values['lora-resolver'] !== undefined,
    loraResolver: regex('lora-resolver', values['lora-resolver']),
    profile: values.profile,
    gpu: values.gpu ?? 'h100',
    tp: int('tp', values.tp, 1),
    speed: num('speed', values.speed, (n) => n > 0, 'a positive number'),
    numGpuBlocks: int('num-gpu-blocks', values['num-gpu-blocks'], 1),
    blockSize: int('block-size', values['block-size'], 1),
    maxNumSeqs: int('max-num-seqs', values['max-num-seqs'], 1),
    maxNumBatchedTokens: int('max-num-batched-tokens', values['max-num-batched-tokens'], 1),
    maxModelLen: int('max-model-len', values['max-model-len'], 1),
    gpuMemoryUtilization: num('gpu-memory-utilization', values['gpu-memory-utilization'], (n) => n > 0 && n <= 1, 'in (0, 1]'),
    enablePrefixCaching: values['no-prefix-caching'] ? false : undefined,
    hashSeed: int('hash-seed', values['hash-seed'], 0),
    legacyMetricNames: values['legacy-metrics'] === true,
    apiKey: typeof values['api-key'] === 'string' && values['api-key'] !== '' ? values['api-key'] : undefined,
    draftOf: values['draft-of'],
    draftAcceptance: values['draft-acceptance'] === undefined ? undefined : parseDraftAcceptance(values['draft-acceptance']),
    draftFidelity: num('draft-fidelity', values['draft-fidelity'], (n) => n >= 0 && n <= 1, 'in [0, 1]'),
  };
  if (opts.maxLoras !== undefined && opts.adapters === undefined && !opts.runtimeLoraUpdating) throw new UsageError('--max-loras needs --adapters or --runtime-lora');
  const specK = int('spec-k', values['spec-k'], 1);
  if (specK === undefined && (values['spec-draft-model'] !== undefined || values['spec-acceptance'] !== undefined)) {
    throw new UsageError('--spec-draft-model and --spec-acceptance need --spec-k');
  }
  if (specK !== undefined) {
    opts.speculative = { k: specK, draftModel: values['spec-draft-model'] ?? 'llama-3.1-8b', acceptance: parseAcceptance(values['spec-acceptance'] ?? '0.7') };
  }
  if (opts.draftAcceptance !== undefined && opts.draftFidelity !== undefined) throw new UsageError('give --draft-acceptance or --draft-fidelity, not both');
  if ((opts.draftAcceptance !== undefined || opts.draftFidelity !== undefined) && opts.draftOf === undefined) {
    throw new UsageError('--draft-acceptance and --draft-fidelity need --draft-of');
  }
  const kvPort = int('kv-events-port', values['kv-events-port'], 0);
  const replayPort = int('kv-replay-port', values['kv-replay-port'], 0);
  if (replayPort !== undefined && kvPort === undefined) throw new UsageError('--kv-replay-port needs --kv-events-port');
  if (kvPort !== undefined) {
    const zhost = host === '0.0.0.0' || host === '::' ? '*' : host;
    const ep = (p: number) => `tcp://${zhost}:${p === 0 ? '*' : p}`;
    opts.kvEvents = { endpoint: ep(kvPort), topic: values['kv-topic'] ?? '' };
    if (replayPort !== undefined) opts.kvEvents.replayEndpoint = ep(replayPort);
    const encoding = values['kv-events-encoding'];
    if (encoding !== undefined) {
      if (encoding !== 'map' && encoding !== 'array') throw new UsageError(`--kv-events-encoding must be map or array, got "${encoding}"`);
      opts.kvEvents.encoding = encoding;
    }
    const drop = num('kv-events-drop', values['kv-events-drop'], (n) => n >= 0 && n <= 1, 'in [0, 1]');
    if (drop !== undefined) opts.kvEvents.dropRate = drop;
  } else if (values['kv-events-encoding'] !== undefined || values['kv-events-drop'] !== undefined) {
    throw new UsageError('--kv-events-encoding and --kv-events-drop need --kv-events-port');
  }
  Object.assign(opts, kvConnectorArgs(values.role, values['kv-link'], values['kv-hold-timeout']));
  const offload = num('cpu-offload-gib', values['cpu-offload-gib'], (n) => n >= 0, 'a non-negative number');
  if (offload !== undefined && offload > 0) opts.cpuOffloadGib = offload;
  return opts;
}

/** Run a worker until `signal` aborts (or SIGINT/SIGTERM when no signal is given). */
export async function runSim(argv: string[], o: SimRunOptions = {}): Promise<number> {
  const out = o.out ?? process.stdout;
  const err = o.err ?? process.stderr;
  let opts: SimWorkerOptions;
  try {
    opts = parseSimArgs(argv);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    err.write(`kvgate sim: ${e.message}\n\nRun 'kvgate sim --help' for the options.\n`);
    return 2;
  }
  // Listen for the stop request before anything is printed: whoever reads the URL may signal at once.
  let stopRequested!: () => void;
  const stopped = new Promise<void>((resolve) => (stopRequested = resolve));
  const onSignal = () => stopRequested();
  if (o.signal) {
    if (o.signal.aborted) stopRequested();
    else o.signal.addEventListener('abort', onSignal, { once: true });
  } else {
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  }
  try {
    let worker;
    try {
      worker = await startSimWorker(opts);
    } catch (e) {
      err.write(`kvgate sim: ${e instanceof Error ? e.message : String(e)}\n`);
      return 1;
    }
    const c = worker.engine.config;
    out.write(
      `simulated vLLM worker: ${worker.url}  model=${worker.model} gpu=${opts.gpu} tp=${opts.tp ?? 1} ` +
        `speed=${worker.speed} blocks=${c.numGpuBlocks}x${c.blockSize} max_model_len=${c.maxModelLen}\n`,
    );
    if (opts.kvRole !== undefined) out.write(`kv connector: role=${opts.kvRole} link=${opts.kvLink?.name ?? 'ib-400'}\n`);
    if (worker.kvEventsEndpoint) {
      out.write(`kv events: ${worker.kvEventsEndpoint}${worker.kvReplayEndpoint ? `  replay: ${worker.kvReplayEndpoint}` : ''}\n`);
    }
    await stopped;
    await worker.close();
    return 0;
  } finally {
    o.signal?.removeEventListener('abort', onSignal);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

export async function run(argv: string[]): Promise<number> {
  return runSim(argv);
}
