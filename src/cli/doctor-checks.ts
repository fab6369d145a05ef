/**
 * The checks `kvgate doctor` runs against one worker: everything kvgate reads from a vLLM worker,
 * read the way kvgate reads it, with a fix for each failure.
 *
 * - models: GET /v1/models lists the model (and the LoRA adapters) kvgate routes to it;
 * - metrics: GET /metrics parses, and each metric kvgate reads (src/kv/vllm-metric-names.ts,
 *   src/fleet/vllm-metrics-parser.ts) is present and plausible;
 * - cache_config_info: block size and number of GPU blocks, prefix caching on;
 * - KV events (when configured): a subscription for a few seconds while a request makes the worker
 *   store blocks; the messages arrive, decode (src/fleet/kv-events-wire.ts), have consecutive
 *   sequence numbers, report blocks at the worker's block size, and carry the token ids kvgate
 *   computes for the request's prompt; the replay socket answers;
 * - token parity: kvgate's ids for the probe prompts against the worker's (gateway/fleet-watch/token-parity.ts);
 * - LoRA and speculative-decoding metrics, when configured or exported.
 */
import { randomBytes } from 'node:crypto';
import * as zmq from 'zeromq';
import type { PromptTokenizer } from '../tokenizer/registry.js';
import { parsePromText, type Sample } from '../fleet/prom-text.js';
import { decodeEventBatch, decodeSeq, encodeSeq } from '../fleet/kv-events-wire.js';
import type { KvEvent } from '../kv/events.js';
import { VLLM_METRICS as V } from '../kv/vllm-metric-names.js';
import { kvgateIds, probeTokenParity, PARITY_SAMPLES } from '../gateway/fleet-watch/token-parity.js';

export type CheckStatus = 'ok' | 'warn' | 'fail' | 'skip';

export interface CheckResult {
  check: string;
  status: CheckStatus;
  detail: string;
  /** What to change, for a failure or a warning. */
  fix?: string;
}

export interface DoctorTarget {
  id: string;
  url: string;
  /** The model kvgate routes to the worker; null: take the first the worker lists. */
  model: string | null;
  pool?: string;
  headers: Record<string, string>;
  adapters: readonly string[];
  kvEvents?: { endpoint: string; replayEndpoint?: string; topic?: string };
  /** Block size / capacity the config gives, to compare with the worker's. */
  blockSize?: number;
  numGpuBlocks?: number;
  /** Check the speculative-decoding counters even if the worker exports none. */
  speculative: boolean;
  /** The tokenizer kvgate uses for the model, and its spec. */
  tokenizer: (model: string) => PromptTokenizer;
}

export interface DoctorOptions {
  /** How long to listen for KV events, ms. */
  eventsMs: number;
  /** Per HTTP request, ms. */
  timeoutMs: number;
}

export interface WorkerReport {
  id: string;
  url: string;
  model: string | null;
  checks: CheckResult[];
}

async function get(url: string, headers: Record<string, string>, timeoutMs: number): Promise<{ status: number; text: string }> {
  const r = await fetch(url, { headers, signal: AbortSignal.timeout(timeoutMs) });
  return { status: r.status, text: await r.text() };
}

function why(err: unknown): string {
  const e = err as Error & { cause?: { code?: string; message?: string } };
  if (e.name === 'TimeoutError') return 'no answer in time';
  return e.cause?.code ?? e.cause?.message ?? e.message;
}

