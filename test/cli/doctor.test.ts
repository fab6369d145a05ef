/**
 * `kvgate doctor` against real simulated workers (`kvgate sim` as child processes on loopback), in
 * several of their modes, and against a stand-in server that lacks pieces: what passes passes, and
 * what is missing is named with its fix and fails the exit status.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import type { AddressInfo } from 'node:net';
import { help, runDoctor } from '../../src/cli/doctor.js';
import type { WorkerReport } from '../../src/cli/doctor-checks.js';
import { CLI } from './demo-process.js';
import { estimateTokenizer } from '../../src/tokenizer/estimate.js';
import { encode } from '@msgpack/msgpack';
import * as zmq from 'zeromq';

interface SimProcess {
  url: string;
  events?: string;
  replay?: string;
  child: ChildProcess;
}

const sims: SimProcess[] = [];

async function startSim(args: string[]): Promise<SimProcess> {
  const child = spawn(process.execPath, [CLI, 'sim', '--port', '0', '--speed', '50', '--num-gpu-blocks', '600', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d));
  const wantEvents = args.includes('--kv-events-port');
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline && child.exitCode === null && !(out.includes('http://') && (!wantEvents || out.includes('kv events:')))) await new Promise((r) => setTimeout(r, 20));
  const url = /(http:\/\/127\.0\.0\.1:\d+)/.exec(out)?.[1];
  if (!url) child.kill('SIGKILL');
  assert.ok(url, `no URL in: ${out}`);
  const s: SimProcess = { url, child };
  const ev = /kv events: (tcp:\/\/\S+)(?:\s+replay: (tcp:\/\/\S+))?/.exec(out);
  if (ev) {
    s.events = ev[1]!;
    if (ev[2]) s.replay = ev[2];
  }
  sims.push(s);
  return s;
}

function sink(): { stream: PassThrough; text: () => string } {
  const stream = new PassThrough();
  let buf = '';
  stream.on('data', (c: Buffer) => (buf += c.toString('utf8')));
  return { stream, text: () => buf };
}

async function doctor(argv: string[]): Promise<{ code: number; out: string; err: string; json?: { ok: boolean; workers: WorkerReport[] } }> {
  const out = sink();
  const err = sink();
  const code = await runDoctor(argv, { out: out.stream, err: err.stream });
  const r: { code: number; out: string; err: string; json?: { ok: boolean; workers: WorkerReport[] } } = { code, out: out.text(), err: err.text() };
  if (argv.includes('--json') && code !== 2) r.json = JSON.parse(r.out);
  return r;
}

const statusOf = (w: WorkerReport, check: string): string | undefined => w.checks.find((c) => c.check === check)?.status;

let withEvents: SimProcess;

before(async () => {
  withEvents = await startSim(['--kv-events-port', '0', '--kv-replay-port', '0']);
});

after(async () => {
  for (const s of sims) {
    if (s.child.exitCode === null) {
      const exited = new Promise((r) => s.child.once('exit', r));
      s.child.kill('SIGTERM');
      await exited;
    }
  }
});

test('help names the checks and the options', () => {
  for (const s of ['--config', '--worker', '--kv-events', '--kv-replay', '--tokenizer', '--json', '--events-seconds', 'cache_config_info', '/tokenize', 'render']) assert.ok(help.includes(s), s);
});

test('bad flags exit with code 2 and a message', async () => {
  for (const argv of [[], ['--bogus'], ['--worker', 'not a url'], ['--worker', 'http://x', '--kv-events', 'http://x'], ['--worker', 'http://x', '--kv-replay', 'tcp://x:1'], ['--config', 'a.yaml', '--worker', 'http://x'], ['--worker', 'http://x', '--tokenizer', 'nope'], ['--worker', 'http://x', '--events-seconds', '0']]) {
    const r = await doctor(argv);
    assert.equal(r.code, 2, argv.join(' '));
    assert.match(r.err, /^kvgate doctor: /, argv.join(' '));
  }
});

test('a simulated worker with KV events and replay passes every check, events and token parity included', async () => {
  const r = await doctor(['--worker', withEvents.url, '--kv-events', withEvents.events!, '--kv-replay', withEvents.replay!, '--events-seconds', '2', '--json']);
  assert.equal(r.code, 0, r.out);
  const w = r.json!.workers[0]!;
  const failed = w.checks.filter((c) => c.status !== 'ok');
  assert.deepEqual(failed, []);
  for (const c of ['models', 'vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc', 'vllm:cache_config_info', 'tokens: completion', 'tokens: chat-tools', 'tokens: chat-multipart', 'tokens: responses', 'kv events arrive', 'kv events decode', 'kv events sequence', 'kv events blocks', 'kv events tokens', 'kv events replay'])
    assert.equal(statusOf(w, c), 'ok', c);
  assert.match(w.checks.find((c) => c.check === 'vllm:cache_config_info')!.detail, /block_size=16 num_gpu_blocks=600/);
});

test('the table prints one line per check and a summary', async () => {
  const r = await doctor(['--worker', withEvents.url, '--events-seconds', '1']);
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /^WORKER\s+CHECK\s+RESULT\s+DETAIL$/m);
  assert.match(r.out, /tokens: chat-tools\s+OK/);
  assert.match(r.out, /kv events\s+SKIP/);
  assert.match(r.out, /\d+ ok, 0 warnings, 0 failed, 1 skipped/);
});

test('modes of the simulated worker: pre-0.9 metric names warn, in-engine speculation and LoRA adapters are checked', async () => {
  const [legacy, spec, lora] = await Promise.all([startSim(['--legacy-metrics']), startSim(['--spec-k', '2']), startSim(['--adapters', 'sql-lora'])]);
  const l = (await doctor(['--worker', legacy.url, '--json'])).json!.workers[0]!;
  assert.equal(statusOf(l, 'vllm:kv_cache_usage_perc'), 'warn');
  assert.match(l.checks.find((c) => c.check === 'vllm:kv_cache_usage_perc')!.fix!, /upgrade vLLM/);
  const s = await doctor(['--worker', spec.url, '--speculative', '--json']);
  assert.equal(s.code, 0, JSON.stringify(s.json));
  assert.equal(statusOf(s.json!.workers[0]!, 'spec decode'), 'ok');
  // Speculation asked of a worker that does not do it fails, with the flag to start vLLM with.
  const noSpec = await doctor(['--worker', legacy.url, '--speculative', '--json']);
  assert.equal(noSpec.code, 1);
  assert.match(noSpec.json!.workers[0]!.checks.find((c) => c.check === 'spec decode')!.fix!, /--speculative-config/);
  const lo = await doctor(['--worker', lora.url, '--adapters', 'sql-lora', '--json']);
  assert.equal(lo.code, 0, JSON.stringify(lo.json));
  assert.equal(statusOf(lo.json!.workers[0]!, 'lora adapters'), 'ok');
  assert.equal(statusOf(lo.json!.workers[0]!, 'vllm:lora_requests_info'), 'ok');
  const missing = await doctor(['--worker', lora.url, '--adapters', 'sql-lora,other-lora', '--json']);
  assert.equal(missing.code, 1);
  assert.match(missing.json!.workers[0]!.checks.find((c) => c.check === 'lora adapters')!.detail, /does not list other-lora/);
});

test('--config checks every worker with the configured tokenizer and KV events', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'kvgate-doctor-'));
  try {
    const file = join(dir, 'kvgate.yaml');
    await writeFile(
      file,
      [
        'pools:',
        '  - name: target',
        '    model: llama-3.1-8b',
        '    workers:',
        `      - { id: sim-a, url: "${withEvents.url}", kvEvents: { endpoint: "${withEvents.events}", replayEndpoint: "${withEvents.replay}" } }`,
        'tokenizers:',
        '  models:',
        '    llama-3.1-8b: estimate',
        '',
      ].join('\n'),
    );
    const r = await doctor(['--config', file, '--events-seconds', '2', '--json']);
    assert.equal(r.code, 0, r.out);
    assert.equal(r.json!.workers[0]!.id, 'sim-a');
    assert.equal(statusOf(r.json!.workers[0]!, 'kv events tokens'), 'ok');
    await writeFile(file, 'pools: [ { name: p, model: m, workers: [ { url: "not a url" } ] } ]\n');
    const bad = await doctor(['--config', file]);
    assert.equal(bad.code, 2);
    assert.match(bad.err, /invalid configuration/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

/**
 * A server that looks like vLLM from afar: it lists its model and tokenizes, but has no /metrics, no
 * KV events, and its /tokenize gives other ids than kvgate's estimate (each id + 1).
 */
