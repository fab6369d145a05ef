/** `kvgate serve` as a user runs it: the built CLI in a child process. */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer, type AddressInfo } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { startSimWorker, type SimWorker } from '../../src/sim/worker/server.js';
import { CLI, runCli } from '../support.js';

let dir: string;

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'kvgate-serve-'));
});
after(() => rmSync(dir, { recursive: true, force: true }));


test('an invalid config exits 2 naming the field', async () => {
  const file = join(dir, 'bad.yaml');
  writeFileSync(file, 'pools:\n  - name: p\n    model: m\n    workers:\n      - url: http://127.0.0.1:9\n      - url: nonsense\n');
  const r = await runCli(['serve', '--config', file]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /pools\[0\]\.workers\[1\]\.url: Invalid URL/);
});

test('bad flags, a missing --config and an unreadable file exit 2', async () => {
  assert.equal((await runCli(['serve', '--bogus'])).code, 2);
  const r = await runCli(['serve']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--config FILE is required/);
  const r2 = await runCli(['serve', '--config', join(dir, 'nope.yaml')]);
  assert.equal(r2.code, 2);
  assert.match(r2.stderr, /cannot read/);
  const ok = join(dir, 'ok.json');
  writeFileSync(ok, JSON.stringify({ workers: [{ url: 'http://127.0.0.1:9', model: 'm' }] }));
  const badPort = await runCli(['serve', '--config', ok, '--port', 'x']);
  assert.equal(badPort.code, 2);
  assert.match(badPort.stderr, /kvgate serve: --port must be an integer 0\.\.65535, got 'x'/);
  const badLevel = await runCli(['serve', '--config', ok, '--log-level', 'loud']);
  assert.equal(badLevel.code, 2);
  assert.match(badLevel.stderr, /kvgate serve: --log-level must be one of fatal, error/);
});

test('a port already taken exits 1 naming the address', async () => {
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
  try {
    const port = (taken.address() as AddressInfo).port;
    const ok = join(dir, 'taken.json');
    writeFileSync(ok, JSON.stringify({ workers: [{ url: 'http://127.0.0.1:9', model: 'm' }] }));
    const r = await runCli(['serve', '--config', ok, '--port', String(port)]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, new RegExp(`kvgate serve: cannot listen on 127\\.0\\.0\\.1:${port}: .*EADDRINUSE`));
  } finally {
    taken.close();
  }
});

test('--check validates the file and the gateway it describes, and exits without listening', async () => {
  const ok = join(dir, 'check-ok.yaml');
  writeFileSync(ok, 'listen: { port: 1 }\nworkers:\n  - { url: "http://127.0.0.1:9", model: m }\n  - { url: "http://127.0.0.1:10", model: n }\npolicy: { name: kvgate, options: { wPrefix: 2 } }\n');
  const r = await runCli(['serve', '--config', ok, '--check']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /configuration ok \(2 workers, 2 models, policy kvgate, 0 tenants\)/);
  // A policy option out of range, and TLS files that cannot be read: what only building the
  // gateway finds is found too.
  const badPolicy = join(dir, 'check-policy.yaml');
  writeFileSync(badPolicy, 'workers:\n  - { url: "http://127.0.0.1:9", model: m }\npolicy: { name: kvgate, options: { nearRelative: x } }\n');
  const p = await runCli(['serve', '--config', badPolicy, '--check']);
  assert.equal(p.code, 2);
  assert.match(p.stderr, /policy\.options\.nearRelative/);
  const badTls = join(dir, 'check-tls.yaml');
  writeFileSync(badTls, `listen: { tls: { certFile: ${join(dir, 'no.crt')}, keyFile: ${join(dir, 'no.key')} } }\nworkers:\n  - { url: "http://127.0.0.1:9", model: m }\n`);
  const t = await runCli(['serve', '--config', badTls, '--check']);
  assert.equal(t.code, 2);
  assert.match(t.stderr, /listen\.tls\.certFile: cannot read .*no\.crt \(ENOENT\)/);
});