/** Run every check against one worker. */
export async function checkWorker(t: DoctorTarget, o: DoctorOptions): Promise<WorkerReport> {
  const checks: CheckResult[] = [];
  const base = t.url.replace(/\/+$/, '');
  const add = (check: string, status: CheckStatus, detail: string, fix?: string): void => {
    checks.push(fix !== undefined ? { check, status, detail, fix } : { check, status, detail });
  };

  // ---- models
  let model = t.model;
  let listed: string[] = [];
  try {
    const r = await get(`${base}/v1/models`, t.headers, o.timeoutMs);
    if (r.status === 401 || r.status === 403) {
      add('models', 'fail', `GET /v1/models answered ${r.status}`, "give the worker's --api-key (apiKey in the config, --api-key here)");
    } else if (r.status !== 200) {
      add('models', 'fail', `GET /v1/models answered ${r.status}`, 'is this a vLLM (OpenAI-compatible) server? kvgate needs /v1/models');
    } else {
      const data = (JSON.parse(r.text) as { data?: Array<{ id?: unknown }> }).data;
      listed = Array.isArray(data) ? data.map((m) => String(m.id)) : [];
      if (model === null) model = listed[0] ?? null;
      if (model === null) add('models', 'fail', 'GET /v1/models lists no model', 'start vLLM with a model');
      else if (!listed.includes(model))
        add('models', 'fail', `serves ${listed.join(', ') || 'nothing'}, not '${model}'`, `set the pool's model to the worker's name, or start vLLM with --served-model-name ${model}`);
      else add('models', 'ok', `serves '${model}'${listed.length > 1 ? ` (and ${listed.length - 1} more)` : ''}`);
      const missing = t.adapters.filter((a) => !listed.includes(a));
      if (t.adapters.length > 0)
        add(
          'lora adapters',
          missing.length === 0 ? 'ok' : 'fail',
          missing.length === 0 ? `lists ${t.adapters.join(', ')}` : `does not list ${missing.join(', ')}`,
          missing.length === 0 ? undefined : 'start vLLM with --enable-lora --lora-modules NAME=PATH for each adapter, or load it (POST /v1/load_lora_adapter)',
        );
    }
  } catch (err) {
    add('reachable', 'fail', `GET ${base}/v1/models: ${why(err)}`, 'check the URL and that the worker is up and reachable from here');
    return { id: t.id, url: t.url, model, checks };
  }

  // ---- metrics
  let samples: Sample[] | null = null;
  try {
    const r = await get(`${base}/metrics`, t.headers, o.timeoutMs);
    if (r.status !== 200) add('metrics', 'fail', `GET /metrics answered ${r.status}`, 'kvgate routes on the worker\'s Prometheus metrics: serve them at /metrics (vLLM does unless --disable-log-stats)');
    else {
      samples = parsePromText(r.text);
      add('metrics', 'ok', `${samples.length} samples`);
    }
  } catch (err) {
    add('metrics', 'fail', `GET /metrics: ${why(err)}`, 'serve Prometheus metrics at /metrics');
  }
  let blockSize: number | undefined;
  if (samples) blockSize = checkMetrics(samples, t, add);

  // ---- token parity
  if (model !== null) {
    const tokenizer = t.tokenizer(model);
    const report = await probeTokenParity({
      workerId: t.id,
      workerUrl: base,
      model,
      ...(t.pool !== undefined ? { pool: t.pool } : {}),
      tokenizer,
      headers: t.headers,
      timeoutMs: o.timeoutMs,
    });
    for (const s of report.samples) {
      const label = PARITY_SAMPLES.find((p) => p.kind === s.kind)!.label;
      if (s.match === true) add(`tokens: ${s.kind}`, 'ok', `'${tokenizer.spec}' = worker's ${s.via === 'render' ? 'render' : '/tokenize'} (${s.kvgateTokens} ids)`);
      else if (s.match === false)
        add(
          `tokens: ${s.kind}`,
          t.kvEvents ? 'fail' : 'warn',
          `'${tokenizer.spec}' differs from the worker's ${s.via === 'render' ? '/v1/chat/completions/render' : '/tokenize'} for ${label} at token ${s.firstDifference} (kvgate ${s.kvgateTokens} ids, worker ${s.workerTokens})`,
          `set tokenizers.models.${model} to 'hf:<path to the model's tokenizer.json>' or 'remote'${t.kvEvents ? '' : ' (only KV-event routing needs exact ids)'}`,
        );
      else add(`tokens: ${s.kind}`, t.kvEvents ? 'fail' : 'warn', s.error ?? 'not checked', "serve vLLM's /tokenize (it is on by default) so kvgate's ids can be checked");
    }
  }

  // ---- KV events
  if (t.kvEvents) {
    const tok = model !== null ? t.tokenizer(model) : null;
    await checkKvEvents(t, base, model, blockSize, tok, o, add);
  } else add('kv events', 'skip', 'none configured: kvgate routes on its approximate prefix index', 'for exact prefix routing start vLLM with --kv-events-config and give the worker kvEvents');

  return { id: t.id, url: t.url, model, checks };
}