async function standIn(): Promise<{ server: Server; url: string }> {
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const send = (status: number, obj: unknown): void => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(obj));
      };
      if (req.url === '/v1/models') return send(200, { object: 'list', data: [{ id: 'stand-in', object: 'model' }] });
      if (req.url === '/tokenize') {
        const b = JSON.parse(body) as { prompt?: string; messages?: Array<{ role: string; content: unknown }> };
        const text = b.prompt ?? (b.messages ?? []).map((m) => `${m.role}: ${JSON.stringify(m.content)}`).join('\n');
        const tokens = estimateTokenizer.encode(text).map((t) => t + 1);
        return send(200, { count: tokens.length, max_model_len: 4096, tokens });
      }
      if (req.url === '/v1/completions') return send(200, { id: 'x', object: 'text_completion', choices: [{ index: 0, text: 'ok', finish_reason: 'length' }] });
      send(404, { error: { message: 'not found', type: 'NotFoundError', param: null, code: 404 } });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

test('a server that lacks pieces: no /metrics, no KV events, other token ids: each failure is named with its fix', async () => {
  const { server, url } = await standIn();
  // A port with nothing behind it: ZeroMQ connects in the background and never receives.
  const idle = createServer();
  await new Promise<void>((r) => idle.listen(0, '127.0.0.1', r));
  const deadPort = (idle.address() as AddressInfo).port;
  await new Promise<void>((r) => idle.close(() => r()));
  try {
    const r = await doctor(['--worker', url, '--kv-events', `tcp://127.0.0.1:${deadPort}`, '--events-seconds', '1', '--json']);
    assert.equal(r.code, 1);
    const w = r.json!.workers[0]!;
    assert.equal(w.model, 'stand-in');
    assert.equal(statusOf(w, 'models'), 'ok');
    const metrics = w.checks.find((c) => c.check === 'metrics')!;
    assert.equal(metrics.status, 'fail');
    assert.match(metrics.detail, /GET \/metrics answered 404/);
    assert.match(metrics.fix!, /\/metrics/);
    const tokens = w.checks.find((c) => c.check === 'tokens: completion')!;
    assert.equal(tokens.status, 'fail');
    assert.match(tokens.detail, /differs from the worker's \/tokenize for a completion prompt at token 0/);
    assert.match(tokens.fix!, /tokenizers\.models\.stand-in to 'hf:.*' or 'remote'/);
    const events = w.checks.find((c) => c.check === 'kv events arrive')!;
    assert.equal(events.status, 'fail');
    assert.match(events.fix!, /--kv-events-config '\{"enable_kv_cache_events":true,"publisher":"zmq"/);
    // The table says the same, a fix under each failure.
    const t = await doctor(['--worker', url, '--events-seconds', '1']);
    assert.equal(t.code, 1);
    assert.match(t.out, /metrics\s+FAIL\s+GET \/metrics answered 404\n\s+fix: /);
    assert.match(t.out, /tokens: chat-tools\s+WARN/); // no KV events here: exact ids matter less
  } finally {
    await new Promise<void>((r) => server.close(() => r()));
  }
});

test('an unreachable worker fails one check and stops there', async () => {
  const idle = createServer();
  await new Promise<void>((r) => idle.listen(0, '127.0.0.1', r));
  const port = (idle.address() as AddressInfo).port;
  await new Promise<void>((r) => idle.close(() => r()));
  const r = await doctor(['--worker', `http://127.0.0.1:${port}`, '--json']);
  assert.equal(r.code, 1);
  assert.deepEqual(r.json!.workers[0]!.checks.map((c) => [c.check, c.status]), [['reachable', 'fail']]);
});

test('the kvgate binary runs doctor and exits 1 on a failed check', async () => {
  const child = spawn(process.execPath, [CLI, 'doctor', '--worker', 'http://127.0.0.1:1', '--timeout-ms', '1000'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d));
  const code = await new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
  assert.equal(code, 1);
  assert.match(out, /reachable\s+FAIL/);
});

test("a tokenizer other than the worker's fails the token checks and the KV-event token check, with the tokenizer to set", async () => {
  const dir = await mkdtemp(join(tmpdir(), 'kvgate-doctor-tok-'));
  try {
    const tok = join(dir, 'tokenizer.json');
    const vocab = Object.fromEntries([...'abcdefghijklmnopqrstuvwxyz'].map((c, i) => [c, i]));
    await writeFile(tok, JSON.stringify({ version: '1.0', added_tokens: [], normalizer: null, pre_tokenizer: { type: 'Whitespace' }, post_processor: null, decoder: null, model: { type: 'BPE', unk_token: null, vocab, merges: [] } }));
    const r = await doctor(['--worker', withEvents.url, '--kv-events', withEvents.events!, '--tokenizer', `hf:${tok}`, '--events-seconds', '2', '--json']);
    assert.equal(r.code, 1);
    const w = r.json!.workers[0]!;
    for (const c of ['tokens: completion', 'tokens: chat-tools', 'tokens: chat-multipart', 'tokens: responses', 'kv events tokens']) {
      const x = w.checks.find((y) => y.check === c)!;
      assert.equal(x.status, 'fail', c);
      assert.match(x.fix!, /tokenizers\.models\.llama-3\.1-8b to 'hf:<path to the model's tokenizer\.json>' or 'remote'/, c);
    }
    assert.equal(statusOf(w, 'kv events arrive'), 'ok');
    assert.equal(statusOf(w, 'kv events decode'), 'ok');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('a publisher whose sequence numbers skip, or whose payload is not an EventBatch, fails those checks', async () => {
  const pub = new zmq.Publisher({ linger: 0 });
  await pub.bind('tcp://127.0.0.1:*');
  const endpoint = pub.lastEndpoint!;
  let seq = 10;
  let garbage = false;
  const frame = (n: number): Buffer => {
    const b = Buffer.alloc(8);
    b.writeBigInt64BE(BigInt(n));
    return b;
  };
  const batch = (tokens: number[]): Uint8Array => encode([Date.now() / 1000, [['BlockStored', [seq * 100 + 1], null, tokens, 16, null, null]]]);
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      if (req.url === '/v1/models') {
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end(JSON.stringify({ data: [{ id: 'gappy' }] }));
      }
      if (req.url === '/v1/completions') {
        const ids = estimateTokenizer.encode((JSON.parse(body) as { prompt: string }).prompt);
        // One batch per request, every other sequence number: a gap before each.
        void pub.send(['', frame(seq), garbage ? Buffer.from('not msgpack at all') : batch(ids.slice(0, 16))]);
        seq += 2;
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end('{}');
      }
      res.writeHead(404);
      res.end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const r = await doctor(['--worker', url, '--kv-events', endpoint, '--events-seconds', '2', '--json']);
    const w = r.json!.workers[0]!;
    assert.equal(statusOf(w, 'kv events arrive'), 'ok');
    assert.equal(statusOf(w, 'kv events decode'), 'ok');
    const s = w.checks.find((c) => c.check === 'kv events sequence')!;
    assert.equal(s.status, 'fail');
    assert.match(s.detail, /2 gaps in 10,12,14/);
    assert.match(s.fix!, /raise hwm .* replay_endpoint/);
    assert.equal(statusOf(w, 'kv events tokens'), 'ok', 'the blocks carry the ids the estimate gives');
    garbage = true;
    const g = (await doctor(['--worker', url, '--kv-events', endpoint, '--events-seconds', '1', '--json'])).json!.workers[0]!;
    assert.equal(statusOf(g, 'kv events decode'), 'fail');
    assert.match(g.checks.find((c) => c.check === 'kv events decode')!.fix!, /EventBatch/);
  } finally {
    await new Promise<void>((r) => server.close(() => r()));
    pub.close();
  }
});
