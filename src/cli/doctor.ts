/**
 * `kvgate doctor`: checks each worker as kvgate needs it (doctor-checks.ts) and prints a table with a
 * fix per failure; exit status 1 when a check fails.
 */
import { parseArgs } from 'node:util';
import { ConfigError, loadConfigFile } from '../config/index.js';
import { TokenizerRegistry } from '../tokenizer/registry.js';
import { checkWorker, type CheckResult, type DoctorTarget, type WorkerReport } from './doctor-checks.js';

export const help = `Usage: kvgate doctor --config FILE [options]
       kvgate doctor --worker URL [--model NAME] [--kv-events ENDPOINT [--kv-replay ENDPOINT]] [options]

Checks each worker as kvgate needs it and prints a table with a fix for each failure:
  models              GET /v1/models lists the model (and the LoRA adapters) kvgate routes there
  metrics             GET /metrics parses; every vLLM metric kvgate reads is present and plausible
                      (requests running and waiting, KV usage, prefix-cache counters, preemptions)
  cache_config_info   block size and GPU blocks (and prefix caching on)
  tokens              kvgate's token ids for sample prompts (a completion, a chat with tools, a chat
                      with multi-part content, a Responses input) equal the worker's
                      (/v1/chat/completions/render, else /tokenize)
  kv events           with kvEvents: for a few seconds, while one request makes the worker store
                      blocks, the messages arrive, decode, have consecutive sequence numbers, carry
                      the block size and the token ids kvgate computes; the replay socket answers
  lora, spec decode   vllm:lora_requests_info with adapters configured; the spec_decode counters
                      with --speculative or when the worker exports them

Options:
  -c, --config FILE       check every worker of this kvgate config (tokenizers as configured)
  -w, --worker URL        check one worker instead
      --model NAME        with --worker: the model kvgate routes there (default: the first listed)
      --kv-events EP      with --worker: its KV-event endpoint (tcp://HOST:5557)
      --kv-replay EP      with --worker: its KV-event replay endpoint (tcp://HOST:5558)
      --kv-topic TOPIC    with --worker: the KV-event topic (default empty)
      --tokenizer SPEC    with --worker: estimate | hf:<path to tokenizer.json> | remote (default estimate)
      --adapters A,B      with --worker: LoRA adapters it should serve
      --api-key KEY       with --worker: the worker's --api-key
      --speculative       with --worker: it runs speculative decoding (check the spec_decode counters)
      --events-seconds S  how long to wait for KV events (default 3)
      --timeout-ms T      per HTTP request (default 5000)
      --json              print the results as JSON instead of a table
  -h, --help              this text

A probe request (max_tokens 1) is sent to each worker with KV events, so that it stores blocks.
Exit codes: 0 when nothing failed (warnings allowed), 1 when a check failed, 2 for bad flags or an
invalid config.
`;

export interface DoctorRunOptions {
  out?: NodeJS.WritableStream;
  err?: NodeJS.WritableStream;
}

class UsageError extends Error {}

/** The table: one line per check, the fix under a failure or warning. */
export function formatTable(reports: readonly WorkerReport[]): string {
  const rows: string[][] = [['WORKER', 'CHECK', 'RESULT', 'DETAIL']];
  const fixes = new Map<number, string>();
  for (const r of reports)
    for (const c of r.checks) {
      rows.push([r.id, c.check, c.status.toUpperCase(), c.detail]);
      if (c.fix !== undefined && (c.status === 'fail' || c.status === 'warn')) fixes.set(rows.length - 1, c.fix);
    }
  const w = [0, 1, 2].map((i) => Math.max(...rows.map((r) => r[i]!.length)));
  const lines: string[] = [];
  rows.forEach((r, i) => {
    lines.push(`${r[0]!.padEnd(w[0]!)}  ${r[1]!.padEnd(w[1]!)}  ${r[2]!.padEnd(w[2]!)}  ${r[3]}`);
    const fix = fixes.get(i);
    if (fix !== undefined) lines.push(`${' '.repeat(w[0]! + w[1]! + w[2]! + 6)}fix: ${fix}`);
  });
  const all = reports.flatMap((r) => r.checks);
  const count = (s: CheckResult['status']): number => all.filter((c) => c.status === s).length;
  lines.push('', `${count('ok')} ok, ${count('warn')} warnings, ${count('fail')} failed, ${count('skip')} skipped`);
  return lines.join('\n') + '\n';
}