type Add = (check: string, status: CheckStatus, detail: string, fix?: string) => void;

const baseName = (n: string): string => (n.endsWith('_total') ? n.slice(0, -6) : n);

/** The metrics kvgate reads: present, parseable, plausible. Returns the block size cache_config_info gives. */
function checkMetrics(samples: readonly Sample[], t: DoctorTarget, add: Add): number | undefined {
  const by = new Map<string, Sample[]>();
  for (const s of samples) {
    const n = baseName(s.name);
    const l = by.get(n);
    if (l) l.push(s);
    else by.set(n, [s]);
  }
  const sum = (n: string): number | undefined => {
    const l = by.get(n);
    return l === undefined ? undefined : l.reduce((a, s) => a + s.value, 0);
  };
  const gauge = (name: string, required: boolean, what: string, plausible: (v: number) => boolean): void => {
    const l = by.get(name);
    if (l === undefined) {
      add(name, required ? 'fail' : 'warn', 'missing', required ? `kvgate needs it for ${what}: use vLLM's V1 engine metrics (vLLM ≥ 0.9)` : `without it kvgate has no ${what}`);
      return;
    }
    const bad = l.find((s) => !Number.isFinite(s.value) || !plausible(s.value));
    if (bad) add(name, 'fail', `implausible value ${bad.value}`, `the worker reports a ${name} kvgate cannot use`);
    else add(name, 'ok', l.map((s) => s.value).join(', '));
  };
  gauge(V.running, true, 'load balancing', (v) => v >= 0);
  gauge(V.waiting, true, 'queue-aware routing and admission', (v) => v >= 0);
  if (by.has(V.kvUsage)) gauge(V.kvUsage, true, 'KV-headroom routing', (v) => v >= 0 && v <= 1.0001);
  else if (by.has(V.legacyKvUsage)) add(V.kvUsage, 'warn', `missing; the pre-0.9 ${V.legacyKvUsage} is read instead`, 'upgrade vLLM to a V1-engine release');
  else add(V.kvUsage, 'fail', 'missing (and no pre-0.9 vllm:gpu_cache_usage_perc)', 'kvgate reads KV usage for routing and admission: run vLLM ≥ 0.9 with metrics on');
  const q = sum(V.prefixQueries) ?? sum(V.legacyPrefixQueries);
  const h = sum(V.prefixHits) ?? sum(V.legacyPrefixHits);
  if (q === undefined || h === undefined) add(V.prefixHits, 'warn', 'prefix-cache counters missing', 'start vLLM with --enable-prefix-caching; kvgate reports the worker hit rate from them');
  else if (h > q || h < 0) add(V.prefixHits, 'fail', `hits ${h} > queries ${q}`, 'the prefix-cache counters are inconsistent');
  else add(V.prefixHits, 'ok', `${h} of ${q} prompt tokens`);
  const pre = sum(V.preemptions);
  add(V.preemptions, pre === undefined ? 'warn' : pre >= 0 ? 'ok' : 'fail', pre === undefined ? 'missing' : String(pre), pre === undefined ? 'kvgate counts preemptions from it; run vLLM ≥ 0.9' : undefined);

  // cache_config_info: one gauge per engine, its labels the cache's configuration.
  let blockSize: number | undefined;
  const info = by.get(V.cacheConfigInfo);
  if (info === undefined) add(V.cacheConfigInfo, 'fail', 'missing', 'kvgate learns block size and KV capacity from it: run vLLM ≥ 0.9 with metrics on (or give blockSize and numGpuBlocks in the config)');
  else {
    const l = info[0]!.labels;
    const bs = Number(l['block_size']);
    const nb = info.reduce((a, s) => a + Number(s.labels['num_gpu_blocks']), 0);
    const pc = l['enable_prefix_caching'];
    if (!Number.isInteger(bs) || bs <= 0 || !Number.isInteger(nb) || nb <= 0)
      add(V.cacheConfigInfo, 'fail', `block_size=${l['block_size']} num_gpu_blocks=${l['num_gpu_blocks']}`, 'the labels block_size and num_gpu_blocks must be positive integers');
    else {
      blockSize = bs;
      const notes: string[] = [];
      if (t.blockSize !== undefined && t.blockSize !== bs) notes.push(`the config says blockSize ${t.blockSize}`);
      if (t.numGpuBlocks !== undefined && t.numGpuBlocks !== nb) notes.push(`the config says numGpuBlocks ${t.numGpuBlocks}`);
      add(
        V.cacheConfigInfo,
        notes.length > 0 ? 'warn' : 'ok',
        `block_size=${bs} num_gpu_blocks=${nb}${info.length > 1 ? ` over ${info.length} engines` : ''}${notes.length ? `; ${notes.join(', ')}` : ''}`,
        notes.length > 0 ? "drop blockSize/numGpuBlocks from the config: the worker's own figures win once scraped" : undefined,
      );
    }
    if (pc !== undefined && !/^true$/i.test(pc)) add('prefix caching', 'fail', `enable_prefix_caching=${pc}`, 'start vLLM with --enable-prefix-caching: prefix routing is worth nothing without it');
  }

  // LoRA: vllm:lora_requests_info tells which adapters are running (kvgate's adapter affinity).
  const lora = by.get(V.loraInfo);
  if (t.adapters.length > 0 || lora !== undefined) {
    if (lora === undefined) add(V.loraInfo, 'fail', 'missing', 'start vLLM with --enable-lora: kvgate reads the running adapters from it');
    else {
      const max = Number(lora[0]!.labels['max_lora']);
      add(V.loraInfo, Number.isInteger(max) && max > 0 ? 'ok' : 'fail', `max_lora=${lora[0]!.labels['max_lora']}`, Number.isInteger(max) && max > 0 ? undefined : 'max_lora must be a positive integer (vLLM --max-loras)');
    }
  }
  // Speculative decoding: acceptance = accepted / draft tokens (vllm/v1/spec_decode/metrics.py).
  const drafts = sum(V.specDrafts);
  const draftTokens = sum(V.specDraftTokens);
  const accepted = sum(V.specAcceptedTokens);
  if (t.speculative || drafts !== undefined || draftTokens !== undefined || accepted !== undefined) {
    if (drafts === undefined || draftTokens === undefined || accepted === undefined)
      add('spec decode', 'fail', 'vllm:spec_decode_num_{drafts,draft_tokens,accepted_tokens} not all exported', 'start vLLM with --speculative-config so kvgate can read the acceptance rate');
    else if (accepted > draftTokens || drafts > draftTokens) add('spec decode', 'fail', `accepted ${accepted}, drafts ${drafts}, draft tokens ${draftTokens}`, 'the counters are inconsistent (accepted ≤ draft tokens, drafts ≤ draft tokens)');
    else add('spec decode', 'ok', draftTokens > 0 ? `acceptance ${(accepted / draftTokens).toFixed(2)} over ${draftTokens} draft tokens` : 'no drafts yet');
  }
  return blockSize;
}

