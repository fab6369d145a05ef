/** `kvgate sim`: argument parsing, a real run answered over HTTP, clean shutdown. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { help, parseSimArgs, runSim } from '../../src/cli/sim.js';

function sink(): { stream: PassThrough; text: () => string } {
  const stream = new PassThrough();
  let buf = '';
  stream.on('data', (c: Buffer) => (buf += c.toString('utf8')));
  return { stream, text: () => buf };
}

test('help names every option with its default', () => {
  for (const flag of ['--host', '--port', '--model', '--adapters', '--gpu', '--tp', '--speed', '--kv-events-port', '--num-gpu-blocks', '--legacy-metrics']) {
    assert.ok(help.includes(flag), flag);
  }
  assert.match(help, /default 8000/);
  assert.match(help, /default 127\.0\.0\.1/);
});

test('arguments map onto worker options', () => {
  const o = parseSimArgs(['--port', '0', '--model', 'llama-3-70b', '--gpu', 'a100', '--tp', '4', '--speed', '2.5', '--num-gpu-blocks', '900', '--legacy-metrics', '--kv-events-port', '0', '--kv-replay-port', '5600']);
  assert.equal(o.port, 0);
  assert.equal(o.model, 'llama-3-70b');
  assert.equal(o.gpu, 'a100');
  assert.equal(o.tp, 4);
  assert.equal(o.speed, 2.5);
  assert.equal(o.numGpuBlocks, 900);
  assert.equal(o.legacyMetricNames, true);
  assert.deepEqual(o.kvEvents, { endpoint: 'tcp://127.0.0.1:*', topic: '', replayEndpoint: 'tcp://127.0.0.1:5600' });
  assert.deepEqual(parseSimArgs(['--adapters', 'sql-lora, chat-lora']).adapters, ['sql-lora', 'chat-lora']);
  assert.equal(parseSimArgs(['--adapters', 'a', '--max-loras', '2']).maxLoras, 2);
  const rt = parseSimArgs(['--runtime-lora', '--max-loras', '3']);
  assert.deepEqual([rt.runtimeLoraUpdating, rt.maxLoras, rt.adapters], [true, 3, undefined]);
  const rs = parseSimArgs(['--lora-resolver', 'cust-[0-9]+']);
  assert.deepEqual([rs.runtimeLoraUpdating, rs.loraResolver], [true, 'cust-[0-9]+']);
  assert.throws(() => parseSimArgs(['--lora-resolver', '(']), /--lora-resolver: not a valid regular expression/);
  const d = parseSimArgs([]);
  assert.equal(d.adapters, undefined);
  assert.equal(d.runtimeLoraUpdating, false);
  assert.equal(d.port, 8000);
  assert.equal(d.host, '127.0.0.1');
  assert.equal(d.kvEvents, undefined);
  const kv = parseSimArgs(['--kv-events-port', '0', '--kv-events-encoding', 'array', '--kv-events-drop', '0.25', '--cpu-offload-gib', '8']);
  assert.equal(kv.kvEvents?.encoding, 'array');
  assert.equal(kv.kvEvents?.dropRate, 0.25);
  assert.equal(kv.cpuOffloadGib, 8);
  assert.equal(parseSimArgs(['--kv-events-port', '0']).kvEvents?.encoding, undefined, "the publisher's default (map) applies");
});

test('bad flags exit with code 2 and a message', async () => {
  for (const argv of [['--bogus'], ['--port', 'abc'], ['--speed', '0'], ['--tp', '1.5'], ['extra'], ['--kv-replay-port', '5'], ['--adapters', 'a,'], ['--adapters', 'llama-3.1-8b'], ['--adapters', 'a,a'], ['--max-loras', '2'], ['--adapters', 'a', '--max-loras', '0'], ['--kv-events-encoding', 'map'], ['--kv-events-port', '0', '--kv-events-encoding', 'json'], ['--kv-events-port', '0', '--kv-events-drop', '1.5'], ['--cpu-offload-gib', '-1']]) {
    const err = sink();
    const code = await runSim(argv, { err: err.stream, out: new PassThrough() });
    assert.equal(code, 2, argv.join(' '));
    assert.match(err.text(), /^kvgate sim: /);
  }
});

test('runs a worker, prints its URL, serves requests and stops cleanly', async () => {
  const out = sink();
  const ac = new AbortController();
  const done = runSim(['--port', '0', '--speed', '100', '--num-gpu-blocks', '500'], { signal: ac.signal, out: out.stream, err: new PassThrough() });
  let url: string | undefined;
  for (let i = 0; i < 200 && !url; i++) {
    url = /(http:\/\/127\.0\.0\.1:\d+)/.exec(out.text())?.[1];
    if (!url) await new Promise((r) => setTimeout(r, 5));
  }
  assert.ok(url, 'the URL is printed');
  const r = await fetch(url + '/v1/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'hello', max_tokens: 3 }),
  });
  assert.equal(r.status, 200);
  const metrics = await (await fetch(url + '/metrics')).text();
  assert.match(metrics, /num_gpu_blocks="500"/);
  ac.abort();
  assert.equal(await done, 0);
});

test('the kvgate binary handles SIGTERM with exit code 0', async () => {
  const cli = fileURLToPath(new URL('../../src/cli.js', import.meta.url));
  const child = spawn(process.execPath, [cli, 'sim', '--port', '0', '--speed', '100'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  try {
    for (let i = 0; i < 400 && !out.includes('http://'); i++) await new Promise((r) => setTimeout(r, 10));
    assert.match(out, /http:\/\/127\.0\.0\.1:\d+/);
    child.kill('SIGTERM');
    assert.equal(await exited, 0);
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
  }
});

test('speculation flags: a draft model tuned to an acceptance rate, and in-engine speculation with a shifting acceptance', () => {
  const d = parseSimArgs(['--model', 'llama-3.1-8b', '--draft-of', 'llama-3.1-70b', '--draft-acceptance', '0.7']);
  assert.equal(d.draftOf, 'llama-3.1-70b');
  assert.equal(d.draftAcceptance, 0.7);
  assert.deepEqual(parseSimArgs(['--draft-of', 'llama-3.1-70b', '--draft-acceptance', '0.8:0.3@30']).draftAcceptance, { before: 0.8, after: 0.3, atMs: 30_000 });
  const s = parseSimArgs(['--model', 'llama-3.1-70b', '--tp', '4', '--spec-k', '4', '--spec-acceptance', '0.8:0.3@60']);
  assert.equal(s.speculative?.k, 4);
  assert.equal(s.speculative?.draftModel, 'llama-3.1-8b');
  const acc = s.speculative.acceptance as (ms: number) => number;
  assert.equal(acc(59_000), 0.8);
  assert.equal(acc(61_000), 0.3);
  assert.equal(parseSimArgs(['--spec-k', '2']).speculative?.acceptance, 0.7);
  for (const bad of [['--spec-acceptance', '0.5'], ['--spec-k', '2', '--spec-acceptance', '1.5'], ['--draft-acceptance', '0.5'], ['--draft-of', 'x', '--draft-acceptance', '0.5', '--draft-fidelity', '0.5']]) {
    assert.throws(() => parseSimArgs(bad), /--/, bad.join(' '));
  }
});

test('--role starts a KV connector: its link and hold timeout, and the flags that need it', () => {
  for (const flag of ['--role', '--kv-link', '--kv-hold-timeout']) assert.ok(help.includes(flag), flag);
  const o = parseSimArgs(['--role', 'prefill', '--kv-link', 'tcp-100', '--kv-hold-timeout', '30']);
  assert.equal(o.kvRole, 'prefill');
  assert.equal(o.kvLink?.name, 'tcp-100');
  assert.equal(o.kvHoldTimeoutMs, 30_000);
  const custom = parseSimArgs(['--role', 'decode', '--kv-link', '200:20']).kvLink!;
  assert.equal(custom.bytesPerSecond, 25e9);
  assert.equal(custom.latencyMs, 0.02);
  assert.equal(parseSimArgs([]).kvRole, undefined);
  assert.throws(() => parseSimArgs(['--role', 'proxy']), /--role must be prefill, decode or both/);
  assert.throws(() => parseSimArgs(['--kv-link', 'nvlink']), /need --role/);
  assert.throws(() => parseSimArgs(['--role', 'both', '--kv-link', 'carrier-pigeon']), /--kv-link: unknown KV link/);
});