export async function runDoctor(argv: string[], o: DoctorRunOptions = {}): Promise<number> {
  const out = o.out ?? process.stdout;
  const err = o.err ?? process.stderr;
  let targets: DoctorTarget[];
  let registry: TokenizerRegistry;
  let eventsMs: number;
  let timeoutMs: number;
  let json: boolean;
  try {
    const { values } = parseArgs({
      args: argv,
      options: {
        config: { type: 'string', short: 'c' },
        worker: { type: 'string', short: 'w' },
        model: { type: 'string' },
        'kv-events': { type: 'string' },
        'kv-replay': { type: 'string' },
        'kv-topic': { type: 'string' },
        tokenizer: { type: 'string' },
        adapters: { type: 'string' },
        'api-key': { type: 'string' },
        speculative: { type: 'boolean' },
        'events-seconds': { type: 'string' },
        'timeout-ms': { type: 'string' },
        json: { type: 'boolean' },
      },
      strict: true,
      allowPositionals: false,
    });
    json = values.json === true;
    const secs = Number(values['events-seconds'] ?? 3);
    if (!Number.isFinite(secs) || secs <= 0 || secs > 600) throw new UsageError(`--events-seconds must be a number of seconds in (0, 600], got '${values['events-seconds']}'`);
    eventsMs = secs * 1000;
    timeoutMs = Number(values['timeout-ms'] ?? 5000);
    if (!Number.isInteger(timeoutMs) || timeoutMs <= 0) throw new UsageError(`--timeout-ms must be a positive integer, got '${values['timeout-ms']}'`);
    const zmqEndpoint = /^(tcp|ipc|inproc):\/\/.+/;
    if ((values.config === undefined) === (values.worker === undefined)) throw new UsageError('give either --config FILE or --worker URL');
    if (values.config !== undefined) {
      for (const f of ['model', 'kv-events', 'kv-replay', 'kv-topic', 'tokenizer', 'adapters', 'api-key', 'speculative'] as const)
        if (values[f] !== undefined) throw new UsageError(`--${f} goes with --worker (with --config the file says it)`);
      const config = loadConfigFile(values.config);
      registry = await TokenizerRegistry.create(config.tokenizers.models, { default: config.tokenizers.default, remoteTimeoutMs: Math.max(config.tokenizers.remoteTimeoutMs, timeoutMs), threads: 0 });
      const kv = new Map(config.kvEvents.map((e) => [e.workerId, e]));
      targets = config.workers.map((w) => {
        const e = kv.get(w.id);
        const t: DoctorTarget = {
          id: w.id,
          url: w.url,
          model: w.model,
          pool: w.pool,
          headers: { ...(w.upstreamHeaders ?? {}) },
          adapters: w.adapters ?? [],
          speculative: false,
          tokenizer: (m) => registry.for(m),
        };
        if (e) t.kvEvents = { endpoint: e.endpoint, ...(e.replayEndpoint !== undefined ? { replayEndpoint: e.replayEndpoint } : {}), ...(e.topic !== undefined ? { topic: e.topic } : {}) };
        if (w.blockSize !== undefined) t.blockSize = w.blockSize;
        if (w.numGpuBlocks !== undefined) t.numGpuBlocks = w.numGpuBlocks;
        return t;
      });
    } else {
      let url: URL;
      try {
        url = new URL(values.worker!);
      } catch {
        throw new UsageError(`--worker must be a URL such as http://10.0.0.5:8000, got '${values.worker}'`);
      }
      for (const f of ['kv-events', 'kv-replay'] as const)
        if (values[f] !== undefined && !zmqEndpoint.test(values[f])) throw new UsageError(`--${f} must be a ZeroMQ endpoint such as tcp://10.0.0.5:5557, got '${values[f]}'`);
      if (values['kv-events'] === undefined && (values['kv-replay'] !== undefined || values['kv-topic'] !== undefined)) throw new UsageError('--kv-replay and --kv-topic need --kv-events');
      try {
        registry = await TokenizerRegistry.create({}, { default: values.tokenizer ?? 'estimate', remoteTimeoutMs: timeoutMs, threads: 0 });
      } catch (e) {
        throw new UsageError(`--tokenizer: ${(e as Error).message}`);
      }
      const t: DoctorTarget = {
        id: url.host,
        url: url.href.replace(/\/+$/, ''),
        model: values.model ?? null,
        headers: values['api-key'] !== undefined ? { authorization: `Bearer ${values['api-key']}` } : {},
        adapters: values.adapters !== undefined ? values.adapters.split(',').map((a) => a.trim()).filter((a) => a !== '') : [],
        speculative: values.speculative === true,
        tokenizer: (m) => registry.for(m),
      };
      if (values['kv-events'] !== undefined)
        t.kvEvents = {
          endpoint: values['kv-events'],
          ...(values['kv-replay'] !== undefined ? { replayEndpoint: values['kv-replay'] } : {}),
          ...(values['kv-topic'] !== undefined ? { topic: values['kv-topic'] } : {}),
        };
      targets = [t];
    }
  } catch (e) {
    if (e instanceof ConfigError) {
      err.write(`kvgate doctor: ${e.message}\n`);
      return 2;
    }
    if (e instanceof UsageError || (e as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      err.write(`kvgate doctor: ${(e as Error).message}\n\nRun 'kvgate doctor --help' for the options.\n`);
      return 2;
    }
    throw e;
  }
  try {
    const reports: WorkerReport[] = [];
    // One worker at a time: KV-event checks send a request and listen, and the output reads in order.
    for (const t of targets) reports.push(await checkWorker(t, { eventsMs, timeoutMs }));
    const failed = reports.some((r) => r.checks.some((c) => c.status === 'fail'));
    if (json) out.write(JSON.stringify({ ok: !failed, workers: reports }, null, 2) + '\n');
    else out.write(formatTable(reports));
    return failed ? 1 : 0;
  } finally {
    await registry.close();
  }
}

export async function run(argv: string[]): Promise<number> {
  return runDoctor(argv);
}