interface Received {
  seq: number;
  events: KvEvent[];
}

/** Subscribe, make the worker store blocks, and judge what arrives. */
async function checkKvEvents(
  t: DoctorTarget,
  base: string,
  model: string | null,
  blockSize: number | undefined,
  tokenizer: PromptTokenizer | null,
  o: DoctorOptions,
  add: Add,
): Promise<void> {
  const ev = t.kvEvents!;
  const sub = new zmq.Subscriber({ linger: 0 });
  const got: Received[] = [];
  let undecodable: string | null = null;
  let frameProblem: string | null = null;
  try {
    sub.connect(ev.endpoint);
    sub.subscribe(ev.topic ?? '');
    const loop = (async () => {
      for await (const frames of sub) {
        if (frames.length < 3) {
          frameProblem ??= `a message of ${frames.length} frames (expected topic, sequence, payload)`;
          continue;
        }
        try {
          const seq = decodeSeq(frames[frames.length - 2]!);
          got.push({ seq, events: decodeEventBatch(frames[frames.length - 1]!).events });
        } catch (err) {
          undecodable ??= (err as Error).message;
        }
      }
    })().catch(() => {});
    // A ZeroMQ subscription takes a moment to reach the publisher: messages before that are lost.
    await new Promise((r) => setTimeout(r, Math.min(500, o.eventsMs / 4)));
    // Prompts no cache holds (a random head), a few blocks long, one after the other: the worker
    // stores their blocks in batches of its own, whose sequence numbers must follow each other.
    const prompts = [0, 1, 2].map(() => `doctor ${randomBytes(6).toString('hex')}: ${PROBE_TEXT}`);
    const prompt = prompts[0]!;
    let requestProblem: string | null = null;
    const storedCount = (): number => got.reduce((a, g) => a + g.events.filter((e) => e.type === 'BlockStored').length, 0);
    const until = Date.now() + o.eventsMs;
    if (model !== null) {
      for (const p of prompts) {
        const before = storedCount();
        try {
          const r = await fetch(`${base}/v1/completions`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', ...t.headers },
            body: JSON.stringify({ model, prompt: p, max_tokens: 1, temperature: 0 }),
            signal: AbortSignal.timeout(Math.max(o.timeoutMs, o.eventsMs)),
          });
          if (r.status !== 200) requestProblem ??= `POST /v1/completions answered ${r.status}`;
          await r.arrayBuffer();
        } catch (err) {
          requestProblem ??= `POST /v1/completions: ${why(err)}`;
        }
        while (Date.now() < until && storedCount() === before) await new Promise((r) => setTimeout(r, 20));
      }
    } else requestProblem = 'no model to send a request to';
    while (Date.now() < until && storedCount() === 0) await new Promise((r) => setTimeout(r, 50));
    await new Promise((r) => setTimeout(r, 200)); // the rest of the step's messages
    sub.close();
    await loop;

    if (got.length === 0 && undecodable === null) {
      add(
        'kv events arrive',
        'fail',
        `nothing on ${ev.endpoint} in ${(o.eventsMs / 1000).toFixed(1)} s${requestProblem ? ` (${requestProblem})` : ' after a request'}`,
        `start vLLM with --kv-events-config '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558"}' and check that ${ev.endpoint} is reachable from here (and the topic '${ev.topic ?? ''}')`,
      );
      return;
    }
    add('kv events arrive', 'ok', `${got.length} batches in ${(o.eventsMs / 1000).toFixed(1)} s`);
    if (undecodable !== null || frameProblem !== null)
      add('kv events decode', 'fail', undecodable ?? frameProblem!, 'kvgate reads vLLM\'s EventBatch (array or map encoding, vllm/distributed/kv_events.py): report the vLLM version with this message');
    else add('kv events decode', 'ok', `${got.reduce((a, g) => a + g.events.length, 0)} events`);
    const seqs = got.map((g) => g.seq);
    const gaps = seqs.slice(1).filter((s, i) => s !== seqs[i]! + 1).length;
    add(
      'kv events sequence',
      gaps === 0 ? 'ok' : 'fail',
      gaps === 0 ? `consecutive ${seqs[0]}..${seqs[seqs.length - 1]}` : `${gaps} gaps in ${seqs.join(',')}`,
      gaps === 0 ? undefined : 'messages were dropped between vLLM and here: raise hwm in --kv-events-config, and give a replay_endpoint so kvgate can fill gaps',
    );
    const stored = got.flatMap((g) => g.events).filter((e): e is Extract<KvEvent, { type: 'BlockStored' }> => e.type === 'BlockStored');
    if (stored.length === 0) {
      add('kv events blocks', 'fail', `no BlockStored${requestProblem ? ` (${requestProblem})` : ' after a request'}`, 'start vLLM with --enable-prefix-caching: only cached blocks are reported');
    } else {
      const foreign = stored.find((e) => blockSize !== undefined && e.blockSize !== blockSize);
      if (foreign)
        add('kv events blocks', 'fail', `block_size ${foreign.blockSize} in events, ${blockSize} in cache_config_info`, 'the events and the metrics must come from the same worker: check the endpoint');
      else add('kv events blocks', 'ok', `${stored.reduce((a, e) => a + e.blockHashes.length, 0)} blocks stored at block size ${stored[0]!.blockSize}`);
      // The request's own blocks: the event that starts with the prompt's ids, compared with kvgate's.
      if (tokenizer !== null && model !== null) {
        const mine = await kvgateIds(tokenizer, 'completion', { model, prompt } as never, base).catch(() => null);
        if (mine) {
          const bs = stored[0]!.blockSize;
          const full = Math.floor(mine.ids.length / bs) * bs;
          const want = mine.ids.slice(0, full);
          const seen = stored.find((e) => e.parentBlockHash === null && e.tokenIds.length >= bs && e.tokenIds.slice(0, Math.min(full, e.tokenIds.length)).every((x, i) => x === want[i]));
          if (seen) add('kv events tokens', 'ok', `the request's blocks carry kvgate's ids ('${tokenizer.spec}')`);
          else
            add(
              'kv events tokens',
              'fail',
              `no BlockStored carries the ids '${tokenizer.spec}' gives the request's prompt: its blocks would never match kvgate's`,
              `set tokenizers.models.${model} to 'hf:<path to the model's tokenizer.json>' or 'remote'`,
            );
        }
      }
    }
    if (ev.replayEndpoint !== undefined) await checkReplay(ev.replayEndpoint, seqs[0]!, o, add);
    else add('kv events replay', 'warn', 'no replay endpoint', 'give vLLM a replay_endpoint in --kv-events-config and kvEvents.replayEndpoint here: dropped messages are then refilled instead of resetting the worker\'s index');
  } finally {
    sub.close();
  }
}