test('--cache and --redis override the file and are checked like its fields', async () => {
  const ok = join(dir, 'cache.json');
  writeFileSync(ok, JSON.stringify({ workers: [{ url: 'http://127.0.0.1:9', model: 'm' }] }));
  const bad = await runCli(['serve', '--config', ok, '--cache', 'disk']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--cache must be off, memory or redis/);
  const url = await runCli(['serve', '--config', ok, '--redis', 'http://x']);
  assert.equal(url.code, 2);
  assert.match(url.stderr, /cache\.redis\.url: expected redis:\/\//);
  const noUrl = await runCli(['serve', '--config', ok, '--cache', 'redis']);
  assert.equal(noUrl.code, 2);
  assert.match(noUrl.stderr, /cache\.redis\.url: required when cache\.store is redis \(or set REDIS_URL\)/);
  assert.equal((await runCli(['serve', '--config', ok, '--cache', 'off', '--redis', 'redis://h'])).code, 2);
});

test('--help prints usage with defaults', async () => {
  const r = await runCli(['serve', '--help']);
  assert.equal(r.code, 0);
  assert.match(r.stdout, /--config FILE/);
  assert.match(r.stdout, /default 8080/);
  assert.match(r.stdout, /--cache MODE/);
  assert.match(r.stdout, /--redis URL/);
  assert.match(r.stdout, /--strict-parity/);
});

test('serves a worker from a config file; on SIGTERM /ready answers 503 for the drain delay, then it exits 0', async () => {
  let sim: SimWorker | null = await startSimWorker({ port: 0, speed: 100 });
  try {
    const file = join(dir, 'good.yaml');
    writeFileSync(file, `pools:\n  - name: p\n    model: ${sim.model}\n    workers:\n      - url: ${sim.url}\nlog:\n  level: info\nshutdown:\n  drainDelayMs: 800\n`);
    const child = spawn(process.execPath, [CLI, 'serve', '--config', file, '--port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d));
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    const deadline = Date.now() + 10_000;
    let url: string | undefined;
    while (!url && Date.now() < deadline) {
      url = /"url":"(http:\/\/[^"]+)"/.exec(stdout)?.[1];
      if (!url) await new Promise((r) => setTimeout(r, 20));
    }
    assert.ok(url, `no listening line in: ${stdout}`);
    const r = await fetch(url + '/v1/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: sim.model, prompt: 'hello', max_tokens: 3 }),
    });
    assert.equal(r.status, 200);
    assert.equal(((await r.json()) as any).usage.completion_tokens, 3);
    assert.equal((await fetch(url + '/ready')).status, 200);
    child.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 200));
    // Draining: still listening and serving, but no longer ready.
    assert.equal((await fetch(url + '/ready')).status, 503);
    assert.equal((await fetch(url + '/health')).status, 200);
    assert.equal(await exited, 0);
    assert.match(stdout, /"msg":"request"/);
  } finally {
    await sim?.close();
    sim = null;
  }
});

test('a tokenizer file that cannot be loaded exits 2 naming the model', async () => {
  const file = join(dir, 'tok.yaml');
  writeFileSync(file, `workers:\n  - url: http://127.0.0.1:9\n    model: m\ntokenizers:\n  models:\n    m: hf:${join(dir, 'missing-tokenizer.json')}\nlisten:\n  port: 0\nlog:\n  level: silent\n`);
  const r = await runCli(['serve', '--config', file]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /tokenizers: tokenizer for model 'm'/);
});