async function checkReplay(endpoint: string, from: number, o: DoctorOptions, add: Add): Promise<void> {
  const dealer = new zmq.Dealer({ linger: 0, receiveTimeout: o.timeoutMs, sendTimeout: o.timeoutMs });
  try {
    dealer.connect(endpoint);
    // vLLM's replay ROUTER: send the start sequence (8 bytes, big-endian), receive (seq, payload)
    // frames up to seq −1 (vllm/distributed/kv_events.py ZmqEventPublisher._service_replay).
    await dealer.send([Buffer.alloc(0), encodeSeq(from)]);
    let n = 0;
    for (;;) {
      let frames = await dealer.receive();
      if (frames.length > 0 && frames[0]!.length === 0) frames = frames.slice(1);
      const seq = decodeSeq(frames[0]!);
      if (seq === -1) break;
      decodeEventBatch(frames[1]!);
      n++;
    }
    add('kv events replay', n > 0 ? 'ok' : 'warn', n > 0 ? `${n} batches replayed from ${from}` : `empty reply from ${from}`, n > 0 ? undefined : "raise buffer_steps in vLLM's --kv-events-config");
  } catch (err) {
    add('kv events replay', 'fail', `${endpoint}: ${why(err)}`, "check replay_endpoint in vLLM's --kv-events-config and kvEvents.replayEndpoint (reachable from here)");
  } finally {
    dealer.close();
  }
}

/** Text of the KV-event probe request: several blocks of ordinary prose. */
const PROBE_TEXT =
  'The quarterly inventory report lists 1,204 pallets across four warehouses. Rotterdam holds the most, ' +
  'followed by Hamburg and Antwerp; Gdansk, opened in March, is still filling up. Each pallet is scanned ' +
  'on arrival and again before it leaves, and the two scans are reconciled every night.';