test('SIGHUP reloads the file (watching off): a worker added is served, the --port flag still holds, a bad file is rejected naming the field', async () => {
  const sims: SimWorker[] = [await startSimWorker({ port: 0, speed: 100 }), await startSimWorker({ port: 0, speed: 100 })];
  const model = sims[0]!.model;
  const file = join(dir, 'hup.yaml');
  const yaml = (urls: string[]) =>
    `pools:\n  - name: p\n    model: ${model}\n    workers:\n${urls.map((u, i) => `      - { url: ${u}, id: w${i} }`).join('\n')}\n` +
    `policy: { name: round-robin }\nserver: { routingHeaders: true }\nreload: { watch: false }\nshutdown: { drainDelayMs: 0 }\n`;
  writeFileSync(file, yaml([sims[0]!.url]));
  const child = spawn(process.execPath, [CLI, 'serve', '--config', file, '--port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  const until = async (re: RegExp, what: string): Promise<RegExpExecArray> => {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const m = re.exec(stdout);
      if (m) return m;
      if (Date.now() > deadline) throw new Error(`${what} not in: ${stdout}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  try {
    const url = (await until(/"url":"(http:\/\/[^"]+)"/, 'listening line'))[1]!;
    const version = async () => ((await (await fetch(url + '/admin/config')).json()) as any).version as number;
    const workerOf = async () => {
      const r = await fetch(url + '/v1/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, prompt: 'hello', max_tokens: 2 }),
      });
      assert.equal(r.status, 200);
      await r.text();
      return r.headers.get('x-kvgate-worker');
    };
    assert.equal(await workerOf(), 'w0');
    writeFileSync(file, yaml([sims[0]!.url, sims[1]!.url]));
    await new Promise((r) => setTimeout(r, 400));
    assert.equal(await version(), 1, 'reload.watch false: a change alone does not reload');
    child.kill('SIGHUP');
    await until(/config reload applied: version 2/, 'applied line');
    assert.equal(await version(), 2);
    const seen = new Set([await workerOf(), await workerOf(), await workerOf()]);
    assert.deepEqual([...seen].sort(), ['w0', 'w1']);
    // The flags apply to the reloaded file too: listen.port stays what --port made it (no restart asked).
    assert.doesNotMatch(stdout, /needs a restart/);
    writeFileSync(file, yaml([sims[0]!.url, 'nonsense']));
    child.kill('SIGHUP');
    const line = JSON.parse((await until(/^.*config reload rejected.*$/m, 'rejected line'))[0]);
    assert.equal(line.level, 50);
    assert.match(line.msg, /pools\[0\]\.workers\[1\]\.url: Invalid URL/);
    assert.equal(await version(), 2);
    assert.equal(await workerOf() !== null, true, 'still serving');
    child.kill('SIGINT');
    assert.equal(await exited, 0);
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
    await Promise.all(sims.map((s) => s.close()));
  }
});

test('--strict-parity refuses to start when a KV-event worker tokenizes differently, naming the fix (exit 2)', async () => {
  const sim = await startSimWorker({ port: 0, speed: 100, kvEvents: { endpoint: 'tcp://127.0.0.1:0' } });
  try {
    // A tokenizer.json of its own (letters only): not the ids the simulated worker gives.
    const tok = join(dir, 'letters.json');
    const vocab = Object.fromEntries([...'abcdefghijklmnopqrstuvwxyz'].map((c, i) => [c, i]));
    writeFileSync(tok, JSON.stringify({ version: '1.0', added_tokens: [], normalizer: null, pre_tokenizer: { type: 'Whitespace' }, post_processor: null, decoder: null, model: { type: 'BPE', unk_token: null, vocab, merges: [] } }));
    const file = join(dir, 'parity.yaml');
    writeFileSync(
      file,
      `pools:\n  - name: p\n    model: ${sim.model}\n    workers:\n      - { url: ${sim.url}, id: w0, kvEvents: { endpoint: "${sim.kvEventsEndpoint}" } }\n` +
        `tokenizers: { models: { ${sim.model}: "hf:${tok}" }, threads: 0 }\nlisten: { port: 0 }\nlog: { level: silent }\nshutdown: { drainDelayMs: 0 }\n`,
    );
    const r = await runCli(['serve', '--config', file, '--strict-parity']);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /tokenizers \(strictParity\): pool p: tokenizer 'hf:.*letters\.json' gives different ids than worker w0's \/tokenize/);
    assert.match(r.stderr, /set tokenizers\.models\.llama-3\.1-8b to 'hf:<path to the model's tokenizer\.json>'/);
  } finally {
    await sim.close();
  }
});
